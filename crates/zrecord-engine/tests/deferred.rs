//! Deferred durability (`Durability::AtSync`) step by step: what each call
//! writes and syncs, what a killed process and a power cut leave, and how
//! the `durable.zr` marker comes and goes. (`power_loss.rs` and `kill.rs`
//! cover every crash point; these tests name the cases.)

mod common;
use common::workload::read_all;
use common::{
    append_by_hand, at_sync, killed_with_appends_pending, reopen_after_each_failed_open,
    sim_8k_chunks, tagged,
};
use std::path::Path;
use zrecord_engine::sim::SimVfs;
use zrecord_engine::{Codec, CreateOptions, Durability, Engine, EngineConfig, OpenMode};

const DIR: &str = "/s";

fn cfg(v: &SimVfs) -> EngineConfig {
    common::sim(v)
}

fn append(e: &Engine, ks: std::ops::Range<u8>) {
    for k in ks {
        e.append_var(&tagged(k), &[0, tagged(k).len()]).unwrap();
    }
}

/// A deferring raw store of `tagged(0..6)`, synced; and those records.
fn six_synced(v: &SimVfs) -> (Engine, Vec<Vec<u8>>) {
    let e = Engine::create_with(DIR, &at_sync(Codec::Raw), cfg(v)).unwrap();
    append(&e, 0..6);
    e.sync().unwrap();
    let synced = read_all(&e).unwrap();
    (e, synced)
}

fn marker(v: &SimVfs) -> bool {
    common::has_marker(v, Path::new(DIR))
}

fn expect_tags(e: &Engine, ks: &[u8]) {
    let want: Vec<Vec<u8>> = ks.iter().map(|&k| tagged(k)).collect();
    assert_eq!(read_all(e).unwrap(), want);
}

fn expect(e: &Engine, ks: std::ops::Range<u8>) {
    let want: Vec<Vec<u8>> = ks.map(tagged).collect();
    assert_eq!(read_all(e).unwrap(), want);
}

/// Every power cut at this point (a handful of crash images) opens to
/// `ks`: what is there is durable.
fn durable_now(v: &SimVfs, ks: std::ops::Range<u8>) {
    let at = v.snapshot();
    for seed in 0..8 {
        let e = Engine::open_with(DIR, OpenMode::ReadOnly, cfg(&at.crash_image(seed))).unwrap();
        expect(&e, ks.clone());
    }
}

fn meta(v: &SimVfs) -> Vec<u8> {
    v.read_file(&Path::new(DIR).join("meta.zr")).unwrap()
}

#[test]
fn deferred_appends_sync_nothing_until_sync() {
    let _g = serial();
    let v = SimVfs::new();
    let e = Engine::create_with(DIR, &at_sync(Codec::Zstd), cfg(&v)).unwrap();
    assert_eq!(e.durability(), Durability::AtSync);
    assert!(!marker(&v), "no marker before the first append");
    let (syncs, durable_meta) = (v.syncs(), meta(&v));
    append(&e, 0..1);
    assert!(
        marker(&v),
        "the first deferred append records its header in the marker"
    );
    // Later appends, crossing chunks and loc segments, leave writes pending.
    append(&e, 1..9);
    assert!(v.snapshot().pending_ops() > 0);
    assert_eq!(v.syncs(), syncs, "deferred appends sync nothing");
    assert_eq!(meta(&v), durable_meta, "meta.zr keeps the durable header");
    e.sync().unwrap();
    assert!(!marker(&v), "sync ends the marker");
    durable_now(&v, 0..9);
    append(&e, 9..10);
    assert!(marker(&v), "the next append after a sync writes it again");
    e.close().unwrap();
    assert!(!marker(&v), "close syncs");
    durable_now(&v, 0..10);
    let e = Engine::open_with(DIR, OpenMode::ReadOnly, cfg(&v)).unwrap();
    expect(&e, 0..10);
}

#[test]
fn a_kill_keeps_every_returned_append_and_a_power_cut_the_synced_ones() {
    let _g = serial();
    for codec in [Codec::Raw, Codec::Zstd] {
        let v = SimVfs::new();
        let e = Engine::create_with(DIR, &at_sync(codec), cfg(&v)).unwrap();
        append(&e, 0..3);
        e.sync().unwrap();
        append(&e, 3..8);
        let at = v.snapshot();
        std::mem::forget(e); // a killed process runs no destructor

        // Killed: same boot, the page cache holds every write.
        let killed = at.kill_image();
        let ro = Engine::open_with(DIR, OpenMode::ReadOnly, cfg(&killed)).unwrap();
        expect(&ro, 0..8);
        drop(ro);
        assert!(marker(&killed), "a read-only open leaves the marker");
        let rw = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&killed)).unwrap();
        expect(&rw, 0..8);
        assert!(!marker(&killed), "a read-write open settles the marker");
        durable_now(&killed, 0..8);
        drop(rw);

        // Power cut, even one that kept every write: back to the sync.
        for seed in 0..20 {
            let cut = at.crash_image(seed);
            let ro = Engine::open_with(DIR, OpenMode::ReadOnly, cfg(&cut)).unwrap();
            expect(&ro, 0..3);
            drop(ro);
            let mut rw = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&cut)).unwrap();
            expect(&rw, 0..3);
            assert!(!marker(&cut));
            assert!(rw.verify().unwrap().is_ok());
            // The roll-back is durable: another cut changes nothing.
            drop(rw);
            let again = cut.snapshot().crash_image(seed + 1);
            rw = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&again)).unwrap();
            expect(&rw, 0..3);
            // Appends land over the dropped ones.
            rw.set_durability(Durability::AtSync).unwrap();
            append(&rw, 3..6);
            rw.compact().unwrap();
            expect(&rw, 0..6);
        }
    }
}

