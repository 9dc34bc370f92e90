//! Fourth review of deferred deletes: the `meta.zr`-names-missing-bytes
//! fallback to the marker when its log holds deletes, and the loc segments
//! a read-write open keeps past its header's for a failed settle's
//! put-back (appends, verify, compaction and stats with them present).

mod common;
use common::workload::read_all;
use common::{at_sync, reopen_after_each_failed_open, tagged};
use std::path::Path;
use zrecord_engine::sim::SimVfs;
use zrecord_engine::{Codec, Engine, OpenMode};

const DIR: &str = "/s";

fn append(e: &Engine, ks: impl IntoIterator<Item = u8>) {
    for k in ks {
        e.append_var(&tagged(k), &[0, tagged(k).len()]).unwrap();
    }
}

fn tags(ks: &[u8]) -> Vec<Vec<u8>> {
    ks.iter().map(|&k| tagged(k)).collect()
}

fn marker(v: &SimVfs) -> bool {
    common::has_marker(v, Path::new(DIR))
}

/// Same boot, a finished delete and an unfinished one in the log, and a
/// `meta.zr` naming loc entries its segment lacks (a failed write-back):
/// the open falls back to the marker's header with the log's undo entries
/// (not the header alone, whose slots 0 and 1 the deletes overwrote), and
/// a read-write open makes that state durable and ends the marker.
#[test]
fn the_fallback_to_the_marker_rolls_back_finished_and_unfinished_deletes() {
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), common::sim(&v)).unwrap();
    append(&e, [0, 1, 2, 8]);
    e.sync().unwrap();
    e.delete(&[3]).unwrap(); // arms the marker: [0, 1, 2, 8]
    append(&e, 3..8); // slots 3..8: segment 0 and 1 (4-entry segments)
    e.delete(&[1]).unwrap();
    assert!(e.verify().unwrap().is_ok(), "flushes delete(1): done");
    e.delete(&[0]).unwrap(); // pending
    assert_eq!(read_all(&e).unwrap(), tags(&[6, 7, 2, 3, 4, 5]));
    let image = v.snapshot().kill_image();
    std::mem::forget(e);
    image.write_file(&Path::new(DIR).join("1.loc"), b"");

    // The fallback open fails at any call: the next one still finds the
    // marker's state.
    let failed = reopen_after_each_failed_open(&image, DIR, common::sim, 60, |call, r| {
        assert_eq!(read_all(&r).unwrap(), tags(&[0, 1, 2, 8]), "call {call}");
        assert!(r.verify().unwrap().is_ok(), "call {call}");
    });
    assert!(failed > 5);

    // Read-only: the table mapped, the undo entries over it (`read_all`
    // calls `stats`, which checks the live byte count in a debug build).
    let r = Engine::open_with(DIR, OpenMode::ReadOnly, common::sim(&image)).unwrap();
    assert_eq!(read_all(&r).unwrap(), tags(&[0, 1, 2, 8]));
    assert!(r.verify().unwrap().is_ok());
    let (mapped_stats, mapped_heap) = (r.stats(), r.table_heap_bytes());
    drop(r);
    image.set_maps(false);
    let r = Engine::open_with(DIR, OpenMode::ReadOnly, common::sim(&image)).unwrap();
    assert_eq!(read_all(&r).unwrap(), tags(&[0, 1, 2, 8]));
    assert_eq!(r.stats(), mapped_stats);
    assert_ne!(r.table_heap_bytes(), mapped_heap, "one of them mapped");
    drop(r);
    image.set_maps(true);
    let r = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&image)).unwrap();
    assert_eq!(read_all(&r).unwrap(), tags(&[0, 1, 2, 8]));
    assert!(r.verify().unwrap().is_ok());
    assert!(!marker(&image), "the read-write open ends the marker");
    append(&r, [9]);
    assert_eq!(read_all(&r).unwrap(), tags(&[0, 1, 2, 8, 9]));
    std::mem::forget(r);
    // Durable: a power cut now keeps the rolled-back state (and the
    // append after it is each-append durable: the handle defaults so).
    for seed in 0..20 {
        let cut = image.snapshot().crash_image(seed);
        let r = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&cut))
            .unwrap_or_else(|err| panic!("seed {seed}: {err}"));
        let got = read_all(&r).unwrap();
        assert!(
            got == tags(&[0, 1, 2, 8]) || got == tags(&[0, 1, 2, 8, 9]),
            "seed {seed}: {got:?}"
        );
        assert!(r.verify().unwrap().is_ok(), "seed {seed}");
    }
}

