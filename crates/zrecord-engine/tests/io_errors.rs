//! Guards against an I/O error causing a panic, a handle that keeps writing
//! over a state it no longer knows, or a store that reopens in a state never
//! committed. For every N, the Nth I/O call of a workload (every append form,
//! deletes, compactions, syncs) fails: the error must come back as `Err`,
//! the handle must refuse further writes (`Poisoned`), and a reopen must
//! hold the state before or after the failed operation, bit-exact. A failed
//! fsync loses the writes it was to make durable (as on Linux), so a power
//! cut after that reopen must still find a committed state. Both
//! durabilities run.

mod common;
use common::Rng;
use common::workload::{Op, apply, random_op, read_all, run};
use std::path::Path;
use zrecord_engine::sim::SimVfs;
use zrecord_engine::{Codec, CreateOptions, Durability, Engine, EngineConfig, Error, OpenMode};

fn cfg(vfs: &SimVfs) -> EngineConfig {
    common::sim(vfs)
}

fn check(codec: Codec, seed: u64, durability: Durability) -> u64 {
    let dir = Path::new("/store");
    let base = SimVfs::new();
    let mut rng = Rng(seed);
    let mut model = Vec::new();
    {
        let mut e = Engine::create_with(dir, &CreateOptions::new(codec), cfg(&base)).unwrap();
        for _ in 0..12 {
            let op = random_op(&mut rng, model.len(), 40);
            run(&mut e, &op).unwrap();
            apply(&mut model, &op);
        }
        e.sync().unwrap();
    }
    let base_model = model.clone();
    let mut ops = Vec::new();
    let mut m = model.clone();
    for step in 0..16 {
        let op = if step % 6 == 5 {
            Op::Compact
        } else {
            random_op(&mut rng, m.len(), 40)
        };
        apply(&mut m, &op);
        ops.push(op);
    }
    // Dry run: how many calls the workload makes.
    let total = {
        let v = base.fork();
        let mut e = Engine::open_with(dir, OpenMode::ReadWrite, cfg(&v)).unwrap();
        e.set_durability(durability).unwrap();
        let c0 = v.calls();
        for op in &ops {
            run(&mut e, op).unwrap();
        }
        v.calls() - c0
    };
    assert!(total > 50, "workload too small: {total} calls");
    for n in 0..total {
        let v = base.fork();
        let mut e = Engine::open_with(dir, OpenMode::ReadWrite, cfg(&v)).unwrap();
        e.set_durability(durability).unwrap();
        v.fail_at(Some(n));
        let mut before = model.clone();
        let mut failed = None;
        for (j, op) in ops.iter().enumerate() {
            match run(&mut e, op) {
                Ok(()) => apply(&mut before, op),
                Err(err) => {
                    failed = Some((j, err));
                    break;
                }
            }
        }
        let (j, err) = failed.unwrap_or_else(|| panic!("call {n} of {total}: no error surfaced"));
        assert!(matches!(err, Error::Io { .. }), "call {n}: {err}");
        // The handle refuses writes until reopened.
        for r in [
            e.append_var(b"x", &[0, 1]).map(|_| ()),
            e.sync(),
            e.compact(),
        ] {
            assert!(
                matches!(r, Err(Error::Poisoned { .. })),
                "call {n} (op {j}): write after the error gave {r:?}"
            );
        }
        drop(e);
        v.fail_at(None);
        let r = Engine::open_with(dir, OpenMode::ReadWrite, cfg(&v))
            .unwrap_or_else(|err| panic!("call {n} (op {j}): reopen failed: {err}"));
        let got = read_all(&r).unwrap();
        // states[k]: after ops[..k]. Each-append: every op that returned is
        // durable, so the reopen shows the state before or after op j.
        // Deferred: a failed fsync may have lost every append and delete
        // since the last durable point (sync, compaction, or the start),
        // and the handle puts `meta.zr` and the entries deletes overwrote
        // back to it; the error said so.
        let mut states = vec![base_model.clone()];
        for op in &ops[..=j] {
            let mut s = states.last().unwrap().clone();
            apply(&mut s, op);
            states.push(s);
        }
        let lo = match durability {
            Durability::EachAppend => j,
            Durability::AtSync => (0..j)
                .filter(|&k| matches!(ops[k], Op::Sync | Op::Compact))
                .map(|k| k + 1)
                .max()
                .unwrap_or(0),
        };
        assert_eq!(states[j], before);
        assert!(
            states[lo..].contains(&got),
            "call {n} (op {j} {:?}): reopened state is no committed state from {lo} to {}",
            format!("{:?}", ops[j]).chars().take(40).collect::<String>(),
            j + 1
        );
        assert!(r.verify().unwrap().is_ok(), "call {n}");
        drop(r);
        // The reopen made its state durable (or left a marker that rolls
        // back to a durable one): a power cut now must find a state the
        // workload committed, never a header past lost bytes.
        let cut = v.snapshot().crash_image(0);
        let c = Engine::open_with(dir, OpenMode::ReadWrite, cfg(&cut)).unwrap_or_else(|err| {
            panic!("call {n} (op {j}): open after reopen + power cut failed: {err}")
        });
        let got = read_all(&c).unwrap();
        assert!(
            states[lo..].contains(&got),
            "call {n} (op {j}): after reopen + power cut, {} records match no committed state",
            got.len()
        );
        assert!(
            c.verify().unwrap().is_ok(),
            "call {n}: power cut after reopen"
        );
    }
    total
}

#[test]
fn every_failed_io_call_is_an_error_that_poisons_and_reopens_clean() {
    for durability in [Durability::AtSync, Durability::EachAppend] {
        let mut total = 0;
        for (k, codec) in [Codec::Raw, Codec::Zstd].into_iter().enumerate() {
            for s in 0..4 {
                total += check(codec, 7 + s + 100 * k as u64, durability);
            }
        }
        eprintln!("io errors ({durability:?}): {total} injected failures");
    }
}
