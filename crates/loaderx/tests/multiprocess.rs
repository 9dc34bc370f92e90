//! Guards multi-process training: N real processes open the same stores
//! read-only at once, take their shard from the launcher's environment
//! (RANK / WORLD_SIZE, as torchrun sets them), and together draw exactly the
//! single-process batch stream, each global batch split disjointly.

use std::process::Command;

use loaderx::{DataLoader, LoaderOptions, Mode, Stream};
use ndarray::Array2;
use zrecord::{Codec, CreateOptions, DenseCore, DenseStore, OpenOptions};

const STEPS: u64 = 12;
const BATCH: usize = 48;

/// Child mode: run only when the parent sets LOADERX_TEST_STORE. Prints one
/// line per step: `step rank idx,idx,...` (indices read from the store's
/// own records, so they prove the gather, not just the sampler).
#[test]
fn child_entry() {
    let Ok(store) = std::env::var("LOADERX_TEST_STORE") else {
        return;
    };
    let core = DenseCore::open(
        &store,
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )
    .expect("read-only open while other ranks hold the store");
    let opts = LoaderOptions {
        batch_size: BATCH,
        mode: Mode::Cyclic,
        seed: 11,
        workers: 2,
        ..LoaderOptions::default()
    }
    .shard_from_env()
    .unwrap();
    let rank = opts.shard.expect("RANK/WORLD_SIZE are set").0;
    let loader = DataLoader::new([("v", Stream::from(core))], opts).unwrap();
    for item in loader.take(STEPS as usize) {
        let item = item.unwrap();
        let v = item.value.dense::<u64>("v").unwrap();
        let ids: Vec<String> = v
            .index_axis(ndarray::Axis(1), 0)
            .iter()
            .map(|x| x.to_string())
            .collect();
        println!("LINE {} {} {}", item.step, rank, ids.join(","));
    }
}

#[test]
fn sharded_processes_together_draw_the_single_process_stream() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v");
    {
        let s = DenseStore::<u64>::create(&path, &[2], &CreateOptions::new(Codec::Zstd)).unwrap();
        // Record i holds [i, i * 3]: the gathered value names its index.
        s.append(Array2::from_shape_fn((1000, 2), |(i, j)| (i * (1 + 2 * j)) as u64).view())
            .unwrap();
        s.sync().unwrap();
    }
    let single: Vec<Vec<u64>> = {
        let core = DenseCore::open(&path, &OpenOptions::default()).unwrap();
        let opts = LoaderOptions {
            batch_size: BATCH,
            mode: Mode::Cyclic,
            seed: 11,
            ..LoaderOptions::default()
        };
        DataLoader::new([("v", Stream::from(core))], opts)
            .unwrap()
            .take(STEPS as usize)
            .map(|r| r.unwrap().value.indices().to_vec())
            .collect()
    };
    let exe = std::env::current_exe().unwrap();
    for world in [2usize, 3, 4] {
        let children: Vec<_> = (0..world)
            .map(|rank| {
                Command::new(&exe)
                    .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
                    .env("LOADERX_TEST_STORE", &path)
                    .env("RANK", rank.to_string())
                    .env("WORLD_SIZE", world.to_string())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        // All ranks were started before any is waited for: they hold the
        // store open at the same time.
        let children: Vec<_> = children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect();
        let mut parts = vec![vec![Vec::<u64>::new(); world]; STEPS as usize];
        for (rank, out) in children.iter().enumerate() {
            assert!(
                out.status.success(),
                "rank {rank}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                // libtest may print "test child_entry ... " on the same line.
                let Some(at) = line.find("LINE ") else {
                    continue;
                };
                let rest = &line[at + 5..];
                let mut f = rest.split(' ');
                let step: usize = f.next().unwrap().parse().unwrap();
                let r: usize = f.next().unwrap().parse().unwrap();
                assert_eq!(r, rank);
                parts[step][r] = f
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|x| x.parse().unwrap())
                    .collect();
            }
        }
        for (step, ranks) in parts.iter().enumerate() {
            let joined: Vec<u64> = ranks.concat();
            assert_eq!(joined, single[step], "world {world}, step {step}");
            let mut seen = joined.clone();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), joined.len(), "ranks overlap at step {step}");
        }
    }
}
