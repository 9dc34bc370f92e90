//! Guards against a training example that builds but no longer learns: the
//! candle_train binary trains for a short run on loader batches and must
//! exit 0, which it does only when the mean loss of its last ten steps is
//! below half that of its first ten. Runs under `cargo test`, so the test
//! command exercises the example with the workspace's own build of it.

#[path = "../../common/trains.rs"]
mod trains;

const EXE: &str = env!("CARGO_BIN_EXE_candle_train");

#[test]
fn short_run_halves_the_loss() {
    trains::short_run_halves_the_loss(EXE, "candle");
}

#[test]
fn sharded_run_trains_on_its_half_of_each_batch() {
    trains::sharded_run_trains_on_its_half_of_each_batch(EXE, "candle");
}

#[test]
fn bad_arguments_exit_with_usage_error() {
    trains::bad_arguments_exit_with_usage_error(EXE, "candle_train");
}

#[test]
fn docs_excerpt_is_in_program() {
    trains::docs_excerpt_is_in_program("candle");
}
