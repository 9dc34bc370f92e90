//! The store handle: create, open (with validation), locking, sync, stats.

use crate::codec::{Codec, CodecState, CreateOptions, DictOrigin};
use crate::deferred::{
    DURABLE_FILE, DeleteLog, Durability, KeptFile, MAX_KEPT_BYTES, Marker, PendingAppends,
    PendingFile,
};
use crate::error::{Error, Result};
use crate::format::{
    self, CHUNK_CAPACITY, DICT_FILE, Header, LOC_SEGMENT_ENTRIES, LOC_SIZE, Loc, MAX_RECORD_LEN,
    META_FILE, META_SIZE,
};
use crate::intent::{INTENT_FILE, Intent};
use crate::table::{MappedTable, Table};
use crate::vfs::{Mapping, OpenFlags, RealVfs, StorageFile, Vfs};
use crate::writeback::WRITEBACK_FILE;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `.loc` segments opened to check a killed writer's unfinished deletes:
/// id -> the file and its size (`None`: no such file).
type LocFiles = std::collections::BTreeMap<u64, Option<(Box<dyn StorageFile>, u64)>>;

/// How to open an existing store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// One writer: an exclusive lock on `meta.zr`.
    ReadWrite,
    /// Many readers: a shared lock on `meta.zr`; writes are refused.
    ReadOnly,
}

/// How gathers read stored bytes.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadPath {
    /// A read-only mapping of each chunk, copied or decoded from directly.
    Mmap,
    /// Positional reads (page-aligned bounce buffer when the destination is not).
    Pread,
}

/// Internal parameters. Tests shrink the capacities so chunk rollover and
/// loc-segment boundaries need no 4 GiB files, and swap in a simulated
/// file system. A store written with non-default capacities is only
/// readable with the same ones.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The file system.
    pub vfs: Arc<dyn Vfs>,
    /// Logical chunk capacity (format: 2^32).
    pub chunk_capacity: u64,
    /// Entries per loc segment (format: 2^28).
    pub loc_segment_entries: u64,
    /// Bytes per vectored payload write.
    pub flush_bytes: usize,
    /// Gather read path.
    pub read_path: ReadPath,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            vfs: Arc::new(RealVfs),
            chunk_capacity: CHUNK_CAPACITY,
            loc_segment_entries: LOC_SEGMENT_ENTRIES,
            flush_bytes: 256 << 10,
            read_path: ReadPath::Mmap,
        }
    }
}

impl EngineConfig {
    fn validate(&self) -> Result<()> {
        let out_of_range = |field: &str, value: u64, range: String| {
            Err(Error::InvalidArgument(format!(
                "engine config {field} is {value}, outside {range}"
            )))
        };
        if !(2..=CHUNK_CAPACITY).contains(&self.chunk_capacity) {
            return out_of_range(
                "chunk_capacity",
                self.chunk_capacity,
                format!("2..={CHUNK_CAPACITY}"),
            );
        }
        if !(1..=LOC_SEGMENT_ENTRIES).contains(&self.loc_segment_entries) {
            return out_of_range(
                "loc_segment_entries",
                self.loc_segment_entries,
                format!("1..={LOC_SEGMENT_ENTRIES}"),
            );
        }
        if self.flush_bytes == 0 {
            return out_of_range("flush_bytes", 0, "1..".into());
        }
        Ok(())
    }
}

/// Storage usage, in physical records and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Physical records.
    pub records: u64,
    /// Stored bytes of the live records.
    pub live_bytes: u64,
    /// Bytes the chunk files have grown to (up to the frontier).
    pub chunk_bytes: u64,
    /// `chunk_bytes - live_bytes`: an upper bound on what `compact` frees.
    pub reclaimable: u64,
}

/// An open file plus its path (for error messages) and, for chunks on the
/// mmap path, its mapping.
#[derive(Debug)]
pub(crate) struct Handle {
    pub file: crate::vfs::Tracked,
    pub path: PathBuf,
    pub map: Option<Box<dyn Mapping>>,
}

/// Everything a gather reads; replaced only under the write lock.
#[derive(Debug)]
pub(crate) struct State {
    pub header: Header,
    /// Entries of records `0..len`: owned by a read-write handle, mapped
    /// from the loc segments by a read-only one where the file system can.
    pub table: Table,
    /// Chunks `0..=tail_chunk`.
    pub chunks: Vec<Arc<Handle>>,
    /// Bytes in use per chunk: file length for full chunks, the frontier for the tail.
    pub chunk_ends: Vec<u64>,
    /// Loc segments that exist (at least those `length` needs).
    pub locs: Vec<Arc<Handle>>,
    /// Stored bytes of the live records (the table's `phys_length` sum),
    /// kept as records come and go so `stats` need not walk the table.
    pub live_bytes: u64,
}

/// An open store: records of bytes, addressed `0..len`.
///
/// `Engine` is `Send + Sync`: gathers run from many threads at once,
/// concurrently with one appender (appends are serialized internally), and see
/// only committed records. Delete and compact take `&mut self`.
#[derive(Debug)]
pub struct Engine {
    pub(crate) dir: PathBuf,
    pub(crate) cfg: EngineConfig,
    pub(crate) codec: CodecState,
    pub(crate) read_only: bool,
    pub(crate) meta: Handle,
    pub(crate) state: RwLock<State>,
    pub(crate) len: AtomicU64,
    pub(crate) append_lock: Mutex<()>,
    pub(crate) poisoned: AtomicBool,
    pub(crate) durability: Durability,
    /// The boot id at open (`None`: the system has none, so appends never
    /// defer).
    pub(crate) boot: Option<Vec<u8>>,
    /// The marker of a deferred delete exists (`durable.zr`, armed):
    /// `meta.zr` may be ahead of the disk.
    pub(crate) armed: AtomicBool,
    /// A file may have been created since the directory was last synced
    /// (an append's new chunk or loc segment): its entry must be durable
    /// before the marker goes.
    pub(crate) dir_dirty: AtomicBool,
    /// The header `durable.zr` names (when it is valid): durable, and put
    /// back into `meta.zr` when a sync fails.
    pub(crate) durable_header: Mutex<Option<Header>>,
    /// The delete log of the marker this handle wrote (while it is armed).
    pub(crate) log: Mutex<Option<DeleteLog>>,
    /// Appends since the last durable point, when nothing else changed
    /// (not armed): `durable.zr` holds their header, `meta.zr` the durable
    /// one until the sync (see `deferred`).
    pub(crate) pending: Mutex<Option<PendingFile>>,
    /// `durable.zr`, zeroed, kept for this handle's next marker or pending
    /// appends record (see [`KeptFile`]).
    pub(crate) kept: Mutex<Option<KeptFile>>,
    /// The process that opened the handle: a forked child that inherits it
    /// must not remove the marker the parent's later appends rely on.
    pub(crate) pid: u32,
    /// [`crate::fork::forks`] when this handle was made: compaction refuses
    /// once the process has forked since (a child may read through it).
    pub(crate) forks_at_open: u64,
    /// Records whose entry a read-only handle took from a pending delete
    /// intent: their loc file entries are not written yet (it writes
    /// nothing), so `verify` does not hold the file to memory there.
    pub(crate) unapplied: BTreeSet<u64>,
    /// This handle made the store ([`Engine::create`]), so
    /// [`Engine::discard_created`] may remove it.
    pub(crate) created: bool,
}

impl Engine {
    /// Creates a new store in `dir` (created if missing; it must be empty).
    ///
    /// Writes `meta.zr`, an empty `0.chunk` and, for [`Codec::ZstdDict`],
    /// `dict.zr`, all synced, and keeps the exclusive lock. The typed layer
    /// writes `store.zr` afterwards (see [`crate::typed_header`]).
    ///
    /// `meta.zr` holds the lock from the moment it appears, so of creates
    /// racing on one directory exactly one succeeds and the others fail with
    /// [`Error::ForeignFiles`], and an open racing the create fails with
    /// [`Error::NotAStore`] or [`Error::StoreBusy`] until the handle is
    /// dropped. A create that fails removes the files it made; one that a
    /// crash cuts short leaves files that [`Engine::open`] reports as
    /// [`Error::CreateInterrupted`] (or `NotAStore`).
    ///
    /// A later create takes such a directory over when it holds exactly
    /// what a create leaves before its typed layer writes `store.zr` (see
    /// [`Engine::is_create_leftover`]) and nobody holds those files' locks:
    /// it clears them and creates the store, reusing `meta.zr` under its
    /// lock. A lock another handle holds is [`Error::StoreBusy`]; anything
    /// else in the directory (a record, `store.zr`, a file of another name)
    /// is `ForeignFiles`, untouched.
    pub fn create(dir: impl AsRef<Path>, opts: &CreateOptions) -> Result<Engine> {
        Self::create_with(dir, opts, EngineConfig::default())
    }

    /// Opens an existing store, validating its files.
    pub fn open(dir: impl AsRef<Path>, mode: OpenMode) -> Result<Engine> {
        Self::open_with(dir, mode, EngineConfig::default())
    }