#[test]
fn deferred_deletes_fsync_once_per_flush_and_roll_back_with_the_appends() {
    let _g = serial();
    let v = SimVfs::new();
    let (mut e, synced) = six_synced(&v);
    let syncs = |f: &mut dyn FnMut()| {
        let s0 = v.syncs();
        f();
        v.syncs() - s0
    };
    // The first delete after a sync writes the marker, unsynced.
    assert_eq!(syncs(&mut || e.delete(&[1]).unwrap()), 0);
    assert!(marker(&v), "a deferred delete writes the marker");
    // Later ones only log: their writes in place wait for the next flush.
    let loc = Path::new(DIR).join("0.loc");
    let on_disk = v.read_file(&loc);
    assert_eq!(syncs(&mut || e.delete(&[0]).unwrap()), 0);
    assert_eq!(v.read_file(&loc), on_disk, "nothing written in place yet");
    // An append flushes them first: one fsync of the marker and its log,
    // whose undo entries must be on disk before the entries they restore
    // change, and one of the directory for the marker's entry.
    assert_eq!(syncs(&mut || append(&e, 6..8)), 2);
    assert_ne!(v.read_file(&loc), on_disk);
    // A slot already logged, or past the marker's length, needs no fsync.
    assert_eq!(syncs(&mut || e.delete(&[5]).unwrap()), 0);

    let mut model: Vec<Vec<u8>> = synced.clone();
    for i in [1usize, 0] {
        let last = model.pop().unwrap();
        if i < model.len() {
            model[i] = last;
        }
    }
    model.extend([tagged(6), tagged(7)]);
    model.pop();
    assert_eq!(read_all(&e).unwrap(), model);

    // Killed: every delete that returned is there (the last one from the
    // log). Power cut: back to the sync, with the slots the deletes and
    // appends overwrote restored.
    let killed = v.snapshot().kill_image();
    let r = Engine::open_with(DIR, OpenMode::ReadOnly, cfg(&killed)).unwrap();
    assert_eq!(read_all(&r).unwrap(), model);
    drop(r);
    let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&killed)).unwrap();
    assert_eq!(read_all(&r).unwrap(), model);
    drop(r);
    let r = Engine::open_with(
        DIR,
        OpenMode::ReadOnly,
        cfg(&killed.snapshot().crash_image(0)),
    );
    assert_eq!(
        read_all(&r.unwrap()).unwrap(),
        model,
        "the kill's open finished it durably"
    );
    let cut = v.snapshot().crash_image(0);
    let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&cut)).unwrap();
    assert_eq!(read_all(&r).unwrap(), synced, "a power cut rolls back");
    drop(r);
    let again = cut.snapshot().crash_image(1);
    let r = Engine::open_with(DIR, OpenMode::ReadOnly, cfg(&again)).unwrap();
    assert_eq!(read_all(&r).unwrap(), synced, "the roll-back was durable");
    drop(r);

    e.sync().unwrap();
    assert!(!marker(&v), "sync ends the log with the marker");
    let cut = v.snapshot().crash_image(0);
    let r = Engine::open_with(DIR, OpenMode::ReadOnly, cfg(&cut)).unwrap();
    assert_eq!(read_all(&r).unwrap(), model, "durable after the sync");
}

/// A writer killed with deletes still pending, then loaderx 1.7.2 (which
/// ignores `durable.zr`) appends to the store before this package opens it
/// again: the log's deletes were logged against another state, so they are
/// not finished over the foreign append, which stands.
#[test]
fn pending_deletes_are_not_finished_over_a_foreign_writers_changes() {
    let _g = serial();
    // The reference appends tagged(9) at slot 6.
    let killed =
        common::killed_deleting_then_a_foreign_append(&SimVfs::new(), Path::new(DIR), false);

    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let r = Engine::open_with(DIR, mode, big(&killed)).unwrap();
        expect_tags(&r, &[0, 1, 2, 3, 4, 5, 9]);
    }
}

/// 8 KiB chunks: the hand-made foreign appends and deletes stay in chunk 0.
fn big(v: &SimVfs) -> EngineConfig {
    common::sim_8k_chunks(v)
}

/// Ten records synced, then a writer killed with `delete(0)` pending, then
/// loaderx 1.7.2's `delete(5)` by hand: the last entry (slot 9, segment 2
/// of 4-entry segments) moves to slot 5 (segment 1), then `meta.zr` with
/// the length 9. The killed image, with the reference's writes.
fn killed_with_a_pending_delete_then_a_foreign_one() -> SimVfs {
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), big(&v)).unwrap();
    append(&e, 0..10);
    e.sync().unwrap();
    e.delete(&[0]).unwrap();
    let killed = v.snapshot().kill_image();
    std::mem::forget(e);
    let dir = Path::new(DIR);
    let last = killed.read_file(&dir.join("2.loc")).unwrap()[16..32].to_vec();
    let mut seg = killed.read_file(&dir.join("1.loc")).unwrap();
    seg[16..32].copy_from_slice(&last);
    killed.write_file(&dir.join("1.loc"), &seg);
    let mut meta = killed.read_file(&dir.join("meta.zr")).unwrap();
    assert_eq!(u64::from_le_bytes(meta[14..22].try_into().unwrap()), 10);
    meta[14..22].copy_from_slice(&9u64.to_le_bytes());
    killed.write_file(&dir.join("meta.zr"), &meta);
    killed
}

/// A writer killed with `delete(0)` pending, then loaderx 1.7.2 deletes
/// record 5 by itself: its `meta.zr` is the very header our pending delete
/// would write (one record fewer, the frontier unmoved), but slot 0 still
/// holds its old entry. Finishing our delete over it put record 9 in slots
/// 0 and 5 and lost records 0 and 5; the foreign delete stands.
#[test]
fn pending_deletes_are_not_finished_over_a_foreign_delete_of_as_many_records() {
    let _g = serial();
    let killed = killed_with_a_pending_delete_then_a_foreign_one();

    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let r = Engine::open_with(DIR, mode, big(&killed)).unwrap();
        expect_tags(&r, &[0, 1, 2, 3, 4, 9, 6, 7, 8]);
    }
}

/// A killed writer's pending delete of a slot that its earlier deletes cut
/// off and an append then refilled: the log does not know what the append
/// wrote there, and the delete is still finished (the check against a
/// foreign writer above must not take that slot for one).
#[test]
fn pending_deletes_over_slots_refilled_by_an_append_are_finished() {
    let _g = serial();
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), big(&v)).unwrap();
    append(&e, 0..6);
    e.sync().unwrap();
    for _ in 0..6 {
        e.delete(&[0]).unwrap();
    }
    append(&e, 10..13);
    e.delete(&[0]).unwrap();
    let killed = v.snapshot().kill_image();
    std::mem::forget(e);
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let r = Engine::open_with(DIR, mode, big(&killed)).unwrap();
        expect_tags(&r, &[12, 11]);
    }
}

