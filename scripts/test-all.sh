#!/usr/bin/env bash
# Every test of the project, as CI runs it (.ci/run calls exactly this).
# Needs only cargo and python3 (with venv + pip reaching PyPI); installs the
# rest (reference loaderx 1.7.2 for interop, maturin/numpy/pytest for the
# wheel) into virtual environments under target/.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
step() { printf '\n=== %s\n' "$*"; }

step "format"
cargo fmt --all -- --check

step "interop peer (loaderx 1.7.2 venv)"
scripts/ref-venv.sh

step "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "clippy for macOS and Linux on ARM (compiled, not run)"
scripts/check-targets.sh

step "rustdoc of the library crates (broken intra-doc links and bad doc markup are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked -q \
  -p zrecord-engine -p zrecord -p zsampler -p loaderx

step "rust tests"
cargo test --workspace --locked

step "examples"
cargo run --locked -q -p examples --bin quickstart

step "python wheel (maturin) + pytest, with interop against loaderx 1.7.2, then the shared tests on loaderx 1.7.2 itself"
scripts/py-test.sh --ref

step "pip install . (the README's install command) into a fresh venv"
scripts/pip-install-check.sh
