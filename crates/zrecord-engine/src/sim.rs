//! A simulated, in-memory file system for crash and fault tests.
//!
//! [`SimVfs`] keeps, per file, the bytes that are durable (synced) apart from
//! the writes issued since the last `sync`, and, per directory, the entries
//! made durable by `sync_dir` apart from later creations, removals and
//! renames. A directory made by `create_dir_all` is itself such an entry, in
//! its parent: until `sync_dir` of the parent it can vanish in a power cut,
//! with everything in it. (A directory the disk was never asked to make is
//! taken to exist, durably, as in `/d/f` made without a `mkdir`.) It can:
//!
//! - record a [`Snapshot`] before every mutating call (a crash point), from
//!   which [`Snapshot::crash_image`] builds the disk a power cut could leave:
//!   each unsynced write kept, dropped, or torn at 512-byte sectors (writes
//!   inside one sector are atomic), and a prefix of the unsynced directory
//!   operations applied;
//! - fail the Nth I/O call with an injected error ([`SimVfs::fail_at`]); a
//!   failed `sync` loses the file's unsynced writes from the disk while the
//!   cache still shows them, as Linux does after a failed write-back.
//!
//! It maps only files opened [`OpenFlags::Read`] (a read-only handle's),
//! as a copy of their bytes at the call: such a "mapping" never sees later
//! writes, which is what a real one shows while the store's shared lock
//! keeps writers out. [`SimVfs::set_maps`] turns mapping off, for the
//! engine's copying fallback. Every other read goes through the trait.

use crate::vfs::{OpenFlags, StorageFile, Vfs};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Sector size for tearing: a write within one sector is atomic.
pub const SECTOR: u64 = 512;

#[derive(Clone, Debug)]
enum Pending {
    Write { off: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Clone, Debug, Default)]
struct Node {
    durable: Vec<u8>,
    current: Vec<u8>,
    pending: Vec<Pending>,
}

#[derive(Clone, Debug)]
enum DirOp {
    Link(PathBuf, usize),
    Unlink(PathBuf),
}

#[derive(Clone, Debug, Default)]
struct State {
    nodes: Vec<Node>,
    dir: BTreeMap<PathBuf, usize>,
    durable_dir: BTreeMap<PathBuf, usize>,
    dir_log: Vec<DirOp>,
    /// Directories made by `create_dir_all`, durable or not.
    dirs: BTreeSet<PathBuf>,
    /// Those of `dirs` whose parent has not been synced since, oldest first.
    mkdir_log: Vec<PathBuf>,
    calls: u64,
    /// File and directory syncs made.
    syncs: u64,
    /// Directory syncs made (counted in `syncs` too).
    dir_syncs: u64,
    /// First failing call and how many fail.
    fail_at: Option<(u64, u64)>,
    /// Further single calls that fail (see [`SimVfs::fail_calls`]).
    fail_also: BTreeSet<u64>,
    record: bool,
    snapshots: Vec<Snapshot>,
    /// Which boot of the simulated machine this is (a power cut starts the
    /// next one; a killed process does not).
    boot: u64,
    /// `map` answers `None` for every file.
    no_maps: bool,
}

/// The disk at one crash point: durable bytes plus the unsynced operations.
#[derive(Clone, Debug)]
pub struct Snapshot {
    dirs: BTreeSet<PathBuf>,
    mkdir_log: Vec<PathBuf>,
    nodes: Vec<Node>,
    durable_dir: BTreeMap<PathBuf, usize>,
    dir_log: Vec<DirOp>,
    boot: u64,
}

/// A small deterministic generator (splitmix64).
#[derive(Clone, Debug)]
pub struct SimRng(pub u64);

impl SimRng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

fn apply(buf: &mut Vec<u8>, op: &Pending) {
    match op {
        Pending::Write { off, data } => {
            let off = *off as usize;
            if buf.len() < off + data.len() {
                buf.resize(off + data.len(), 0);
            }
            buf[off..off + data.len()].copy_from_slice(data);
        }
        Pending::SetLen(n) => buf.resize(*n as usize, 0),
    }
}

