//! Deferred durability: appends that commit to the page cache and become
//! durable at the next `sync()`.
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
//! The marker file `durable.zr` closes that gap. Before the first deferred
//! append after a durable point, the engine fsyncs every store file and
//! writes the marker: the header that is durable now, plus the kernel's boot
//! id. While the marker exists, `meta.zr` may run ahead of the disk. `sync()`
//! fsyncs everything and removes the marker. An open that finds a marker
//! compares boot ids: the same boot means the page cache that holds every
//! write is still there, so `meta.zr` stands; another boot (or none known)
//! means a power cut may have dropped writes, so the store rolls back to the
//! marker's header, whose bytes were durable before it was written. A
//! read-write open then makes the outcome durable and removes the marker.
//! A marker that fails its checksum was torn before it was durable, so no
//! deferred append had started: `meta.zr` stands. The reference ignores
//! unknown files.
//!
//! Layout (little-endian): magic `ZDUR` u32, version u8 (1), boot id length
//! u8, 2 zero bytes, the durable `meta.zr` (32 bytes), the boot id, FNV-1a 64
//! of all preceding bytes.

use crate::format::{Header, META_SIZE};
use crate::intent::fnv;

/// File name of the marker.
pub const DURABLE_FILE: &str = "durable.zr";
const MAGIC: u32 = 0x5255_445A;
const VERSION: u8 = 1;
const PREFIX: usize = 8;

/// When an append becomes durable, i.e. survives a power cut.
///
/// Either way an append that returned survives its process being killed,
/// and a power cut leaves a store that opens to a committed state, never a
/// broken one. The setting belongs to a handle, not to the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Durable at the next [`Engine::sync`](crate::Engine::sync),
    /// [`Engine::close`](crate::Engine::close), delete or compaction (and,
    /// best effort, when the handle is dropped). An append syncs nothing; a
    /// power cut before the sync rolls the store back to the last durable
    /// point. So does any reboot between a killed writer and the next open,
    /// and an open on another host, since neither can trust the page cache.
    /// A failed sync also goes back to that point (and says so). loaderx
    /// 1.7.2 defers the same way, without the roll-back. On a system without
    /// a boot id (not Linux) appends behave as [`Durability::EachAppend`],
    /// since a reboot cannot be told apart.
    #[default]
    AtSync,
    /// Durable on return: an append fsyncs its payloads and loc entries,
    /// writes the header and fsyncs it. Three fsyncs per call, two of them
    /// concurrent (about 0.2 ms here): batch records into few calls.
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
}

impl Marker {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let boot = &self.boot[..self.boot.len().min(255)];
        let mut b = Vec::with_capacity(PREFIX + META_SIZE + boot.len() + 8);
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.push(VERSION);
        b.push(boot.len() as u8);
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&self.header.encode());
        b.extend_from_slice(boot);
        let h = fnv(&b);
        b.extend_from_slice(&h.to_le_bytes());
        b
    }

    /// Parses a marker; `None` for anything torn, truncated or foreign.
    pub fn decode(b: &[u8]) -> Option<Marker> {
        if b.len() < PREFIX + META_SIZE + 8 {
            return None;
        }
        let (body, sum) = b.split_at(b.len() - 8);
        if fnv(body).to_le_bytes() != sum {
            return None;
        }
        if u32::from_le_bytes(body[0..4].try_into().ok()?) != MAGIC
            || body[4] != VERSION
            || body[6..8] != [0, 0]
        {
            return None;
        }
        let boot_len = usize::from(body[5]);
        if body.len() != PREFIX + META_SIZE + boot_len {
            return None;
        }
        let header = Header::decode(&body[PREFIX..PREFIX + META_SIZE]).ok()?;
        Some(Marker {
            header,
            boot: body[PREFIX + META_SIZE..].to_vec(),
        })
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
    fn any_flipped_byte_or_cut_is_rejected() {
        let b = marker().encode();
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            assert_eq!(Marker::decode(&c), None, "byte {i} flipped");
            assert_eq!(Marker::decode(&b[..i]), None, "cut at {i}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(Marker::decode(&longer), None);
    }

    #[test]
    fn names_round_trip() {
        for d in [Durability::EachAppend, Durability::AtSync] {
            assert_eq!(Durability::from_name(d.name()), Some(d));
        }
        assert_eq!(Durability::from_name("sometimes"), None);
    }
}
