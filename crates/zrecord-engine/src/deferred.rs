//! Deferred durability: appends and deletes that commit to the page cache
//! and become durable at the next `sync()`.
//!
//! Under [`Durability::EachAppend`] an append fsyncs its payloads and loc
//! entries before it writes the header, then the header: durable on return,
//! at three fsyncs per call. Under [`Durability::AtSync`] (the default) an
//! append writes payloads, loc entries and the header in that order and
//! syncs nothing, as loaderx 1.7.2 does. A killed process loses nothing that
//! returned, since the page cache outlives it; but after a power cut the
//! header on disk may name bytes that never reached it, and without
//! checksums in the format an open cannot tell.
//!
//! The marker file `durable.zr` closes that gap, in one of two forms.
//!
//! While the changes since the last durable point are appends alone (the
//! common case: a sync after each batch), `meta.zr` is not written until
//! the sync: it keeps the durable header, and each append writes its
//! header to `durable.zr` instead (the *pending appends* record: the
//! durable header it was appended to, the new header and the boot id),
//! syncing nothing. The first such append creates the file, without a
//! directory sync. `sync()` fsyncs the files the appends wrote, the
//! directory if they created files, then writes the header to `meta.zr`
//! and fsyncs it (the three fsyncs loaderx 1.7.2 makes), and zeroes the
//! record without an fsync (the file is kept, see below). An open on the boot that wrote the
//! record, with `meta.zr` still holding the durable header it names,
//! takes the appends' header (a killed process loses nothing; a
//! read-write open then syncs them as the writer's sync would). Any other
//! open keeps `meta.zr`: after a power cut (another boot) it is durable
//! and names only durable bytes, and a `meta.zr` that moved on was
//! written by a later writer (loaderx 1.7.2 ignores the marker), whose
//! state stands. So a record left behind by a zeroing that a power cut
//! undid is harmless, and so is a torn one. A failed sync writes the
//! durable header back and removes the record (the kernel may have
//! dropped the pages a failed write-back named, and call them clean).
//!
//! Once a delete is deferred, the handle is *armed* instead, until the
//! next sync: the appends before the delete are synced, and it writes
//! the marker: the header that is durable now, plus the kernel's boot id,
//! unsynced (the first flush fsyncs it, then the directory, before any
//! write in place, so it is durable before anything it protects). While it
//! exists, `meta.zr` may run ahead of the disk (appends write it in
//! place). `sync()` fsyncs every file written since and ends the marker,
//! durably: it zeroes the file's first sector (the fixed part; a power cut
//! never tears a sector) and fsyncs it. The handle keeps the file for its
//! next marker or pending appends record (removing it at close), so a
//! delete and a sync cost no directory fsync after the first: the marker,
//! the loc segment, `meta.zr`, the zeroed sector. A marker written into a
//! kept file draws a new *salt*, which seeds its log's checksums, so the
//! records of the file's earlier markers that follow it never pass as its
//! own. An open that finds a marker
//! compares boot ids: the same boot means the page cache that holds every
//! write is still there, so `meta.zr` stands; another boot (or none known)
//! means a power cut may have dropped writes, so the store rolls back to the
//! marker's header, whose bytes were durable before it was written. A
//! read-write open then makes the outcome durable and removes the marker.
//! A marker that fails its checksum was torn before it was durable, so no
//! deferred append had started: `meta.zr` stands. The reference ignores
//! unknown files.
//!
//! Deletes defer too. A delete rewrites entries the marker's header names,
//! so a roll-back must be able to put them back: a deferred delete appends
//! a record to the marker (the entries it is the first to overwrite since
//! the marker, the header before it, and the entries and header it
//! writes), unsynced, and writes nothing in place. The next flush (an
//! append, a sync, a verify) fsyncs the log (with the marker, and then the
//! directory, when the marker is new), writes the pending deletes in
//! place and appends a short *done* record (not fsynced): a loop of
//! single-index deletes costs one fsync. A roll-back after a power cut
//! restores the first logged entry of every slot below the marker's
//! length; an open on the same boot finishes the deletes after the last
//! *done* record (a killed process's) from the entries they name, when
//! `meta.zr` and their slots still hold the state they were logged against
//! (loaderx 1.7.2, which ignores the marker, may have written since).
//!
//! The armed marker's layout (little-endian): magic `ZDUR` u32, version u8
//! (3; 1 from earlier builds, without the salt, still read), boot id length
//! u8, 2 zero bytes, the durable `meta.zr` (32 bytes), the salt u64, the
//! boot id, FNV-1a 64 of all preceding bytes; then the log, records of:
//! body length u32, body, FNV-1a 64 of the salt's 8 bytes (none in version
//! 1), the length and the body. A delete's body: kind u8 (1), 3 zero
//! bytes, undo count u32, redo count u32, 4 zero bytes, the header before
//! and the header after the delete (32 bytes each), then that many (slot
//! u64, entry 16 bytes) pairs, undo first. A done record's body: kind 2, 3
//! zero bytes. The log ends at the first record that fails its checksum.
//!
//! The pending appends record: magic `ZDUR` u32, version u8 (2), boot id
//! length u8, 2 zero bytes, the durable header (32 bytes, what `meta.zr`
//! holds), the appends' header (32 bytes), the boot id, FNV-1a 64 of all
//! preceding bytes. Rewritten in place by each append.

