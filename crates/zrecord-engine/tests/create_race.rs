//! Guards against `create` racing an `open` or another `create` of the same
//! directory. `create` used to make `meta.zr` (empty) and only then lock it:
//! an open that landed between the two took the lock first and reported the
//! empty `meta.zr` as `Corrupted`, while the creator failed with `StoreBusy`
//! and left a directory behind that neither opened nor could be created
//! again; and two creators that both found the directory empty got one store
//! and a raw I/O error ("File exists") instead of `ForeignFiles`. Now the
//! locked `meta.zr` is published with a hard link that fails if the name
//! exists, so it is never visible unlocked while its creator runs.
//!
//! Real threads race on real directories (`/dev/shm` where present, so the
//! fsyncs cost little and the loop is long); the crash and failure tests use
//! the simulated disk: a create cut short at any I/O call (power cut, kill,
//! injected error) leaves a directory that opens as an empty store or is
//! reported as not a store (`NotAStore`, `CreateInterrupted`), never as
//! `Corrupted`, and that a later create takes or refuses naming a file.

mod common;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use zrecord_engine::sim::SimVfs;
use zrecord_engine::vfs::{OpenFlags, RealVfs, StorageFile, Vfs};
use zrecord_engine::{Codec, CreateOptions, Engine, EngineConfig, Error, OpenMode};

const ROUNDS: usize = 300;

fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The store a finished create leaves: opens read-write, empty, verified,
/// holding exactly the files a new store has.
fn assert_new_store(dir: &Path, what: &str) {
    let e = Engine::open(dir, OpenMode::ReadWrite)
        .unwrap_or_else(|e| panic!("{what}: the created store does not reopen: {e}"));
    assert_eq!(e.len(), 0, "{what}");
    assert!(e.verify().unwrap().is_ok(), "{what}");
    e.append_fixed(b"abcd", 4).unwrap();
    drop(e);
    assert_eq!(names(dir), ["0.chunk", "0.loc", "meta.zr"], "{what}");
}

#[test]
fn racing_creators_leave_one_store_and_a_clear_refusal() {
    let tmp = scratch();
    let creators = 3;
    for round in 0..ROUNDS {
        // Every other round the directory exists (empty) beforehand.
        let dir = tmp.path().join(format!("s{round}"));
        if round % 2 == 0 {
            std::fs::create_dir(&dir).unwrap();
        }
        let results = race_creates(&dir, creators);
        let mut winners = 0;
        for r in &results {
            match r {
                Ok(_) => winners += 1,
                Err(Error::ForeignFiles { path, file }) => {
                    assert_eq!(path, &dir);
                    assert!(!file.is_empty());
                }
                Err(Error::StoreBusy { .. }) => {}
                Err(e) => panic!("round {round}: a losing creator got {e:?}"),
            }
        }
        assert_eq!(winners, 1, "round {round}: {results:?}");
        drop(results);
        // The losers left nothing behind.
        assert_new_store(&dir, &format!("round {round}"));
    }
}

#[test]
fn an_open_racing_a_create_sees_no_store_a_busy_one_or_an_empty_one() {
    let tmp = scratch();
    let (mut busy, mut absent, mut opened) = (0u64, 0u64, 0u64);
    for round in 0..ROUNDS {
        let dir = tmp.path().join(format!("s{round}"));
        std::fs::create_dir(&dir).unwrap();
        let done = AtomicBool::new(false);
        let go = Barrier::new(3);
        let (created, seen) = std::thread::scope(|s| {
            let creator = s.spawn(|| {
                go.wait();
                let r = Engine::create(&dir, &CreateOptions::new(Codec::Zstd));
                // Released at once: the openers then see the finished store.
                let r = r.map(drop);
                done.store(true, Ordering::SeqCst);
                r
            });
            let openers: Vec<_> = [OpenMode::ReadWrite, OpenMode::ReadOnly]
                .into_iter()
                .map(|mode| {
                    let (dir, done, go) = (&dir, &done, &go);
                    s.spawn(move || {
                        go.wait();
                        let mut seen = Vec::new();
                        loop {
                            let finished = done.load(Ordering::SeqCst);
                            match Engine::open(dir, mode) {
                                Ok(e) => {
                                    assert_eq!(e.len(), 0, "round {round} {mode:?}");
                                    seen.push(Ok(()));
                                }
                                Err(e) => seen.push(Err(e)),
                            }
                            // One last try after the creator let go.
                            if finished {
                                break seen;
                            }
                        }
                    })
                })
                .collect();
            let created = creator.join().unwrap();
            let seen: Vec<_> = openers
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect();
            (created, seen)
        });
        let odd: Vec<_> = seen
            .iter()
            .filter_map(|r| r.as_ref().err())
            .filter(|e| !matches!(e, Error::StoreBusy { .. } | Error::NotAStore { .. }))
            .take(2)
            .collect();
        assert!(
            created.is_ok(),
            "round {round}: the only creator failed: {created:?} (openers also saw {odd:?})"
        );
        for r in seen {
            match r {
                Ok(()) => opened += 1,
                Err(Error::StoreBusy { .. }) => busy += 1,
                Err(Error::NotAStore { .. }) => absent += 1,
                Err(e) => panic!("round {round}: an open racing the create got {e:?}"),
            }
        }
        assert_new_store(&dir, &format!("round {round}"));
    }
    eprintln!("opens racing a create: {opened} opened, {busy} busy, {absent} no store");
    assert!(
        opened > 0 && absent > 0,
        "the race never ran: {opened} {absent}"
    );
}

