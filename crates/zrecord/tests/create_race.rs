//! Guards against an open racing a typed store's create being told the store
//! is broken. The open's first look (`probe`) checked `meta.zr`, then
//! `store.zr`, then `meta.zr`'s lock: a create that finished in between
//! looked like "meta.zr missing, but store.zr exists", or (when it had also
//! let go of the lock) like "the store's creation did not finish", both
//! `BadStore`. The open must see no store, a busy one, or the finished
//! empty store. (The engine's own create/open race is guarded by
//! `crates/zrecord-engine/tests/create_race.rs`.)

use std::path::Path;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use zrecord::{Codec, CreateOptions, DenseStore, Error, OpenOptions};

#[test]
fn an_open_racing_a_typed_create_sees_no_store_a_busy_one_or_an_empty_one() {
    let shm = Path::new("/dev/shm");
    let tmp = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let (mut opened, mut busy, mut absent) = (0u64, 0u64, 0u64);
    for round in 0..200 {
        let dir = tmp.path().join(format!("s{round}"));
        let done = AtomicBool::new(false);
        let go = Barrier::new(2);
        let (created, seen) = std::thread::scope(|s| {
            let creator = s.spawn(|| {
                go.wait();
                let r = DenseStore::<f32>::create(&dir, &[3], &CreateOptions::new(Codec::Zstd))
                    .map(drop);
                done.store(true, Ordering::SeqCst);
                r
            });
            let mut seen = Vec::new();
            go.wait();
            loop {
                let finished = done.load(Ordering::SeqCst);
                seen.push(
                    DenseStore::<f32>::open_with(&dir, &OpenOptions::read_only()).map(|s| s.len()),
                );
                if finished {
                    break;
                }
            }
            (creator.join().unwrap(), seen)
        });
        created.unwrap_or_else(|e| panic!("round {round}: the only creator failed: {e}"));
        for r in seen {
            match r {
                Ok(0) => opened += 1,
                Err(Error::NotAStore { .. }) => absent += 1,
                Err(Error::Engine(zrecord_engine::Error::StoreBusy { .. })) => busy += 1,
                r => panic!("round {round}: an open racing the create got {r:?}"),
            }
        }
        assert_eq!(DenseStore::<f32>::open(&dir).unwrap().len(), 0);
    }
    eprintln!("opens racing a typed create: {opened} opened, {busy} busy, {absent} no store");
    assert!(opened > 0 && absent > 0);
}