use crate::format::{Header, LOC_SIZE, Loc, META_SIZE};
use crate::intent::{fnv, fnv_parts};
use crate::vfs::StorageFile;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// File name of the marker.
pub const DURABLE_FILE: &str = "durable.zr";
/// The most bytes the marker and its log take: a deferred delete whose
/// record would take the file past it makes the store durable first (which
/// ends the log) and starts a new marker.
pub(crate) const MAX_MARKER_BYTES: u64 = 16 << 20;
/// Deletes of more records than this go through `intent.zr`, durable on
/// return (their log record would be large, and their fsyncs are few per
/// record).
pub(crate) const MAX_DEFERRED_DELETE: u64 = 8192;
const MAGIC: u32 = 0x5255_445A;
const VERSION: u8 = 1;
/// The version byte of a [`PendingAppends`] record.
const VERSION_PENDING: u8 = 2;
/// The version byte of an armed marker whose log checksums are salted.
const VERSION_SALTED: u8 = 3;
const PREFIX: usize = 8;

/// When an append becomes durable, i.e. survives a power cut.
///
/// Either way an append that returned survives its process being killed,
/// and a power cut leaves a store that opens to a committed state, never a
/// broken one. The setting belongs to a handle, not to the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Durable at the next [`Engine::sync`](crate::Engine::sync),
    /// [`Engine::close`](crate::Engine::close) or compaction (and, best
    /// effort, when the handle is dropped). An append syncs nothing, nor
    /// does a delete of up to 8,192 records (it is logged in `durable.zr`,
    /// and the next append or sync writes it in place after one fsync of
    /// the log, and one of the directory for a new marker); a power cut before the sync rolls the store back to the
    /// last durable point, undoing the deletes since as well. So does any reboot between a killed writer and the next open,
    /// and an open on another host, since neither can trust the page cache.
    /// A failed sync also goes back to that point (and says so). loaderx
    /// 1.7.2 defers the same way, without the roll-back. On a system without
    /// a boot id (not Linux) appends behave as [`Durability::EachAppend`],
    /// since a reboot cannot be told apart.
    #[default]
    AtSync,
    /// Durable on return: an append fsyncs its payloads and loc entries,
    /// writes the header and fsyncs it. Three fsyncs per call, two of them
    /// concurrent (about 0.2 ms here): batch records into few calls. A
    /// delete goes through `intent.zr`, about five fsyncs per call.
    EachAppend,
}

impl Durability {
    /// The name used in the Python API: `"each_append"` or `"at_sync"`.
    pub fn name(self) -> &'static str {
        match self {
            Durability::EachAppend => "each_append",
            Durability::AtSync => "at_sync",
        }
    }

    /// The inverse of [`Durability::name`].
    pub fn from_name(s: &str) -> Option<Durability> {
        match s {
            "each_append" => Some(Durability::EachAppend),
            "at_sync" => Some(Durability::AtSync),
            _ => None,
        }
    }
}