#[test]
fn verify_writes_pending_deletes_in_place_before_it_compares_the_loc_files() {
    let _g = serial();
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &at_sync(Codec::Zstd), cfg(&v)).unwrap();
    append(&e, 0..6);
    e.sync().unwrap();
    e.delete(&[1, 3]).unwrap();
    let loc = Path::new(DIR).join("0.loc");
    let before = v.read_file(&loc);
    let report = e.verify().unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_ne!(v.read_file(&loc), before);
    expect_tags(&e, &[0, 4, 2, 5]);
}

#[test]
fn compact_and_a_switch_to_each_append_make_deferred_appends_durable() {
    let _g = serial();
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), cfg(&v)).unwrap();
    append(&e, 0..6);
    e.delete(&[0]).unwrap();
    append(&e, 6..8);
    e.compact().unwrap();
    assert!(!marker(&v), "compact settles first");

    append(&e, 8..9);
    assert!(marker(&v));
    e.set_durability(Durability::EachAppend).unwrap();
    assert!(!marker(&v), "switching to each-append settles");
    append(&e, 9..10);
    assert!(!marker(&v), "each-append writes no marker");
    let all = read_all(&e).unwrap();
    let cut = v.snapshot().crash_image(0);
    let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&cut)).unwrap();
    assert_eq!(read_all(&r).unwrap(), all);
}

#[test]
fn dropping_a_deferred_handle_syncs() {
    let _g = serial();
    let v = SimVfs::new();
    let e = Engine::create_with(DIR, &at_sync(Codec::Zstd), cfg(&v)).unwrap();
    append(&e, 0..4);
    drop(e);
    assert!(!marker(&v));
    let cut = v.snapshot().crash_image(0);
    let r = Engine::open_with(DIR, OpenMode::ReadOnly, cfg(&cut)).unwrap();
    expect(&r, 0..4);
}

#[test]
fn a_torn_or_foreign_marker_leaves_meta_standing() {
    let _g = serial();
    // A marker torn before it was durable means no deferred append started.
    let v = SimVfs::new();
    let e = Engine::create_with(DIR, &CreateOptions::new(Codec::Raw), cfg(&v)).unwrap();
    append(&e, 0..3);
    drop(e);
    let p = Path::new(DIR).join("durable.zr");
    for junk in [&b""[..], b"ZDUR", &[0xAB; 80]] {
        v.write_file(&p, junk);
        let cut = v.snapshot().crash_image(0);
        let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&cut)).unwrap();
        expect(&r, 0..3);
        assert!(!marker(&cut), "the read-write open removes it");
    }
}

#[test]
fn a_marker_naming_another_codec_is_a_clear_error() {
    let _g = serial();
    // Write a real marker from a zstd store (a deferred delete arms one),
    // then put it beside a raw one.
    let z = SimVfs::new();
    let mut e = Engine::create_with(DIR, &at_sync(Codec::Zstd), cfg(&z)).unwrap();
    append(&e, 0..2);
    e.delete(&[1]).unwrap();
    let m = z.read_file(&Path::new(DIR).join("durable.zr")).unwrap();
    std::mem::forget(e);

    let v = SimVfs::new();
    drop(Engine::create_with(DIR, &CreateOptions::new(Codec::Raw), cfg(&v)).unwrap());
    v.write_file(&Path::new(DIR).join("durable.zr"), &m);
    let cut = v.snapshot().crash_image(0); // another boot: the marker is read
    let err = Engine::open_with(DIR, OpenMode::ReadOnly, cfg(&cut)).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("durable.zr") && msg.contains("codec"),
        "unclear error: {msg}"
    );
}

#[test]
fn real_file_system_markers_come_and_go() {
    let _g = serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let m = dir.join("durable.zr");
    // Present with a record or marker in its first bytes; a handle keeps
    // the file between syncs with those zeroed, and removes it at close.
    let live = || common::live_marker(std::fs::read(&m).ok());
    let e = Engine::create(&dir, &at_sync(Codec::Zstd)).unwrap();
    append(&e, 0..5);
    assert!(live());
    e.sync().unwrap();
    assert!(!live());
    append(&e, 5..7);
    // A read-only open on the same boot sees every append (the reference
    // would too); the writer still holds the lock, so try after close.
    e.close().unwrap();
    assert!(!m.exists());
    let r = Engine::open(&dir, OpenMode::ReadOnly).unwrap();
    expect(&r, 0..7);
}

/// FNV-1a 64, as docs/format.md specifies for `durable.zr`.
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The fork test runs alone: its child inherits every file open in this
/// process at that moment, so a concurrent test's handle would keep its
/// store's lock (a reopen after close saw `StoreBusy`) and its fork would
/// count against that handle's compaction. Every test here takes it.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn real_file_system_rolls_back_when_the_marker_names_another_boot() {
    let _g = serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let e = Engine::create(&dir, &at_sync(Codec::Zstd)).unwrap();
    append(&e, 0..3);
    e.sync().unwrap();
    append(&e, 3..8);
    // Killed: no destructor. Its lock stays with this process, so the
    // reopens below read copies of the files it left.
    std::mem::forget(e);
    let copy_of = |name: &str| {
        let to = tmp.path().join(name);
        std::fs::create_dir(&to).unwrap();
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
        }
        to
    };
    // Same boot: every append stands.
    let same = copy_of("same");
    let r = Engine::open(&same, OpenMode::ReadWrite).unwrap();
    expect(&r, 0..8);
    assert!(!same.join("durable.zr").exists());
    drop(r);
    let copy = copy_of("other");
    let marker = std::fs::read(copy.join("durable.zr")).unwrap();
    // Another boot: rewrite the boot id (layout of docs/format.md: the
    // record of pending appends holds two headers) and the checksum; the
    // store goes back to the 3 synced records.
    let boot_len = usize::from(marker[5]);
    assert_eq!(marker.len(), 8 + 64 + boot_len + 8);
    let mut other = marker[..8 + 64].to_vec();
    other.extend(std::iter::repeat_n(b'0', boot_len));
    let sum = fnv(&other);
    other.extend_from_slice(&sum.to_le_bytes());
    std::fs::write(copy.join("durable.zr"), &other).unwrap();
    let ro = Engine::open(&copy, OpenMode::ReadOnly).unwrap();
    expect(&ro, 0..3);
    drop(ro);
    let mut rw = Engine::open(&copy, OpenMode::ReadWrite).unwrap();
    expect(&rw, 0..3);
    assert!(!copy.join("durable.zr").exists());
    assert!(rw.verify().unwrap().is_ok());
    append(&rw, 3..5);
    rw.compact().unwrap();
    expect(&rw, 0..5);
    drop(rw);
    let again = Engine::open(&copy, OpenMode::ReadOnly).unwrap();
    expect(&again, 0..5);
}