/// A killed writer's deletes cut loc segments 1 and 2 off, appends refilled
/// slot 4 and one more delete is pending: the read-write open on the same
/// boot finishes it (length 4, one segment) and keeps segments 1 and 2 open
/// for a failed settle's put-back of the marker's 10 records. Once it
/// settles, appends into and past those segments, deletes, verify,
/// compaction (which removes segments past the live data) and stats all
/// see a consistent store, and so do a reopen and a power cut.
#[test]
fn the_loc_segments_kept_past_the_header_serve_appends_and_compaction() {
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), common::sim(&v)).unwrap();
    append(&e, 0..10);
    e.sync().unwrap();
    e.delete(&[0, 1, 2, 3, 4, 5, 6]).unwrap();
    assert!(e.verify().unwrap().is_ok());
    append(&e, 20..22);
    e.delete(&[1]).unwrap();
    let want = read_all(&e).unwrap();
    assert_eq!(want.len(), 4);
    let killed = v.snapshot().kill_image();
    std::mem::forget(e);
    for f in ["1.loc", "2.loc"] {
        assert!(killed.read_file(&Path::new(DIR).join(f)).is_some(), "{f}");
    }

    let mut r = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&killed)).unwrap();
    assert_eq!(read_all(&r).unwrap(), want);
    assert!(!marker(&killed));
    let s = r.stats();
    assert_eq!(s.records, 4);
    let mut model = want.clone();
    // Slots 4..14: segments 1 and 2 (kept open), 3 (new).
    append(&r, 30..40);
    model.extend(tags(&(30..40).collect::<Vec<_>>()));
    assert_eq!(read_all(&r).unwrap(), model);
    let rep = r.verify().unwrap();
    assert!(rep.is_ok(), "{rep:?}");
    r.delete(&[0, 5, 13]).unwrap();
    for i in [13usize, 5, 0] {
        let last = model.pop().unwrap();
        if i < model.len() {
            model[i] = last;
        }
    }
    assert_eq!(read_all(&r).unwrap(), model);
    assert!(r.verify().unwrap().is_ok());
    // Down to one segment: compaction removes segments 1..
    r.delete(&(3..model.len() as u64).collect::<Vec<_>>())
        .unwrap();
    model.truncate(3);
    r.compact().unwrap();
    assert_eq!(read_all(&r).unwrap(), model);
    assert!(r.verify().unwrap().is_ok());
    let s = r.stats();
    assert_eq!(s.records, 3);
    assert_eq!(s.live_bytes, model.iter().map(|m| m.len() as u64).sum());
    for f in ["1.loc", "2.loc", "3.loc"] {
        assert!(
            killed.read_file(&Path::new(DIR).join(f)).is_none(),
            "{f} outlived the compaction"
        );
    }
    append(&r, 40..46);
    model.extend(tags(&(40..46).collect::<Vec<_>>()));
    assert!(r.verify().unwrap().is_ok());
    r.sync().unwrap();
    std::mem::forget(r);
    for seed in 0..10 {
        let cut = killed.snapshot().crash_image(seed);
        let r = Engine::open_with(DIR, OpenMode::ReadWrite, common::sim(&cut))
            .unwrap_or_else(|err| panic!("seed {seed}: {err}"));
        assert_eq!(read_all(&r).unwrap(), model, "seed {seed}");
        assert!(r.verify().unwrap().is_ok(), "seed {seed}");
    }
}

/// 8 KiB chunks: the hand-made foreign append stays in chunk 0.
fn big(v: &SimVfs) -> zrecord_engine::EngineConfig {
    common::sim_8k_chunks(v)
}

/// A writer killed after its deletes were all written in place (*done*),
/// then loaderx 1.7.2 (which ignores `durable.zr`) appends record 9 into
/// slot 4, one the deletes freed. The same-boot open takes that store as
/// it is (nothing unfinished to check); when its settle fails, the
/// put-back of the marker's header with the undo entries (slot 4's among
/// them) leaves the marker's six records, a whole state, where the header
/// alone would name record 9 in slot 4 and the deletes' entries in slots
/// 0 and 1. The put-back is no worse over a foreign writer than the one
/// for appends (its append is lost either way), so it stands.
#[test]
fn a_failed_settle_over_a_foreign_append_after_finished_deletes_is_whole() {
    // The reference appends tagged(9) at slot 4.
    let killed =
        common::killed_deleting_then_a_foreign_append(&SimVfs::new(), Path::new(DIR), true);

    let foreign = tags(&[4, 5, 2, 3, 9]);
    let r = Engine::open_with(DIR, OpenMode::ReadWrite, big(&killed.fork())).unwrap();
    assert_eq!(read_all(&r).unwrap(), foreign);
    drop(r);
    let failed = reopen_after_each_failed_open(&killed, DIR, big, 60, |call, r| {
        let got = read_all(&r).unwrap();
        assert!(
            got == foreign || got == tags(&[0, 1, 2, 3, 4, 5]),
            "call {call}: {got:?}"
        );
        assert!(r.verify().unwrap().is_ok(), "call {call}");
    });
    assert!(failed > 5);
}