/// The content of `durable.zr`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Marker {
    /// The header whose records were durable when the marker was written.
    pub header: Header,
    /// The boot id at that time (empty when the system has none).
    pub boot: Vec<u8>,
    /// The salt of the log's checksums (version 3; `None`: version 1,
    /// unsalted). A handle that keeps its file draws a new one per marker,
    /// so records of an earlier marker left past the new log never pass.
    pub salt: Option<u64>,
    /// The deferred deletes since (the valid prefix of the log).
    pub log: Vec<LogRecord>,
}

/// One record of the delete log that follows the marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LogRecord {
    /// A deferred delete, logged (and fsynced before its in-place writes).
    Delete {
        /// Entries as they were before this delete overwrote them, for the
        /// slots first overwritten since the marker (a roll-back's).
        undo: Vec<(u64, Loc)>,
        /// The header before the delete (in memory: `meta.zr` holds it
        /// when no delete before this one is pending).
        prev: Header,
        /// The header the delete writes.
        header: Header,
        /// The entries it writes (an interrupted delete's roll-forward).
        redo: Vec<(u64, Loc)>,
    },
    /// Every write of the delete before it was issued.
    Done,
}

/// The appending end of `durable.zr`'s log, held by the read-write handle
/// that wrote the marker.
#[derive(Debug)]
pub(crate) struct DeleteLog {
    pub file: Box<dyn StorageFile>,
    pub path: PathBuf,
    /// Where the next record goes.
    pub end: u64,
    /// The entry logged for roll-back per slot (the first one; later ones
    /// are not logged).
    pub undo: BTreeMap<u64, Loc>,
    /// Whether a record holding undo entries (or the fixed part) has not
    /// been fsynced yet.
    pub unsynced: bool,
    /// Whether the marker's directory entry may not be durable yet: a new
    /// marker is written unsynced, and the first flush, before any write in
    /// place, fsyncs it with its log, then the directory.
    pub new_file: bool,
    /// Entries of the deletes logged since the last flush, in order, not
    /// yet written in place.
    pub pending: Vec<(u64, Loc)>,
    /// The header the last of them leaves, not yet written.
    pub pending_header: Option<Header>,
    /// Whether the sync that ends the log may keep the file for this
    /// handle's next marker (see [`KeptFile`]): it armed the file itself,
    /// so no bytes past the log are another writer's.
    pub reusable: bool,
    /// Its marker's salt, for the records appended.
    pub salt: Option<u64>,
}

/// A `durable.zr` a handle keeps between durable points, instead of
/// removing it at each sync and creating it again (with a directory fsync)
/// at the next deferred delete. Its first sector is zero in the page cache;
/// on disk too (the sync that ended a marker fsynced that), or it holds a
/// pending appends record zeroed unsynced, which an open ignores once
/// `meta.zr` has moved on. A file whose first sector is zero opens as a
/// torn marker: `meta.zr` stands. Past it may lie an earlier marker's log,
/// whose records fail the next marker's checksums (a new salt). Removed
/// when the handle closes.
#[derive(Debug)]
pub(crate) struct KeptFile {
    pub file: Box<dyn StorageFile>,
    /// Whether its directory entry is durable (a marker's first flush
    /// synced the directory; a pending appends record's file was created
    /// without).
    pub entry_durable: bool,
    /// The salt of the last marker written in it: the next one takes
    /// another.
    pub salt: Option<u64>,
}

/// Largest `durable.zr` a sync keeps; a longer one (a long delete log,
/// which every open would read) is removed, and the next marker starts a
/// new file.
pub(crate) const MAX_KEPT_BYTES: u64 = 64 << 10;

/// The open `durable.zr` of a read-write handle with pending appends.
#[derive(Debug)]
pub(crate) struct PendingFile {
    pub file: Box<dyn StorageFile>,
    /// The durable header, which `meta.zr` holds until the sync.
    pub base: Header,
    /// For a file this handle wrote (not one an open adopted), whether its
    /// directory entry is durable, and the salt of the last marker written
    /// in it: the sync then zeroes and keeps it ([`KeptFile`]) rather than
    /// removing it.
    pub kept: Option<(bool, Option<u64>)>,
}

