//! Guards against a training example that builds but no longer learns: the
//! burn_train binary trains for a short run on loader batches and must
//! exit 0, which it does only when the mean loss of its last ten steps is
//! below half that of its first ten. Runs under `cargo test`, so the test
//! command exercises the example with the workspace's own build of it.

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

fn example() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_burn_train"));
    for v in SHARD_VARS {
        cmd.env_remove(v);
    }
    cmd
}

#[test]
fn short_run_halves_the_loss() {
    let out = example().args(["--steps", "150"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with("burn: 150 steps of 64 records"),
        "unexpected summary line {summary:?}"
    );
}

#[test]
fn sharded_run_trains_on_its_half_of_each_batch() {
    let out = example()
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
        summary.starts_with("burn: 150 steps of 32 records"),
        "unexpected summary line {summary:?}"
    );
}

#[test]
fn bad_arguments_exit_with_usage_error() {
    for args in [
        &["--steps"][..],
        &["--steps", "x"],
        &["--steps", "5"],
        &["--bogus"],
    ] {
        let out = example().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).starts_with("burn_train: "),
            "{args:?}"
        );
    }
}