#[test]
fn an_open_falls_back_to_the_marker_when_meta_names_missing_bytes() {
    let _g = serial();
    // Same boot, yet the files lack what meta.zr names (a failed write-back,
    // a device that lost power on its own): the marker's header is durable.
    let v = SimVfs::new();
    let e = Engine::create_with(DIR, &at_sync(Codec::Raw), cfg(&v)).unwrap();
    append(&e, 0..3);
    e.sync().unwrap();
    append(&e, 3..8); // records 4..8 live in loc segment 1
    let image = v.snapshot().kill_image();
    std::mem::forget(e);
    image.write_file(&Path::new(DIR).join("1.loc"), b"");
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let r = Engine::open_with(DIR, mode, cfg(&image)).unwrap();
        expect(&r, 0..3);
    }
    // Without a marker the same damage is a clear error.
    image.write_file(&Path::new(DIR).join("meta.zr"), &{
        let v2 = SimVfs::new();
        let e2 = Engine::create_with(DIR, &at_sync(Codec::Raw), cfg(&v2)).unwrap();
        append(&e2, 0..8);
        e2.close().unwrap();
        v2.read_file(&Path::new(DIR).join("meta.zr")).unwrap()
    });
    let err = Engine::open_with(DIR, OpenMode::ReadOnly, cfg(&image)).unwrap_err();
    assert!(err.to_string().contains("1.loc"), "{err}");
}

/// A forked child that inherited a handle fsyncs nothing through it (the
/// opener must see its own write-back errors) and cannot remove the
/// opener's marker: with the opener's deferred appends pending, its `sync`
/// and `close` fail with `ForeignProcess` instead of reporting them durable;
/// with none pending they succeed.
#[cfg(target_os = "linux")]
#[test]
fn a_forked_child_cannot_report_the_openers_deferred_appends_durable() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let e = Engine::create(&path, &at_sync(Codec::Raw)).unwrap();
    append(&e, 0..1);
    e.sync().unwrap();
    // In the child: 0 = as expected, 1 = wrong sync result, 2 = wrong close
    // result.
    let child = |e: Engine, pending: bool| -> i32 {
        let foreign = |r: zrecord_engine::Result<()>| {
            matches!(r, Err(zrecord_engine::Error::ForeignProcess { .. }))
        };
        let expected = |r: zrecord_engine::Result<()>| {
            if pending { foreign(r) } else { r.is_ok() }
        };
        if !expected(e.sync()) {
            return 1;
        }
        if !expected(e.close()) {
            return 2;
        }
        0
    };
    let in_child = |e: &Engine, pending: bool| {
        // SAFETY: the child only calls into the engine (which takes no lock
        // on these paths) and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: a bitwise copy of the parent's handle, consumed once in
            // this process; the parent keeps its own.
            let copy = unsafe { std::ptr::read(e) };
            let code = child(copy, pending);
            // SAFETY: ends the child without running the parent's exit code.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child crashed: {status}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "pending {pending}");
    };
    in_child(&e, false);
    append(&e, 1..3); // deferred: the marker is armed
    in_child(&e, true);
    assert!(
        path.join("durable.zr").exists(),
        "the child left the opener's marker"
    );
    e.close().unwrap();
    assert!(!path.join("durable.zr").exists());
    let r = Engine::open(&path, OpenMode::ReadOnly).unwrap();
    expect(&r, 0..3);
}

/// The whole marker an open reads (`MAX_MARKER_BYTES`).
const MAX_MARKER: usize = 16 << 20;

fn marker_len(v: &SimVfs) -> usize {
    v.read_file(&Path::new(DIR).join("durable.zr"))
        .map_or(0, |b| b.len())
}