/// The salt of the first marker in a new file: any value serves (the file
/// holds no records of another marker; each later marker in it takes the
/// next value). Drawn from the boot id and the durable header, so a
/// simulated disk replays the same bytes.
pub(crate) fn first_salt(boot: &[u8], header: &Header) -> u64 {
    salted_fnv(Some(fnv(boot)), &header.encode())
}

/// FNV-1a 64 of the salt's bytes (if any), then `b`.
fn salted_fnv(salt: Option<u64>, b: &[u8]) -> u64 {
    match salt {
        Some(s) => fnv_parts(&[&s.to_le_bytes(), b]),
        None => fnv(b),
    }
}

const KIND_DELETE: u8 = 1;
const KIND_DONE: u8 = 2;
const DELETE_FIXED: usize = 16 + 2 * META_SIZE;
const PAIR: usize = 8 + LOC_SIZE;

impl LogRecord {
    /// The record's bytes, framed; checksummed with `salt` (its marker's).
    pub fn encode(&self, salt: Option<u64>) -> Vec<u8> {
        let mut body = Vec::new();
        match self {
            LogRecord::Delete {
                undo,
                prev,
                header,
                redo,
            } => {
                body.reserve(DELETE_FIXED + PAIR * (undo.len() + redo.len()));
                body.extend_from_slice(&[KIND_DELETE, 0, 0, 0]);
                body.extend_from_slice(&(undo.len() as u32).to_le_bytes());
                body.extend_from_slice(&(redo.len() as u32).to_le_bytes());
                body.extend_from_slice(&[0; 4]);
                body.extend_from_slice(&prev.encode());
                body.extend_from_slice(&header.encode());
                for (slot, loc) in undo.iter().chain(redo) {
                    body.extend_from_slice(&slot.to_le_bytes());
                    body.extend_from_slice(&loc.encode());
                }
            }
            LogRecord::Done => body.extend_from_slice(&[KIND_DONE, 0, 0, 0]),
        }
        let mut b = Vec::with_capacity(body.len() + 12);
        b.extend_from_slice(&(body.len() as u32).to_le_bytes());
        b.extend_from_slice(&body);
        let h = salted_fnv(salt, &b);
        b.extend_from_slice(&h.to_le_bytes());
        b
    }

    /// The valid records at the start of `b`: parsing stops at the first
    /// one that is torn, truncated or unknown (never written durably, so
    /// nothing after it was either).
    pub fn decode_all(mut b: &[u8], salt: Option<u64>) -> Vec<LogRecord> {
        let mut out = Vec::new();
        while let Some((r, n)) = Self::decode_one(b, salt) {
            out.push(r);
            b = &b[n..];
        }
        out
    }

    fn decode_one(b: &[u8], salt: Option<u64>) -> Option<(LogRecord, usize)> {
        let len = usize::try_from(u32::from_le_bytes(b.get(..4)?.try_into().ok()?)).ok()?;
        let total = len.checked_add(12)?;
        let framed = b.get(..total)?;
        let (head, sum) = framed.split_at(4 + len);
        if salted_fnv(salt, head).to_le_bytes() != sum {
            return None;
        }
        let body = &head[4..];
        let r = match *body.first()? {
            KIND_DONE if body == [KIND_DONE, 0, 0, 0] => LogRecord::Done,
            KIND_DELETE if body.len() >= DELETE_FIXED && body[1..4] == [0; 3] => {
                let count = |at: usize| -> Option<usize> {
                    usize::try_from(u32::from_le_bytes(body[at..at + 4].try_into().ok()?)).ok()
                };
                let (nu, nr) = (count(4)?, count(8)?);
                if body[12..16] != [0; 4]
                    || nu.checked_add(nr)?.checked_mul(PAIR)? != body.len() - DELETE_FIXED
                {
                    return None;
                }
                let prev = Header::decode(&body[16..16 + META_SIZE]).ok()?;
                let header = Header::decode(&body[16 + META_SIZE..DELETE_FIXED]).ok()?;
                let mut pairs = body[DELETE_FIXED..].chunks_exact(PAIR).map(|p| {
                    let slot = u64::from_le_bytes(p[..8].try_into().expect("8 bytes"));
                    (slot, Loc::decode(p[8..].try_into().expect("16 bytes")))
                });
                let undo = pairs.by_ref().take(nu).collect();
                let redo = pairs.collect();
                LogRecord::Delete {
                    undo,
                    prev,
                    header,
                    redo,
                }
            }
            _ => return None,
        };
        Some((r, total))
    }
}