/// How a directory left by a create cut short opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Found {
    /// An empty, valid, writable store.
    NewStore,
    /// `NotAStore`.
    NoStore,
    /// `CreateInterrupted`.
    Interrupted,
}

/// Opens both ways; anything but [`Found`] (`Corrupted` above all) is a
/// failure, described.
fn open_cut_short(vfs: &SimVfs, dir: &Path, what: &str) -> Result<Found, String> {
    let mut found = None;
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let f = match Engine::open_with(dir, mode, common::sim(vfs)) {
            Ok(e) => {
                if !e.is_empty() || !e.verify().unwrap().is_ok() {
                    return Err(format!("{what} {mode:?}: opened with {} records", e.len()));
                }
                if mode == OpenMode::ReadWrite {
                    e.append_fixed(b"abcd", 4)
                        .map_err(|e| format!("{what}: no append: {e}"))?;
                }
                Found::NewStore
            }
            Err(Error::NotAStore { .. }) => Found::NoStore,
            Err(Error::CreateInterrupted { .. }) => Found::Interrupted,
            Err(e) => return Err(format!("{what} {mode:?}: {e:?}")),
        };
        if found.is_some_and(|g| g != f) {
            return Err(format!("{what}: read-only and read-write opens disagree"));
        }
        found = Some(f);
    }
    Ok(found.unwrap())
}

/// A create on what a cut-short create left: it succeeds, and the store
/// it made survives a power cut (any seed) and a kill, and a third handle
/// opens it, empty and valid.
///
/// Regression: a create refused the leftovers of a killed one
/// (`ForeignFiles` naming `meta.zr`, `0.chunk` or `meta.zr.creating.*`), so
/// re-running the script that was killed failed until someone removed the
/// files by hand.
fn create_again(vfs: &SimVfs, dir: &Path, opts: &CreateOptions, what: &str) {
    let e = Engine::create_with(dir, opts, common::sim(vfs))
        .unwrap_or_else(|e| panic!("{what}: a second create got {e:?}"));
    let after = vfs.snapshot();
    drop(e);
    let mut images = vec![("kill".to_string(), after.kill_image())];
    images.extend((0..4).map(|seed| (format!("power cut {seed}"), after.crash_image(seed))));
    for (how, image) in images {
        let what = format!("{what}, created again, then a {how}");
        let f = open_cut_short(&image, dir, &what).unwrap_or_else(|m| panic!("{m}"));
        assert_eq!(f, Found::NewStore, "{what}");
    }
    let e = Engine::open_with(dir, OpenMode::ReadOnly, common::sim(vfs))
        .unwrap_or_else(|e| panic!("{what}: the new store does not open: {e}"));
    assert_eq!(e.len(), 0, "{what}");
    assert!(e.verify().unwrap().is_ok(), "{what}");
    assert_eq!(e.codec(), opts.codec, "{what}");
    drop(e);
    let mut left = vfs.list_dir(dir).unwrap();
    left.sort();
    let want: &[&str] = match opts.codec {
        Codec::ZstdDict => &["0.chunk", "dict.zr", "meta.zr"],
        _ => &["0.chunk", "meta.zr"],
    };
    assert_eq!(left, want, "{what}: leftovers not cleared");
}

#[test]
fn a_create_cut_short_at_any_call_leaves_no_store_or_an_empty_one() {
    // Two directories above the store are new too: each must be durable in
    // its parent before create returns.
    let dir = Path::new("/data/run/store");
    let mut images = 0u64;
    let mut found = std::collections::BTreeMap::<String, u64>::new();
    for codec in [Codec::Raw, Codec::ZstdDict] {
        let opts = common::options(codec);
        let vfs = SimVfs::new();
        vfs.record(true);
        let e = Engine::create_with(dir, &opts, common::sim(&vfs)).unwrap();
        vfs.record(false);
        let mut snaps = vfs.take_snapshots();
        let points = snaps.len();
        snaps.push(vfs.snapshot());
        drop(e);
        for (p, snap) in snaps.iter().enumerate() {
            for (k, (how, image)) in cut_images(snap, 10).into_iter().enumerate() {
                let what = format!("{codec:?}: {how} at call {p} of {points} (image {k})");
                images += 1;
                let f = open_cut_short(&image.fork(), dir, &what).unwrap_or_else(|m| panic!("{m}"));
                // A create that returned is durable.
                assert!(p < points || f == Found::NewStore, "{what}: {f:?}");
                *found.entry(format!("{f:?}")).or_default() += 1;
                create_again(&image, dir, &opts, &what);
            }
        }
    }
    eprintln!("create cut short: {images} images, {found:?}; a second create took each");
    assert_eq!(found.len(), 3, "not every outcome was reached: {found:?}");
}