#[test]
fn a_delete_that_would_take_the_log_past_its_limit_starts_a_new_marker() {
    // A delete is logged only when its record fits under the limit (past
    // it, an open reads a torn record and loses its undo entries). The
    // first delete of fresh slots logs each hole and each freed tail slot
    // as undo, besides its redo entries: the record is 72 bytes a moved
    // slot, not 48, so the room check must count both.
    let _g = serial();
    let v = SimVfs::new();
    let cfg = EngineConfig {
        vfs: std::sync::Arc::new(v.clone()),
        read_path: zrecord_engine::ReadPath::Pread,
        ..EngineConfig::default()
    };
    const B: u64 = 8192;
    let n = 3 * B;
    let tag = |t: u64| (t as u32).to_le_bytes();
    let batch = |from: u64| -> (Vec<u8>, Vec<usize>) {
        let data: Vec<u8> = (from..from + B).flat_map(tag).collect();
        let offsets = (0..=B as usize).map(|i| 4 * i).collect();
        (data, offsets)
    };
    let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), cfg.clone()).unwrap();
    for b in 0..3 {
        let (d, o) = batch(b * B);
        e.append_var(&d, &o).unwrap();
    }
    e.sync().unwrap();
    // Fill the log: append a batch past the marker's length, then delete
    // slots 0..B (each takes one of the batch's entries, and frees a slot
    // the marker does not name). Slots B..n are never touched.
    let holes: Vec<u64> = (0..B).collect();
    let mut next = n;
    loop {
        let left = MAX_MARKER - marker_len(&v);
        if left < 60 + 72 * B as usize {
            break;
        }
        let (d, o) = batch(next);
        next += B;
        e.append_var(&d, &o).unwrap();
        e.delete(&holes).unwrap();
    }
    // The largest delete of fresh holes whose record the 48-byte count
    // lets in although it does not fit.
    let left = MAX_MARKER - marker_len(&v);
    let h = (((left - 76) / 48) as u64).min(B);
    assert!(60 + 72 * h as usize > left, "the test's arithmetic");
    let before = read_all(&e).unwrap();
    let fresh: Vec<u64> = (B..B + h).collect();
    e.delete(&fresh).unwrap();
    let after = read_all(&e).unwrap();
    assert!(
        marker_len(&v) <= MAX_MARKER,
        "durable.zr grew to {} bytes, past the {MAX_MARKER} an open reads",
        marker_len(&v)
    );
    // Killed: the delete stays.
    let killed = v.snapshot().kill_image();
    let r = Engine::open_with(DIR, OpenMode::ReadOnly, cfg_on(&cfg, &killed)).unwrap();
    assert!(read_all(&r).unwrap() == after, "a kill keeps the delete");
    drop(r);
    // Written in place, then a power cut that keeps those writes: the
    // roll-back restores what the delete overwrote.
    assert!(e.verify().unwrap().is_ok());
    let cut = v.snapshot().crash_image(1);
    let r = Engine::open_with(DIR, OpenMode::ReadOnly, cfg_on(&cfg, &cut)).unwrap();
    assert!(
        read_all(&r).unwrap() == before,
        "a power cut rolls it back, restoring every slot it overwrote"
    );
    drop(r);
    drop(e);
}

fn cfg_on(cfg: &EngineConfig, v: &SimVfs) -> EngineConfig {
    EngineConfig {
        vfs: std::sync::Arc::new(v.clone()),
        ..cfg.clone()
    }
}

#[test]
fn an_open_whose_roll_back_write_fails_leaves_the_marker_for_the_next_one() {
    // A power cut kept a flushed delete's entry but not its header: the
    // roll-back must put the entry back. When that write fails, the failed
    // open must not make the half-rolled-back files durable and remove the
    // marker (its handle, dropped on the way out, settled them).
    let _g = serial();
    let v = SimVfs::new();
    let (mut e, synced) = six_synced(&v);
    e.delete(&[0]).unwrap();
    assert!(e.verify().unwrap().is_ok(), "writes the delete in place");
    let snap = v.snapshot();
    std::mem::forget(e);
    let loc = Path::new(DIR).join("0.loc");
    let meta = Path::new(DIR).join("meta.zr");
    let (loc0, meta0) = (v.read_file(&loc).unwrap(), v.read_file(&meta).unwrap());
    let torn = (2..500)
        .map(|seed| snap.crash_image(seed))
        .find(|img| {
            let l = img.read_file(&loc).unwrap();
            // The moved entry landed, the header did not.
            l[..16] == loc0[..16] && img.read_file(&meta).unwrap() != meta0
        })
        .expect("a power cut that keeps the entry and drops the header");
    let failed_opens = reopen_after_each_failed_open(&torn, DIR, cfg, 60, |n, r| {
        assert_eq!(read_all(&r).unwrap(), synced, "call {n} failed");
        assert!(r.verify().unwrap().is_ok(), "call {n}");
    });
    assert!(failed_opens > 5);
}

#[cfg(unix)]
#[test]
fn a_forked_child_verifies_clean_while_the_opener_has_deferred_deletes() {
    // The child reads through a copy of the opener's table, which holds
    // deletes whose entries reach the loc files only at the opener's next
    // flush (the child may not write them): those slots are not compared.
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let mut e = Engine::create(&path, &at_sync(Codec::Raw)).unwrap();
    append(&e, 0..6);
    e.sync().unwrap();
    e.delete(&[1, 3]).unwrap();
    assert!(path.join("durable.zr").exists(), "the delete was deferred");
    // SAFETY: the child only reads through the engine and leaves with
    // `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = match e.verify() {
            Ok(r) if r.is_ok() && r.records == 4 => 0,
            Ok(_) => 1,
            Err(_) => 2,
        };
        // SAFETY: ends the child without running the parent's exit code
        // (or the handle's drop).
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "child crashed: {status}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "the child's verify");
    // The opener's own verify writes the deletes in place first.
    assert!(e.verify().unwrap().is_ok());
    expect_tags(&e, &[0, 4, 2, 5]);
}

/// Review of deferred deletes: a `sync` that fails (at any of its calls)
/// says the deferred work since the last durable point is lost, and puts
/// the store back to it; a reopen on the same boot must not finish the
/// deletes the log holds (it did when the log's fsync failed: their
/// records had no *done* record after them).
#[test]
fn a_failed_sync_abandons_the_deletes_it_could_not_make_durable() {
    let _g = serial();
    let mut checked = 0;
    for call in 0..40u64 {
        let v = SimVfs::new();
        let (mut e, _) = six_synced(&v);
        e.delete(&[1]).unwrap();
        e.delete(&[0]).unwrap();
        v.fail_at(Some(call));
        let failed = e.sync().is_err();
        v.fail_at(None);
        if !failed {
            break;
        }
        // Failed at the directory sync after the marker's removal: every
        // file was synced, and with no marker left nothing can be put
        // back safely (see `a_sync_that_fails_after_removing_the_marker_
        // puts_nothing_back` in recovery_faults.rs): the deletes stand.
        let gone = !marker(&v);
        drop(e);
        let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&v)).unwrap();
        if gone {
            expect_tags(&r, &[4, 5, 2, 3]);
        } else {
            expect(&r, 0..6);
        }
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} failing calls");
}

/// The store after deleting `indices` one call at a time (swap-last).
fn deleted(mut model: Vec<Vec<u8>>, indices: &[usize]) -> Vec<Vec<u8>> {
    for &i in indices {
        let last = model.pop().unwrap();
        if i < model.len() {
            model[i] = last;
        }
    }
    model
}