/// What `durable.zr` holds while a handle has appended since its last
/// durable point and deleted nothing: the durable header (`meta.zr` on
/// disk, left alone until the sync) and the header the appends reached,
/// rewritten by each append and never fsynced (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PendingAppends {
    /// The header `meta.zr` holds, durable.
    pub base: Header,
    /// The header the appends since reached, in the page cache.
    pub header: Header,
    /// The boot id of the appending process.
    pub boot: Vec<u8>,
}

impl PendingAppends {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let boot = &self.boot[..self.boot.len().min(255)];
        let mut b = Vec::with_capacity(PREFIX + 2 * META_SIZE + boot.len() + 8);
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.push(VERSION_PENDING);
        b.push(boot.len() as u8);
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&self.base.encode());
        b.extend_from_slice(&self.header.encode());
        b.extend_from_slice(boot);
        let h = fnv(&b);
        b.extend_from_slice(&h.to_le_bytes());
        b
    }

    /// Parses the record; `None` for anything torn, truncated or foreign
    /// (an armed marker included).
    pub fn decode(b: &[u8]) -> Option<PendingAppends> {
        let boot_len = usize::from(*b.get(5)?);
        let fixed = PREFIX + 2 * META_SIZE + boot_len + 8;
        let (body, sum) = b.get(..fixed)?.split_at(fixed - 8);
        if fnv(body).to_le_bytes() != sum
            || u32::from_le_bytes(body[0..4].try_into().ok()?) != MAGIC
            || body[4] != VERSION_PENDING
            || body[6..8] != [0, 0]
        {
            return None;
        }
        let at = |i: usize| Header::decode(&body[PREFIX + i * META_SIZE..][..META_SIZE]).ok();
        Some(PendingAppends {
            base: at(0)?,
            header: at(1)?,
            boot: body[PREFIX + 2 * META_SIZE..].to_vec(),
        })
    }
}