impl Snapshot {
    /// The disk a power cut at this point could leave. `seed` 0 drops every
    /// unsynced operation, 1 keeps them all, others choose per operation
    /// (keep, drop, or tear a multi-sector write) and a prefix of the
    /// directory operations.
    pub fn crash_image(&self, seed: u64) -> SimVfs {
        let mut rng = SimRng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5EED);
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            let mut b = n.durable.clone();
            for op in &n.pending {
                match seed {
                    0 => {}
                    1 => apply(&mut b, op),
                    _ => match (rng.below(3), op) {
                        (0, _) => {}
                        (1, _) => apply(&mut b, op),
                        (_, Pending::Write { off, data }) => {
                            // Tear: each touched sector lands or not.
                            let end = off + data.len() as u64;
                            let mut s = *off;
                            while s < end {
                                let e = ((s / SECTOR + 1) * SECTOR).min(end);
                                if rng.below(2) == 0 {
                                    let piece = Pending::Write {
                                        off: s,
                                        data: data[(s - off) as usize..(e - off) as usize].to_vec(),
                                    };
                                    apply(&mut b, &piece);
                                }
                                s = e;
                            }
                        }
                        (_, op) => apply(&mut b, op),
                    },
                }
            }
            nodes.push(Node {
                durable: b.clone(),
                current: b,
                pending: Vec::new(),
            });
        }
        let keep = match seed {
            0 => 0,
            1 => self.dir_log.len(),
            _ => rng.below(self.dir_log.len() as u64 + 1) as usize,
        };
        let mut dir = self.dir_after(keep);
        // Unsynced directories: an older part of them may have made it.
        let made = match seed {
            0 => 0,
            1 => self.mkdir_log.len(),
            _ => rng.below(self.mkdir_log.len() as u64 + 1) as usize,
        };
        let lost = &self.mkdir_log[made..];
        let gone = |p: &Path| p.ancestors().skip(1).any(|a| lost.iter().any(|l| l == a));
        dir.retain(|p, _| !gone(p));
        let dirs = self
            .dirs
            .iter()
            .filter(|d| !lost.contains(d) && !gone(d))
            .cloned()
            .collect();
        SimVfs::from_state(State {
            nodes,
            dirs,
            durable_dir: dir.clone(),
            dir,
            boot: self.boot + 1,
            ..State::default()
        })
    }

    /// As [`Snapshot::crash_image`], on a file system that does not keep
    /// the order of directory operations between syncs: each unsynced one
    /// is kept or dropped on its own (a file's creation can be lost while
    /// a later removal lasts). Files keep or lose their unsynced writes as
    /// in `crash_image(seed)`; directories made by `create_dir_all` are as
    /// there too (use it where the store's directory is durable).
    pub fn crash_image_unordered(&self, seed: u64) -> SimVfs {
        let img = self.crash_image(seed);
        let mut rng = SimRng(seed ^ 0xD1B5_4A32_D192_ED03);
        let mut dir = self.durable_dir.clone();
        for op in &self.dir_log {
            if rng.below(2) == 0 {
                continue;
            }
            match op {
                DirOp::Link(p, id) => {
                    dir.insert(p.clone(), *id);
                }
                DirOp::Unlink(p) => {
                    dir.remove(p);
                }
            }
        }
        {
            let mut s = img.lock();
            s.durable_dir = dir.clone();
            s.dir = dir;
        }
        img
    }

    /// The disk a killed process leaves at this point: every write it issued
    /// is there (in the page cache, still unsynced), and the machine is the
    /// same boot.
    pub fn kill_image(&self) -> SimVfs {
        SimVfs::from_state(State {
            nodes: self.nodes.clone(),
            dirs: self.dirs.clone(),
            mkdir_log: self.mkdir_log.clone(),
            durable_dir: self.durable_dir.clone(),
            dir: self.dir_after(self.dir_log.len()),
            dir_log: self.dir_log.clone(),
            boot: self.boot,
            ..State::default()
        })
    }

    /// The durable directory with the first `keep` unsynced operations applied.
    fn dir_after(&self, keep: usize) -> BTreeMap<PathBuf, usize> {
        let mut dir = self.durable_dir.clone();
        for op in &self.dir_log[..keep] {
            match op {
                DirOp::Link(p, id) => {
                    dir.insert(p.clone(), *id);
                }
                DirOp::Unlink(p) => {
                    dir.remove(p);
                }
            }
        }
        dir
    }

    /// Whether a file of this name exists at this point (durably or not).
    pub fn has_file(&self, path: &Path) -> bool {
        let mut here = self.durable_dir.contains_key(path);
        for op in &self.dir_log {
            match op {
                DirOp::Link(p, _) if p == path => here = true,
                DirOp::Unlink(p) if p == path => here = false,
                _ => {}
            }
        }
        here
    }

    /// Unsynced operations at this point (a crash here can lose them).
    pub fn pending_ops(&self) -> usize {
        self.nodes.iter().map(|n| n.pending.len()).sum::<usize>() + self.dir_log.len()
    }
}

