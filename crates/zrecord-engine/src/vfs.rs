//! The one seam for file I/O.
//!
//! Every byte the engine reads or writes goes through [`Vfs`] and
//! [`StorageFile`]. [`RealVfs`] is the production implementation over
//! `std::fs`; tests can supply a simulated one (crash images, injected
//! faults) through `EngineConfig::vfs`.

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// How to open a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenFlags {
    /// Read only; the file must exist.
    Read,
    /// Read and write; the file must exist.
    ReadWrite,
    /// Read and write; created if missing, kept if present.
    Create,
    /// Read and write; created if missing, truncated if present.
    CreateTruncate,
    /// Read and write; fails if the file exists.
    CreateNew,
}

/// A read-only view of a file's address range: chunks on the mmap gather
/// path, loc segments of a read-only handle.
pub trait Mapping: Send + Sync + Debug {
    /// The mapped bytes. Only ranges inside the file's current length may be
    /// touched (the mapping may extend past the end of the file).
    fn bytes(&self) -> &[u8];
}

/// One open file.
#[allow(clippy::len_without_is_empty)]
pub trait StorageFile: Send + Sync + Debug {
    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Fills `buf` from `offset`; a short file is an `UnexpectedEof` error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`, extending the file if needed.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Writes the buffers back to back starting at `offset`.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let mut off = offset;
        for b in bufs {
            self.write_at(b, off)?;
            off += b.len() as u64;
        }
        Ok(())
    }
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data durable.
    fn sync(&self) -> io::Result<()>;
    /// Takes a non-blocking advisory lock; `Ok(false)` when another holder
    /// prevents it. The lock is released when the file is dropped.
    fn try_lock(&self, exclusive: bool) -> io::Result<bool>;
    /// The file itself (device and inode on Unix): equal for two handles
    /// exactly when they are one file, whatever names they were opened by.
    /// `None` when the backend cannot tell; a create then never takes over
    /// what an interrupted one left (see `Engine::create`).
    fn file_id(&self) -> io::Result<Option<(u64, u64)>> {
        Ok(None)
    }
    /// Maps `len` bytes of address space over the file, if the backend can.
    fn map(&self, _len: u64) -> Option<Box<dyn Mapping>> {
        None
    }
}

/// A file that knows whether it was written since its last successful
/// sync, so that making a store durable can skip its clean files: an
/// fsync costs a device cache flush (about 0.1 ms on this project's VM)
/// even when there is nothing to write. New handles count as written
/// (another process, or this open's recovery, may have left pages).
#[derive(Debug)]
pub(crate) struct Tracked {
    inner: Box<dyn StorageFile>,
    dirty: AtomicBool,
}

impl Tracked {
    pub(crate) fn new(inner: Box<dyn StorageFile>) -> Tracked {
        Tracked {
            inner,
            dirty: AtomicBool::new(true),
        }
    }

    /// Syncs the file if anything was written to it since its last
    /// successful sync. Cleared before the sync: a write racing it marks
    /// the file again (writers and syncs are serialised by the engine, so
    /// none does).
    pub(crate) fn sync_if_dirty(&self) -> io::Result<()> {
        if self.dirty.swap(false, Ordering::AcqRel) {
            self.inner
                .sync()
                .inspect_err(|_| self.dirty.store(true, Ordering::Release))
        } else {
            Ok(())
        }
    }

    fn wrote<T>(&self, r: io::Result<T>) -> io::Result<T> {
        // A failed write may have written part of its bytes.
        self.dirty.store(true, Ordering::Release);
        r
    }
}

impl StorageFile for Tracked {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.wrote(self.inner.write_at(buf, offset))
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.wrote(self.inner.write_vectored_at(bufs, offset))
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.wrote(self.inner.set_len(len))
    }
    fn sync(&self) -> io::Result<()> {
        self.dirty.store(false, Ordering::Release);
        self.inner
            .sync()
            .inspect_err(|_| self.dirty.store(true, Ordering::Release))
    }
    fn try_lock(&self, exclusive: bool) -> io::Result<bool> {
        self.inner.try_lock(exclusive)
    }
    fn file_id(&self) -> io::Result<Option<(u64, u64)>> {
        self.inner.file_id()
    }
    fn map(&self, len: u64) -> Option<Box<dyn Mapping>> {
        self.inner.map(len)
    }
}

/// A file system: opens files and edits directories.
pub trait Vfs: Send + Sync + Debug {
    /// Opens (or creates) a file.
    fn open(&self, path: &Path, flags: OpenFlags) -> io::Result<Box<dyn StorageFile>>;
    /// Whether a file exists.
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Renames a file, replacing the target.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Gives the file `from` a second name, `to` (a hard link), failing with
    /// `AlreadyExists` when `to` exists: never replacing it. `create`
    /// publishes `meta.zr` this way, already locked, so that of two creators
    /// exactly one gets the name and no opener sees it unlocked. A file
    /// system without hard links fails with `PermissionDenied` or
    /// `Unsupported` (as Linux does).
    fn link(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Names of the entries of a directory (`NotFound` if it does not exist).
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// `mkdir -p`. It need not make the new directories durable: `create`
    /// syncs the parent of each directory on the path afterwards.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Whether `dir` exists as a directory. The default asks
    /// [`Vfs::list_dir`], which fails with `NotFound` for a missing one.
    fn dir_exists(&self, dir: &Path) -> io::Result<bool> {
        match self.list_dir(dir) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
    /// Makes a directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Whether `path` itself (not what a symlink there points to) is a
    /// regular file: not a symlink, directory, FIFO or device. `NotFound`
    /// when nothing has that name. `false` when the backend cannot tell; a
    /// create then never takes over what an interrupted one left (see
    /// `Engine::create`), which would otherwise write through such a name.
    fn is_plain_file(&self, _path: &Path) -> io::Result<bool> {
        Ok(false)
    }
    /// An id that changes whenever the machine boots (and so whenever the
    /// page cache was lost); `None` when the system offers none.
    fn boot_id(&self) -> Option<Vec<u8>>;
    /// Whether a process forked from this one reaches the same files (and
    /// so sees a compaction here move bytes under its inherited handles).
    /// True unless the files live in this process's memory alone.
    fn shared_with_forks(&self) -> bool {
        true
    }
}

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealVfs;

/// Runs `open`; when the process is out of file descriptors (`EMFILE`)
/// below its hard limit, raises the soft limit to the hard one (as Go's
/// runtime does at start) and tries once more. A handle keeps one file
/// open per 4 GiB chunk, so a store of a few TiB outgrows the soft limit of
/// 1024 that many systems start processes with, where the hard limit is
/// far higher.
fn open_retrying(open: impl Fn() -> io::Result<File>) -> io::Result<File> {
    match open() {
        Err(e) if e.raw_os_error() == Some(libc::EMFILE) && raise_open_file_limit() => open(),
        r => r,
    }
}

/// Raises the soft limit on open files to the hard one (on macOS at most
/// `OPEN_MAX`, 10240, above which it refuses a soft limit); whether it
/// raised it.
fn raise_open_file_limit() -> bool {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the `rlimit` we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return false;
    }
    #[cfg(target_vendor = "apple")]
    let want = l.rlim_max.min(10240);
    #[cfg(not(target_vendor = "apple"))]
    let want = l.rlim_max;
    if l.rlim_cur >= want {
        return false;
    }
    let raised = libc::rlimit {
        rlim_cur: want,
        rlim_max: l.rlim_max,
    };
    // SAFETY: a valid `rlimit` whose soft limit is at most the hard one.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 }
}

/// Makes `f`'s writes durable (its data only, or its metadata too), as the
/// engine does for its own files; the importers' `.npy` writer uses it too.
/// On macOS std asks for `F_FULLFSYNC`, a flush of the drive's cache; file
/// systems without it (SMB shares, some FUSE ones) answer `ENOTSUP` or
/// `EINVAL`, and there a plain `fsync` is the most there is.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let f = std::fs::File::create(dir.path().join("x")).unwrap();
/// zrecord_engine::vfs::sync_file(&f, false).unwrap();
/// ```
pub fn sync_file(f: &File, data_only: bool) -> io::Result<()> {
    let r = if data_only {
        f.sync_data()
    } else {
        f.sync_all()
    };
    #[cfg(target_vendor = "apple")]
    if let Err(e) = &r
        && matches!(
            e.raw_os_error(),
            Some(libc::ENOTSUP | libc::EOPNOTSUPP | libc::EINVAL)
        )
    {
        use std::os::fd::AsRawFd;
        loop {
            // SAFETY: fsync of a descriptor `f` owns for the whole call.
            if unsafe { libc::fsync(f.as_raw_fd()) } == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
    r
}

#[derive(Debug)]
struct RealFile {
    file: File,
}

#[derive(Debug)]
struct RealMapping(memmap2::Mmap);

impl Mapping for RealMapping {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl StorageFile for RealFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // pwritev takes at most IOV_MAX (1024) buffers; callers group by
        // bytes, this loop also handles short writes.
        let mut idx = 0usize;
        let mut skip = 0usize; // bytes of bufs[idx] already written
        let mut off = offset;
        while idx < bufs.len() {
            let mut iov: Vec<libc::iovec> = Vec::with_capacity((bufs.len() - idx).min(1024));
            for (k, b) in bufs[idx..].iter().take(1024).enumerate() {
                let s = if k == 0 { &b[skip..] } else { &b[..] };
                iov.push(libc::iovec {
                    iov_base: s.as_ptr() as *mut libc::c_void,
                    iov_len: s.len(),
                });
            }
            let off_t = libc::off_t::try_from(off)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
            // SAFETY: every iovec points into a live `&[u8]` borrowed for the
            // duration of this call (pwritev only reads from them), the count
            // matches the vector's length, and the fd is owned by `self.file`.
            let n = unsafe {
                libc::pwritev(
                    self.file.as_raw_fd(),
                    iov.as_ptr(),
                    iov.len() as libc::c_int,
                    off_t,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 && iov.iter().any(|v| v.iov_len > 0) {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "pwritev wrote 0 bytes",
                ));
            }
            let mut n = n as usize;
            off += n as u64;
            // Advance over the fully written buffers.
            while idx < bufs.len() {
                let rest = bufs[idx].len() - skip;
                if n >= rest {
                    n -= rest;
                    idx += 1;
                    skip = 0;
                } else {
                    skip += n;
                    break;
                }
            }
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync(&self) -> io::Result<()> {
        sync_file(&self.file, true)
    }

    fn try_lock(&self, exclusive: bool) -> io::Result<bool> {
        let r = if exclusive {
            self.file.try_lock()
        } else {
            self.file.try_lock_shared()
        };
        match r {
            Ok(()) => Ok(true),
            Err(std::fs::TryLockError::WouldBlock) => Ok(false),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }

    fn file_id(&self) -> io::Result<Option<(u64, u64)>> {
        use std::os::unix::fs::MetadataExt;
        let m = self.file.metadata()?;
        Ok(Some((m.dev(), m.ino())))
    }

    fn map(&self, len: u64) -> Option<Box<dyn Mapping>> {
        let len = usize::try_from(len).ok()?;
        if len == 0 {
            return None;
        }
        // SAFETY: the mapping is read-only and shared. In a chunk the engine
        // only reads ranges that a validated, committed location entry
        // points to, which lie inside the file (checked on open against the
        // file's length, and written before the commit for appends);
        // compaction truncates only under `&mut Engine`, when no gather can
        // run. A loc segment is mapped only by a read-only handle, over the
        // entries its open found the file to hold, and read one whole entry
        // at a time into a copy that is validated before use (so bytes
        // rewritten under it are an error, not an out-of-range read).
        // Another process truncating either file would fault the reader
        // (SIGBUS), which the store lock excludes for cooperating processes.
        let m = unsafe { memmap2::MmapOptions::new().len(len).map(&self.file) }.ok()?;
        Some(Box::new(RealMapping(m)))
    }
}

impl Vfs for RealVfs {
    fn open(&self, path: &Path, flags: OpenFlags) -> io::Result<Box<dyn StorageFile>> {
        let mut o = OpenOptions::new();
        match flags {
            OpenFlags::Read => o.read(true),
            OpenFlags::ReadWrite => o.read(true).write(true),
            OpenFlags::Create => o.read(true).write(true).create(true),
            OpenFlags::CreateTruncate => o.read(true).write(true).create(true).truncate(true),
            OpenFlags::CreateNew => o.read(true).write(true).create_new(true),
        };
        // Without blocking: a FIFO (or device) under a store file's name
        // would hold `open` until a writer or reader appeared, hanging an
        // open or a probe for good. On a regular file the flag changes
        // nothing (open(2)); anything else is refused once opened.
        o.custom_flags(libc::O_NONBLOCK);
        let file = open_retrying(|| o.open(path))?;
        let kind = file.metadata()?.file_type();
        if kind.is_dir() {
            // What a read or a write-mode open of it reports.
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        }
        if !kind.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file (a FIFO, socket or device)",
            ));
        }
        Ok(Box::new(RealFile { file }))
    }

    fn is_plain_file(&self, path: &Path) -> io::Result<bool> {
        Ok(std::fs::symlink_metadata(path)?.file_type().is_file())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn link(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::hard_link(from, to)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in std::fs::read_dir(dir)? {
            names.push(e?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn dir_exists(&self, dir: &Path) -> io::Result<bool> {
        match std::fs::metadata(dir) {
            Ok(m) => Ok(m.is_dir()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        sync_file(&open_retrying(|| File::open(dir))?, false)
    }

    #[cfg(not(target_os = "macos"))]
    fn boot_id(&self) -> Option<Vec<u8>> {
        // Linux: a random UUID drawn at each boot (the host's, inside a
        // container, which is the kernel whose page cache holds the writes).
        let b = std::fs::read("/proc/sys/kernel/random/boot_id").ok()?;
        let id = b.trim_ascii();
        (!id.is_empty()).then(|| id.to_vec())
    }

    #[cfg(target_os = "macos")]
    fn boot_id(&self) -> Option<Vec<u8>> {
        // macOS: the kernel's boot session UUID, a NUL-terminated string
        // drawn at each boot.
        let mut b = [0u8; 128];
        let mut len = b.len();
        // SAFETY: the name is NUL-terminated; `b` has `len` writable bytes
        // and the kernel writes at most `len` of them, storing the count in
        // `len`; no new value is set (null pointer, 0 bytes).
        let r = unsafe {
            libc::sysctlbyname(
                c"kern.bootsessionuuid".as_ptr(),
                b.as_mut_ptr().cast(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        if r != 0 {
            return None;
        }
        let b = &b[..len.min(b.len())];
        let id = b.split(|&c| c == 0).next().unwrap_or_default().trim_ascii();
        (!id.is_empty()).then(|| id.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn the_boot_id_is_stable_within_a_boot() {
        let a = RealVfs.boot_id().expect("Linux has a boot id");
        assert_eq!(a.len(), 36, "a UUID: {:?}", String::from_utf8_lossy(&a));
        assert_eq!(RealVfs.boot_id(), Some(a));
    }

    #[test]
    fn dir_exists_is_true_for_directories_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(RealVfs.dir_exists(dir.path()).unwrap());
        assert!(!RealVfs.dir_exists(&file).unwrap());
        assert!(
            !RealVfs
                .dir_exists(&dir.path().join("missing/deeper"))
                .unwrap()
        );
    }

    #[test]
    fn vectored_write_lands_back_to_back() {
        let dir = tempfile::tempdir().unwrap();
        let f = RealVfs
            .open(&dir.path().join("f"), OpenFlags::CreateNew)
            .unwrap();
        let bufs: Vec<Vec<u8>> = (0..2000u32).map(|i| vec![(i % 251) as u8; 3]).collect();
        let refs: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
        f.write_vectored_at(&refs, 5).unwrap();
        let mut out = vec![0u8; 6000];
        f.read_at(&mut out, 5).unwrap();
        assert_eq!(out, bufs.concat());
        assert_eq!(f.len().unwrap(), 6005);
    }

    #[test]
    fn a_link_never_replaces_and_a_lock_follows_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let f = RealVfs.open(&a, OpenFlags::CreateNew).unwrap();
        assert!(f.try_lock(true).unwrap());
        RealVfs.link(&a, &b).unwrap();
        let e = RealVfs.link(&a, &b).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        RealVfs.remove(&a).unwrap();
        // The lock taken under the first name holds the file under the second.
        let g = RealVfs.open(&b, OpenFlags::Read).unwrap();
        assert!(!g.try_lock(false).unwrap());
        drop(f);
        assert!(g.try_lock(false).unwrap());
    }
}