/// Regression: create synced the parent of a directory only when it found
/// the directory missing. A create killed (or failing to sync) after its
/// `mkdir -p`, before those syncs, left directories whose entries were not
/// durable; a second create found them there, synced nothing above the
/// store, and returned: a power cut then took the directories away with the
/// store in them.
#[test]
fn a_create_over_what_a_killed_create_left_is_durable_once_it_returns() {
    let dir = Path::new("/data/run/store");
    let opts = common::options(Codec::Raw);
    let first = SimVfs::new();
    first.record(true);
    let start = first.calls();
    drop(Engine::create_with(dir, &opts, common::sim(&first)).unwrap());
    let calls = first.calls() - start;
    first.record(false);
    // What a create killed before each of its mutating calls left, and what
    // one that failed at each of its calls left.
    let mut left: Vec<(String, SimVfs)> = first
        .take_snapshots()
        .iter()
        .enumerate()
        .map(|(p, snap)| {
            (
                format!("killed before mutating call {p}"),
                snap.kill_image(),
            )
        })
        .collect();
    for n in 0..calls {
        let vfs = SimVfs::new();
        vfs.fail_at(Some(n));
        let _ = Engine::create_with(dir, &opts, common::sim(&vfs));
        vfs.fail_at(None);
        left.push((format!("failing at call {n}"), vfs));
    }
    let mut again = 0;
    for (how, vfs) in left {
        let what = format!("a create {how}, then another");
        match Engine::create_with(dir, &opts, common::sim(&vfs)) {
            Ok(e) => drop(e),
            Err(e) => panic!("{what}: {e:?}"),
        }
        again += 1;
        for seed in 0..4 {
            let cut = vfs.snapshot().crash_image(seed);
            let f = open_cut_short(&cut, dir, &what).unwrap_or_else(|m| panic!("{m}"));
            assert_eq!(f, Found::NewStore, "{what}, then a power cut (seed {seed})");
        }
    }
    assert!(again > 0);
}

/// Regression (simulated disk): a directory made under the working
/// directory (`store`, `./a/b`) never became durable there, since its parent
/// is `""` while create syncs `.`, and `./a/b` also made `.` itself a new
/// directory: a power cut after a create that returned lost the store.
#[test]
fn a_create_at_a_relative_path_survives_a_power_cut() {
    for dir in ["store", "./a/b", "a/b/", "./c"] {
        let dir = Path::new(dir);
        let vfs = SimVfs::new();
        drop(Engine::create_with(dir, &common::options(Codec::Raw), common::sim(&vfs)).unwrap());
        for seed in 0..4 {
            let what = format!("{dir:?}, power cut (seed {seed})");
            let cut = vfs.snapshot().crash_image(seed);
            let f = open_cut_short(&cut, dir, &what).unwrap_or_else(|m| panic!("{m}"));
            assert_eq!(f, Found::NewStore, "{what}");
        }
    }
}

#[test]
fn a_failed_create_removes_what_it_made() {
    let dir = Path::new("/store");
    for codec in [Codec::Raw, Codec::ZstdDict] {
        let opts = common::options(codec);
        let clean = SimVfs::new();
        let start = clean.calls();
        drop(Engine::create_with(dir, &opts, common::sim(&clean)).unwrap());
        let calls = clean.calls() - start;
        for n in 0..calls {
            let vfs = SimVfs::new();
            vfs.fail_at(Some(n));
            let what = format!("{codec:?}: call {n} of {calls} fails");
            match Engine::create_with(dir, &opts, common::sim(&vfs)) {
                Err(Error::Io { .. }) => {}
                r => panic!("{what}: {:?}", r.map(|_| ())),
            }
            vfs.fail_at(None);
            assert_eq!(
                vfs.list_dir(dir).unwrap_or_default(),
                Vec::<String>::new(),
                "{what}: files left behind"
            );
            create_again(&vfs, dir, &opts, &what);
        }
    }
}

