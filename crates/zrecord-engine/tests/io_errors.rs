//! Guards against an I/O error causing a panic, a handle that keeps writing
//! over a state it no longer knows, or a store that reopens in a state never
//! committed. For every N, the Nth I/O call of a workload (every append form,
//! deletes, compactions, syncs) fails: the error must come back as `Err`,
//! the handle must refuse further writes (`Poisoned`), and a reopen must
//! hold the state before or after the failed operation, bit-exact. Both
//! durabilities run.

mod common;
use common::Rng;
use common::workload::{Op, apply, random_op, read_all, run};
use std::path::Path;
use std::sync::Arc;
use zrecord_engine::sim::SimVfs;
use zrecord_engine::{
    Codec, CreateOptions, Durability, Engine, EngineConfig, Error, OpenMode, ReadPath,
};

fn cfg(vfs: &SimVfs) -> EngineConfig {
    EngineConfig {
        vfs: Arc::new(vfs.clone()),
        chunk_capacity: 160,
        loc_segment_entries: 4,
        flush_bytes: 24,
        read_path: ReadPath::Pread,
    }
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
        let mut after = before.clone();
        apply(&mut after, &ops[j]);
        assert!(
            got == before || got == after,
            "call {n} (op {j} {:?}): reopened state is neither before nor after",
            format!("{:?}", ops[j]).chars().take(40).collect::<String>()
        );
        assert!(r.verify().unwrap().is_ok(), "call {n}");
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
