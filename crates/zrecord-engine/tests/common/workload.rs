//! A scripted workload (every append form, deletes, compactions, syncs) with
//! the committed state after each step, for crash, fault and kill tests.

use super::Rng;
use zrecord_engine::{Engine, Result};

#[derive(Clone, Debug)]
pub enum Op {
    Fixed(Vec<u8>, usize),
    Var(Vec<Vec<u8>>),
    Paired(Vec<(Vec<u8>, Vec<u8>)>),
    Delete(Vec<u64>, u64),
    Compact,
    Sync,
}

fn bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    // Half compressible runs, half noise, so zstd frames vary in size.
    let b = rng.next() as u8;
    (0..len)
        .map(|i| {
            if i % 2 == 0 {
                b.wrapping_add((i / 4) as u8)
            } else {
                rng.next() as u8
            }
        })
        .collect()
}

/// Applies `op` to the model (swap-last deletes, as the engine does).
pub fn apply(model: &mut Vec<Vec<u8>>, op: &Op) {
    match op {
        Op::Fixed(d, w) => model.extend(d.chunks(*w).map(|c| c.to_vec())),
        Op::Var(r) => model.extend(r.iter().cloned()),
        Op::Paired(p) => {
            for (a, b) in p {
                model.push(a.clone());
                model.push(b.clone());
            }
        }
        Op::Delete(groups, k) => {
            let k = *k as usize;
            let mut order = groups.clone();
            order.sort_unstable_by(|a, b| b.cmp(a));
            order.dedup();
            let mut live = model.len() / k;
            for g in order {
                let g = g as usize;
                let last = live - 1;
                if g != last {
                    for j in 0..k {
                        model[g * k + j] = model[last * k + j].clone();
                    }
                }
                live -= 1;
            }
            model.truncate(live * k);
        }
        Op::Compact | Op::Sync => {}
    }
}

/// Runs one op on the engine.
pub fn run(e: &mut Engine, op: &Op) -> Result<()> {
    match op {
        Op::Fixed(d, w) => e.append_fixed(d, *w).map(|_| ()),
        Op::Var(r) => {
            let (d, o) = flatten(r);
            e.append_var(&d, &o).map(|_| ())
        }
        Op::Paired(p) => {
            let a: Vec<Vec<u8>> = p.iter().map(|x| x.0.clone()).collect();
            let b: Vec<Vec<u8>> = p.iter().map(|x| x.1.clone()).collect();
            let (da, oa) = flatten(&a);
            let (db, ob) = flatten(&b);
            e.append_paired(&da, &oa, &db, &ob).map(|_| ())
        }
        Op::Delete(g, k) => e.delete_groups(g, *k),
        Op::Compact => e.compact(),
        Op::Sync => e.sync(),
    }
}

fn flatten(r: &[Vec<u8>]) -> (Vec<u8>, Vec<usize>) {
    let mut o = vec![0usize];
    let mut d = Vec::new();
    for x in r {
        d.extend_from_slice(x);
        o.push(d.len());
    }
    (d, o)
}

/// A random op valid for a store holding `len` records. `compact` weights
/// compactions; `big` makes larger records.
pub fn random_op(rng: &mut Rng, len: usize, max_rec: usize) -> Op {
    let mr = max_rec.max(2) as u64;
    match rng.below(10) {
        0..=1 => {
            let w = 1 + rng.below(mr) as usize;
            let n = 1 + rng.below(4) as usize;
            Op::Fixed(bytes(rng, w * n), w)
        }
        2..=3 => {
            let n = 1 + rng.below(4) as usize;
            Op::Var(
                (0..n)
                    .map(|_| {
                        let l = 1 + rng.below(mr) as usize;
                        bytes(rng, l)
                    })
                    .collect(),
            )
        }
        4 if len.is_multiple_of(2) => {
            let n = 1 + rng.below(3) as usize;
            Op::Paired(
                (0..n)
                    .map(|_| {
                        let a = 1 + rng.below(mr) as usize;
                        let b = 1 + rng.below(16) as usize;
                        (bytes(rng, a), bytes(rng, b))
                    })
                    .collect(),
            )
        }
        5..=6 if len > 0 => {
            let k = if len.is_multiple_of(2) && rng.below(2) == 0 {
                2
            } else {
                1
            };
            let groups = (len / k) as u64;
            let n = 1 + rng.below(3);
            Op::Delete((0..n).map(|_| rng.below(groups)).collect(), k as u64)
        }
        7 => Op::Compact,
        8 => Op::Sync,
        _ => {
            let l = 1 + rng.below(mr) as usize;
            Op::Var(vec![bytes(rng, l)])
        }
    }
}