    /// [`Engine::create`] with internal parameters.
    #[doc(hidden)]
    pub fn create_with(
        dir: impl AsRef<Path>,
        opts: &CreateOptions,
        cfg: EngineConfig,
    ) -> Result<Engine> {
        cfg.validate()?;
        let dir = dir.as_ref().to_path_buf();
        match (opts.codec, &opts.dictionary) {
            (Codec::ZstdDict, None) => {
                return Err(Error::InvalidArgument(
                    "codec zstd_dict needs a dictionary".into(),
                ));
            }
            (Codec::ZstdDict, Some(d)) if d.is_empty() => {
                return Err(Error::InvalidArgument("the dictionary is empty".into()));
            }
            (Codec::Raw | Codec::Zstd, Some(_)) => {
                return Err(Error::InvalidArgument(format!(
                    "codec {} takes no dictionary",
                    opts.codec.name()
                )));
            }
            _ => {}
        }
        let codec = CodecState::new(
            opts.codec,
            opts.level,
            opts.dictionary.clone(),
            DictOrigin::Argument,
        )?;
        let vfs = cfg.vfs.clone();
        Self::make_dir(&*vfs, &dir)?;
        let names = vfs.list_dir(&dir).map_err(|e| Error::io(&dir, "list", e))?;
        // What a killed create left: cleared, and its `meta.zr` (if any)
        // locked, emptied, and reused.
        let taken = if names.is_empty() {
            None
        } else {
            Self::take_leftovers(&*vfs, &dir, &names)?
        };
        // `meta.zr` appears already locked, so it guards the rest of the
        // creation from every other handle; its contents are written last,
        // after the other files are durable.
        let meta_path = dir.join(META_FILE);
        let reused = taken.is_some();
        let meta = match taken {
            Some(meta) => meta,
            None => Self::publish_meta(&*vfs, &dir)?,
        };
        let header = Header {
            codec: opts.codec,
            tail_chunk: 0,
            tail_offset: 0,
            length: 0,
        };
        let mut made = if reused {
            Vec::new()
        } else {
            vec![meta_path.clone()]
        };
        let chunk = match Self::create_files(&*vfs, &dir, opts, &*meta, &header, &mut made) {
            Ok(chunk) => chunk,
            Err(e) => {
                // Leave the directory as it was found: a later create there
                // can succeed, and no opener meets half a store. Still under
                // the lock, `meta.zr` last. Best effort: the error that
                // stopped the create is the one to report. A reused
                // `meta.zr` keeps its name (see `take_leftovers`), emptied:
                // what it was taken over as.
                for p in made.iter().rev() {
                    let _ = vfs.remove(p);
                }
                if reused {
                    let _ = meta.set_len(0);
                    let _ = meta.sync();
                }
                let _ = vfs.sync_dir(&dir);
                return Err(e);
            }
        };
        let chunk_path = dir.join(format::chunk_name(0));
        let map = Self::map_chunk(&cfg, &*chunk);
        let state = State {
            header,
            table: Table::Owned(Vec::new()),
            chunks: vec![Arc::new(Handle {
                file: crate::vfs::Tracked::new(chunk),
                path: chunk_path,
                map,
            })],
            chunk_ends: vec![0],
            locs: Vec::new(),
            live_bytes: 0,
        };
        Ok(Engine {
            dir,
            cfg,
            codec,
            read_only: false,
            meta: Handle {
                file: crate::vfs::Tracked::new(meta),
                path: meta_path,
                map: None,
            },
            state: RwLock::new(state),
            len: AtomicU64::new(0),
            append_lock: Mutex::new(()),
            poisoned: AtomicBool::new(false),
            durability: opts.durability,
            boot: vfs.boot_id(),
            armed: AtomicBool::new(false),
            dir_dirty: AtomicBool::new(true),
            durable_header: Mutex::new(None),
            log: Mutex::new(None),
            pending: Mutex::new(None),
            kept: Mutex::new(None),
            pid: std::process::id(),
            forks_at_open: crate::fork::forks(),
            unapplied: BTreeSet::new(),
            created: true,
        })
    }

    /// `mkdir -p dir`, durably: the parent of `dir` and of each directory
    /// above it is synced, top down, so that a power cut after a successful
    /// create cannot take the store's directory (or one above it) away with
    /// every file in it. The store's own entries are synced later, before
    /// its header is written.
    ///
    /// A directory found in place is synced into its parent too: a create
    /// killed (or failing) between its `mkdir -p` and these syncs leaves
    /// directories whose entries are not durable, and nothing tells them
    /// apart from old ones. For a directory this call made, a failed sync
    /// fails the create; for one it found, the sync is best effort (its
    /// parent may be a directory this process can search but not read, as
    /// `/home` sometimes is, which cannot be opened to sync).
    fn make_dir(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
        let mut missing = Vec::new();
        let mut d = dir;
        loop {
            match vfs.dir_exists(d) {
                Ok(true) => break,
                Ok(false) => missing.push(d),
                Err(e) => return Err(Error::io(d, "inspect", e)),
            }
            match d.parent() {
                // `""` is the working directory: there.
                Some(p) if !p.as_os_str().is_empty() => d = p,
                _ => break,
            }
        }
        vfs.create_dir_all(dir)
            .map_err(|e| Error::io(dir, "create directory", e))?;
        let chain: Vec<&Path> = dir.ancestors().collect();
        for m in chain.into_iter().rev() {
            // `/`, `.`, `..` and `""` are no entry of a parent of theirs.
            if m.file_name().is_none() {
                continue;
            }
            // `store` (relative) has the parent `""`: the working directory.
            let parent = match m.parent() {
                Some(p) if p.as_os_str().is_empty() => Path::new("."),
                Some(p) => p,
                None => continue,
            };
            match vfs.sync_dir(parent) {
                Err(e) if missing.contains(&m) => {
                    return Err(Error::io(parent, "sync directory", e));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether `dir` holds exactly what a create that did not finish
    /// leaves, and so no record: files named `meta.zr.creating.*` alone, or
    /// `meta.zr` (empty, or a header of no records with its tail at 0 of
    /// `0.chunk`) beside at most an empty `0.chunk`, `dict.zr`,
    /// `store.zr.tmp` and `meta.zr.creating.*` files: no `store.zr`, loc
    /// segment, marker, intent, or file of another name. A missing or
    /// empty `dir` is `false`.
    ///
    /// Looked at without any lock, so only a hint (the Python
    /// create-or-open asks it): a create decides again under the lock of
    /// `meta.zr`, and also needs every such file unlocked.
    pub fn is_create_leftover(dir: impl AsRef<Path>) -> Result<bool> {
        let dir = dir.as_ref();
        let vfs = RealVfs;
        let names = match vfs.list_dir(dir) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Error::io(dir, "list", e)),
        };
        if names.is_empty() || !names.iter().all(|n| is_leftover_name(n)) {
            return Ok(false);
        }
        if Self::first_not_plain(&vfs, dir, &names)?.is_some() {
            return Ok(false);
        }
        if !names.iter().any(|n| n == META_FILE) {
            return Ok(names.iter().all(|n| is_creating_name(n)));
        }
        let meta_path = dir.join(META_FILE);
        let meta = match vfs.open(&meta_path, OpenFlags::Read) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Error::io(&meta_path, "open", e)),
        };
        Ok(Self::leftover_contents(&vfs, dir, &names, &*meta)?.is_some())
    }

    /// For a listing of leftover names that holds `meta.zr` (opened as
    /// `meta`): `Some(size of meta.zr)` when the files hold no record (see
    /// [`Engine::is_create_leftover`]), else `None`.
    fn leftover_contents(
        vfs: &dyn Vfs,
        dir: &Path,
        names: &[String],
        meta: &dyn StorageFile,
    ) -> Result<Option<u64>> {
        let meta_path = dir.join(META_FILE);
        let size = meta.len().map_err(|e| Error::io(&meta_path, "stat", e))?;
        if size != 0 {
            if size != META_SIZE as u64 {
                return Ok(None);
            }
            let mut hb = [0u8; META_SIZE];
            meta.read_at(&mut hb, 0)
                .map_err(|e| Error::io(&meta_path, "read", e))?;
            match Header::decode(&hb) {
                Ok(h) if h.length == 0 && h.tail_chunk == 0 && h.tail_offset == 0 => {}
                _ => return Ok(None),
            }
        }
        let chunk = format::chunk_name(0);
        if names.contains(&chunk) {
            let p = dir.join(&chunk);
            match vfs.open(&p, OpenFlags::Read) {
                Ok(f) => {
                    if f.len().map_err(|e| Error::io(&p, "stat", e))? != 0 {
                        return Ok(None);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&p, "open", e)),
            }
        }
        Ok(Some(size))
    }

    /// Clears what a create that did not finish left in `dir` (`names`, a
    /// listing that is not empty) for this create to proceed.
    /// `Ok(None)`: only `meta.zr.creating.*` files were there, each
    /// unlocked, now removed; the create publishes `meta.zr` as usual.
    /// `Ok(Some(meta))`: `meta.zr` was there, unlocked; it comes back
    /// locked and (durably) empty, the other leftovers removed, for the
    /// create to finish in. A lock another handle holds is
    /// [`Error::StoreBusy`]; a directory that is not such leftovers is
    /// [`Error::ForeignFiles`], untouched.
    ///
    /// Races: every decision is taken under a lock. `meta.zr` is locked,
    /// then checked to still be the file named `meta.zr` (its unlinkers, a
    /// failing create and `discard_created`, unlink it under its lock, and
    /// this recovery never does), and the directory is listed and checked
    /// again under that lock. Of two recovering creates one gets the lock
    /// and the other `StoreBusy`; the winner keeps `meta.zr` under its name
    /// and lock throughout, so a loser that locks it later finds the
    /// finished store (or, if the winner failed, the emptied `meta.zr` to
    /// take over in turn). A creating file is removed only under its lock
    /// (or as a second name of the `meta.zr` this create holds); a live
    /// creator of it then fails to lock or to link it (`StoreBusy`).
    fn take_leftovers(
        vfs: &dyn Vfs,
        dir: &Path,
        names: &[String],
    ) -> Result<Option<Box<dyn StorageFile>>> {
        let busy = || Error::StoreBusy {
            path: dir.to_path_buf(),
        };
        // The refusal a directory with files always got, naming a file
        // that is no leftover where there is one.
        let refuse = |names: &[String]| Error::ForeignFiles {
            path: dir.to_path_buf(),
            file: names
                .iter()
                .find(|n| !is_leftover_name(n))
                .or(names.first())
                .cloned()
                .unwrap_or_default(),
        };
        if !names.iter().all(|n| is_leftover_name(n)) {
            return Err(refuse(names));
        }
        // Only plain files are taken: through a symlink the takeover would
        // lock, empty and write a file outside `dir` (another store's
        // `meta.zr`, say); a directory or FIFO is nobody's create.
        let not_plain = |names: &[String]| -> Result<Option<Error>> {
            Ok(
                Self::first_not_plain(vfs, dir, names)?.map(|n| Error::ForeignFiles {
                    path: dir.to_path_buf(),
                    file: n.clone(),
                }),
            )
        };
        if let Some(e) = not_plain(names)? {
            return Err(e);
        }
        if !names.iter().any(|n| n == META_FILE) {
            // A create makes its other files after `meta.zr` and removes
            // `meta.zr` last: without it, only a creating file is a leftover.
            if !names.iter().all(|n| is_creating_name(n)) {
                return Err(refuse(names));
            }
            Self::clear_creating(vfs, dir, names, None)?;
            return Ok(None);
        }
        let meta_path = dir.join(META_FILE);
        let meta = match vfs.open(&meta_path, OpenFlags::ReadWrite) {
            Ok(f) => f,
            // Removed since the listing: a failing create cleaned up.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(busy()),
            Err(e) => return Err(Error::io(&meta_path, "open", e)),
        };
        if !meta
            .try_lock(true)
            .map_err(|e| Error::io(&meta_path, "lock", e))?
        {
            return Err(busy());
        }
        let id = |f: &dyn StorageFile| f.file_id().map_err(|e| Error::io(&meta_path, "stat", e));
        // Without file ids, nothing proves the locked file is `meta.zr`.
        let Some(meta_id) = id(&*meta)? else {
            return Err(refuse(names));
        };
        match vfs.open(&meta_path, OpenFlags::Read) {
            Ok(f) if id(&*f)? == Some(meta_id) => {}
            // Unlinked under its lock by a failing creator before this lock
            // was taken: the name is gone, or another create's.
            Ok(_) => return Err(busy()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(busy()),
            Err(e) => return Err(Error::io(&meta_path, "open", e)),
        }
        // Under the lock: what is there now, and no record in it.
        let names = vfs.list_dir(dir).map_err(|e| Error::io(dir, "list", e))?;
        if !names.iter().all(|n| is_leftover_name(n)) || !names.iter().any(|n| n == META_FILE) {
            return Err(refuse(&names));
        }
        if let Some(e) = not_plain(&names)? {
            return Err(e);
        }
        let Some(size) = Self::leftover_contents(vfs, dir, &names, &*meta)? else {
            return Err(refuse(&names));
        };
        Self::clear_creating(vfs, dir, &names, Some(meta_id))?;
        // Committed to the takeover: `meta.zr` empty first, durably, so
        // that a crash from here on leaves what a create leaves before its
        // header (never a header beside a removed `0.chunk`).
        if size != 0 {
            meta.set_len(0)
                .map_err(|e| Error::io(&meta_path, "truncate", e))?;
            meta.sync().map_err(|e| Error::io(&meta_path, "sync", e))?;
        }
        for name in [DICT_FILE, &format::chunk_name(0), STORE_TMP_FILE] {
            if names.iter().any(|n| n == name) {
                let p = dir.join(name);
                match vfs.remove(&p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(&p, "remove", e)),
                }
            }
        }
        Ok(Some(meta))
    }