/// The simulated file system; clones share the same disk.
#[derive(Clone, Debug, Default)]
pub struct SimVfs {
    state: Arc<Mutex<State>>,
}

impl SimVfs {
    /// An empty disk.
    pub fn new() -> SimVfs {
        SimVfs::default()
    }

    fn from_state(s: State) -> SimVfs {
        SimVfs {
            state: Arc::new(Mutex::new(s)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fails the `n`th I/O call from now (0-based) and only it; `None` clears.
    pub fn fail_at(&self, n: Option<u64>) {
        self.fail_span(n, 1);
    }

    /// Fails `count` I/O calls in a row from the `n`th from now (a fault
    /// that a retry meets again); `None` clears.
    pub fn fail_span(&self, n: Option<u64>, count: u64) {
        let mut s = self.lock();
        s.fail_at = n.map(|n| (s.calls + n, count));
    }

    /// Fails each of the `ns`th I/O calls from now (0-based), besides any
    /// [`SimVfs::fail_at`] span: faults apart from each other, as a device
    /// that fails a sync and later a read gives; empty clears.
    pub fn fail_calls(&self, ns: &[u64]) {
        let mut s = self.lock();
        let now = s.calls;
        s.fail_also = ns.iter().map(|n| now + n).collect();
    }

    /// I/O calls made so far.
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }

    /// File and directory syncs made so far (failed ones too).
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    /// Directory syncs made so far (failed ones too).
    pub fn dir_syncs(&self) -> u64 {
        self.lock().dir_syncs
    }

    /// Starts or stops recording a snapshot before every mutating call.
    pub fn record(&self, on: bool) {
        self.lock().record = on;
    }

    /// Takes the snapshots recorded so far.
    pub fn take_snapshots(&self) -> Vec<Snapshot> {
        std::mem::take(&mut self.lock().snapshots)
    }

    /// Snapshots recorded so far (not taken).
    pub fn snapshot_count(&self) -> usize {
        self.lock().snapshots.len()
    }

    /// The disk as it is now (including unsynced operations).
    pub fn snapshot(&self) -> Snapshot {
        snap(&self.lock())
    }

    /// Whether files opened read-only can be mapped (on by default; crash
    /// and kill images start with it on).
    pub fn set_maps(&self, on: bool) {
        self.lock().no_maps = !on;
    }

    /// The current content of a file (`None` if absent).
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let s = self.lock();
        s.dir.get(path).map(|&id| s.nodes[id].current.clone())
    }

    /// Replaces a file's content, durably (for hostile-bytes tests).
    pub fn write_file(&self, path: &Path, data: &[u8]) {
        let mut s = self.lock();
        let id = match s.dir.get(path) {
            Some(&id) => id,
            None => {
                s.nodes.push(Node::default());
                let id = s.nodes.len() - 1;
                s.dir.insert(path.to_path_buf(), id);
                s.durable_dir.insert(path.to_path_buf(), id);
                id
            }
        };
        let n = &mut s.nodes[id];
        n.current = data.to_vec();
        n.durable = data.to_vec();
        n.pending.clear();
    }

    /// A copy of the disk as it is now, sharing nothing with this one.
    pub fn fork(&self) -> SimVfs {
        let s = self.lock();
        SimVfs::from_state(State {
            dirs: s.dirs.clone(),
            mkdir_log: s.mkdir_log.clone(),
            nodes: s.nodes.clone(),
            dir: s.dir.clone(),
            durable_dir: s.durable_dir.clone(),
            dir_log: s.dir_log.clone(),
            boot: s.boot,
            ..State::default()
        })
    }
}

/// A directory exists when it was made, when something lies in it, or when
/// it names no entry of a parent: a root (`/`), the working directory (`""`,
/// `.`) or `..`.
fn sim_dir_exists(s: &State, dir: &Path) -> bool {
    dir.file_name().is_none()
        || s.dirs.contains(dir)
        || s.dirs
            .iter()
            .chain(s.dir.keys())
            .any(|p| p.starts_with(dir) && p != dir)
}

/// `dir` without its `.` components, so that `""` and `.`, or `./a` and
/// `a`, compare equal.
fn same_dir(dir: &Path) -> PathBuf {
    dir.components()
        .filter(|c| *c != std::path::Component::CurDir)
        .collect()
}

fn snap(s: &State) -> Snapshot {
    Snapshot {
        dirs: s.dirs.clone(),
        mkdir_log: s.mkdir_log.clone(),
        nodes: s.nodes.clone(),
        durable_dir: s.durable_dir.clone(),
        dir_log: s.dir_log.clone(),
        boot: s.boot,
    }
}

/// Counts a call; fails it if it is the injected one; snapshots mutations.
fn enter(s: &mut State, mutating: bool) -> io::Result<()> {
    let n = s.calls;
    s.calls += 1;
    if s.fail_at
        .is_some_and(|(first, count)| (first..first + count).contains(&n))
        || s.fail_also.contains(&n)
    {
        return Err(io::Error::other(format!(
            "injected failure of I/O call {n}"
        )));
    }
    if mutating && s.record {
        let sn = snap(s);
        s.snapshots.push(sn);
    }
    Ok(())
}

#[derive(Debug)]
struct SimFile {
    vfs: SimVfs,
    node: usize,
    /// Opened [`OpenFlags::Read`]: mappable.
    read_only: bool,
}

/// A copy of a file's bytes standing in for a mapping.
#[derive(Debug)]
struct SimMapping(Vec<u8>);

impl crate::vfs::Mapping for SimMapping {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl StorageFile for SimFile {
    fn len(&self) -> io::Result<u64> {
        let mut s = self.vfs.lock();
        enter(&mut s, false)?;
        Ok(s.nodes[self.node].current.len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut s = self.vfs.lock();
        enter(&mut s, false)?;
        let c = &s.nodes[self.node].current;
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= c.len() as u64)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "short file"))?;
        buf.copy_from_slice(&c[offset as usize..end as usize]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut s = self.vfs.lock();
        enter(&mut s, true)?;
        let op = Pending::Write {
            off: offset,
            data: buf.to_vec(),
        };
        let n = &mut s.nodes[self.node];
        apply(&mut n.current, &op);
        n.pending.push(op);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.vfs.lock();
        enter(&mut s, true)?;
        let op = Pending::SetLen(len);
        let n = &mut s.nodes[self.node];
        apply(&mut n.current, &op);
        n.pending.push(op);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut s = self.vfs.lock();
        s.syncs += 1;
        let r = enter(&mut s, true);
        let n = &mut s.nodes[self.node];
        if r.is_err() {
            // As Linux after a failed write-back: the unsynced writes never
            // reach the disk, yet the cache keeps them and reports them
            // clean, so a later sync succeeds without them.
            n.pending.clear();
            return r;
        }
        for op in std::mem::take(&mut n.pending) {
            apply(&mut n.durable, &op);
        }
        Ok(())
    }

