//! Shared helpers for integration tests: the reference Python interpreter.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The reference interpreter (loaderx 1.7.2 + numpy). Panics (fails the
/// test) when it cannot be provided: interop is never skipped.
pub fn ref_python() -> PathBuf {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/ref-venv.sh");
        let out = Command::new("bash")
            .arg(script)
            .output()
            .expect("running scripts/ref-venv.sh");
        assert!(
            out.status.success(),
            "scripts/ref-venv.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
    .clone()
}

/// Runs `script` with the reference python, returns stdout; panics on failure.
pub fn run_ref_python(script: &str, args: &[&str]) -> String {
    let out = Command::new(ref_python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("spawning the reference python");
    assert!(
        out.status.success(),
        "reference python failed:\n{}\n--- script ---\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
