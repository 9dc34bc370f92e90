//! Guards against any sequence of operations drifting from the contract:
//! random appends (every form), deletes (single and grouped), compactions,
//! syncs and reopens, checked after every step against an in-memory model.

mod common;
use common::*;
use proptest::prelude::*;
use zrecord_engine::{Codec, Engine, ReadPath};

#[derive(Clone, Debug)]
enum Op {
    Fixed {
        n: usize,
        width: usize,
        seed: u64,
    },
    Var {
        lens: Vec<usize>,
        seed: u64,
    },
    Paired {
        lens: Vec<(usize, usize)>,
        seed: u64,
    },
    Delete(Vec<u64>),
    DeletePairs(Vec<u64>),
    Compact,
    CompactPartial(u64),
    Sync,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..6, 1usize..90, any::<u64>()).prop_map(|(n, width, seed)| Op::Fixed {
            n,
            width,
            seed
        }),
        (prop::collection::vec(1usize..120, 0..6), any::<u64>())
            .prop_map(|(lens, seed)| Op::Var { lens, seed }),
        (
            prop::collection::vec((1usize..60, 8usize..24), 0..4),
            any::<u64>()
        )
            .prop_map(|(lens, seed)| Op::Paired { lens, seed }),
        prop::collection::vec(any::<u64>(), 0..5).prop_map(Op::Delete),
        prop::collection::vec(any::<u64>(), 0..3).prop_map(Op::DeletePairs),
        Just(Op::Compact),
        (0u64..4).prop_map(Op::CompactPartial),
        Just(Op::Sync),
        Just(Op::Reopen),
    ]
}

fn model_delete(model: &mut Vec<Vec<u8>>, idx: &[u64], k: usize) {
    let mut g = idx.to_vec();
    g.sort_unstable_by(|a, b| b.cmp(a));
    g.dedup();
    for gi in g {
        let last = model.len() / k - 1;
        for j in 0..k {
            model.swap(gi as usize * k + j, last * k + j);
        }
        model.truncate(last * k);
    }
}

fn offsets(recs: &[Vec<u8>]) -> Vec<usize> {
    let mut o = vec![0];
    for r in recs {
        o.push(o.last().unwrap() + r.len());
    }
    o
}

fn run(codec: Codec, read_path: ReadPath, ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny(read_path);
    let mut e = Engine::create_with(dir.path(), &options(codec), cfg.clone()).unwrap();
    let mut model: Vec<Vec<u8>> = Vec::new();
    for op in ops {
        match op {
            Op::Fixed { n, width, seed } => {
                let recs: Vec<Vec<u8>> = (0..n).map(|k| record(seed ^ k as u64, width)).collect();
                assert_eq!(
                    e.append_fixed(&recs.concat(), width).unwrap(),
                    model.len() as u64
                );
                model.extend(recs);
            }
            Op::Var { lens, seed } => {
                let recs: Vec<Vec<u8>> = lens
                    .iter()
                    .enumerate()
                    .map(|(k, &l)| record(seed ^ k as u64, l))
                    .collect();
                assert_eq!(
                    e.append_var(&recs.concat(), &offsets(&recs)).unwrap(),
                    model.len() as u64
                );
                model.extend(recs);
            }
            Op::Paired { lens, seed } => {
                let p: Vec<Vec<u8>> = lens
                    .iter()
                    .enumerate()
                    .map(|(k, l)| record(seed ^ k as u64, l.0))
                    .collect();
                let m: Vec<Vec<u8>> = lens
                    .iter()
                    .enumerate()
                    .map(|(k, l)| record(!seed ^ k as u64, l.1))
                    .collect();
                let r = e.append_paired(&p.concat(), &offsets(&p), &m.concat(), &offsets(&m));
                if model.len() % 2 == 1 {
                    assert!(r.is_err());
                } else {
                    assert_eq!(r.unwrap(), model.len() as u64);
                    model.extend(p.iter().zip(&m).flat_map(|(a, b)| [a.clone(), b.clone()]));
                }
            }
            Op::Delete(raw) => {
                if model.is_empty() {
                    assert!(e.delete(&[0]).is_err());
                    continue;
                }
                let idx: Vec<u64> = raw.iter().map(|r| r % model.len() as u64).collect();
                e.delete(&idx).unwrap();
                model_delete(&mut model, &idx, 1);
            }
            Op::DeletePairs(raw) => {
                if model.len() % 2 == 1 || model.is_empty() {
                    continue;
                }
                let idx: Vec<u64> = raw.iter().map(|r| r % (model.len() as u64 / 2)).collect();
                e.delete_groups(&idx, 2).unwrap();
                model_delete(&mut model, &idx, 2);
            }
            Op::Compact => {
                e.compact().unwrap();
                assert_eq!(e.stats().chunk_bytes, bytes_of(dir.path(), "chunk"));
            }
            Op::CompactPartial(n) => {
                e.compact_steps(n).unwrap();
            }
            Op::Sync => e.sync().unwrap(),
            Op::Reopen => {
                drop(e);
                e = reopen(dir.path(), &cfg);
            }
        }
        assert_matches(&e, &model);
    }
    drop(e);
    assert_matches(&reopen(dir.path(), &cfg), &model);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_match_the_model(
        codec in prop_oneof![Just(Codec::Raw), Just(Codec::Zstd), Just(Codec::ZstdDict)],
        mmap in any::<bool>(),
        ops in prop::collection::vec(op(), 1..30),
    ) {
        run(codec, if mmap { ReadPath::Mmap } else { ReadPath::Pread }, ops);
    }
}
