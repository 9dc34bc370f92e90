//! The checks both training examples' tests run, against the example binary
//! `exe` whose summary lines start with `framework`. Included by each
//! package's `tests/trains.rs` with `#[path]`.

use std::process::Command;

/// The launcher variables `LoaderOptions::shard_from_env` reads: cleared so
/// the run does not depend on the environment the tests happen to run in.
const SHARD_VARS: [&str; 9] = [
    "LOADERX_RANK",
    "LOADERX_WORLD_SIZE",
    "RANK",
    "WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_STEP_NUM_TASKS",
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

/// Runs `cmd` for 150 steps: it must exit 0 (the loss halved) and end with
/// a summary of 150 steps of `records` records each.
fn run_150_steps(mut cmd: Command, framework: &str, records: usize) {
    let out = cmd.args(["--steps", "150"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with(&format!("{framework}: 150 steps of {records} records")),
        "unexpected summary line {summary:?}"
    );
}

/// A 150-step run exits 0 (the loss halved) and reports full batches.
pub fn short_run_halves_the_loss(exe: &str, framework: &str) {
    run_150_steps(example(exe), framework, 64);
}

/// Rank 1 of 2 trains on its half of every batch.
pub fn sharded_run_trains_on_its_half_of_each_batch(exe: &str, framework: &str) {
    let mut cmd = example(exe);
    cmd.env("LOADERX_RANK", "1").env("LOADERX_WORLD_SIZE", "2");
    run_150_steps(cmd, framework, 32);
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

/// The `rust,ignore` block of `docs/training.md` that starts with
/// `// {framework} (path)` is an excerpt of the program at `path`: it needs
/// the framework, so no doctest compiles it. This keeps it from drifting:
/// every line of it that is not a comment must be a line of the program
/// (both trimmed, trailing `//` comments dropped), in the same order.
pub fn docs_excerpt_is_in_program(framework: &str) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let doc = std::fs::read_to_string(format!("{root}/docs/training.md")).unwrap();
    let start = format!("```rust,ignore\n// {framework} (");
    let at = doc
        .find(&start)
        .unwrap_or_else(|| panic!("docs/training.md has no block starting {start:?}"));
    let block = &doc[at + start.len()..];
    let block = &block[..block.find("\n```\n").expect("the block ends")];
    let (path, excerpt) = block.split_once(")\n").expect("`(path)` on the first line");
    let program = std::fs::read_to_string(format!("{root}/{path}")).unwrap();

    fn code(line: &str) -> &str {
        line.find("//").map_or(line, |i| &line[..i]).trim()
    }
    let mut lines = program.lines().map(code);
    let mut checked = 0;
    for line in excerpt.lines().map(code).filter(|l| !l.is_empty()) {
        assert!(
            lines.any(|l| l == line),
            "docs/training.md, {framework} excerpt: {line:?} is not a line of {path} \
             (after the excerpt's previous line)"
        );
        checked += 1;
    }
    assert!(
        checked >= 10,
        "the {framework} excerpt has only {checked} lines of code"
    );
}