impl Marker {
    /// The file's bytes (a new marker's log is empty; records are appended
    /// one by one).
    pub fn encode(&self) -> Vec<u8> {
        let boot = &self.boot[..self.boot.len().min(255)];
        let mut b = Vec::with_capacity(self.fixed_len());
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.push(if self.salt.is_some() {
            VERSION_SALTED
        } else {
            VERSION
        });
        b.push(boot.len() as u8);
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&self.header.encode());
        if let Some(salt) = self.salt {
            b.extend_from_slice(&salt.to_le_bytes());
        }
        b.extend_from_slice(boot);
        let h = fnv(&b);
        b.extend_from_slice(&h.to_le_bytes());
        for r in &self.log {
            b.extend_from_slice(&r.encode(self.salt));
        }
        b
    }

    /// Parses a marker; `None` for anything torn, truncated or foreign.
    pub fn decode(b: &[u8]) -> Option<Marker> {
        let salted = match *b.get(4)? {
            VERSION => false,
            VERSION_SALTED => true,
            _ => return None,
        };
        let boot_len = usize::from(*b.get(5)?);
        let at_boot = PREFIX + META_SIZE + if salted { 8 } else { 0 };
        let fixed = at_boot + boot_len + 8;
        let (body, sum) = b.get(..fixed)?.split_at(fixed - 8);
        if fnv(body).to_le_bytes() != sum {
            return None;
        }
        if u32::from_le_bytes(body[0..4].try_into().ok()?) != MAGIC || body[6..8] != [0, 0] {
            return None;
        }
        let header = Header::decode(&body[PREFIX..PREFIX + META_SIZE]).ok()?;
        let salt = salted.then(|| {
            u64::from_le_bytes(
                body[PREFIX + META_SIZE..at_boot]
                    .try_into()
                    .expect("8 bytes"),
            )
        });
        Some(Marker {
            header,
            boot: body[at_boot..].to_vec(),
            salt,
            log: LogRecord::decode_all(&b[fixed..], salt),
        })
    }

    /// The length of the fixed part, where the log starts.
    pub fn fixed_len(&self) -> usize {
        PREFIX + META_SIZE + self.salt.map_or(0, |_| 8) + self.boot.len().min(255) + 8
    }

    /// The length of the file's valid part: where the next log record goes.
    pub fn valid_len(&self) -> u64 {
        let log: usize = self.log.iter().map(|r| r.encode(self.salt).len()).sum();
        (self.fixed_len() + log) as u64
    }

    /// What a roll-back to the marker's header writes back: the first logged
    /// entry of every slot below its length.
    pub fn undo(&self) -> BTreeMap<u64, Loc> {
        let mut out = BTreeMap::new();
        for r in &self.log {
            if let LogRecord::Delete { undo, .. } = r {
                for &(slot, loc) in undo {
                    if slot < self.header.length {
                        out.entry(slot).or_insert(loc);
                    }
                }
            }
        }
        out
    }

    /// The deletes after the last *done* record, whose process died before
    /// it wrote them all in place: the header before the first of them
    /// (what `meta.zr` holds if none of their writes was issued), the
    /// header the last one leaves, and the entries they write below its
    /// length (a later one for a slot wins).
    pub fn unfinished(&self) -> Option<Unfinished> {
        let from = self
            .log
            .iter()
            .rposition(|r| *r == LogRecord::Done)
            .map_or(0, |i| i + 1);
        let mut out: Option<Unfinished> = None;
        // What a slot held before the unfinished deletes: the entry the
        // log's first delete of it saved (undo), or what an earlier,
        // finished delete wrote there (its last redo).
        let mut prior: BTreeMap<u64, Vec<Loc>> = BTreeMap::new();
        for (k, r) in self.log.iter().enumerate() {
            if let LogRecord::Delete { undo, redo, .. } = r {
                for &(slot, loc) in undo {
                    let v = prior.entry(slot).or_default();
                    if !v.contains(&loc) {
                        v.push(loc);
                    }
                }
                if k < from {
                    for &(slot, loc) in redo {
                        let v = prior.entry(slot).or_default();
                        if !v.contains(&loc) {
                            v.push(loc);
                        }
                    }
                }
            }
        }
        for r in &self.log[from..] {
            if let LogRecord::Delete {
                prev, header, redo, ..
            } = r
            {
                let u = out.get_or_insert_with(|| Unfinished {
                    before: *prev,
                    header: *header,
                    entries: BTreeMap::new(),
                    prior: BTreeMap::new(),
                });
                u.header = *header;
                u.entries.extend(redo.iter().copied());
            }
        }
        // A slot a later delete cut off keeps no entry.
        if let Some(u) = &mut out {
            let len = u.header.length;
            u.entries.retain(|&i, _| i < len);
            // A slot an earlier delete cut off may have been appended to
            // since (appends are not logged): what it held is unknown.
            let freed = self.log[..from]
                .iter()
                .filter_map(|r| match r {
                    LogRecord::Delete { header, .. } => Some(header.length),
                    LogRecord::Done => None,
                })
                .min()
                .unwrap_or(u64::MAX);
            u.prior = prior
                .into_iter()
                .filter(|(i, _)| u.entries.contains_key(i) && *i < freed)
                .collect();
        }
        out
    }
}

/// Deletes a killed process logged but may not have written in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unfinished {
    /// The header before the first of them.
    pub before: Header,
    /// The header the last one leaves.
    pub header: Header,
    /// The entries they write.
    pub entries: BTreeMap<u64, Loc>,
    /// For the slots of `entries`: the entries the log knows they held
    /// before these deletes (none for a slot that may have been appended
    /// to since the marker: past its length, or cut off by a delete).
    pub prior: BTreeMap<u64, Vec<Loc>>,
}