    /// The first of `names` that is no regular file of `dir` itself (a
    /// symlink, a directory, a FIFO; see [`Vfs::is_plain_file`]). A name
    /// gone since the listing is skipped: the caller's later open of it
    /// tells.
    fn first_not_plain<'a>(
        vfs: &dyn Vfs,
        dir: &Path,
        names: &'a [String],
    ) -> Result<Option<&'a String>> {
        for name in names {
            let p = dir.join(name);
            match vfs.is_plain_file(&p) {
                Ok(true) => {}
                Ok(false) => return Ok(Some(name)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&p, "inspect", e)),
            }
        }
        Ok(None)
    }

    /// Removes the `meta.zr.creating.*` files of `names`, each under its
    /// lock ([`Error::StoreBusy`] when another handle holds one), or as a
    /// second name of the locked `meta.zr` whose id is `meta_id` (a create
    /// killed between linking and unlinking). One gone meanwhile is skipped.
    fn clear_creating(
        vfs: &dyn Vfs,
        dir: &Path,
        names: &[String],
        meta_id: Option<(u64, u64)>,
    ) -> Result<()> {
        for name in names.iter().filter(|n| is_creating_name(n)) {
            let p = dir.join(name);
            let f = match vfs.open(&p, OpenFlags::ReadWrite) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(&p, "open", e)),
            };
            let id = f.file_id().map_err(|e| Error::io(&p, "stat", e))?;
            let ours = meta_id.is_some() && id == meta_id;
            if !ours && !f.try_lock(true).map_err(|e| Error::io(&p, "lock", e))? {
                return Err(Error::StoreBusy {
                    path: dir.to_path_buf(),
                });
            }
            match vfs.remove(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&p, "remove", e)),
            }
        }
        Ok(())
    }

    /// Makes `meta.zr` in `dir`, empty and holding this handle's exclusive
    /// lock from the moment it has that name: the file is made and locked
    /// under a name of its own, then linked as `meta.zr` (which fails if
    /// the name exists), then its first name is removed. The lock belongs
    /// to the open file, so it holds under the new name. Of creators racing
    /// on one directory exactly one gets the name, the others fail with
    /// [`Error::ForeignFiles`]; an open meanwhile finds no `meta.zr`
    /// ([`Error::NotAStore`]) or a locked one ([`Error::StoreBusy`]).
    ///
    /// On a file system without hard links (link fails with
    /// `PermissionDenied` or `Unsupported`, as on vfat) `meta.zr` is created
    /// under its name and then locked: an open between the two can take the
    /// lock first (and reports the empty file as [`Error::CreateInterrupted`]
    /// or, once it is removed, [`Error::NotAStore`]); this create then fails
    /// with [`Error::StoreBusy`], leaving it to that holder (see
    /// [`Engine::create_meta_unlinked`]).
    fn publish_meta(vfs: &dyn Vfs, dir: &Path) -> Result<Box<dyn StorageFile>> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let meta_path = dir.join(META_FILE);
        let foreign = |file: &str| Error::ForeignFiles {
            path: dir.to_path_buf(),
            file: file.to_string(),
        };
        // Unique to this process and call; another creator's name or a
        // crashed creator's leftover is someone else's file.
        let tmp_name = format!(
            "{META_FILE}.creating.{}.{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let tmp = dir.join(&tmp_name);
        let file = match vfs.open(&tmp, OpenFlags::CreateNew) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(foreign(&tmp_name));
            }
            Err(e) => return Err(Error::io(&tmp, "create", e)),
        };
        match file.try_lock(true) {
            // Nobody else knows the file yet: the lock is free.
            Ok(true) => {}
            r => {
                let _ = vfs.remove(&tmp);
                return Err(match r {
                    Err(e) => Error::io(&tmp, "lock", e),
                    Ok(_) => Error::StoreBusy {
                        path: dir.to_path_buf(),
                    },
                });
            }
        }
        let linked = vfs.link(&tmp, &meta_path);
        let removed = vfs.remove(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(foreign(META_FILE));
            }
            // A recovering create took the file for a killed create's
            // leftover (it locked it before this call did) and removed it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::StoreBusy {
                    path: dir.to_path_buf(),
                });
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::Unsupported
                ) && removed.is_ok() =>
            {
                drop(file);
                return Self::create_meta_unlinked(vfs, dir);
            }
            Err(e) => return Err(Error::io(&meta_path, "link", e)),
        }
        if let Err(e) = removed {
            // Not published after all: both names go (best effort).
            let _ = vfs.remove(&meta_path);
            let _ = vfs.remove(&tmp);
            return Err(Error::io(&tmp, "remove", e));
        }
        Ok(file)
    }

    /// [`Engine::publish_meta`] without hard links: create, then lock.
    fn create_meta_unlinked(vfs: &dyn Vfs, dir: &Path) -> Result<Box<dyn StorageFile>> {
        let meta_path = dir.join(META_FILE);
        let file = match vfs.open(&meta_path, OpenFlags::CreateNew) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(Error::ForeignFiles {
                    path: dir.to_path_buf(),
                    file: META_FILE.to_string(),
                });
            }
            Err(e) => return Err(Error::io(&meta_path, "create", e)),
        };
        let locked = file.try_lock(true);
        if locked.is_err() {
            // Ours, and empty: nobody else uses it.
            let _ = vfs.remove(&meta_path);
        }
        // Held by another handle, it stays: an opener reports it as an
        // interrupted create, and a recovering create takes it over (it
        // holds the lock, so removing the name here would leave its store
        // without `meta.zr`).
        match locked {
            Ok(true) => Ok(file),
            Ok(false) => Err(Error::StoreBusy {
                path: dir.to_path_buf(),
            }),
            Err(e) => Err(Error::io(&meta_path, "lock", e)),
        }
    }

    /// The files of a new store other than `meta.zr`'s name, then its
    /// header: `dict.zr` (for a dictionary), an empty `0.chunk`, the
    /// directory synced, then the header written into the locked `meta`
    /// and synced. Every file it makes is added to `made`. A header on disk
    /// so means every other file is durable; before it, `meta.zr` is empty.
    fn create_files(
        vfs: &dyn Vfs,
        dir: &Path,
        opts: &CreateOptions,
        meta: &dyn StorageFile,
        header: &Header,
        made: &mut Vec<PathBuf>,
    ) -> Result<Box<dyn StorageFile>> {
        let create = |name: &str, made: &mut Vec<PathBuf>| {
            let p = dir.join(name);
            match vfs.open(&p, OpenFlags::CreateNew) {
                Ok(f) => {
                    made.push(p);
                    Ok(f)
                }
                // Put there since the directory was found empty: not ours.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    Err(Error::ForeignFiles {
                        path: dir.to_path_buf(),
                        file: name.to_string(),
                    })
                }
                Err(e) => Err(Error::io(&p, "create", e)),
            }
        };
        if let Some(d) = &opts.dictionary {
            let p = dir.join(DICT_FILE);
            let f = create(DICT_FILE, made)?;
            f.write_at(d, 0).map_err(|e| Error::io(&p, "write", e))?;
            f.sync().map_err(|e| Error::io(&p, "sync", e))?;
        }
        let chunk_path = dir.join(format::chunk_name(0));
        let chunk = create(&format::chunk_name(0), made)?;
        chunk
            .sync()
            .map_err(|e| Error::io(&chunk_path, "sync", e))?;
        // The names (`meta.zr` included) are durable before the header is
        // written: a header never names a file a power cut can lose.
        vfs.sync_dir(dir)
            .map_err(|e| Error::io(dir, "sync directory", e))?;
        let meta_path = dir.join(META_FILE);
        meta.write_at(&header.encode(), 0)
            .map_err(|e| Error::io(&meta_path, "write", e))?;
        meta.sync().map_err(|e| Error::io(&meta_path, "sync", e))?;
        Ok(chunk)
    }

    /// [`Engine::open`] with internal parameters.
    #[doc(hidden)]
    pub fn open_with(dir: impl AsRef<Path>, mode: OpenMode, cfg: EngineConfig) -> Result<Engine> {
        let dir = dir.as_ref();
        match Self::open_inner(dir, mode, cfg.clone(), false) {
            // `meta.zr` names bytes the files lack although this is the boot
            // that wrote them: a failed write-back (an I/O error, a device
            // that lost power on its own). A valid marker still names a
            // durable header; fall back to it.
            Err(e @ Error::Corrupted { .. }) => {
                Self::open_inner(dir, mode, cfg, true).map_err(|_| e)
            }
            r => r,
        }
    }

    /// For an empty `meta.zr` that this open holds the lock of, listed in
    /// `names` (the caller checked): the error when the directory is what a
    /// create left before writing the header (see [`Engine::create_files`]).
    /// `meta.zr` beside at most `dict.zr`, an empty `0.chunk` and files of
    /// other names is an interrupted create. `Ok` when the directory holds a
    /// store's data (loc segments, other chunks, `store.zr`, a marker or an
    /// intent): a damaged store, which the caller reports.
    fn check_unfinished_create(vfs: &dyn Vfs, dir: &Path, names: &[String]) -> Result<()> {
        let data = names.iter().any(|n| {
            [
                format::STORE_FILE,
                DURABLE_FILE,
                INTENT_FILE,
                WRITEBACK_FILE,
            ]
            .contains(&n.as_str())
                || format::parse_numbered(n, "loc").is_some()
                || format::parse_numbered(n, "chunk").is_some_and(|id| id != 0)
        });
        if data {
            return Ok(());
        }
        if names.iter().any(|n| *n == format::chunk_name(0)) {
            let p = dir.join(format::chunk_name(0));
            let f = vfs
                .open(&p, OpenFlags::Read)
                .map_err(|e| Error::io(&p, "open", e))?;
            if f.len().map_err(|e| Error::io(&p, "stat", e))? != 0 {
                return Ok(());
            }
        }
        Err(Error::CreateInterrupted {
            path: dir.to_path_buf(),
        })
    }

    /// Entry `slot` as its `.loc` file holds it (`None` past its end or
    /// without the file), for checking a killed writer's unfinished
    /// deletes against what is on disk before finishing them. `files`
    /// keeps the segments opened so far (with their sizes).
    fn loc_on_disk(
        vfs: &dyn Vfs,
        dir: &Path,
        seg: u64,
        files: &mut LocFiles,
        slot: u64,
    ) -> Result<Option<Loc>> {
        let s = slot / seg;
        let p = dir.join(format::loc_name(s));
        let f = match files.entry(s) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(match vfs.open(&p, OpenFlags::Read) {
                    Ok(f) => {
                        let n = f.len().map_err(|e| Error::io(&p, "stat", e))?;
                        Some((f, n))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => return Err(Error::io(&p, "open", e)),
                })
            }
        };
        let Some((f, n)) = f else {
            return Ok(None);
        };
        let at = (slot % seg) * LOC_SIZE as u64;
        if *n < at + LOC_SIZE as u64 {
            return Ok(None);
        }
        let mut b = [0u8; LOC_SIZE];
        f.read_at(&mut b, at)
            .map_err(|e| Error::io(&p, "read", e))?;
        Ok(Some(Loc::decode(&b)))
    }

    /// The open; `use_marker`: take a valid marker's header whatever the boot.
    fn open_inner(
        dir: &Path,
        mode: OpenMode,
        cfg: EngineConfig,
        use_marker: bool,
    ) -> Result<Engine> {
        cfg.validate()?;
        let dir = dir.to_path_buf();
        let vfs = cfg.vfs.clone();
        let read_only = mode == OpenMode::ReadOnly;
        let flags = if read_only {
            OpenFlags::Read
        } else {
            OpenFlags::ReadWrite
        };
        let open = |p: &Path| vfs.open(p, flags).map_err(|e| Error::io(p, "open", e));
        let meta_path = dir.join(META_FILE);
        let meta = match vfs.open(&meta_path, flags) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotAStore { path: dir });
            }
            Err(e) => return Err(Error::io(&meta_path, "open", e)),
        };
        if !meta
            .try_lock(!read_only)
            .map_err(|e| Error::io(&meta_path, "lock", e))?
        {
            return Err(Error::StoreBusy { path: dir });
        }
        // Listed under the lock: a listing taken before it could miss the
        // `intent.zr` or `durable.zr` of a holder killed in between, and this
        // handle would then serve (or write over) a half-applied delete.
        let names = vfs.list_dir(&dir).map_err(|e| Error::io(&dir, "list", e))?;
        // The `meta.zr` this open locked is gone from the directory: a
        // create that failed removed it (under its lock, after this open
        // had opened it), with the other files it made. Whatever it holds
        // (a header, when only its last sync failed), there is no store.
        if !names.iter().any(|n| n == META_FILE) {
            return Err(Error::NotAStore { path: dir });
        }
        let size = meta.len().map_err(|e| Error::io(&meta_path, "stat", e))?;
        if size == 0 {
            Self::check_unfinished_create(&*vfs, &dir, &names)?;
        }
        if size != META_SIZE as u64 {
            return Err(Error::corrupted(
                &meta_path,
                format!("size is {size} bytes, expected {META_SIZE}"),
            ));
        }
        // Files whose write-back a writer's failed fsync lost on this boot:
        // made durable as the cache shows them before anything here reads
        // or writes over them (see `writeback`).
        if !read_only && names.iter().any(|n| n == WRITEBACK_FILE) {
            crate::writeback::repair(&*vfs, &dir, &names)?;
        }
        let mut hb = [0u8; META_SIZE];
        meta.read_at(&mut hb, 0)
            .map_err(|e| Error::io(&meta_path, "read", e))?;
        let mut header =
            Header::decode(&hb).map_err(|e| Error::corrupted(&meta_path, e.to_string()))?;

        // A deferred-durability marker: after a reboot, `meta.zr` may name
        // writes a power cut dropped, so the store goes back to the header
        // that was durable when the marker was written (see `deferred`).
        let marker_path = dir.join(DURABLE_FILE);
        let has_marker = names.iter().any(|n| n == DURABLE_FILE);
        let mut rolled_back = false;
        // Whether `header` is not the one in `meta.zr`.
        let mut header_moved = false;
        // Entries the marker's delete log puts back (a roll-back) or
        // finishes writing (a delete its killed process left unfinished).
        let mut log_overlay: std::collections::BTreeMap<u64, Loc> = Default::default();
        let mut marker_header = None;
        // The marker, kept to make its log durable before the entries it
        // names are written in place.
        let mut marker_file = None;
        // Its bytes as read, which may be in the page cache only.
        let mut marker_bytes = Vec::new();
        // A valid marker's undo entries and where its log ends, when the
        // log holds a delete (handed to the read-write handle below).
        let mut marker_undo = None;
        let boot = vfs.boot_id();
        // Appends a killed writer left pending (`durable.zr` names their
        // header, `meta.zr` still the durable one): the durable header,
        // with the marker, for a read-write handle to sync them.
        let mut adopted: Option<(Header, Box<dyn StorageFile>)> = None;
        if has_marker {
            let f = open(&marker_path)?;
            let n = f.len().map_err(|e| Error::io(&marker_path, "stat", e))?;
            let mut b = vec![0u8; n.min(crate::deferred::MAX_MARKER_BYTES) as usize];
            f.read_at(&mut b, 0)
                .map_err(|e| Error::io(&marker_path, "read", e))?;
            let m = Marker::decode(&b);
            marker_header = m.as_ref().map(|m| m.header);
            if let Some(m) = &m
                && m.log.iter().any(|r| *r != crate::deferred::LogRecord::Done)
            {
                marker_undo = Some((m.undo(), m.valid_len(), m.header.length, m.salt));
            }
            let meta_codec = header.codec;
            let same_codec = |h: &Header| {
                if h.codec == meta_codec {
                    Ok(())
                } else {
                    Err(Error::corrupted(
                        &marker_path,
                        format!(
                            "the durable header names codec {}, meta.zr {}",
                            h.codec.name(),
                            meta_codec.name()
                        ),
                    ))
                }
            };
            if let Some(m) = m {
                if use_marker || m.boot.is_empty() || boot.as_deref() != Some(&m.boot[..]) {
                    same_codec(&m.header)?;
                    log_overlay = m.undo();
                    rolled_back = m.header != header || !log_overlay.is_empty();
                    header_moved = m.header != header;
                    header = m.header;
                } else if let Some(u) = m.unfinished() {
                    if (header == u.before || header == u.header)
                        && u.matches(header == u.header && u.header != u.before, {
                            let (vfs, dir, seg) = (&*vfs, &dir, cfg.loc_segment_entries);
                            let mut files = Default::default();
                            move |slot| Self::loc_on_disk(vfs, dir, seg, &mut files, slot)
                        })?
                    {
                        // Finished only over the state they were logged
                        // against (their writes not issued, or issued up
                        // to the header): a `meta.zr` that is neither was
                        // written by another writer since (loaderx 1.7.2
                        // ignores the marker), whose state stands.
                        same_codec(&u.header)?;
                        header_moved = u.header != header;
                        header = u.header;
                        log_overlay = u.entries;
                    } else {
                        // That writer's files are not the marker's state
                        // plus its log: a failed settle below must not put
                        // the marker's header and undo entries back over
                        // them (records lost and repeated), nor leave a
                        // `meta.zr` that a reopen takes for our deletes'.
                        marker_header = None;
                        marker_undo = None;
                    }
                }
            }
            if marker_header.is_none()
                && let Some(p) = PendingAppends::decode(&b)
                && p.base == header
                && !p.boot.is_empty()
                && boot.as_deref() == Some(&p.boot[..])
                && !names.iter().any(|n| n == INTENT_FILE)
            {
                // Only on the boot that wrote them (the page cache holds
                // every byte they name) and over the `meta.zr` they were
                // appended to: another writer (loaderx 1.7.2 ignores the
                // marker) may have changed the store since. The fallback
                // open keeps `meta.zr`, durable: the appends named bytes
                // the files lack.
                if use_marker {
                    rolled_back = true;
                } else {
                    same_codec(&p.header)?;
                    header = p.header;
                    adopted = Some((p.base, f));
                }
            } else {
                marker_file = Some(f);
                marker_bytes = b;
            }
        }
        if use_marker && !rolled_back {
            return Err(Error::corrupted(&meta_path, "no marker to fall back to"));
        }
        if log_overlay
            .keys()
            .next_back()
            .is_some_and(|&i| i >= header.length)
        {
            return Err(Error::corrupted(
                &marker_path,
                format!(
                    "its delete log names a record past the length {}",
                    header.length
                ),
            ));
        }

        // A pending intent: a delete or compaction move that a crash
        // interrupted after it became durable. Its effect is applied below
        // (in memory), and written back by a read-write handle.
        let intent_path = dir.join(INTENT_FILE);
        let has_intent = names.iter().any(|n| n == INTENT_FILE);
        let (intent, intent_file) = if has_intent {
            let f = open(&intent_path)?;
            let n = f.len().map_err(|e| Error::io(&intent_path, "stat", e))?;
            let n = usize::try_from(n)
                .map_err(|_| Error::corrupted(&intent_path, "intent too large"))?;
            let mut b = vec![0u8; n];
            f.read_at(&mut b, 0)
                .map_err(|e| Error::io(&intent_path, "read", e))?;
            (Intent::decode(&b), Some((f, b)))
        } else {
            (None, None)
        };
        let mut overlay = log_overlay.clone();
        match &intent {
            Some(Intent::Delete { header: h, entries }) => {
                if h.codec != header.codec {
                    return Err(Error::corrupted(
                        &intent_path,
                        "the pending delete names another codec than meta.zr",
                    ));
                }
                header = *h;
                overlay.extend(entries.iter().copied());
            }
            Some(Intent::Move { .. }) if read_only => {
                return Err(Error::RecoveryNeeded { path: dir });
            }
            Some(Intent::Move { moves, .. }) => {
                overlay.extend(moves.iter().copied());
            }
            None => {}
        }
        if overlay
            .keys()
            .next_back()
            .is_some_and(|&i| i >= header.length)
        {
            return Err(Error::corrupted(
                &intent_path,
                format!("names a record past the length {}", header.length),
            ));
        }

        // Dictionary: required by codec 2, refused by 0 and 1.
        let dict_path = dir.join(DICT_FILE);
        let has_dict = names.iter().any(|n| n == DICT_FILE);
        let dictionary = match (header.codec, has_dict) {
            (Codec::ZstdDict, false) => {
                return Err(Error::corrupted(
                    &dict_path,
                    "missing: codec zstd_dict needs a dictionary",
                ));
            }
            (Codec::ZstdDict, true) => {
                let f = open(&dict_path)?;
                let n = f.len().map_err(|e| Error::io(&dict_path, "stat", e))?;
                if n == 0 {
                    return Err(Error::corrupted(&dict_path, "the dictionary is empty"));
                }
                let n = usize::try_from(n)
                    .map_err(|_| Error::corrupted(&dict_path, "dictionary too large"))?;
                let mut d = vec![0u8; n];
                f.read_at(&mut d, 0)
                    .map_err(|e| Error::io(&dict_path, "read", e))?;
                Some(d)
            }
            (c, true) => {
                return Err(Error::corrupted(
                    &dict_path,
                    format!("present, but codec {} takes no dictionary", c.name()),
                ));
            }
            (_, false) => None,
        };
        let codec = CodecState::new(header.codec, None, dictionary, DictOrigin::File(&dict_path))?;

        // Chunks 0..=tail_chunk must exist; the tail reaches the frontier.
        let cap = cfg.chunk_capacity;
        let present: BTreeSet<u64> = names
            .iter()
            .filter_map(|n| format::parse_numbered(n, "chunk"))
            .collect();
        if u64::from(header.tail_offset) > cap {
            return Err(Error::corrupted(
                &meta_path,
                format!(
                    "tail_offset {} is past the chunk capacity {cap}",
                    header.tail_offset
                ),
            ));
        }
        let mut chunks = Vec::new();
        let mut chunk_ends = Vec::new();
        for id in 0..=u64::from(header.tail_chunk) {
            let p = dir.join(format::chunk_name(id));
            if !present.contains(&id) {
                return Err(Error::corrupted(
                    &p,
                    format!(
                        "missing: meta.zr says chunks 0..={} exist",
                        header.tail_chunk
                    ),
                ));
            }
            let f = open(&p)?;
            let n = f.len().map_err(|e| Error::io(&p, "stat", e))?;
            let end = if id == u64::from(header.tail_chunk) {
                let t = u64::from(header.tail_offset);
                if n < t {
                    return Err(Error::corrupted(
                        &p,
                        format!("tail chunk is {n} bytes, shorter than tail_offset {t}"),
                    ));
                }
                t
            } else {
                n.min(cap)
            };
            let map = Self::map_chunk(&cfg, &*f);
            chunks.push(Arc::new(Handle {
                file: crate::vfs::Tracked::new(f),
                path: p,
                map,
            }));
            chunk_ends.push(end);
        }

        // Loc segments: check every needed file's size before allocating.
        let seg = cfg.loc_segment_entries;
        let length = header.length;
        let nseg = length.div_ceil(seg);
        let mut locs = Vec::new();
        let mut seg_sizes = Vec::new();
        for s in 0..nseg {
            let p = dir.join(format::loc_name(s));
            if !names.iter().any(|n| *n == format::loc_name(s)) {
                return Err(Error::corrupted(
                    &p,
                    format!(
                        "missing: meta.zr says the store holds {}",
                        crate::error::records(length)
                    ),
                ));
            }
            let entries = (length - s * seg).min(seg);
            let need = entries * LOC_SIZE as u64;
            let f = open(&p)?;
            let n = f.len().map_err(|e| Error::io(&p, "stat", e))?;
            if n < need {
                // Either count may be the damaged one: name both files.
                let loc = format::loc_name(s);
                return Err(Error::corrupted(
                    &p,
                    format!(
                        "meta.zr's record count, {length}, disagrees with {loc}: that count needs {entries} entries ({need} bytes) in {loc}, but it holds {} ({n} bytes)",
                        n / LOC_SIZE as u64
                    ),
                ));
            }
            seg_sizes.push(entries);
            locs.push(Arc::new(Handle {
                file: crate::vfs::Tracked::new(f),
                path: p,
                map: None,
            }));
        }
        let unapplied: BTreeSet<u64> = overlay.keys().copied().collect();
        // A read-only handle reads the entries in place, through read-only
        // mappings of the segments (shared with every process that opens
        // the store), where the file system can map them all; otherwise,
        // and for a read-write handle (which edits them), it copies them.
        // Each mapping covers exactly the bytes checked above.
        let maps: Option<Vec<Box<dyn Mapping>>> = if read_only {
            locs.iter()
                .zip(&seg_sizes)
                .map(|(h, &entries)| h.file.map(entries * LOC_SIZE as u64))
                .collect()
        } else {
            None
        };
        // Every live entry is validated, whichever way it is held.
        let length_usize = usize::try_from(length)
            .map_err(|_| Error::corrupted(&meta_path, "length exceeds the address space"))?;
        let mut owned = match maps {
            Some(_) => None,
            None => Some(Vec::with_capacity(length_usize)),
        };
        let mut buf = match maps {
            Some(_) => Vec::new(),
            None => vec![0u8; (4 << 20).min(length_usize.saturating_mul(LOC_SIZE))],
        };
        const BLOCK: u64 = (4 << 20) / LOC_SIZE as u64;
        let mut live_bytes = 0u64;
        // Adopted pending appends: their entries must lie where the appends
        // placed them, one after the other from the base's frontier to the
        // header's (not checked against the chunk capacity, which is the
        // opener's configuration). Another writer's (loaderx 1.7.2 ignores the record) that
        // left `meta.zr` at the base, as one killed between its entry and its
        // header does, breaks that chain unless its records are as long as
        // ours; then the open falls back to `meta.zr`.
        let mut chain = adopted
            .as_ref()
            .map(|(b, _)| (b.length, b.tail_chunk, u64::from(b.tail_offset)));
        for (s, (h, &entries)) in locs.iter().zip(&seg_sizes).enumerate() {
            let mapped = maps.as_ref().map(|m| m[s].bytes());
            let mut done = 0u64;
            while done < entries {
                let take = (entries - done).min(BLOCK);
                let at = done as usize * LOC_SIZE;
                let bytes: &[u8] = match mapped {
                    Some(m) => m.get(at..at + take as usize * LOC_SIZE).ok_or_else(|| {
                        Error::corrupted(&h.path, "mapped fewer bytes than its entries need")
                    })?,
                    None => {
                        let b = &mut buf[..take as usize * LOC_SIZE];
                        h.file
                            .read_at(b, at as u64)
                            .map_err(|e| Error::io(&h.path, "read", e))?;
                        b
                    }
                };
                for (k, e) in bytes.chunks_exact(LOC_SIZE).enumerate() {
                    let index = s as u64 * seg + done + k as u64;
                    let loc = overlay
                        .get(&index)
                        .copied()
                        .unwrap_or_else(|| Loc::decode(e.try_into().expect("16 bytes")));
                    check_entry(&loc, index, &header, &chunk_ends).map_err(|d| {
                        Error::corrupted_record(&h.path, index, format!("its entry: {d}"))
                    })?;
                    live_bytes += u64::from(loc.phys_length);
                    if let Some((from, c, o)) = &mut chain
                        && index >= *from
                    {
                        // Where the previous one ended, or at the start of
                        // the next chunk (when it did not fit: `place`).
                        let phys = u64::from(loc.phys_length);
                        let at = (loc.chunk_id, u64::from(loc.offset));
                        if at != (*c, *o) && (at != (c.wrapping_add(1), 0) || *o == 0) {
                            return Err(Error::corrupted_record(
                                &h.path,
                                index,
                                "its entry is not where the pending appends in durable.zr placed it",
                            ));
                        }
                        (*c, *o) = (loc.chunk_id, u64::from(loc.offset) + phys);
                    }
                    if let Some(t) = &mut owned {
                        t.push(loc);
                    }
                }
                done += take;
            }
        }
        if let Some((_, c, o)) = chain
            && (c, o) != (header.tail_chunk, u64::from(header.tail_offset))
        {
            return Err(Error::corrupted(
                &marker_path,
                "the pending appends' entries do not end at the frontier it names",
            ));
        }
        // A move is replayed below (a read-only open refused it above):
        // its entries must be ones a compaction writes.
        if let (Some(t), Some(Intent::Move { moves, .. })) = (&owned, &intent) {
            crate::maintain::check_moves(moves, t, &intent_path)?;
        }
        // A failed settle below puts the marker's header back, with the
        // entries the log's deletes overwrote below its length: the
        // segments that hold them may lie past the chosen header's.
        if !read_only && let Some((_, _, marker_len, _)) = &marker_undo {
            for s in locs.len() as u64..marker_len.div_ceil(seg) {
                let name = format::loc_name(s);
                if !names.contains(&name) {
                    break;
                }
                let p = dir.join(name);
                locs.push(Arc::new(Handle {
                    file: crate::vfs::Tracked::new(open(&p)?),
                    path: p,
                    map: None,
                }));
            }
        }
        let table = match maps {
            Some(m) => Table::Mapped(MappedTable::new(
                m,
                length,
                seg,
                overlay.iter().map(|(&i, &l)| (i, l)).collect(),
            )),
            None => Table::Owned(owned.unwrap_or_default()),
        };
        let state = State {
            header,
            table,
            chunks,
            chunk_ends,
            locs,
            live_bytes,
        };
        let engine = Engine {
            dir,
            cfg,
            codec,
            read_only,
            meta: Handle {
                file: crate::vfs::Tracked::new(meta),
                path: meta_path,
                map: None,
            },
            state: RwLock::new(state),
            len: AtomicU64::new(length),
            append_lock: Mutex::new(()),
            poisoned: AtomicBool::new(false),
            durability: Durability::default(),
            boot,
            // A marker left by a handle that never synced: settled below by a
            // read-write handle, left alone by a read-only one.
            armed: AtomicBool::new(has_marker),
            dir_dirty: AtomicBool::new(true),
            durable_header: Mutex::new(marker_header),
            log: Mutex::new(None),
            pending: Mutex::new(None),
            kept: Mutex::new(None),
            pid: std::process::id(),
            forks_at_open: crate::fork::forks(),
            unapplied: if read_only {
                unapplied
            } else {
                BTreeSet::new()
            },
            created: false,
        };
        if !read_only {
            // The log's undo entries, for a failed settle below to write
            // back with the marker's header (the header alone, over slots
            // the deletes overwrote, loses records and repeats others).
            if let (Some((undo, end, _, salt)), Some(f)) = (marker_undo, marker_file) {
                *engine.log.lock().unwrap_or_else(|e| e.into_inner()) = Some(DeleteLog {
                    file: f,
                    path: marker_path.clone(),
                    end,
                    undo,
                    unsynced: false,
                    new_file: false,
                    pending: Vec::new(),
                    pending_header: None,
                    // Another handle's file: bytes past its log may be
                    // records it tore.
                    reusable: false,
                    salt,
                });
            }
            if !log_overlay.is_empty() {
                // A killed writer's log records, and the marker itself, may
                // be in the page cache only (it fsyncs them at its first
                // flush): durable, with the marker's directory entry,
                // before the entries they undo change, or a power cut
                // during this open could keep the entries and lose the
                // undo. Rewritten in place with the bytes read first: a
                // writer whose fsync of them failed (poisoned, so no *done*
                // put back) left pages the kernel calls clean, which an
                // fsync alone does not write (a torn write of the same
                // bytes changes nothing).
                if let Some(log) = &*engine.log.lock().unwrap_or_else(|e| e.into_inner()) {
                    let valid = marker_bytes
                        .get(..log.end as usize)
                        .unwrap_or(&marker_bytes);
                    log.file
                        .write_at(valid, 0)
                        .map_err(|e| engine.poison(Error::io(&marker_path, "write", e)))?;
                    log.file
                        .sync()
                        .map_err(|e| engine.poison(Error::io(&marker_path, "sync", e)))?;
                    vfs.sync_dir(&engine.dir)
                        .map_err(|e| engine.poison(Error::io(&engine.dir, "sync directory", e)))?;
                }
                let entries: Vec<(u64, Loc)> = log_overlay.into_iter().collect();
                // A failed write poisons the handle: dropped on the way
                // out, it must not settle (fsync and remove the marker)
                // a half-written roll-back.
                crate::maintain::write_entries(
                    &engine.read_state(),
                    &engine.dir,
                    seg,
                    &entries,
                    false,
                    &|e| engine.poison(e),
                )?;
            }
            if header_moved {
                engine.write_header(&header)?;
            } else {
                // `meta.zr` rewritten in place with the bytes read from it,
                // for the settle below to fsync: a writer's fsync of it
                // that failed (the kernel then calls the page clean) left
                // the disk holding an older header than the cache, which
                // an fsync of the clean page does not write. Pending
                // appends leave `meta.zr` alone until their sync, so what
                // the disk holds must be the header they were appended to:
                // a stale one (a compaction's frontier before the move, a
                // length before a delete) names chunk bytes and entries
                // those appends overwrite, and a power cut left a store
                // that did not open. (Armed markers recorded the header.)
                engine
                    .meta
                    .file
                    .write_at(&hb, 0)
                    .map_err(|e| engine.poison(Error::io(&engine.meta.path, "write", e)))?;
            }
            if has_intent {
                if let (Some(it), Some((f, b))) = (&intent, &intent_file) {
                    // The intent read here may be in the page cache only (a
                    // writer killed before its fsync, or whose fsync failed,
                    // which leaves the pages reported clean): made durable
                    // before the replay writes over the bytes it holds, or a
                    // power cut mid-replay keeps those writes and loses the
                    // intent. Its own bytes rewritten in place (a torn write
                    // of the same bytes changes nothing; a truncation would
                    // tear a durable intent), then fsynced with the
                    // directory entry.
                    f.write_at(b, 0)
                        .and_then(|_| f.sync())
                        .map_err(|e| Error::io(&intent_path, "write", e))?;
                    vfs.sync_dir(&engine.dir)
                        .map_err(|e| Error::io(&engine.dir, "sync directory", e))?;
                    engine.apply_intent(it)?;
                }
                engine.clear_intent()?;
            }
            // Make the state this handle starts from durable, marker or not:
            // a killed writer may have left loc, chunk and header bytes only
            // in the page cache (a compaction here would then move records
            // whose durable entries still point elsewhere), or removed
            // `durable.zr` / `intent.zr` without the directory fsync that
            // makes a removal durable, so that a power cut would bring the
            // stale file back and roll back or replay over later work.
            if let Some((base, file)) = adopted {
                // Synced like the writer's own sync: `meta.zr` stays at the
                // durable header until the files are.
                *engine.pending.lock().unwrap_or_else(|e| e.into_inner()) = Some(PendingFile {
                    file,
                    base,
                    kept: None,
                });
                engine.armed.store(false, Ordering::Release);
            } else {
                engine.armed.store(true, Ordering::Release);
            }
            engine.settle()?;
        }
        Ok(engine)
    }

    pub(crate) fn map_chunk(cfg: &EngineConfig, f: &dyn StorageFile) -> Option<Box<dyn Mapping>> {
        match cfg.read_path {
            ReadPath::Mmap => f.map(cfg.chunk_capacity),
            ReadPath::Pread => None,
        }
    }

    /// The store directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Committed physical records.
    pub fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    /// Whether the store holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The store's codec.
    pub fn codec(&self) -> Codec {
        self.codec.codec
    }

    /// The dictionary of a [`Codec::ZstdDict`] store.
    pub fn dictionary(&self) -> Option<&[u8]> {
        self.codec.dictionary.as_deref()
    }

    /// The zstd level appends through this handle compress at: the one
    /// given at creation or by [`Engine::set_level`], else the format's (3,
    /// or 19 with a dictionary); 0 for a raw store.
    pub fn level(&self) -> i32 {
        // A raw store's level is its codec's default, 0 (it takes no other).
        self.codec.level
    }

    /// Sets the zstd level of later appends through this handle (frames are
    /// self-describing, so any level reads back the same way). Not stored:
    /// a reopened handle starts at the format's level again.
    ///
    /// # Errors
    /// [`Error::ReadOnly`] on a read-only handle; [`Error::InvalidArgument`]
    /// for a raw store or a level outside zstd's range.
    pub fn set_level(&mut self, level: i32) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly {
                path: self.dir.clone(),
            });
        }
        self.codec = CodecState::new(
            self.codec.codec,
            Some(level),
            self.codec.dictionary.clone(),
            DictOrigin::Argument,
        )?;
        Ok(())
    }

    /// Whether this handle was opened [`OpenMode::ReadOnly`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// When appends through this handle become durable.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Sets when later appends through this handle become durable (see
    /// [`Durability`]). Switching to [`Durability::EachAppend`] first makes
    /// the deferred appends durable. No effect on a read-only handle.
    ///
    /// # Errors
    /// As [`Engine::sync`].
    pub fn set_durability(&mut self, durability: Durability) -> Result<()> {
        if durability == Durability::EachAppend {
            self.settle()?;
        }
        self.durability = durability;
        Ok(())
    }

    /// Makes every committed record durable: fsyncs the chunks and loc
    /// segments written since their last fsync, then the directory if
    /// appends created files, then writes and fsyncs `meta.zr` (after
    /// appends alone, the header `durable.zr` held), and ends the
    /// `durable.zr` marker (after a deferred delete, durably: its first
    /// sector zeroed and fsynced; the handle keeps the file until it
    /// closes). A failure poisons the handle.
    ///
    /// In a forked child that inherited the handle it fsyncs nothing (the
    /// files are shared with the opener, who must see any write-back error
    /// itself, and the marker is the opener's): `Ok` when everything the
    /// handle names was already durable at the fork, else
    /// [`Error::ForeignProcess`], since the opener's deferred appends cannot
    /// be made durable from here.
    pub fn sync(&self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        if !self.in_opener() {
            return if self.armed.load(Ordering::Acquire) || self.has_pending() {
                Err(Error::ForeignProcess {
                    path: self.dir.clone(),
                    opener: self.pid,
                })
            } else {
                Ok(())
            };
        }
        self.check_poisoned()?;
        let _g = self.lock_append();
        // Another thread's failed sync may have poisoned the handle while
        // this one waited: its lost writes must not be reported durable.
        self.check_poisoned()?;
        let r = self.sync_locked();
        if r.is_err() && self.armed.load(Ordering::Acquire) {
            // The kernel reports a failed write-back once and may then
            // treat the lost pages as clean, so a later open on this boot
            // would trust a `meta.zr` naming them. The marker is made
            // another boot's first (its fixed part, one sector, with a
            // boot id of as many 0xFF bytes as the one there, which no
            // boot has): every later open then rolls back to its header
            // and undo entries as after a power cut, writing them itself,
            // whatever this put-back reaches before a kill (the header
            // put back over the deletes' entries lost records and
            // repeated others). Then the header the marker names, whose
            // records are durable, and the entries deferred deletes
            // overwrote since go back in place, for loaderx 1.7.2 (which
            // ignores the marker) and readers of these files.
            let h = *self
                .durable_header
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
            if let (Some(h), Some(log)) = (h, log.as_ref()) {
                let mut boot = [0u8];
                if log.file.read_at(&mut boot, 5).is_ok() {
                    let m = Marker {
                        header: h,
                        boot: vec![0xFF; usize::from(boot[0])],
                        salt: log.salt,
                        log: Vec::new(),
                    };
                    let _ = log.file.write_at(&m.encode(), 0);
                }
                if self.meta.file.write_at(&h.encode(), 0).is_ok() {
                    // Only over the header put back: under the deletes'
                    // header they would lose records and repeat others.
                    let undo: Vec<(u64, Loc)> = log.undo.iter().map(|(&i, &l)| (i, l)).collect();
                    let _ = crate::maintain::write_entries(
                        &self.read_state(),
                        &self.dir,
                        self.cfg.loc_segment_entries,
                        &undo,
                        false,
                        &|e| e,
                    );
                }
            } else if let Some(h) = h {
                let _ = self.meta.file.write_at(&h.encode(), 0);
            }
        }
        r
    }

    fn sync_locked(&self) -> Result<()> {
        self.flush_deletes()?;
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(p) = pending {
            debug_assert!(!self.armed.load(Ordering::Acquire));
            return self.sync_pending(p);
        }
        self.sync_files()?;
        if self.armed.load(Ordering::Acquire) {
            // Files the deferred appends created get durable entries before
            // the marker goes; then its removal is made durable.
            if self.dir_dirty.load(Ordering::Acquire) {
                self.sync_directory()?;
            }
            let kept = {
                let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
                match log.as_ref() {
                    Some(l) if l.reusable && !l.new_file && l.end <= MAX_KEPT_BYTES => {
                        // The fixed part (and any pending appends record)
                        // lies in the first sector, which a power cut never
                        // tears: the marker is valid with its whole log, or
                        // gone. A failed write leaves it armed, to be put
                        // back as after a failed removal.
                        l.file
                            .write_at(&[0u8; 512], 0)
                            .map_err(|e| self.poison(Error::io(&l.path, "write", e)))?;
                        log.take()
                    }
                    _ => None,
                }
            };
            if let Some(log) = kept {
                return self.disarm(log);
            }
            let p = self.dir.join(DURABLE_FILE);
            match self.cfg.vfs.remove(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(self.poison(Error::io(&p, "remove", e))),
            }
            // The marker is gone: the files it protected are durable
            // (synced above), and nothing written from here on could be
            // rolled back. A failed directory sync leaves the removal to
            // a power cut (the marker back: its state; gone: this one);
            // putting the marker's header and undo entries back now,
            // unsynced and without a marker, could leave a power cut
            // the deletes' header over restored entries.
            let r = self.sync_directory();
            self.armed.store(false, Ordering::Release);
            *self
                .durable_header
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = None;
            *self.log.lock().unwrap_or_else(|e| e.into_inner()) = None;
            r?;
        }
        Ok(())
    }

    /// Ends the armed state of a sync whose files are durable, once the
    /// caller zeroed the first sector of the marker this handle wrote: an
    /// fsync of it (one fdatasync of a sector in place, where a removal
    /// costs a directory fsync, and the next marker's creation another),
    /// and the file is kept for the next marker ([`KeptFile`]). The log
    /// stays; the next marker in the file salts its checksums anew. A
    /// failed fsync poisons, drops the file and puts nothing back, as a
    /// failed directory sync after a removal: the marker may come back in
    /// a power cut (its state), and an open on this boot reads zeros,
    /// keeps `meta.zr` and removes the file durably.
    fn disarm(&self, log: DeleteLog) -> Result<()> {
        self.armed.store(false, Ordering::Release);
        *self
            .durable_header
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        log.file
            .sync()
            .map_err(|e| self.poison(Error::io(&log.path, "sync", e)))?;
        *self.kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(KeptFile {
            file: log.file,
            entry_durable: true,
            salt: log.salt,
        });
        Ok(())
    }

    /// Removes the store this handle created and that holds no records
    /// yet, for a caller whose own part of the creation failed (the typed
    /// layer's `store.zr`): the files a new store has (`dict.zr`, `0.chunk`,
    /// a loc segment or marker a sync made, `store.zr` and its temporary
    /// name), then `meta.zr`, still under the lock, then the directory is
    /// synced. So the directory is left as the create found it, as when
    /// [`Engine::create`] itself fails, rather than holding a store that
    /// every later open calls unfinished and every create refuses.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (and nothing removed) for a handle that
    /// did not create its store or one that holds records; else the first
    /// removal or sync that failed (the others are still tried).
    #[doc(hidden)]
    pub fn discard_created(self) -> Result<()> {
        if !self.created || self.read_only || !self.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "only an empty store this handle created can be discarded, not {}",
                self.dir.display()
            )));
        }
        let vfs = self.cfg.vfs.clone();
        let dir = self.dir.clone();
        let names = [
            format::STORE_FILE.to_string(),
            format!("{}.tmp", format::STORE_FILE),
            DURABLE_FILE.to_string(),
            INTENT_FILE.to_string(),
            WRITEBACK_FILE.to_string(),
            format::loc_name(0),
            format::chunk_name(0),
            DICT_FILE.to_string(),
            META_FILE.to_string(),
        ];
        let mut first = None;
        for name in names {
            let p = dir.join(&name);
            match vfs.remove(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    first.get_or_insert(Error::io(&p, "remove", e));
                }
            }
        }
        if let Err(e) = vfs.sync_dir(&dir) {
            first.get_or_insert(Error::io(&dir, "sync directory", e));
        }
        // Nothing left to settle: the lock goes with the handle.
        self.poisoned.store(true, Ordering::Release);
        drop(self);
        first.map_or(Ok(()), Err)
    }

    /// Syncs and releases the store: the error [`Drop`] cannot report. A
    /// read-only handle just closes.
    ///
    /// # Errors
    /// As [`Engine::sync`].
    pub fn close(self) -> Result<()> {
        self.settle()
    }

    /// Whether this is the process that opened the handle (not a forked
    /// child that inherited it).
    pub(crate) fn in_opener(&self) -> bool {
        std::process::id() == self.pid
    }

    /// Whether appends skip their fsyncs (the handle defers, and a reboot
    /// can be told apart from a killed process).
    pub(crate) fn defers(&self) -> bool {
        self.durability == Durability::AtSync && self.boot.is_some()
    }

    /// Makes deferred appends durable, if there are any.
    pub(crate) fn settle(&self) -> Result<()> {
        if self.armed.load(Ordering::Acquire) || self.has_pending() {
            self.sync()
        } else {
            Ok(())
        }
    }

    /// fsyncs the chunks, the loc segments and `meta.zr` that were written
    /// since their last sync (the caller holds the append lock).
    fn sync_files(&self) -> Result<()> {
        let st = self.read_state();
        for h in st.chunks.iter().chain(st.locs.iter()) {
            h.file
                .sync_if_dirty()
                .map_err(|e| self.poison(Error::io(&h.path, "sync", e)))?;
        }
        self.meta
            .file
            .sync_if_dirty()
            .map_err(|e| self.poison(Error::io(&self.meta.path, "sync", e)))
    }

    /// fsyncs the store's directory, which makes every file entry in it
    /// durable (a failure poisons the handle and leaves the entries
    /// counted as not durable). The caller holds the append lock (or
    /// `&mut self`).
    pub(crate) fn sync_directory(&self) -> Result<()> {
        self.dir_dirty.store(false, Ordering::Release);
        self.cfg.vfs.sync_dir(&self.dir).map_err(|e| {
            self.dir_dirty.store(true, Ordering::Release);
            self.poison(Error::io(&self.dir, "sync directory", e))
        })
    }

    /// Whether appends are pending in `durable.zr` (a lock held elsewhere,
    /// as one a forked child inherits can be, counts as yes).
    pub(crate) fn has_pending(&self) -> bool {
        match self.pending.try_lock() {
            Ok(g) => g.is_some(),
            Err(std::sync::TryLockError::Poisoned(g)) => g.into_inner().is_some(),
            Err(std::sync::TryLockError::WouldBlock) => true,
        }
    }

    /// A deferred append's commit while the handle is not armed: `header`
    /// goes to `durable.zr` (the file the handle keeps, or one the first
    /// such append since the last durable point creates; `base` is that
    /// point's header), not to `meta.zr`. No
    /// fsync: the record only matters to an open on this boot, which
    /// shares the page cache that holds the appends (the caller holds the
    /// append lock).
    pub(crate) fn write_pending(&self, base: &Header, header: &Header) -> Result<()> {
        let mut g = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let p = self.dir.join(DURABLE_FILE);
        if g.is_none() {
            let k = self.marker_file()?;
            *g = Some(PendingFile {
                file: k.file,
                base: *base,
                kept: Some((k.entry_durable, k.salt)),
            });
        }
        let pf = g.as_ref().expect("set above");
        let bytes = PendingAppends {
            base: pf.base,
            header: *header,
            boot: self.boot.clone().unwrap_or_default(),
        }
        .encode();
        pf.file
            .write_at(&bytes, 0)
            .map_err(|e| self.poison(Error::io(&p, "write", e)))
    }

    /// The sync of a handle whose appends are pending in `durable.zr`:
    /// the files they wrote, then the directory (for the files they
    /// created), then the header in `meta.zr` and its fsync; then the
    /// record goes, no longer needed (a removal a power cut undoes brings
    /// back another boot's record, which an open ignores). A failure
    /// writes the durable header back and removes the record, so that no
    /// open on this boot trusts pages a failed write-back may have lost.
    fn sync_pending(&self, p: PendingFile) -> Result<()> {
        let path = self.dir.join(DURABLE_FILE);
        let r = (|| {
            self.sync_files()?;
            if self.dir_dirty.load(Ordering::Acquire) {
                self.sync_directory()?;
            }
            let h = self.read_state().header;
            self.write_header(&h)?;
            self.meta
                .file
                .sync_if_dirty()
                .map_err(|e| self.poison(Error::io(&self.meta.path, "sync", e)))
        })();
        if r.is_err() {
            let _ = self.meta.file.write_at(&p.base.encode(), 0);
        }
        // Gone: after a success it names a state `meta.zr` has left
        // (harmless unless `meta.zr` came back to its base), after a
        // failure one that may not be on disk. Zeroed in place (unsynced,
        // as the removal was) and kept, after a success in a file this
        // handle wrote; else removed. A failed removal is an error, the
        // record made invalid as far as possible.
        if r.is_ok()
            && let Some((entry_durable, salt)) = p.kept
        {
            let n = PendingAppends {
                base: p.base,
                header: p.base,
                boot: self.boot.clone().unwrap_or_default(),
            }
            .encode()
            .len();
            p.file
                .write_at(&vec![0u8; n], 0)
                .map_err(|e| self.poison(Error::io(&path, "write", e)))?;
            *self.kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(KeptFile {
                file: p.file,
                entry_durable,
                salt,
            });
            return Ok(());
        }
        let gone = match self.cfg.vfs.remove(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => {
                let _ = p.file.write_at(&[0u8; 8], 0);
                Err(self.poison(Error::io(&path, "remove", e)))
            }
        };
        r.and(gone)
    }

    /// The file for a new marker or pending appends record: the one this
    /// handle keeps, or `durable.zr` created (its entry not durable yet, no
    /// marker's salt in it).
    fn marker_file(&self) -> Result<KeptFile> {
        if let Some(k) = self.kept.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return Ok(k);
        }
        let p = self.dir.join(DURABLE_FILE);
        let file = self
            .cfg
            .vfs
            .open(&p, OpenFlags::CreateTruncate)
            .map_err(|e| self.poison(Error::io(&p, "create", e)))?;
        Ok(KeptFile {
            file,
            entry_durable: false,
            salt: None,
        })
    }

    /// Before the first deferred delete after a durable point: makes what
    /// `header` names durable, then records it and the boot id in
    /// `durable.zr`, unsynced: the first flush, before any write in place,
    /// fsyncs the marker with its log and syncs the directory (the caller
    /// holds the append lock).
    pub(crate) fn arm(&self, header: &Header) -> Result<()> {
        self.sync_files()?;
        let p = self.dir.join(DURABLE_FILE);
        let KeptFile {
            file: f,
            entry_durable,
            salt: last_salt,
        } = self.marker_file()?;
        let new_file = !entry_durable;
        // Records of the file's earlier markers may follow the fixed part:
        // a new salt fails their checksums.
        let salt = match last_salt {
            Some(s) => s.wrapping_add(1),
            None => crate::deferred::first_salt(self.boot.as_deref().unwrap_or_default(), header),
        };
        let m = Marker {
            header: *header,
            boot: self.boot.clone().unwrap_or_default(),
            salt: Some(salt),
            log: Vec::new(),
        };
        let bytes = m.encode();
        f.write_at(&bytes, 0)
            .map_err(|e| self.poison(Error::io(&p, "write", e)))?;
        *self
            .durable_header
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(*header);
        *self.log.lock().unwrap_or_else(|e| e.into_inner()) = Some(DeleteLog {
            file: f,
            path: p,
            end: bytes.len() as u64,
            undo: Default::default(),
            unsynced: true,
            new_file,
            pending: Vec::new(),
            pending_header: None,
            reusable: true,
            salt: Some(salt),
        });
        self.armed.store(true, Ordering::Release);
        Ok(())
    }

    /// Heap bytes the handle's location table holds: 16 per record for a
    /// copied table, about none for one mapped from the loc segments (a
    /// read-only handle's, where the file system can map). A test hook.
    #[doc(hidden)]
    pub fn table_heap_bytes(&self) -> usize {
        self.read_state().table.heap_bytes()
    }

    /// Storage usage (physical records; no I/O).
    pub fn stats(&self) -> Stats {
        let st = self.read_state();
        let live_bytes = st.live_bytes;
        debug_assert_eq!(
            live_bytes,
            st.table
                .iter()
                .map(|l| u64::from(l.phys_length))
                .sum::<u64>(),
            "the live byte count drifted from the table"
        );
        let chunk_bytes: u64 = st.chunk_ends.iter().sum();
        Stats {
            records: st.table.len(),
            live_bytes,
            chunk_bytes,
            reclaimable: chunk_bytes.saturating_sub(live_bytes),
        }
    }

    pub(crate) fn read_state(&self) -> RwLockReadGuard<'_, State> {
        // A panic while holding the lock cannot leave `State` half-updated:
        // it is replaced by plain assignments after all I/O succeeded.
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn write_state(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn lock_append(&self) -> MutexGuard<'_, ()> {
        self.append_lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn check_poisoned(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned {
                path: self.dir.clone(),
            });
        }
        Ok(())
    }

    /// Refuses writes on read-only or poisoned handles.
    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly {
                path: self.dir.clone(),
            });
        }
        if !self.in_opener() {
            return Err(Error::ForeignProcess {
                path: self.dir.clone(),
                opener: self.pid,
            });
        }
        self.check_poisoned()
    }

    /// Marks the handle unusable for writes and passes the error on.
    /// A failed fsync of a chunk or a loc segment is also noted in
    /// `writeback.zr`, for the next open on this boot (see `writeback`).
    pub(crate) fn poison(&self, e: Error) -> Error {
        self.poisoned.store(true, Ordering::Release);
        crate::writeback::note(&*self.cfg.vfs, &self.dir, self.boot.as_deref(), &e);
        e
    }

    pub(crate) fn write_header(&self, h: &Header) -> Result<()> {
        self.meta
            .file
            .write_at(&h.encode(), 0)
            .map_err(|e| self.poison(Error::io(&self.meta.path, "write", e)))
    }

    pub(crate) fn loc_path(&self, index: u64) -> PathBuf {
        self.dir
            .join(format::loc_name(index / self.cfg.loc_segment_entries))
    }
}

