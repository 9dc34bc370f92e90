//! Guards a consumer that runs on rayon's global pool (a `par_iter` over
//! several loaders, a framework that calls the training step from a pool
//! thread). The producer's gather hands part of its work to that same pool;
//! with every pool thread blocked in `next()`, waiting for a producer that
//! waits for the pool, nothing ever moved again; closing the loaders there
//! waited likewise for a gather in flight. Its own test binary: a
//! hang there stalls every gather in the process.

use std::time::Duration;

use loaderx::{DataLoader, LoaderOptions, Mode, Stream};
use ndarray::Array2;
use zrecord::{Codec, CreateOptions, DenseStore};

#[test]
fn consumers_on_every_rayon_thread_still_get_their_batches() {
    let dir = tempfile::tempdir().unwrap();
    let x = DenseStore::<f32>::create(
        dir.path().join("x"),
        &[16],
        &CreateOptions::new(Codec::Zstd),
    )
    .unwrap();
    x.append(Array2::<f32>::from_shape_fn((4096, 16), |(i, j)| (i * 16 + j) as f32).view())
        .unwrap();
    let stream = Stream::from(x);
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    let all_read = std::sync::Barrier::new(rayon::current_num_threads());
    std::thread::spawn(move || {
        // One loader per pool thread, each consumed there. Batches of 512
        // zstd records are large enough for the gather to go parallel.
        let counts = rayon::broadcast(|ctx| {
            let opts = LoaderOptions {
                batch_size: 512,
                mode: Mode::Iid,
                seed: ctx.index() as u64,
                workers: 1,
                prefetch: 64,
                ..LoaderOptions::default()
            };
            let mut loader = DataLoader::new([("x", stream.clone())], opts).unwrap();
            let mut got = 0;
            for item in (&mut loader).take(2) {
                let b = item.unwrap().value;
                assert_eq!(b.dense::<f32>("x").unwrap().shape(), &[512, 16]);
                got += 1;
            }
            // Every pool thread out of `next()` at once, each producer
            // still filling its deep prefetch queue: closing waits for a
            // gather that needs the pool too.
            all_read.wait();
            (got, loader.close_within(Duration::from_secs(600)))
        });
        let _ = done_tx.send(counts);
    });
    let counts = done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("consumers on every rayon thread deadlocked with their producers");
    assert!(counts.iter().all(|&c| c == (2, true)), "{counts:?}");
}
