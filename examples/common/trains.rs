//! The checks both training examples' tests run, against the example binary
//! `exe` whose summary lines start with `framework`. Included by each
//! package's `tests/trains.rs` with `#[path]`.

use std::process::Command;

/// The launcher variables `LoaderOptions::shard_from_env` reads: cleared so
/// the run does not depend on the environment the tests happen to run in.
const SHARD_VARS: [&str; 8] = [
    "LOADERX_RANK",
    "LOADERX_WORLD_SIZE",
    "RANK",
    "WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
];

fn example(exe: &str) -> Command {
    let mut cmd = Command::new(exe);
    for v in SHARD_VARS {
        cmd.env_remove(v);
    }
    cmd
}

/// A 150-step run exits 0 (the loss halved) and reports full batches.
pub fn short_run_halves_the_loss(exe: &str, framework: &str) {
    let out = example(exe).args(["--steps", "150"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with(&format!("{framework}: 150 steps of 64 records")),
        "unexpected summary line {summary:?}"
    );
}

/// Rank 1 of 2 trains on its half of every batch.
pub fn sharded_run_trains_on_its_half_of_each_batch(exe: &str, framework: &str) {
    let out = example(exe)
        .args(["--steps", "150"])
        .env("LOADERX_RANK", "1")
        .env("LOADERX_WORLD_SIZE", "2")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with(&format!("{framework}: 150 steps of 32 records")),
        "unexpected summary line {summary:?}"
    );
}

/// Bad arguments exit 2 with a message naming the program.
pub fn bad_arguments_exit_with_usage_error(exe: &str, program: &str) {
    for args in [
        &["--steps"][..],
        &["--steps", "x"],
        &["--steps", "5"],
        &["--bogus"],
    ] {
        let out = example(exe).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).starts_with(&format!("{program}: ")),
            "{args:?}"
        );
    }
}