    fn try_lock(&self, _exclusive: bool) -> io::Result<bool> {
        Ok(true)
    }

    fn file_id(&self) -> io::Result<Option<(u64, u64)>> {
        let mut s = self.vfs.lock();
        enter(&mut s, false)?;
        Ok(Some((0, self.node as u64)))
    }

    /// Not an I/O call (it neither counts nor fails): a real `mmap` reads
    /// nothing. Bytes past the end of the file read as zeros (a real
    /// mapping faults there; the engine never reads them).
    fn map(&self, len: u64) -> Option<Box<dyn crate::vfs::Mapping>> {
        let s = self.vfs.lock();
        // A copy of a whole 4 GiB chunk's address range is no stand-in:
        // such a file is read through the trait.
        if !self.read_only || s.no_maps || len == 0 || len > 64 << 20 {
            return None;
        }
        let len = usize::try_from(len).ok()?;
        let c = &s.nodes[self.node].current;
        let mut b = c[..c.len().min(len)].to_vec();
        b.resize(len, 0);
        Some(Box::new(SimMapping(b)))
    }
}

impl Vfs for SimVfs {
    fn open(&self, path: &Path, flags: OpenFlags) -> io::Result<Box<dyn StorageFile>> {
        let creating = !matches!(flags, OpenFlags::Read | OpenFlags::ReadWrite);
        let mut s = self.lock();
        enter(&mut s, creating)?;
        let node = match (s.dir.get(path).copied(), flags) {
            (Some(_), OpenFlags::CreateNew) => {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, "exists"));
            }
            (Some(id), OpenFlags::CreateTruncate) => {
                let op = Pending::SetLen(0);
                let n = &mut s.nodes[id];
                apply(&mut n.current, &op);
                n.pending.push(op);
                id
            }
            (Some(id), _) => id,
            (None, OpenFlags::Read | OpenFlags::ReadWrite) => {
                return Err(io::Error::new(io::ErrorKind::NotFound, "no such file"));
            }
            (None, _) => {
                s.nodes.push(Node::default());
                let id = s.nodes.len() - 1;
                s.dir.insert(path.to_path_buf(), id);
                s.dir_log.push(DirOp::Link(path.to_path_buf(), id));
                id
            }
        };
        Ok(Box::new(SimFile {
            vfs: self.clone(),
            node,
            read_only: flags == OpenFlags::Read,
        }))
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        let mut s = self.lock();
        enter(&mut s, false)?;
        Ok(s.dir.contains_key(path))
    }

    /// Every file of the simulated disk is a plain one.
    fn is_plain_file(&self, path: &Path) -> io::Result<bool> {
        let mut s = self.lock();
        enter(&mut s, false)?;
        match s.dir.contains_key(path) {
            true => Ok(true),
            false => Err(io::Error::new(io::ErrorKind::NotFound, "no such file")),
        }
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut s = self.lock();
        enter(&mut s, true)?;
        if s.dir.remove(path).is_none() {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such file"));
        }
        s.dir_log.push(DirOp::Unlink(path.to_path_buf()));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.lock();
        enter(&mut s, true)?;
        let id = s
            .dir
            .remove(from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))?;
        s.dir.insert(to.to_path_buf(), id);
        s.dir_log.push(DirOp::Unlink(from.to_path_buf()));
        s.dir_log.push(DirOp::Link(to.to_path_buf(), id));
        Ok(())
    }

    fn link(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.lock();
        enter(&mut s, true)?;
        let id = *s
            .dir
            .get(from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))?;
        if s.dir.contains_key(to) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, "exists"));
        }
        s.dir.insert(to.to_path_buf(), id);
        s.dir_log.push(DirOp::Link(to.to_path_buf(), id));
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut s = self.lock();
        enter(&mut s, false)?;
        let names: Vec<String> = s
            .dir
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        if names.is_empty() && !s.dirs.contains(dir) {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such directory"));
        }
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.lock();
        enter(&mut s, true)?;
        let mut new: Vec<PathBuf> = dir
            .ancestors()
            .filter(|a| !sim_dir_exists(&s, a))
            .map(Path::to_path_buf)
            .collect();
        new.reverse();
        for d in new {
            s.dirs.insert(d.clone());
            s.mkdir_log.push(d);
        }
        Ok(())
    }

    fn dir_exists(&self, dir: &Path) -> io::Result<bool> {
        let mut s = self.lock();
        enter(&mut s, false)?;
        Ok(sim_dir_exists(&s, dir))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.lock();
        s.syncs += 1;
        s.dir_syncs += 1;
        enter(&mut s, true)?;
        // Every file entry (a simplification: tests sync the one directory
        // they use), and the directories made in this one.
        s.durable_dir = s.dir.clone();
        s.dir_log.clear();
        // `store` lies in `""`, `./a` in `.`: both the working directory.
        let dir = same_dir(dir);
        s.mkdir_log
            .retain(|d| d.parent().map(same_dir) != Some(dir.clone()));
        Ok(())
    }

    fn boot_id(&self) -> Option<Vec<u8>> {
        Some(self.lock().boot.to_le_bytes().to_vec())
    }
    fn shared_with_forks(&self) -> bool {
        false // in this process's memory: a forked child has its own copy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsynced_writes_can_be_lost_synced_ones_cannot() {
        let v = SimVfs::new();
        let p = Path::new("/d/f");
        let f = v.open(p, OpenFlags::CreateNew).unwrap();
        f.write_at(b"abc", 0).unwrap();
        f.sync().unwrap();
        v.sync_dir(Path::new("/d")).unwrap();
        f.write_at(b"XY", 1).unwrap();
        let sn = v.snapshot();
        assert_eq!(sn.crash_image(0).read_file(p).unwrap(), b"abc");
        assert_eq!(sn.crash_image(1).read_file(p).unwrap(), b"aXY");
        // A file whose creation was not made durable may vanish.
        v.open(Path::new("/d/g"), OpenFlags::CreateNew).unwrap();
        assert!(
            v.snapshot()
                .crash_image(0)
                .read_file(Path::new("/d/g"))
                .is_none()
        );
    }

    #[test]
    fn a_new_directory_lasts_once_its_parent_is_synced() {
        let v = SimVfs::new();
        let f = Path::new("/a/b/f");
        v.create_dir_all(Path::new("/a/b")).unwrap();
        assert!(v.dir_exists(Path::new("/a")).unwrap());
        assert!(!v.dir_exists(Path::new("/c")).unwrap());
        let h = v.open(f, OpenFlags::CreateNew).unwrap();
        h.sync().unwrap();
        v.sync_dir(Path::new("/a/b")).unwrap();
        // The file's entry is durable, but not `/a` nor `/a/b`.
        let cut = v.snapshot().crash_image(0);
        assert!(cut.read_file(f).is_none());
        assert!(!cut.dir_exists(Path::new("/a")).unwrap());
        v.sync_dir(Path::new("/")).unwrap();
        let cut = v.snapshot().crash_image(0);
        assert!(cut.dir_exists(Path::new("/a")).unwrap());
        assert!(!cut.dir_exists(Path::new("/a/b")).unwrap());
        assert!(cut.read_file(f).is_none());
        v.sync_dir(Path::new("/a")).unwrap();
        assert!(v.snapshot().crash_image(0).read_file(f).is_some());
        // A killed process loses nothing.
        v.create_dir_all(Path::new("/a/b/c")).unwrap();
        let killed = v.snapshot().kill_image();
        assert!(killed.dir_exists(Path::new("/a/b/c")).unwrap());
    }

    #[test]
    fn a_link_shares_the_file_and_never_replaces() {
        let v = SimVfs::new();
        let (a, b) = (Path::new("/d/a"), Path::new("/d/b"));
        let f = v.open(a, OpenFlags::CreateNew).unwrap();
        v.link(a, b).unwrap();
        assert_eq!(
            v.link(a, b).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        v.remove(a).unwrap();
        f.write_at(b"x", 0).unwrap();
        assert_eq!(v.read_file(b).unwrap(), b"x");
        assert!(v.read_file(a).is_none());
        // Unsynced: a power cut may lose the new name.
        assert!(v.snapshot().crash_image(0).read_file(b).is_none());
        v.sync_dir(Path::new("/d")).unwrap();
        assert!(v.snapshot().crash_image(0).read_file(b).is_some());
    }

    #[test]
    fn injected_failure_hits_exactly_one_call() {
        let v = SimVfs::new();
        v.fail_at(Some(1));
        let f = v.open(Path::new("/d/f"), OpenFlags::Create).unwrap();
        assert!(f.write_at(b"a", 0).is_err());
        f.write_at(b"a", 0).unwrap();
    }
}