/// Every record of `e`, in index order.
pub fn read_all(e: &Engine) -> Result<Vec<Vec<u8>>> {
    // In a debug build `stats` checks its running count of live bytes
    // against the table (after every recovery the crash suites read).
    let _ = e.stats();
    let idx: Vec<u64> = (0..e.len()).collect();
    let mut lens = vec![0u64; idx.len()];
    e.record_lengths(&idx, &mut lens, None)?;
    let mut offsets = vec![0usize];
    for l in &lens {
        offsets.push(offsets.last().unwrap() + *l as usize);
    }
    let mut dst = vec![0u8; *offsets.last().unwrap()];
    e.gather_var(&idx, &mut dst, &offsets)?;
    Ok(offsets
        .windows(2)
        .map(|w| dst[w[0]..w[1]].to_vec())
        .collect())
}

/// Short random workloads (2 to 15 ops) on a deferring raw store at `dir`,
/// one per seed in `seeds`, on a simulated disk `cfg` configures: `fail`
/// picks for each op the I/O call to fail, if any (a same-boot reopen
/// follows each error); with `between`, power cuts and kills between ops
/// too. Then 20 power cuts of the end state: returns how many images did
/// not open read-only or verify clean (printing the first two, with the
/// ops that led there).
pub fn short_workloads_then_power_cuts(
    seeds: std::ops::Range<u64>,
    dir: &std::path::Path,
    cfg: impl Fn(&zrecord_engine::sim::SimVfs) -> zrecord_engine::EngineConfig,
    between: bool,
    mut fail: impl FnMut(&mut Rng, &Op) -> Option<u64>,
) -> usize {
    use zrecord_engine::sim::SimVfs;
    use zrecord_engine::{Codec, OpenMode};
    let mut found = 0;
    for seed in seeds {
        let mut rng = Rng(seed);
        let mut v = SimVfs::new();
        let mut e = Engine::create_with(dir, &super::at_sync(Codec::Raw), cfg(&v)).unwrap();
        let mut model = Vec::new();
        let mut ops = Vec::new();
        let reopen = |v: &SimVfs, ops: &Vec<String>| {
            Engine::open_with(dir, OpenMode::ReadWrite, cfg(v))
                .unwrap_or_else(|err| panic!("seed {seed}: {err}\n{ops:#?}"))
        };
        for _ in 0..2 + rng.below(14) {
            let op = random_op(&mut rng, model.len(), 40);
            let failed_call = fail(&mut rng, &op);
            v.fail_at(failed_call);
            let r = run(&mut e, &op);
            v.fail_at(None);
            ops.push(
                format!("{op:?} fail {failed_call:?} {:?}", r.as_ref().err())
                    .chars()
                    .take(300)
                    .collect::<String>(),
            );
            if r.is_err() {
                std::mem::forget(e);
                e = reopen(&v, &ops);
                model = read_all(&e).unwrap();
                ops.push("REOPEN".into());
                continue;
            }
            apply(&mut model, &op);
            if between && rng.below(8) == 0 {
                std::mem::forget(e);
                v = v.snapshot().crash_image(rng.next());
                e = reopen(&v, &ops);
                model = read_all(&e).unwrap();
                ops.push("CUT".into());
            }
            if between && rng.below(6) == 0 {
                std::mem::forget(e);
                v = v.snapshot().kill_image();
                e = reopen(&v, &ops);
                ops.push("KILL".into());
            }
        }
        let s = v.snapshot();
        std::mem::forget(e);
        for cs in 0..20 {
            let img = s.crash_image(cs);
            let ok = Engine::open_with(dir, OpenMode::ReadOnly, cfg(&img))
                .and_then(|r| r.verify())
                .map(|rep| rep.is_ok());
            if !matches!(ok, Ok(true)) {
                found += 1;
                if found < 3 {
                    eprintln!("seed {seed} cut {cs}: {ok:?}\n{ops:#?}");
                }
            }
        }
    }
    found
}