#[test]
fn an_empty_meta_zr_is_an_interrupted_create_and_a_damaged_store_stays_corrupted() {
    let tmp = scratch();
    let dir = tmp.path().join("s");
    // What a killed create leaves: meta.zr not yet written, 0.chunk empty,
    // and a file of another name (a note, or the temporary name).
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("meta.zr"), b"").unwrap();
    std::fs::write(dir.join("0.chunk"), b"").unwrap();
    std::fs::write(dir.join("meta.zr.creating.1.0"), b"").unwrap();
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let e = Engine::open(&dir, mode).map(|_| ()).unwrap_err();
        assert!(matches!(e, Error::CreateInterrupted { .. }), "{e:?}");
        assert!(e.to_string().contains("did not finish"), "{e}");
    }
    // Only a create clears it (it used to refuse, naming 0.chunk).
    drop(Engine::create(&dir, &CreateOptions::new(Codec::Raw)).unwrap());
    assert_new_store(&dir, "created over an interrupted create");
    // A store with data whose meta.zr was emptied is damaged, not unfinished.
    let dir = tmp.path().join("t");
    Engine::create(&dir, &CreateOptions::new(Codec::Raw))
        .unwrap()
        .append_fixed(b"abcd", 4)
        .unwrap();
    std::fs::write(dir.join("meta.zr"), b"").unwrap();
    let e = Engine::open(&dir, OpenMode::ReadOnly)
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(e, Error::Corrupted { .. }), "{e:?}");
}

/// The real file system, without hard links (as vfat).
#[derive(Debug)]
struct NoLinks;

impl Vfs for NoLinks {
    fn open(&self, path: &Path, flags: OpenFlags) -> std::io::Result<Box<dyn StorageFile>> {
        RealVfs.open(path, flags)
    }
    fn exists(&self, path: &Path) -> std::io::Result<bool> {
        RealVfs.exists(path)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        RealVfs.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        RealVfs.rename(from, to)
    }
    fn link(&self, _from: &Path, _to: &Path) -> std::io::Result<()> {
        Err(std::io::Error::from_raw_os_error(libc::EPERM))
    }
    fn is_plain_file(&self, path: &Path) -> std::io::Result<bool> {
        RealVfs.is_plain_file(path)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        RealVfs.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        RealVfs.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        RealVfs.sync_dir(dir)
    }
    fn boot_id(&self) -> Option<Vec<u8>> {
        RealVfs.boot_id()
    }
}

