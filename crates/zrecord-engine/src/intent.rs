//! The intent file `intent.zr`: makes multi-write operations atomic.
//!
//! Before an operation that must rewrite bytes in place (a delete's swapped
//! loc entries, a compaction move whose destination overlaps its own source)
//! the engine writes its whole effect here, fsyncs it and the directory, then
//! applies it, fsyncs the touched files, removes the intent and fsyncs the
//! directory. An intent that exists on open is replayed (it is idempotent);
//! one whose checksum fails was torn before it was durable, so its operation
//! never started and it is discarded. The reference ignores unknown files.
//!
//! Layout (little-endian): magic `ZINT` u32, version u8 (1), kind u8 (1
//! delete, 2 move), 2 zero bytes, body length u64, body, FNV-1a 64 of all
//! preceding bytes.
//! - delete body: the new `meta.zr` (32 bytes), then per changed entry the
//!   record index u64 and the 16-byte entry.
//! - move body: record index u64, the new 16-byte entry, the record's stored
//!   bytes (`phys_length` of them).

use crate::format::{Header, LOC_SIZE, Loc, META_SIZE};

/// File name of the intent.
pub const INTENT_FILE: &str = "intent.zr";
const MAGIC: u32 = 0x544E_495A;
const VERSION: u8 = 1;
const PREFIX: usize = 16;

/// A pending operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Intent {
    /// Entries to write, then the header.
    Delete {
        /// The header after the delete.
        header: Header,
        /// (record index, new entry).
        entries: Vec<(u64, Loc)>,
    },
    /// Stored bytes to place, then the record's entry.
    Move {
        /// The record.
        index: u64,
        /// Its new entry (chunk and offset to write `bytes` at).
        loc: Loc,
        /// The stored bytes.
        bytes: Vec<u8>,
    },
}

pub(crate) fn fnv(b: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &x in b {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Intent {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        let kind = match self {
            Intent::Delete { header, entries } => {
                body.extend_from_slice(&header.encode());
                for (i, l) in entries {
                    body.extend_from_slice(&i.to_le_bytes());
                    body.extend_from_slice(&l.encode());
                }
                1u8
            }
            Intent::Move { index, loc, bytes } => {
                body.extend_from_slice(&index.to_le_bytes());
                body.extend_from_slice(&loc.encode());
                body.extend_from_slice(bytes);
                2u8
            }
        };
        let mut out = Vec::with_capacity(PREFIX + body.len() + 8);
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.push(VERSION);
        out.push(kind);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&body);
        let h = fnv(&out);
        out.extend_from_slice(&h.to_le_bytes());
        out
    }

    /// Decodes a complete, intact intent; `None` when the bytes are torn,
    /// truncated or not an intent (the operation never became durable).
    pub fn decode(b: &[u8]) -> Option<Intent> {
        if b.len() < PREFIX + 8 {
            return None;
        }
        let (data, sum) = b.split_at(b.len() - 8);
        if fnv(data).to_le_bytes() != sum {
            return None;
        }
        let u64_at = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().expect("8 bytes"));
        if u32::from_le_bytes(data[0..4].try_into().expect("4 bytes")) != MAGIC
            || data[4] != VERSION
        {
            return None;
        }
        let body = &data[PREFIX..];
        if u64_at(8) != body.len() as u64 {
            return None;
        }
        match data[5] {
            1 => {
                if body.len() < META_SIZE || !(body.len() - META_SIZE).is_multiple_of(8 + LOC_SIZE)
                {
                    return None;
                }
                let header = Header::decode(&body[..META_SIZE]).ok()?;
                let entries = body[META_SIZE..]
                    .chunks_exact(8 + LOC_SIZE)
                    .map(|e| {
                        let i = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
                        (i, Loc::decode(e[8..].try_into().expect("16 bytes")))
                    })
                    .collect();
                Some(Intent::Delete { header, entries })
            }
            2 => {
                if body.len() < 8 + LOC_SIZE {
                    return None;
                }
                let index = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
                let loc = Loc::decode(body[8..8 + LOC_SIZE].try_into().expect("16 bytes"));
                let bytes = body[8 + LOC_SIZE..].to_vec();
                if bytes.len() as u64 != u64::from(loc.phys_length) {
                    return None;
                }
                Some(Intent::Move { index, loc, bytes })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Codec;

    #[test]
    fn round_trips_and_rejects_any_damage() {
        let loc = Loc {
            offset: 7,
            phys_length: 3,
            logic_length: 3,
            chunk_id: 1,
        };
        let header = Header {
            codec: Codec::Raw,
            tail_chunk: 1,
            tail_offset: 10,
            length: 4,
        };
        for it in [
            Intent::Delete {
                header,
                entries: vec![(1, loc), (2, loc)],
            },
            Intent::Move {
                index: 3,
                loc,
                bytes: vec![1, 2, 3],
            },
        ] {
            let b = it.encode();
            assert_eq!(Intent::decode(&b), Some(it.clone()));
            for n in 0..b.len() {
                assert_eq!(Intent::decode(&b[..n]), None, "truncated at {n}");
                let mut d = b.clone();
                d[n] ^= 0x40;
                assert_eq!(Intent::decode(&d), None, "flipped byte {n}");
            }
        }
    }
}