/// Second review of deferred deletes: a writer killed before its pending
/// deletes were flushed leaves their log records in the page cache only.
/// The open on the same boot finishes them in place; a power cut at any
/// point of that open must leave the store before or after the deletes,
/// never with their entries on disk and the undo entries that roll them
/// back lost (the log must be durable before the entries it undoes change).
#[test]
fn a_power_cut_while_an_open_finishes_a_killed_writers_deletes_loses_nothing() {
    let _g = serial();
    let v = SimVfs::new();
    let (mut e, synced) = six_synced(&v);
    e.delete(&[1]).unwrap();
    e.delete(&[0]).unwrap();
    let model = deleted(synced.clone(), &[1, 0]);
    assert_eq!(read_all(&e).unwrap(), model);
    let killed = v.snapshot().kill_image();
    std::mem::forget(e);
    killed.record(true);
    let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&killed)).unwrap();
    assert_eq!(read_all(&r).unwrap(), model);
    drop(r);
    killed.record(false);
    let snaps = killed.take_snapshots();
    assert!(snaps.len() > 3);
    for (k, s) in snaps.iter().enumerate() {
        for seed in 0..40 {
            let img = s.crash_image(seed);
            let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&img))
                .unwrap_or_else(|err| panic!("snapshot {k} seed {seed}: {err}"));
            let got = read_all(&r).unwrap();
            assert!(
                got == synced || got == model,
                "snapshot {k} seed {seed}: {got:?}"
            );
        }
    }
}

/// Second review: an open on the same boot after a killed writer with
/// deferred deletes (flushed or not) whose own writes or settling fail at
/// any call: a reopen must find the store before the deletes' marker or
/// after the deletes, never with the marker's header over slots the
/// deletes overwrote.
#[test]
fn a_failed_open_after_a_killed_writers_deletes_leaves_a_whole_state() {
    let _g = serial();
    for flushed in [false, true] {
        let v = SimVfs::new();
        let (mut e, synced) = six_synced(&v);
        append(&e, 6..8);
        e.delete(&[1]).unwrap();
        e.delete(&[0]).unwrap();
        if flushed {
            assert!(e.verify().unwrap().is_ok());
        }
        // The first delete made the appends before it durable (a delete
        // arms the marker, which names a durable header).
        let mut all = synced.clone();
        all.extend([tagged(6), tagged(7)]);
        let model = deleted(all.clone(), &[1, 0]);
        let killed = v.snapshot().kill_image();
        std::mem::forget(e);
        let failed = reopen_after_each_failed_open(&killed, DIR, cfg, 80, |n, r| {
            let got = read_all(&r).unwrap();
            assert!(
                got == model || got == all,
                "flushed {flushed} call {n}: {got:?}"
            );
        });
        assert!(failed > 5);
    }
}

/// Second review: a `sync` whose failure meets the put-back of the
/// marker's header too (a fault that a retry meets again) must not leave
/// the deletes' header over the undo entries it did put back: a reopen on
/// the same boot must find the store before or after the deletes.
#[test]
fn a_failed_sync_whose_header_put_back_fails_leaves_a_whole_state() {
    let _g = serial();
    let mut checked = 0;
    for span in 2..5u64 {
        for call in 0..40u64 {
            let v = SimVfs::new();
            let (mut e, synced) = six_synced(&v);
            e.delete(&[1]).unwrap();
            e.delete(&[0]).unwrap();
            let model = deleted(synced.clone(), &[1, 0]);
            v.fail_span(Some(call), span);
            let failed = e.sync().is_err();
            v.fail_span(None, 0);
            if !failed {
                break;
            }
            std::mem::forget(e);
            let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&v))
                .unwrap_or_else(|err| panic!("span {span} call {call}: {err}"));
            let got = read_all(&r).unwrap();
            assert!(
                got == synced || got == model,
                "span {span} call {call}: {got:?}"
            );
            checked += 1;
        }
    }
    assert!(checked > 10);
}

/// Third review: the open that leaves a foreign delete standing over a
/// killed writer's pending one (above) fails to settle, at any call. Its
/// failed sync put the marker's header and undo entries back over the
/// foreign writer's files (whose delete had moved record 9 into slot 5),
/// and a reopen then finished our delete over them too: records lost and
/// repeated. Having found the files changed by another writer, the open
/// has nothing of its own to put back.
#[test]
fn a_failed_open_over_a_foreign_delete_puts_nothing_back() {
    let _g = serial();
    let killed = killed_with_a_pending_delete_then_a_foreign_one();

    let failed = reopen_after_each_failed_open(&killed, DIR, big, 60, |_, r| {
        expect_tags(&r, &[0, 1, 2, 3, 4, 9, 6, 7, 8]);
    });
    assert!(failed > 5);
}

/// An append-and-sync loop syncs only what each round wrote: the tail
/// chunk and loc segment, then `meta.zr`, as loaderx 1.7.2 does; not every
/// chunk and segment of the store (an fsync of a clean file still flushes
/// the device's cache), and not the marker that holds the appends' header
/// meanwhile (written, never synced, removed without a directory sync).
/// The directory is synced only when the round's append created a file,
/// before `meta.zr` names it.
#[test]
fn an_append_and_sync_loop_syncs_only_the_files_each_round_wrote() {
    let _g = serial();
    let v = SimVfs::new();
    let cfg = EngineConfig {
        chunk_capacity: 256,
        loc_segment_entries: 8,
        ..cfg(&v)
    };
    let e = Engine::create_with(DIR, &at_sync(Codec::Raw), cfg.clone()).unwrap();
    append(&e, 0..6);
    e.sync().unwrap();
    let files = || {
        (0..64)
            .flat_map(|i| [format!("{i}.chunk"), format!("{i}.loc")])
            .filter(|n| v.read_file(&Path::new(DIR).join(n)).is_some())
            .count()
    };
    let (mut plain, mut creating) = (0, 0);
    for k in 6..40 {
        let (syncs, dir_syncs, before) = (v.syncs(), v.dir_syncs(), files());
        append(&e, k..k + 1);
        let created = files() > before;
        e.sync().unwrap();
        let (syncs, dir_syncs) = (v.syncs() - syncs, v.dir_syncs() - dir_syncs);
        if created {
            creating += 1;
            assert_eq!(dir_syncs, 1, "round {k}: the new file's entry");
            assert!(syncs <= 5, "round {k}: {syncs} syncs");
        } else {
            plain += 1;
            assert_eq!((syncs, dir_syncs), (3, 0), "round {k}, {before} files");
        }
    }
    assert!(
        plain >= 10 && creating >= 5,
        "{plain} plain rounds, {creating} creating ones"
    );
    assert!(files() >= 12, "the store grew to {} files", files());
    e.close().unwrap();
    let e = Engine::open_with(DIR, OpenMode::ReadOnly, cfg).unwrap();
    expect(&e, 0..40);
}