#[test]
fn without_hard_links_create_still_works_and_refuses_a_second_creator() {
    let tmp = scratch();
    let dir = tmp.path().join("s");
    let cfg = || EngineConfig {
        vfs: Arc::new(NoLinks),
        ..EngineConfig::default()
    };
    let e = Engine::create_with(&dir, &CreateOptions::new(Codec::Zstd), cfg()).unwrap();
    assert_eq!(names(&dir), ["0.chunk", "meta.zr"]);
    assert!(matches!(
        Engine::open(&dir, OpenMode::ReadOnly),
        Err(Error::StoreBusy { .. })
    ));
    drop(e);
    assert_new_store(&dir, "no hard links");
    // A creator that found the directory empty but lost the name to one
    // that still holds it (between its create and its lock): busy. Once
    // let go, the empty meta.zr is a killed create's, which a create takes.
    for vfs in [Arc::new(NoLinks) as Arc<dyn Vfs>, Arc::new(RealVfs)] {
        let dir: PathBuf = tmp.path().join(format!("t{vfs:?}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("meta.zr"), b"").unwrap();
        let cfg = || EngineConfig {
            vfs: vfs.clone(),
            ..EngineConfig::default()
        };
        let holder = std::fs::File::open(dir.join("meta.zr")).unwrap();
        holder.try_lock().unwrap();
        match Engine::create_with(&dir, &CreateOptions::new(Codec::Raw), cfg()).map(|_| ()) {
            Err(Error::StoreBusy { path }) => assert_eq!(path, dir),
            r => panic!("{r:?}"),
        }
        assert_eq!(names(&dir), ["meta.zr"]);
        drop(holder);
        drop(Engine::create_with(&dir, &CreateOptions::new(Codec::Raw), cfg()).unwrap());
        assert_new_store(&dir, &format!("{vfs:?}"));
    }
}

/// The simulated disk, where taking the lock on `meta.zr` first removes
/// every file of the directory: what an open sees when it opened `meta.zr`
/// while a create held it, and the create then failed and removed what it
/// made (`meta.zr` last, still under its lock) before the open's lock
/// attempt.
#[derive(Debug)]
struct CleanedUpUnderTheLock(SimVfs);

#[derive(Debug)]
struct HookedMeta {
    file: Box<dyn StorageFile>,
    vfs: SimVfs,
    dir: PathBuf,
}

impl StorageFile for HookedMeta {
    fn len(&self) -> std::io::Result<u64> {
        self.file.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.file.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.file.write_at(buf, offset)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.file.sync()
    }
    fn try_lock(&self, exclusive: bool) -> std::io::Result<bool> {
        for name in self.vfs.list_dir(&self.dir).unwrap_or_default() {
            self.vfs.remove(&self.dir.join(name))?;
        }
        self.file.try_lock(exclusive)
    }
}

impl Vfs for CleanedUpUnderTheLock {
    fn open(&self, path: &Path, flags: OpenFlags) -> std::io::Result<Box<dyn StorageFile>> {
        let file = self.0.open(path, flags)?;
        if path.file_name() != Some("meta.zr".as_ref()) {
            return Ok(file);
        }
        Ok(Box::new(HookedMeta {
            file,
            vfs: self.0.clone(),
            dir: path.parent().unwrap().to_path_buf(),
        }))
    }
    fn exists(&self, path: &Path) -> std::io::Result<bool> {
        self.0.exists(path)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.0.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.0.rename(from, to)
    }
    fn link(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.0.link(from, to)
    }
    fn is_plain_file(&self, path: &Path) -> std::io::Result<bool> {
        self.0.is_plain_file(path)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.0.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.0.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.0.sync_dir(dir)
    }
    fn boot_id(&self) -> Option<Vec<u8>> {
        self.0.boot_id()
    }
}

/// Regression: a create whose header write succeeded but whose last sync
/// of `meta.zr` failed removes what it made, `meta.zr` (32 bytes by then)
/// last, under its lock. An open that had opened `meta.zr` meanwhile took
/// the lock of the removed file afterwards and, the header being whole,
/// went on to report the store `Corrupted` ("0.chunk: missing") for a
/// directory that held no store at all. Only an empty `meta.zr` was checked
/// against the listing; now any `meta.zr` missing from it is `NotAStore`.
#[test]
fn an_open_that_locks_a_meta_zr_a_failed_create_removed_finds_no_store() {
    let dir = Path::new("/store");
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let sim = SimVfs::new();
        // The files as they were when the create's sync of meta.zr failed.
        drop(Engine::create_with(dir, &CreateOptions::new(Codec::Raw), common::sim(&sim)).unwrap());
        assert_eq!(sim.read_file(&dir.join("meta.zr")).unwrap().len(), 32);
        let cfg = EngineConfig {
            vfs: Arc::new(CleanedUpUnderTheLock(sim.clone())),
            ..common::sim(&sim)
        };
        match Engine::open_with(dir, mode, cfg).map(|_| ()) {
            Err(Error::NotAStore { path }) => assert_eq!(path, dir),
            r => panic!("{mode:?}: {r:?}"),
        }
        assert!(sim.list_dir(dir).unwrap_or_default().is_empty());
    }
}

/// `discard_created` (the typed layer's cleanup when its `store.zr` cannot
/// be written) removes only a store its handle created and that holds no
/// records: an opened store, or one with records, is refused untouched.
#[test]
fn discard_created_removes_only_an_empty_store_its_handle_created() {
    let tmp = scratch();
    let dir = tmp.path().join("s");
    let opts = common::options(Codec::ZstdDict);
    Engine::create(&dir, &opts)
        .unwrap()
        .discard_created()
        .unwrap();
    assert_eq!(names(&dir), Vec::<String>::new());
    let e = Engine::create(&dir, &opts).unwrap();
    e.append_fixed(b"abcd", 4).unwrap();
    assert!(matches!(
        e.discard_created(),
        Err(Error::InvalidArgument(_))
    ));
    let dir = tmp.path().join("t");
    drop(Engine::create(&dir, &opts).unwrap());
    let before = names(&dir);
    let e = Engine::open(&dir, OpenMode::ReadWrite).unwrap();
    assert!(matches!(
        e.discard_created(),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(names(&dir), before);
    assert!(Engine::open(&dir, OpenMode::ReadOnly).unwrap().is_empty());
}

/// The typed layer's create (engine create, sync, `store.zr` through
/// `store.zr.tmp`) cut short at every call: without `store.zr` the
/// directory is a killed create's (maybe with `store.zr.tmp`), which a
/// second create takes; with it, a store, which a create refuses untouched.
/// A create cut short while taking leftovers over leaves leftovers again.
#[test]
fn a_typed_create_cut_short_is_taken_over_unless_store_zr_made_it() {
    use zrecord_engine::typed_header::{self, Kind, TypedHeader};
    let dir = Path::new("/data/store");
    let (mut taken, mut refused, mut nested) = (0u64, 0u64, 0u64);
    for codec in [Codec::Raw, Codec::ZstdDict] {
        let opts = common::options(codec);
        let vfs = SimVfs::new();
        vfs.record(true);
        let e = Engine::create_with(dir, &opts, common::sim(&vfs)).unwrap();
        e.sync().unwrap();
        let h = TypedHeader {
            kind: Kind::Ragged,
            record_bytes: 0,
            identity: b"id".to_vec(),
        };
        typed_header::write_with(&vfs, dir, &h).unwrap();
        vfs.record(false);
        let mut snaps = vfs.take_snapshots();
        snaps.push(vfs.snapshot());
        drop(e);
        for (p, snap) in snaps.iter().enumerate() {
            for (k, (how, image)) in cut_images(snap, 6).into_iter().enumerate() {
                let what = format!("{codec:?}: {how} at call {p} (image {k})");
                let before = common_files(&image, dir);
                if before.iter().any(|(n, _)| n == "store.zr") {
                    match Engine::create_with(dir, &opts, common::sim(&image)).map(|_| ()) {
                        Err(Error::ForeignFiles { file, .. }) => assert_eq!(file, "store.zr"),
                        r => panic!("{what}: {r:?}"),
                    }
                    assert_eq!(common_files(&image, dir), before, "{what}: touched");
                    refused += 1;
                    continue;
                }
                if before.iter().any(|(n, _)| n == "store.zr.tmp") && k == 0 {
                    // Kill the taking over at each of its calls: what it
                    // leaves is taken by a third create.
                    let second = image.fork();
                    second.record(true);
                    drop(Engine::create_with(dir, &opts, common::sim(&second)).unwrap());
                    second.record(false);
                    for (q, s2) in second.take_snapshots().iter().enumerate() {
                        for (how2, third) in [("kill", s2.kill_image()), ("cut", s2.crash_image(7))]
                        {
                            let what = format!("{what}, second create: {how2} at call {q}");
                            // Never `Corrupted`: meta.zr is emptied (durably)
                            // before any file it names goes.
                            open_cut_short(&third.fork(), dir, &what)
                                .unwrap_or_else(|m| panic!("{m}"));
                            create_again(&third, dir, &opts, &what);
                            nested += 1;
                        }
                    }
                }
                create_again(&image, dir, &opts, &what);
                taken += 1;
            }
        }
    }
    eprintln!("typed create cut short: {taken} taken over, {refused} refused, {nested} nested");
    assert!(taken > 0 && refused > 0 && nested > 0);
}

/// The directory's files and their bytes.
fn common_files(vfs: &SimVfs, dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = vfs
        .list_dir(dir)
        .unwrap_or_default()
        .into_iter()
        .map(|n| {
            let b = vfs.read_file(&dir.join(&n)).unwrap();
            (n, b)
        })
        .collect();
    v.sort();
    v
}

/// Writes what a killed create leaves, of kind `kind` (0: only creating
/// files; 1: empty meta.zr, empty 0.chunk, dict.zr; 2: a header of no
/// records, the typed layer's store.zr.tmp, and a creating file).
fn plant_leftovers(dir: &Path, kind: usize) {
    std::fs::create_dir_all(dir).unwrap();
    match kind {
        0 => {
            std::fs::write(dir.join("meta.zr.creating.999999.0"), b"").unwrap();
            std::fs::write(dir.join("meta.zr.creating.999999.1"), b"").unwrap();
        }
        1 => {
            std::fs::write(dir.join("meta.zr"), b"").unwrap();
            std::fs::write(dir.join("0.chunk"), b"").unwrap();
            std::fs::write(dir.join("dict.zr"), b"half a dict").unwrap();
        }
        _ => {
            let t = tempfile::tempdir_in(dir.parent().unwrap()).unwrap();
            let s = t.path().join("s");
            drop(Engine::create(&s, &common::options(Codec::ZstdDict)).unwrap());
            for n in ["meta.zr", "0.chunk", "dict.zr"] {
                std::fs::copy(s.join(n), dir.join(n)).unwrap();
            }
            std::fs::write(dir.join("store.zr.tmp"), b"LXST").unwrap();
            std::fs::write(dir.join("meta.zr.creating.999999.2"), b"").unwrap();
        }
    }
}

#[test]
fn creates_racing_over_a_killed_creates_files_leave_one_store() {
    let tmp = scratch();
    let creators = 3;
    let mut outcomes = std::collections::BTreeMap::<String, u64>::new();
    for round in 0..ROUNDS {
        let dir = tmp.path().join(format!("s{round}"));
        plant_leftovers(&dir, round % 3);
        let results = race_creates(&dir, creators);
        let mut winners = 0;
        for r in &results {
            let o = match r {
                Ok(_) => {
                    winners += 1;
                    "won".to_string()
                }
                Err(Error::ForeignFiles { path, file }) => {
                    assert_eq!(path, &dir);
                    format!("foreign {file}")
                }
                Err(Error::StoreBusy { .. }) => "busy".to_string(),
                Err(e) => panic!("round {round}: a losing creator got {e:?}"),
            };
            *outcomes.entry(o).or_default() += 1;
        }
        assert_eq!(winners, 1, "round {round}: {results:?}");
        drop(results);
        assert_new_store(&dir, &format!("round {round}"));
    }
    eprintln!("creates racing over leftovers: {outcomes:?}");
}

#[test]
fn a_create_over_leftovers_someone_holds_is_busy_and_touches_nothing() {
    let tmp = scratch();
    for kind in 0..3 {
        let dir = tmp.path().join(format!("s{kind}"));
        plant_leftovers(&dir, kind);
        let before = names(&dir);
        // A live creator holds the file it is creating (or has published).
        let held = if kind == 0 {
            "meta.zr.creating.999999.1"
        } else {
            "meta.zr"
        };
        let holder = std::fs::File::open(dir.join(held)).unwrap();
        holder.try_lock().unwrap();
        match Engine::create(&dir, &CreateOptions::new(Codec::Raw)).map(|_| ()) {
            Err(Error::StoreBusy { path }) => assert_eq!(path, dir),
            r => panic!("kind {kind}: {r:?}"),
        }
        if kind != 0 {
            assert_eq!(names(&dir), before, "kind {kind}");
        } else {
            // The unheld creating file of a killed create may go.
            assert!(names(&dir).contains(&held.to_string()));
        }
        drop(holder);
        drop(Engine::create(&dir, &CreateOptions::new(Codec::Raw)).unwrap());
        assert_new_store(&dir, &format!("kind {kind}"));
    }
}

/// Leftovers beside anything a killed create does not leave (a record, a
/// foreign file, `store.zr`, a marker, a loc segment, a header that names
/// records, a chunk with bytes) are refused as before, every file left as
/// it was.
#[test]
fn leftovers_beside_a_record_or_a_foreign_file_are_refused_untouched() {
    let tmp = scratch();
    let snapshot = |dir: &Path| -> Vec<(String, Vec<u8>)> {
        names(dir)
            .into_iter()
            .map(|n| {
                let b = std::fs::read(dir.join(&n)).unwrap();
                (n, b)
            })
            .collect()
    };
    type Make = Box<dyn Fn(&Path)>;
    // Leftovers of kind `k` (see `plant_leftovers`), then `file` written
    // with `bytes`; the refusal names `named`.
    let plant_then_write = |what: &'static str,
                            k: usize,
                            file: &'static str,
                            bytes: &'static [u8],
                            named: &'static str|
     -> (&'static str, Make, &'static str) {
        let make: Make = Box::new(move |d: &Path| {
            plant_leftovers(d, k);
            std::fs::write(d.join(file), bytes).unwrap();
        });
        (what, make, named)
    };
    let cases: Vec<(&str, Make, &str)> = vec![
        (
            "a committed record",
            Box::new(|d: &Path| {
                let e = Engine::create(d, &CreateOptions::new(Codec::Raw)).unwrap();
                e.append_fixed(b"abcd", 4).unwrap();
                drop(e);
                std::fs::write(d.join("meta.zr.creating.999999.0"), b"").unwrap();
            }),
            "0.loc",
        ),
        (
            "a record whose loc segment is gone",
            Box::new(|d: &Path| {
                let e = Engine::create(d, &CreateOptions::new(Codec::Raw)).unwrap();
                e.append_fixed(b"abcd", 4).unwrap();
                drop(e);
                std::fs::remove_file(d.join("0.loc")).unwrap();
            }),
            "0.chunk",
        ),
        plant_then_write(
            "bytes in 0.chunk under an empty meta.zr",
            1,
            "0.chunk",
            b"data",
            "0.chunk",
        ),
        plant_then_write("a foreign file", 1, "notes.txt", b"mine", "notes.txt"),
        plant_then_write(
            "a foreign file beside creating files",
            0,
            "notes.txt",
            b"mine",
            "notes.txt",
        ),
        plant_then_write("store.zr", 2, "store.zr", b"LXST", "store.zr"),
        plant_then_write("a durability marker", 1, "durable.zr", b"", "durable.zr"),
        plant_then_write("0.chunk without meta.zr", 0, "0.chunk", b"", "0.chunk"),
        plant_then_write(
            "a meta.zr of another size",
            1,
            "meta.zr",
            b"ZREC",
            "0.chunk",
        ),
    ];
    for (i, (what, make, named)) in cases.into_iter().enumerate() {
        let dir = tmp.path().join(format!("s{i}"));
        std::fs::create_dir(&dir).unwrap();
        make(&dir);
        let before = snapshot(&dir);
        match Engine::create(&dir, &CreateOptions::new(Codec::Raw)).map(|_| ()) {
            Err(Error::ForeignFiles { file, .. }) => assert_eq!(file, named, "{what}"),
            r => panic!("{what}: {r:?}"),
        }
        assert_eq!(snapshot(&dir), before, "{what}: touched");
    }
}

/// Regression: a leftover name that is no plain file of the directory (a
/// symlink, a directory, a FIFO) was taken over as a killed create's file.
/// A `meta.zr` symlinked to a file elsewhere had that file locked, emptied
/// (a header of no records) and written with the new store's header: a
/// create wrote outside its directory (into another empty store's
/// `meta.zr`, say); a FIFO `meta.zr` was taken too, the other leftovers
/// removed, and the create failed writing it ("Illegal seek"). Now each is
/// refused as `ForeignFiles` naming it, nothing touched (as before the
/// takeover existed), and `is_create_leftover` says no.
#[test]
fn leftovers_that_are_no_plain_files_are_refused_and_nothing_outside_is_touched() {
    use std::os::unix::fs::symlink;
    let tmp = scratch();
    let other = tmp.path().join("other");
    drop(Engine::create(&other, &CreateOptions::new(Codec::Zstd)).unwrap());
    let outside_header = std::fs::read(other.join("meta.zr")).unwrap();
    let outside_empty = tmp.path().join("empty.bin");
    std::fs::write(&outside_empty, b"").unwrap();
    type Make<'a> = Box<dyn Fn(&Path) + 'a>;
    let cases: Vec<(&str, Make, &str)> = vec![
        (
            "meta.zr a symlink to another empty store's meta.zr",
            Box::new(|d: &Path| {
                symlink(other.join("meta.zr"), d.join("meta.zr")).unwrap();
                std::fs::write(d.join("0.chunk"), b"").unwrap();
            }),
            "meta.zr",
        ),
        (
            "meta.zr a symlink to an empty file elsewhere",
            Box::new(|d: &Path| symlink(&outside_empty, d.join("meta.zr")).unwrap()),
            "meta.zr",
        ),
        (
            "0.chunk a symlink to an empty file elsewhere",
            Box::new(|d: &Path| {
                std::fs::write(d.join("meta.zr"), b"").unwrap();
                symlink(&outside_empty, d.join("0.chunk")).unwrap();
            }),
            "0.chunk",
        ),
        (
            "a creating file that is a symlink",
            Box::new(|d: &Path| {
                symlink(&outside_empty, d.join("meta.zr.creating.999999.0")).unwrap()
            }),
            "meta.zr.creating.999999.0",
        ),
        (
            "meta.zr a directory",
            Box::new(|d: &Path| std::fs::create_dir(d.join("meta.zr")).unwrap()),
            "meta.zr",
        ),
        (
            "meta.zr a FIFO",
            Box::new(|d: &Path| {
                let p =
                    std::ffi::CString::new(d.join("meta.zr").into_os_string().into_encoded_bytes())
                        .unwrap();
                // SAFETY: `p` is a NUL-terminated path that outlives the call.
                assert_eq!(unsafe { libc::mkfifo(p.as_ptr(), 0o600) }, 0);
                std::fs::write(d.join("0.chunk"), b"").unwrap();
            }),
            "meta.zr",
        ),
        (
            // Its open for reading blocked the create (and the Python
            // probe) for good.
            "0.chunk a FIFO",
            Box::new(|d: &Path| {
                std::fs::write(d.join("meta.zr"), b"").unwrap();
                let p =
                    std::ffi::CString::new(d.join("0.chunk").into_os_string().into_encoded_bytes())
                        .unwrap();
                // SAFETY: `p` is a NUL-terminated path that outlives the call.
                assert_eq!(unsafe { libc::mkfifo(p.as_ptr(), 0o600) }, 0);
            }),
            "0.chunk",
        ),
    ];
    let mut wrong = Vec::new();
    for (i, (what, make, named)) in cases.into_iter().enumerate() {
        let dir = tmp.path().join(format!("s{i}"));
        std::fs::create_dir(&dir).unwrap();
        make(&dir);
        let before = names(&dir);
        if Engine::is_create_leftover(&dir).unwrap() {
            wrong.push(format!("{what}: is_create_leftover"));
        }
        match Engine::create(&dir, &CreateOptions::new(Codec::Raw)).map(|_| ()) {
            Err(Error::ForeignFiles { file, .. }) if file == named => {}
            r => wrong.push(format!("{what}: create gave {r:?}")),
        }
        if names(&dir) != before {
            wrong.push(format!("{what}: {before:?} became {:?}", names(&dir)));
        }
        if std::fs::read(&outside_empty).unwrap() != b"" {
            wrong.push(format!("{what}: wrote into {}", outside_empty.display()));
            std::fs::write(&outside_empty, b"").unwrap();
        }
        if std::fs::read(other.join("meta.zr")).unwrap() != outside_header {
            wrong.push(format!("{what}: rewrote the other store's meta.zr"));
            std::fs::write(other.join("meta.zr"), &outside_header).unwrap();
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// `creators` threads released at once, each creating a raw store in
/// `dir`; their results.
fn race_creates(dir: &Path, creators: usize) -> Vec<Result<Engine, Error>> {
    let go = Barrier::new(creators);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..creators)
            .map(|_| {
                s.spawn(|| {
                    go.wait();
                    Engine::create(dir, &CreateOptions::new(Codec::Raw))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The images a process cut short at `snap` can leave: the kill image (the
/// page cache survives) and `power_cuts` crash images (seeds `0..`).
fn cut_images(
    snap: &zrecord_engine::sim::Snapshot,
    power_cuts: u64,
) -> Vec<(&'static str, SimVfs)> {
    let mut cut = vec![("kill", snap.kill_image())];
    cut.extend((0..power_cuts).map(|seed| ("power cut", snap.crash_image(seed))));
    cut
}
