//! `writeback.zr`: the files whose write-back a failed fsync may have lost.
//!
//! Linux reports a failed write-back once, to the fsync that meets it, and
//! then calls the pages clean: the page cache keeps the new bytes, the disk
//! may keep the old ones, and a later fsync of the file (another handle's,
//! on this boot) writes nothing. An open on the same boot reads the cache
//! and builds on it. After a compaction whose fsync of a loc segment
//! failed, a reopen saw the moved records' new entries, a second compaction
//! wrote over their old places, and a power cut brought back the old
//! entries (the disk's) pointing into those overwritten bytes: a store that
//! did not open.
//!
//! So a handle whose fsync of a chunk or a loc segment fails names the file
//! here, never fsynced (the record only matters while the page cache lasts,
//! that is on this boot), and a read-write open on the boot that wrote it
//! first rewrites each named file with the bytes it reads (the cache's),
//! fsyncs it, and then removes this file. Until that fsync the disk holds
//! the file as before the failed call, or a mix of the two: the failed call
//! wrote nothing the state before it needed (a compaction's entries only
//! ever point at bytes made durable first; appended bytes lie past the
//! durable header), so either is a state a power cut may leave. `meta.zr`,
//! `intent.zr` and `durable.zr` need no entry: an open rewrites them itself
//! before relying on them. A read-only open ignores the file (it never
//! writes in place), and so does one on another boot or one that cannot
//! parse it (a power cut tore it, and the cache it spoke for is gone).
//!
//! Layout (little-endian): magic `ZWBK` u32, version u8 (1), boot id length
//! u8, 2 zero bytes, file count u32, the boot id, per file its kind u8 (1
//! chunk, 2 loc segment) and number u64, FNV-1a 64 of all preceding bytes.
//! The reference ignores files it does not know.

use crate::format;
use crate::intent::fnv;
use crate::vfs::{OpenFlags, Vfs};
use std::collections::BTreeSet;
use std::io;
use std::path::Path;

/// File name of the record.
pub const WRITEBACK_FILE: &str = "writeback.zr";
const MAGIC: u32 = 0x4B42_575A;
const VERSION: u8 = 1;
const PREFIX: usize = 12;
/// Most files one record names (a store has far fewer write handles open
/// at a failure; a longer count is hostile).
const MAX_FILES: usize = 1 << 16;

/// A store file the record names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum StoreFile {
    Chunk(u64),
    Loc(u64),
}

impl StoreFile {
    /// The file `name` is, if a chunk or a loc segment.
    pub fn from_name(name: &str) -> Option<StoreFile> {
        format::parse_numbered(name, "chunk")
            .map(StoreFile::Chunk)
            .or_else(|| format::parse_numbered(name, "loc").map(StoreFile::Loc))
    }

    fn name(self) -> String {
        match self {
            StoreFile::Chunk(id) => format::chunk_name(id),
            StoreFile::Loc(id) => format::loc_name(id),
        }
    }
}

/// What `writeback.zr` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LostWrites {
    /// The boot id of the handle whose fsync failed (empty: none known).
    pub boot: Vec<u8>,
    /// The files whose cached bytes the disk may lack.
    pub files: BTreeSet<StoreFile>,
}

impl LostWrites {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let boot = &self.boot[..self.boot.len().min(255)];
        let mut b = Vec::with_capacity(PREFIX + boot.len() + 9 * self.files.len() + 8);
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.push(VERSION);
        b.push(boot.len() as u8);
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&(self.files.len() as u32).to_le_bytes());
        b.extend_from_slice(boot);
        for f in &self.files {
            let (kind, id) = match *f {
                StoreFile::Chunk(id) => (1u8, id),
                StoreFile::Loc(id) => (2u8, id),
            };
            b.push(kind);
            b.extend_from_slice(&id.to_le_bytes());
        }
        let h = fnv(&b);
        b.extend_from_slice(&h.to_le_bytes());
        b
    }

    /// Parses the record (bytes after its checksum are ignored: a longer
    /// record of an earlier boot that a rewrite did not cut yet); `None`
    /// for anything torn, truncated or foreign.
    pub fn decode(b: &[u8]) -> Option<LostWrites> {
        let prefix = b.get(..PREFIX)?;
        if u32::from_le_bytes(prefix[0..4].try_into().ok()?) != MAGIC
            || prefix[4] != VERSION
            || prefix[6..8] != [0, 0]
        {
            return None;
        }
        let boot_len = usize::from(prefix[5]);
        let count = u32::from_le_bytes(prefix[8..12].try_into().ok()?) as usize;
        if count > MAX_FILES {
            return None;
        }
        let end = PREFIX + boot_len + 9 * count;
        let (body, sum) = (b.get(..end)?, b.get(end..end + 8)?);
        if fnv(body).to_le_bytes() != sum {
            return None;
        }
        let mut files = BTreeSet::new();
        for e in body[PREFIX + boot_len..].chunks_exact(9) {
            let id = u64::from_le_bytes(e[1..9].try_into().ok()?);
            files.insert(match e[0] {
                1 => StoreFile::Chunk(id),
                2 => StoreFile::Loc(id),
                _ => return None,
            });
        }
        Some(LostWrites {
            boot: body[PREFIX..PREFIX + boot_len].to_vec(),
            files,
        })
    }

    /// Whether the record speaks for the page cache of boot `boot`: the one
    /// that wrote it, or either side without a boot id (a reboot cannot be
    /// told apart, and rewriting a file with its own durable bytes is only
    /// time).
    fn this_boot(&self, boot: Option<&[u8]>) -> bool {
        self.boot.is_empty() || boot.is_none_or(|b| b == self.boot)
    }
}