impl Drop for Engine {
    /// Makes deferred appends and deletes durable (best effort: [`Engine::close`]
    /// reports a failure; after one, the next open recovers).
    fn drop(&mut self) {
        if !self.read_only && !self.poisoned.load(Ordering::Acquire) && self.in_opener() {
            let _ = self.settle();
        }
        // A kept marker is zero (no directory sync: one a power cut brings
        // back opens as a torn marker, and `meta.zr` stands).
        let kept = self
            .kept
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if kept.is_some() && self.in_opener() {
            drop(kept);
            let _ = self.cfg.vfs.remove(&self.dir.join(DURABLE_FILE));
        }
    }
}

/// Whether a gather can read `loc` without leaving its chunk or sizing a
/// buffer past the format's limit: the chunk is open, the stored bytes end
/// within its committed end (inside the file, so a mapping of it never
/// faults), the decoded length is at most 2^31 bytes (what the caller
/// allocates for it), and a raw record's stored and decoded lengths agree
/// (it is copied as is). The part of [`check_entry`] that gathers through
/// a mapped table repeat per record, in a few comparisons and one branch
/// (the full check cost about 2 ns per record there); the rest (non-empty)
/// was checked at open, and an entry rewritten since that breaks only that
/// makes a record fail to decode, no worse.
#[inline(always)]
pub(crate) fn entry_reachable(loc: &Loc, header: &Header, chunk_ends: &[u64]) -> bool {
    let within = match chunk_ends.get(loc.chunk_id as usize) {
        Some(&end) => loc.end() <= end,
        None => false,
    };
    within
        & (u64::from(loc.logic_length) <= MAX_RECORD_LEN)
        & ((header.codec != Codec::Raw) | (loc.phys_length == loc.logic_length))
}

