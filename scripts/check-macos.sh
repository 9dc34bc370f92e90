#!/usr/bin/env bash
# Keeps the crates compiling for macOS (Apple silicon), which we support but
# cannot run here: clippy with -D warnings over the libraries, their tests,
# the benches and the quickstart, for aarch64-apple-darwin. This also
# compiles every path behind `cfg(target_arch = "x86_64")` the other way
# (the portable text parser, no prefetch), and the Linux-only calls
# (huge-page advice) out.
#
# Installs the target's standard library with rustup if it is missing.
# A check never links, but cargo still runs zstd-sys's build script, which
# compiles libzstd's C sources for the target; there is no Apple C
# toolchain on Linux, so the C compiler and archiver are no-ops here (the
# Rust side of zstd is still checked). PyO3 needs only the Python version
# for an abi3 cross check.
#
# The candle and burn examples are left out: their dependency trees are
# large, and they use nothing platform-specific of ours.
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-apple-darwin
if ! rustup target list --installed | grep -qx "$target"; then
  rustup target add "$target"
fi
export CC_aarch64_apple_darwin=/bin/true AR_aarch64_apple_darwin=/bin/true
export PYO3_CROSS_PYTHON_VERSION=3.10
cargo clippy --locked --target "$target" --all-targets \
  -p zrecord-engine -p zrecord -p zsampler -p loaderx -p loaderx-py \
  -p examples -p benches -- -D warnings