/// A failed `sync` puts back the marker's header and the entries its
/// deferred deletes overwrote. A second, separate fault in that put-back of
/// the entries (a read of the entries between scattered slots, which a
/// spanning write makes first, or a write) left the marker's length over
/// the deletes' entries, followed by *done*: an open on this boot trusted
/// them and found records lost and others repeated. It must find the store
/// before the delete or after it, whichever calls fail.
#[test]
fn a_failed_sync_whose_entry_put_back_fails_too_loses_no_record() {
    let _g = serial();
    let n = 3000u32;
    let before: Vec<Vec<u8>> = (0..n).map(|k| k.to_le_bytes().to_vec()).collect();
    // Two stretches of slots more than a page apart: two spanning writes.
    let doomed = [10u64, 20, 30, 1000, 1010, 1020];
    let mut after = before.clone();
    for &i in doomed.iter().rev() {
        after.swap_remove(i as usize);
    }
    let (mut failed, mut checked) = (0, 0);
    for a in 0..12u64 {
        for b in a + 1..a + 10 {
            let v = SimVfs::new();
            let c = EngineConfig {
                chunk_capacity: 1 << 20,
                loc_segment_entries: 1 << 12,
                ..cfg(&v)
            };
            let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), c.clone()).unwrap();
            let offsets: Vec<usize> = (0..=before.len()).map(|i| 4 * i).collect();
            e.append_var(&before.concat(), &offsets).unwrap();
            e.sync().unwrap();
            e.delete(&doomed).unwrap();
            v.fail_calls(&[a, b]);
            let r = e.sync();
            v.fail_calls(&[]);
            failed += usize::from(r.is_err());
            drop(e);
            // The same boot: the page cache is the disk.
            let e = Engine::open_with(DIR, OpenMode::ReadWrite, c).unwrap();
            let got = read_all(&e).unwrap();
            assert!(
                got == before || got == after,
                "calls {a} and {b} failed: {} records, neither the store before the delete nor after it",
                got.len()
            );
            e.verify().unwrap();
            checked += 1;
        }
    }
    assert!(failed > 40 && checked == 108, "{failed} syncs failed");
}

/// Whatever a workload did since (appends that create chunks and loc
/// segments, scattered deferred deletes written in spans, compactions that
/// truncate and remove files, switches of durability, a killed handle
/// whose successor starts from its unsynced pages), a `sync` that
/// returned leaves nothing a power cut can take: the disk that drops every
/// unsynced write and directory operation, and ones that keep or tear some,
/// open to the records at the sync. Catches a sync that skips a file or the
/// directory that a write or a new file made dirty.
#[test]
fn after_every_sync_a_power_cut_loses_nothing() {
    use common::Rng;
    use common::workload::{Op, apply, random_op, run};
    let _g = serial();
    let mut syncs = 0;
    for seed in 0..24u64 {
        let mut v = SimVfs::new();
        let mut e = Engine::create_with(DIR, &at_sync(Codec::Zstd), cfg(&v)).unwrap();
        let mut rng = Rng(seed);
        let mut model: Vec<Vec<u8>> = Vec::new();
        for step in 0..80 {
            if rng.below(15) == 0 {
                // Killed: the next handle starts from pages it did not write.
                let killed = v.snapshot().kill_image();
                std::mem::forget(e);
                v = killed;
                e = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&v)).unwrap();
            }
            if rng.below(12) == 0 {
                let d = if e.durability() == Durability::AtSync {
                    Durability::EachAppend
                } else {
                    Durability::AtSync
                };
                e.set_durability(d).unwrap();
            }
            let op = random_op(&mut rng, model.len(), 40);
            run(&mut e, &op).unwrap();
            apply(&mut model, &op);
            if !matches!(op, Op::Sync) {
                continue;
            }
            syncs += 1;
            let at = v.snapshot();
            for cut in [0, 2, 3, 4] {
                let img = at.crash_image(cut);
                let r = Engine::open_with(DIR, OpenMode::ReadOnly, cfg(&img))
                    .unwrap_or_else(|err| panic!("seed {seed} step {step} cut {cut}: {err}"));
                assert!(
                    read_all(&r).unwrap() == model,
                    "seed {seed} step {step} cut {cut}: records lost since the sync"
                );
            }
        }
    }
    assert!(syncs > 100, "{syncs} syncs");
}

/// On a file system that does not order directory operations, a `sync`
/// whose deferred appends created chunks and loc segments makes their
/// entries durable before it removes `durable.zr`: a power cut at any point
/// of the appends and the sync, keeping any subset of the unsynced
/// directory operations, opens to the records before the round or after it
/// (never a `meta.zr` naming a chunk whose creation was lost once the
/// marker's removal lasted).
#[test]
fn a_power_cut_with_unordered_directory_operations_never_loses_a_new_file() {
    let _g = serial();
    let v = SimVfs::new();
    let (e, mut model) = six_synced(&v);
    let (mut created, mut checked) = (0, 0);
    for k in 6..30u8 {
        let names = |v: &SimVfs| {
            (0..64)
                .flat_map(|i| [format!("{i}.chunk"), format!("{i}.loc")])
                .filter(|n| v.read_file(&Path::new(DIR).join(n)).is_some())
                .count()
        };
        let files = names(&v);
        v.record(true);
        append(&e, k..k + 1);
        e.sync().unwrap();
        v.record(false);
        created += usize::from(names(&v) > files);
        let before = model.clone();
        model.push(tagged(k));
        for (n, s) in v.take_snapshots().iter().enumerate() {
            for seed in 0..16 {
                let img = s.crash_image_unordered(seed);
                let r = Engine::open_with(DIR, OpenMode::ReadOnly, cfg(&img))
                    .unwrap_or_else(|err| panic!("record {k} snapshot {n} seed {seed}: {err}"));
                let got = read_all(&r).unwrap();
                assert!(
                    got == before || got == model,
                    "record {k} snapshot {n} seed {seed}: {} records",
                    got.len()
                );
                checked += 1;
            }
        }
    }
    assert!(
        created >= 5 && checked > 1000,
        "{created} rounds created files"
    );
}