/// For an error that poisons a handle of the store at `dir`: when it is a
/// failed fsync of a chunk or a loc segment, adds the file to `dir`'s
/// record, unsynced. Best effort: the caller reports the failure, which
/// stands whatever this does.
pub(crate) fn note(vfs: &dyn Vfs, dir: &Path, boot: Option<&[u8]>, e: &crate::Error) {
    if let crate::Error::Io {
        path, op: "sync", ..
    } = e
    {
        record(vfs, dir, boot, path);
    }
}

fn record(vfs: &dyn Vfs, dir: &Path, boot: Option<&[u8]>, path: &Path) {
    let Some(file) = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(StoreFile::from_name)
    else {
        return;
    };
    let Ok(f) = vfs.open(&dir.join(WRITEBACK_FILE), OpenFlags::Create) else {
        return;
    };
    // (A record that cannot be read is replaced: best effort, as above.)
    let mut rec = read(&*f)
        .ok()
        .flatten()
        .filter(|r| r.boot.as_slice() == boot.unwrap_or_default())
        .unwrap_or_else(|| LostWrites {
            boot: boot.unwrap_or_default().to_vec(),
            files: BTreeSet::new(),
        });
    if !rec.files.insert(file) {
        return;
    }
    // Written over the old bytes, then cut: a kill in between leaves the
    // new record with bytes after it, which parse as it.
    let b = rec.encode();
    if f.write_at(&b, 0).is_ok() {
        let _ = f.set_len(b.len() as u64);
    }
}

/// The record `f` holds: `Ok(None)` for bytes that do not parse (torn,
/// truncated, foreign), an error where they could not be read.
fn read(f: &dyn crate::vfs::StorageFile) -> io::Result<Option<LostWrites>> {
    let n = f.len()?;
    let max = (PREFIX + 255 + 9 * MAX_FILES + 8) as u64;
    let mut b = vec![0u8; n.min(max) as usize];
    f.read_at(&mut b, 0)?;
    Ok(LostWrites::decode(&b))
}

/// For a read-write open holding the store's lock, `names` listing `dir`
/// with `WRITEBACK_FILE` among them: rewrites each file a record of this
/// boot names with its own bytes and fsyncs it, then removes the record
/// (see the module docs). An error leaves the record for the next open.
pub(crate) fn repair(vfs: &dyn Vfs, dir: &Path, names: &[String]) -> crate::Result<()> {
    let path = dir.join(WRITEBACK_FILE);
    let f = vfs
        .open(&path, OpenFlags::Read)
        .map_err(|e| crate::Error::io(&path, "open", e))?;
    // A record that cannot be read fails the open and stays: taken for a
    // torn one, it would be removed unused, and the files it names then
    // trusted.
    let rec = read(&*f).map_err(|e| crate::Error::io(&path, "read", e))?;
    if let Some(rec) = rec
        && rec.this_boot(vfs.boot_id().as_deref())
    {
        for file in &rec.files {
            let name = file.name();
            if names.contains(&name) {
                let p = dir.join(&name);
                rewrite(vfs, &p).map_err(|e| crate::Error::io(&p, "rewrite", e))?;
            }
        }
    }
    drop(f);
    // No directory sync: a power cut before the removal is durable leaves a
    // record of an earlier boot, which opens ignore.
    match vfs.remove(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(crate::Error::io(&path, "remove", e)),
        _ => Ok(()),
    }
}

/// Writes the file's bytes back over themselves and fsyncs it.
fn rewrite(vfs: &dyn Vfs, path: &Path) -> io::Result<()> {
    const PIECE: u64 = 1 << 20;
    let f = vfs.open(path, OpenFlags::ReadWrite)?;
    let len = f.len()?;
    let mut buf = vec![0u8; len.min(PIECE) as usize];
    let mut off = 0;
    while off < len {
        let n = (len - off).min(PIECE) as usize;
        f.read_at(&mut buf[..n], off)?;
        f.write_at(&buf[..n], off)?;
        off += n as u64;
    }
    f.sync()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> LostWrites {
        LostWrites {
            boot: b"boot-1".to_vec(),
            files: [StoreFile::Loc(1), StoreFile::Chunk(0), StoreFile::Chunk(7)]
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn round_trips_and_ignores_trailing_bytes() {
        let r = rec();
        let mut b = r.encode();
        assert_eq!(LostWrites::decode(&b), Some(r.clone()));
        b.extend_from_slice(&[0xAB; 40]);
        assert_eq!(LostWrites::decode(&b), Some(r));
    }

    #[test]
    fn rejects_every_flip_and_cut() {
        let b = rec().encode();
        for i in 0..b.len() {
            assert_eq!(LostWrites::decode(&b[..i]), None, "cut at {i}");
            for bit in 0..8 {
                let mut c = b.clone();
                c[i] ^= 1 << bit;
                assert_eq!(LostWrites::decode(&c), None, "flip {i}.{bit}");
            }
        }
    }

    #[test]
    fn a_hostile_count_is_refused_before_reading() {
        let mut b = rec().encode();
        b[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(LostWrites::decode(&b), None);
    }

    #[test]
    fn speaks_for_its_own_boot_or_where_none_is_known() {
        let r = rec();
        assert!(r.this_boot(Some(b"boot-1")));
        assert!(!r.this_boot(Some(b"boot-2")));
        assert!(r.this_boot(None));
        let none = LostWrites {
            boot: Vec::new(),
            ..r
        };
        assert!(none.this_boot(Some(b"boot-2")));
    }
}