/// Validates one live entry against the committed frontier.
pub(crate) fn check_entry(
    loc: &Loc,
    _index: u64,
    header: &Header,
    chunk_ends: &[u64],
) -> std::result::Result<(), String> {
    if loc.phys_length == 0 || loc.logic_length == 0 {
        return Err("empty record (records are non-empty)".into());
    }
    if u64::from(loc.logic_length) > MAX_RECORD_LEN {
        return Err(format!(
            "logic_length {} exceeds the 2^31 record limit",
            loc.logic_length
        ));
    }
    if header.codec == Codec::Raw && loc.phys_length != loc.logic_length {
        return Err(format!(
            "raw record with phys_length {} != logic_length {}",
            loc.phys_length, loc.logic_length
        ));
    }
    if loc.chunk_id > header.tail_chunk {
        return Err(format!(
            "chunk_id {} is past tail_chunk {}",
            loc.chunk_id, header.tail_chunk
        ));
    }
    let Some(&end) = chunk_ends.get(loc.chunk_id as usize) else {
        return Err(format!("chunk_id {} names no open chunk", loc.chunk_id));
    };
    if loc.end() > end {
        return Err(format!(
            "bytes {}..{} of chunk {} are past its committed end {end}",
            loc.offset,
            loc.end(),
            loc.chunk_id
        ));
    }
    Ok(())
}

/// The typed layer's `store.zr` before its rename into place.
const STORE_TMP_FILE: &str = "store.zr.tmp";

/// A name `publish_meta` gives `meta.zr` before linking it.
fn is_creating_name(name: &str) -> bool {
    name.strip_prefix(META_FILE)
        .is_some_and(|rest| rest.starts_with(".creating."))
}

/// A name a create makes (or the typed layer's create, before `store.zr`).
fn is_leftover_name(name: &str) -> bool {
    [META_FILE, DICT_FILE, STORE_TMP_FILE].contains(&name)
        || name == format::chunk_name(0)
        || is_creating_name(name)
}