/// A writer killed with appends pending (their header in `durable.zr`,
/// `meta.zr` still the durable one), then loaderx 1.7.2 appends a record by
/// hand over the same frontier: its `meta.zr` is no longer the one the
/// appends were made to, so its state stands, and the killed writer's
/// appends (whose bytes it overwrote) are not adopted over it.
#[test]
fn pending_appends_stand_only_over_the_meta_they_were_appended_to() {
    let _g = serial();
    let (killed, _) = killed_with_appends_pending(Path::new(DIR), sim_8k_chunks);
    // Ours alone: every returned append stands, read-only or read-write.
    let alone = killed.fork();
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let r = Engine::open_with(DIR, mode, sim_8k_chunks(&alone)).unwrap();
        expect(&r, 0..9);
    }
    // The reference's append in between, as long as our first: it writes
    // over our bytes in place (the bytes after it stay), its entry over
    // ours, and its header. Its record, not ours.
    let name = Path::new(DIR).join("0.chunk");
    let ours = killed.read_file(&name).unwrap();
    append_by_hand(&killed, Path::new(DIR), 4, &[42; 36]);
    let mut theirs = killed.read_file(&name).unwrap();
    theirs.extend_from_slice(&ours[theirs.len()..]);
    killed.write_file(&name, &theirs);
    let mut want: Vec<Vec<u8>> = (0..6).map(tagged).collect();
    want.push(vec![42; 36]);
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let r = Engine::open_with(DIR, mode, sim_8k_chunks(&killed)).unwrap();
        assert_eq!(read_all(&r).unwrap(), want, "{mode:?}");
        assert!(r.verify().unwrap().is_ok());
    }
    assert!(!marker(&killed), "the read-write open removed the marker");
}

/// A sync that fails with appends pending puts the durable header back and
/// removes their record: an open on the same boot (whose page cache a
/// failed write-back may have emptied) keeps the synced records, unless
/// the failure came once `meta.zr` was durable.
#[test]
fn a_failed_sync_of_pending_appends_leaves_no_record_to_adopt() {
    let _g = serial();
    let mut first_call_checked = false;
    for call in 0..20u64 {
        let v = SimVfs::new();
        let (e, synced) = six_synced(&v);
        append(&e, 6..9);
        let mut all = synced.clone();
        all.extend((6..9).map(tagged));
        v.fail_at(Some(call));
        let r = e.sync();
        v.fail_at(None);
        let Err(err) = r else { break };
        assert!(matches!(err, zrecord_engine::Error::Io { .. }), "{err}");
        std::mem::forget(e);
        let r = Engine::open_with(DIR, OpenMode::ReadWrite, cfg(&v))
            .unwrap_or_else(|err| panic!("call {call}: {err}"));
        let got = read_all(&r).unwrap();
        if call == 0 {
            assert_eq!(got, synced, "the first fsync failed");
            first_call_checked = true;
        }
        assert!(got == synced || got == all, "call {call}: {got:?}");
        assert!(r.verify().unwrap().is_ok());
    }
    assert!(first_call_checked);
}

/// Same boot, appends pending, and the tail chunk lost the bytes they
/// wrote (a failed write-back): the header in `durable.zr` names bytes
/// the files lack, so the open falls back to `meta.zr`, durable.
#[test]
fn pending_appends_naming_lost_bytes_fall_back_to_the_durable_header() {
    let _g = serial();
    let (killed, chunk) = killed_with_appends_pending(Path::new(DIR), sim_8k_chunks);
    killed.write_file(&Path::new(DIR).join("0.chunk"), &chunk);
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let r = Engine::open_with(DIR, mode, sim_8k_chunks(&killed)).unwrap();
        expect(&r, 0..6);
    }
}

/// A deferred delete and a sync, round after round (the loop loaderx 1.7.2
/// users write around `delete` and `sync`): after the first round the
/// handle keeps `durable.zr`, so each later one fsyncs the marker with its
/// log, the loc segment, `meta.zr` and the marker's zeroed first sector,
/// and syncs no directory (a new marker cost a directory sync at its first
/// flush and its removal another: five syncs a round, two of them of the
/// directory). Every round is durable, and the file goes at close.
#[test]
fn delete_and_sync_rounds_keep_the_marker_file_and_sync_no_directory() {
    let _g = serial();
    let v = SimVfs::new();
    let mut e = Engine::create_with(DIR, &at_sync(Codec::Raw), cfg(&v)).unwrap();
    append(&e, 0..12);
    e.sync().unwrap();
    let mut model: Vec<u8> = (0..12).collect();
    let mut delete = |e: &mut Engine, i: usize| {
        e.delete(&[i as u64]).unwrap();
        let last = model.pop().unwrap();
        if i < model.len() {
            model[i] = last;
        }
        e.sync().unwrap();
        model.clone()
    };
    delete(&mut e, 0);
    for round in 0..6 {
        let (s, d) = (v.syncs(), v.dir_syncs());
        let want = delete(&mut e, round % 3);
        assert_eq!(
            (v.syncs() - s, v.dir_syncs() - d),
            (4, 0),
            "round {round}: (syncs, directory syncs)"
        );
        assert!(!marker(&v), "round {round}: the sync ends the marker");
        let at = v.snapshot();
        for seed in 0..6 {
            let r = Engine::open_with(DIR, OpenMode::ReadOnly, cfg(&at.crash_image(seed))).unwrap();
            expect_tags(&r, &want);
        }
    }
    e.close().unwrap();
    assert!(v.read_file(&Path::new(DIR).join("durable.zr")).is_none());
}
