#!/usr/bin/env bash
# Keeps the crates compiling where we cannot run them: clippy with
# -D warnings over the libraries, their tests, the benches and the
# quickstart, for macOS on Apple silicon (aarch64-apple-darwin) and Linux on
# ARM (aarch64-unknown-linux-gnu, Grace / Graviton hosts). This compiles
# every path behind `cfg(target_arch = "x86_64")` the other way (the
# portable text parser, no prefetch), the Linux-only calls (huge-page
# advice, /proc) out on macOS, and C strings with an unsigned `c_char`.
#
# Installs each target's standard library with rustup if it is missing.
# A check never links, but cargo still runs zstd-sys's build script, which
# compiles libzstd's C sources for the target; there is no cross C
# toolchain here, so the C compiler and archiver are no-ops (the Rust side
# of zstd is still checked). PyO3 needs only the Python version for an
# abi3 cross check.
#
# The candle and burn examples are left out: their dependency trees are
# large, and they use nothing platform-specific of ours.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYO3_CROSS_PYTHON_VERSION=3.10
installed=$(rustup target list --installed)
for target in aarch64-apple-darwin aarch64-unknown-linux-gnu; do
  # (Not `rustup ... | grep -q`: grep quits at the match, and under
  # pipefail rustup's SIGPIPE would read as "missing".)
  if ! grep -qx "$target" <<<"$installed"; then
    rustup target add "$target"
  fi
  t=${target//-/_}
  echo "--- $target"
  env "CC_$t=/bin/true" "AR_$t=/bin/true" \
    cargo clippy --locked --target "$target" --all-targets \
      -p zrecord-engine -p zrecord -p zsampler -p loaderx -p loaderx-py \
      -p examples -p benches -- -D warnings
done
