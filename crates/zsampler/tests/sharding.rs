//! Guards multi-process sharding: for every world size the ranks' slices of a
//! step must be disjoint and together be exactly the single-process batch, in
//! order, so a run resumed on a different number of processes continues the
//! same data stream. Also guards the argument errors (never panics).

use zsampler::{Error, MAX_BATCH_SIZE, Mode, Sampler};

const MODES: [Mode; 3] = [Mode::Sequential, Mode::Iid, Mode::Cyclic];

#[test]
fn shards_partition_every_global_batch_for_world_sizes_1_to_8() {
    for mode in MODES {
        for (n, batch) in [
            (1000u64, 64usize),
            (1000, 13),
            (10, 8),
            (50, 100),
            (1 << 50, 8192),
        ] {
            let global = Sampler::new(n, batch, mode, 17).unwrap();
            for world in 1..=8usize {
                let shards: Vec<Sampler> = (0..world)
                    .map(|r| global.clone().sharded(r, world).unwrap())
                    .collect();
                for step in [0u64, 1, 2, 77, 1 << 33] {
                    let whole = global.batch(step);
                    let mut joined = Vec::new();
                    let mut covered = 0;
                    for s in &shards {
                        let part = s.batch(step);
                        assert_eq!(part.len(), s.batch_len());
                        assert!(!part.is_empty(), "a rank got nothing");
                        assert_eq!(s.shard_range().start, covered, "shards must be contiguous");
                        covered = s.shard_range().end;
                        joined.extend(part);
                    }
                    // Union in lane order equals the global batch: the lanes
                    // are disjoint and cover it exactly.
                    assert_eq!(
                        joined, whole,
                        "{mode:?} n={n} B={batch} w={world} step {step}"
                    );
                }
            }
        }
    }
}

#[test]
fn shard_sizes_differ_by_at_most_one() {
    let s = Sampler::new(1000, 10, Mode::Iid, 0).unwrap();
    let lens: Vec<usize> = (0..3)
        .map(|r| s.clone().sharded(r, 3).unwrap().batch_len())
        .collect();
    assert_eq!(lens.iter().sum::<usize>(), 10);
    assert!(lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1);
}

#[test]
fn sharded_cursor_keeps_step_and_seeks() {
    let mut s = Sampler::new(1000, 64, Mode::Cyclic, 4).unwrap();
    s.seek(40);
    let mut shard = s.clone().sharded(2, 4).unwrap();
    assert_eq!(shard.step(), 40);
    assert_eq!(shard.next().unwrap(), s.batch(40)[32..48]);
    shard.seek(3);
    assert_eq!(shard.next().unwrap(), s.batch(3)[32..48]);
}

/// Regression: `Sampler::new(10, usize::MAX, ..)` succeeded and `batch(0)`
/// then panicked (capacity overflow). Batch sizes past MAX_BATCH_SIZE are
/// refused where they are given.
#[test]
fn batch_sizes_past_the_maximum_are_errors_not_panics_later() {
    for mode in [Mode::Sequential, Mode::Iid, Mode::Cyclic] {
        for batch_size in [usize::MAX, usize::MAX / 4, MAX_BATCH_SIZE + 1] {
            assert_eq!(
                Sampler::new(10, batch_size, mode, 0).unwrap_err(),
                Error::BatchTooLarge {
                    batch_size,
                    max: MAX_BATCH_SIZE
                },
                "{mode:?} {batch_size}"
            );
        }
        // The maximum itself is accepted (nothing is allocated until a batch
        // is drawn), and so are its shards.
        let s = Sampler::new(u64::MAX, MAX_BATCH_SIZE, mode, 0).unwrap();
        let shard = s.sharded(3, 1 << 20).unwrap();
        assert_eq!(shard.batch_len(), MAX_BATCH_SIZE >> 20);
    }
    let msg = Sampler::new(10, usize::MAX, Mode::Iid, 0)
        .unwrap_err()
        .to_string();
    assert!(msg.contains(&usize::MAX.to_string()), "{msg}");
}

#[test]
fn invalid_arguments_are_errors_not_panics() {
    assert_eq!(
        Sampler::new(0, 4, Mode::Iid, 0).unwrap_err(),
        Error::EmptyIndexSpace
    );
    assert_eq!(
        Sampler::new(10, 0, Mode::Cyclic, 0).unwrap_err(),
        Error::ZeroBatch
    );
    let s = Sampler::new(10, 4, Mode::Sequential, 0).unwrap();
    assert_eq!(s.clone().sharded(0, 0).unwrap_err(), Error::ZeroWorld);
    assert_eq!(
        s.clone().sharded(4, 4).unwrap_err(),
        Error::RankOutOfRange { rank: 4, world: 4 }
    );
    assert_eq!(
        s.clone().sharded(0, 5).unwrap_err(),
        Error::WorldExceedsBatch {
            world: 5,
            global: 4,
            batch_size: 4
        }
    );
    assert!(
        !s.clone()
            .sharded(0, 5)
            .unwrap_err()
            .to_string()
            .contains("cyclic"),
        "a full batch needs no explanation"
    );
    // Cyclic with n < batch: the global batch is n long.
    let c = Sampler::new(3, 4, Mode::Cyclic, 0).unwrap();
    let e = c.sharded(0, 4).unwrap_err();
    assert_eq!(
        e,
        Error::WorldExceedsBatch {
            world: 4,
            global: 3,
            batch_size: 4
        }
    );
    // The message says where the 3 comes from.
    let m = e.to_string();
    assert!(m.contains("batch_size 4, cut to n = 3"), "{m}");
    let mut buf = [0u64; 3];
    assert_eq!(
        s.batch_at(0, &mut buf).unwrap_err(),
        Error::BufferTooSmall { needed: 4, got: 3 }
    );
    // Messages name the values.
    let msg = Error::RankOutOfRange { rank: 4, world: 4 }.to_string();
    assert!(msg.contains('4'), "{msg}");
}
