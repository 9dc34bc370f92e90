"""Shared fixtures.

The suite runs against this package, and (for everything but the
extensions) against the reference loaderx 1.7.2 too, which makes the drop-in
claim concrete: ``LOADERX_SUITE=ref <ref python> -m pytest tests`` runs the
same public-behaviour tests on the reference package.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import loaderx

REPO = Path(__file__).resolve().parents[3]
try:
    import loaderx._native  # noqa: F401
    OURS = True
except ImportError:
    OURS = False

ours_only = pytest.mark.skipif(not OURS, reason="extension of this package, not in loaderx 1.7.2")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Every test runs in its own empty directory (README examples use
    relative paths)."""
    monkeypatch.chdir(tmp_path)
    yield


@pytest.fixture(scope="session")
def ref_python():
    """The interpreter with loaderx 1.7.2 (a separate venv). Interop is never
    skipped silently: if the reference venv cannot be built, the test errors."""
    if not OURS:
        pytest.skip("running the suite on the reference itself: no peer")
    env_py = os.environ.get("LOADERX_REF_PYTHON")
    if env_py:
        return env_py
    out = subprocess.run(["bash", str(REPO / "scripts" / "ref-venv.sh")],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def run_ref(ref_python, code, *args, cwd=None):
    """Run ``code`` under the reference interpreter; fail with its stderr."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run([ref_python, "-c", code, *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise AssertionError(f"reference run failed:\n{proc.stderr}")
    return proc.stdout


def structured_dtype():
    return np.dtype([("x", "<f4"), ("id", "<i8"), ("pos", "<i2", (3,)),
                     ("inner", [("a", "u1"), ("b", ">f8")])])