impl Unfinished {
    /// Whether the slots' entries on disk (`on_disk(slot)`) are what these
    /// deletes left, as far as they got: with `meta.zr` holding the header
    /// they write (`written`, written after every entry), each slot holds
    /// its new entry; with the header before them, each holds its new
    /// entry or one it held before. Anything else was written by another
    /// writer since (loaderx 1.7.2 ignores the log): a delete there leaves
    /// the same header as ours when it removes as many records, at other
    /// indices, and finishing ours over it would duplicate a record and
    /// lose two.
    pub fn matches<E>(
        &self,
        written: bool,
        mut on_disk: impl FnMut(u64) -> Result<Option<Loc>, E>,
    ) -> Result<bool, E> {
        for (&slot, new) in &self.entries {
            let Some(cur) = on_disk(slot)? else {
                return Ok(false);
            };
            if cur == *new {
                continue;
            }
            if written {
                return Ok(false);
            }
            match self.prior.get(&slot) {
                Some(old) if !old.contains(&cur) => return Ok(false),
                _ => {}
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Codec;

    fn marker() -> Marker {
        Marker {
            header: Header {
                codec: Codec::Zstd,
                tail_chunk: 3,
                tail_offset: 77,
                length: 1234,
            },
            boot: b"0f1e2d3c-aaaa-bbbb-cccc-0123456789ab".to_vec(),
            salt: Some(0x5A17_0000_0000_0001),
            log: Vec::new(),
        }
    }

    fn loc(n: u32) -> Loc {
        Loc {
            offset: n,
            phys_length: 10 + n,
            logic_length: 20 + n,
            chunk_id: n % 3,
        }
    }

    fn delete(undo: &[u64], length: u64, redo: &[u64]) -> LogRecord {
        LogRecord::Delete {
            undo: undo.iter().map(|&i| (i, loc(i as u32))).collect(),
            prev: Header {
                length: length + 1,
                ..marker().header
            },
            header: Header {
                length,
                ..marker().header
            },
            redo: redo.iter().map(|&i| (i, loc(100 + i as u32))).collect(),
        }
    }

    #[test]
    fn round_trips() {
        let m = marker();
        assert_eq!(Marker::decode(&m.encode()), Some(m.clone()));
        let none = Marker {
            boot: Vec::new(),
            ..m
        };
        assert_eq!(Marker::decode(&none.encode()), Some(none));
    }

    #[test]
    fn a_pending_appends_record_round_trips_and_rejects_any_flip_or_cut() {
        let m = marker();
        let p = PendingAppends {
            base: m.header,
            header: Header {
                length: 2000,
                tail_offset: 99,
                ..m.header
            },
            boot: m.boot.clone(),
        };
        let b = p.encode();
        assert_eq!(PendingAppends::decode(&b), Some(p));
        // Neither form passes for the other.
        assert_eq!(Marker::decode(&b), None);
        assert_eq!(PendingAppends::decode(&m.encode()), None);
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            assert_eq!(PendingAppends::decode(&c), None, "byte {i} flipped");
            assert_eq!(PendingAppends::decode(&b[..i]), None, "cut at {i}");
        }
    }

    #[test]
    fn any_flipped_byte_or_cut_is_rejected() {
        let b = marker().encode();
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            assert_eq!(Marker::decode(&c), None, "byte {i} flipped");
            assert_eq!(Marker::decode(&b[..i]), None, "cut at {i}");
        }
        // Bytes past the fixed part are the log: a torn record there ends
        // it, and leaves the marker valid.
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(Marker::decode(&longer), Some(marker()));
    }

    #[test]
    fn the_log_round_trips_and_ends_at_its_first_bad_record() {
        let log = vec![
            delete(&[3, 1200], 1230, &[3]),
            LogRecord::Done,
            delete(&[], 1229, &[]),
            LogRecord::Done,
            delete(&[7], 1228, &[7, 8]),
        ];
        let m = Marker {
            log: log.clone(),
            ..marker()
        };
        let b = m.encode();
        assert_eq!(Marker::decode(&b), Some(m.clone()));
        let fixed = marker().encode().len();
        // A cut or a flipped byte anywhere in the log keeps exactly the
        // records before the damaged one.
        let ends: Vec<usize> = log
            .iter()
            .scan(fixed, |at, r| {
                *at += r.encode(m.salt).len();
                Some(*at)
            })
            .collect();
        for i in fixed..b.len() {
            let whole = ends.iter().filter(|&&e| e <= i).count();
            let cut = Marker::decode(&b[..i]).unwrap();
            assert_eq!(cut.log, log[..whole], "cut at {i}");
            let mut c = b.clone();
            c[i] ^= 0x08;
            let flipped = Marker::decode(&c).unwrap();
            assert_eq!(flipped.log, log[..whole], "byte {i} flipped");
        }
    }

    #[test]
    fn an_unsalted_version_1_marker_still_reads() {
        let m = Marker {
            salt: None,
            log: vec![delete(&[3], 1233, &[3]), LogRecord::Done],
            ..marker()
        };
        let b = m.encode();
        assert_eq!(b[4], VERSION);
        assert_eq!(m.fixed_len() + 8, marker().fixed_len());
        assert_eq!(Marker::decode(&b), Some(m.clone()));
        assert_eq!(m.valid_len(), b.len() as u64);
    }

    /// A kept file's next marker starts over the previous one's log: only
    /// records of its own salt count, so the log it reads ends where its
    /// own records do, whatever lies after.
    #[test]
    fn records_of_an_earlier_marker_never_join_the_log() {
        let old = Marker {
            salt: Some(41),
            log: vec![
                delete(&[3], 1233, &[3]),
                LogRecord::Done,
                delete(&[5], 1232, &[5]),
            ],
            ..marker()
        };
        let mut b = old.encode();
        let new = Marker {
            salt: Some(42),
            ..marker()
        };
        // The new fixed part over the old one: the old records follow.
        let fixed = new.encode();
        b[..fixed.len()].copy_from_slice(&fixed);
        assert_eq!(Marker::decode(&b).unwrap().log, []);
        // One record of its own, then the old ones at an offset they may
        // have had (records of equal length line up exactly).
        let own = delete(&[7], 1233, &[7]).encode(new.salt);
        assert_eq!(own.len(), old.log[0].encode(old.salt).len());
        b[fixed.len()..fixed.len() + own.len()].copy_from_slice(&own);
        assert_eq!(Marker::decode(&b).unwrap().log, [delete(&[7], 1233, &[7])]);
        // The same bytes under the old salt's check are not a record.
        assert_eq!(LogRecord::decode_all(&own, Some(41)), []);
        assert_eq!(LogRecord::decode_all(&own, None), []);
    }

    #[test]
    fn undo_keeps_each_slots_first_entry_below_the_marker_length() {
        let m = Marker {
            log: vec![
                delete(&[5, 1234], 1232, &[5]),
                LogRecord::Done,
                LogRecord::Delete {
                    undo: vec![(5, loc(99)), (9, loc(9))],
                    prev: marker().header,
                    header: marker().header,
                    redo: vec![],
                },
            ],
            ..marker()
        };
        let undo = m.undo();
        assert_eq!(
            undo.into_iter().collect::<Vec<_>>(),
            [(5, loc(5)), (9, loc(9))]
        );
        // The last delete has no done record: it is unfinished.
        assert_eq!(
            m.unfinished(),
            Some(Unfinished {
                before: marker().header,
                header: marker().header,
                entries: BTreeMap::new(),
                prior: BTreeMap::new(),
            })
        );
        let done = Marker {
            log: vec![delete(&[1], 1233, &[1]), LogRecord::Done],
            ..marker()
        };
        assert_eq!(done.unfinished(), None);
        assert_eq!(marker().unfinished(), None);
        // Every delete after the last done record, a later entry winning.
        let two = Marker {
            log: vec![
                delete(&[1], 1233, &[1]),
                LogRecord::Done,
                delete(&[4], 1232, &[4, 6, 1231]),
                delete(&[9], 1231, &[6]),
            ],
            ..marker()
        };
        let u = two.unfinished().unwrap();
        assert_eq!((u.before.length, u.header.length), (1233, 1231));
        // 1231 was cut off by the last delete.
        assert_eq!(
            u.entries.into_iter().collect::<Vec<_>>(),
            [(4, loc(104)), (6, loc(106))]
        );
    }

    #[test]
    fn names_round_trip() {
        for d in [Durability::EachAppend, Durability::AtSync] {
            assert_eq!(Durability::from_name(d.name()), Some(d));
        }
        assert_eq!(Durability::from_name("sometimes"), None);
    }
}
