//! The intent file `intent.zr`: makes multi-write operations atomic.
//!
//! Before an operation that must rewrite bytes in place (a delete's swapped
//! loc entries, a compaction move whose destination overlaps the sources of
//! its records, or lies so close below them that batches would be tiny)
//! the engine writes its whole effect here, fsyncs it and the directory, then
//! applies it, fsyncs the touched files, removes the intent and fsyncs the
//! directory. An intent that exists on open is replayed (it is idempotent);
//! one whose checksum fails was torn before it was durable, so its operation
//! never started and it is discarded. The reference ignores unknown files.
//!
//! Layout (little-endian): magic `ZINT` u32, version u8 (1), kind u8 (1
//! delete, 2 move of one record, 3 move of records), 2 zero bytes, body
//! length u64, body, FNV-1a 64 of all preceding bytes.
//! - delete body: the new `meta.zr` (32 bytes), then per changed entry the
//!   record index u64 and the 16-byte entry.
//! - move body (kind 2, read only; written by earlier builds): record index
//!   u64, the new 16-byte entry, the record's stored bytes (`phys_length` of
//!   them).
//! - moves body (kind 3): record count u64, then per record its index u64
//!   and new 16-byte entry, then the records' stored bytes back to back in
//!   that order (`phys_length` each).

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
    /// Stored bytes to place, then the records' entries.
    Move {
        /// The records and their new entries (chunk and offset to write
        /// each one's bytes at).
        moves: Vec<(u64, Loc)>,
        /// The records' stored bytes, back to back in the order of `moves`.
        bytes: Vec<u8>,
    },
}

/// Prefix, the body `body` appends, checksum.
fn frame(kind: u8, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::with_capacity(PREFIX + 8);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.push(VERSION);
    out.push(kind);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&[0; 8]);
    body(&mut out);
    let len = (out.len() - PREFIX) as u64;
    out[8..PREFIX].copy_from_slice(&len.to_le_bytes());
    let h = fnv(&out);
    out.extend_from_slice(&h.to_le_bytes());
    out
}

pub(crate) fn fnv(b: &[u8]) -> u64 {
    fnv_parts(&[b])
}

/// FNV-1a 64 of `parts` one after the other.
pub(crate) fn fnv_parts(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &x in parts.iter().flat_map(|p| p.iter()) {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Intent {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Intent::Delete { header, entries } => frame(1, |out| {
                out.extend_from_slice(&header.encode());
                for (i, l) in entries {
                    out.extend_from_slice(&i.to_le_bytes());
                    out.extend_from_slice(&l.encode());
                }
            }),
            Intent::Move { moves, bytes } => Intent::encode_moves(moves, bytes),
        }
    }

    /// The bytes of `Intent::Move { moves, bytes }`, written straight into
    /// the file's buffer (a run's bytes are copied once, not three times).
    pub fn encode_moves(moves: &[(u64, Loc)], bytes: &[u8]) -> Vec<u8> {
        frame(3, |out| {
            out.reserve(8 + moves.len() * (8 + LOC_SIZE) + bytes.len() + 8);
            out.extend_from_slice(&(moves.len() as u64).to_le_bytes());
            for (i, l) in moves {
                out.extend_from_slice(&i.to_le_bytes());
                out.extend_from_slice(&l.encode());
            }
            out.extend_from_slice(bytes);
        })
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
                Some(Intent::Move {
                    moves: vec![(index, loc)],
                    bytes,
                })
            }
            3 => {
                let count =
                    usize::try_from(u64::from_le_bytes(body.get(..8)?.try_into().ok()?)).ok()?;
                let table_len = count.checked_mul(8 + LOC_SIZE)?;
                let table = body.get(8..8usize.checked_add(table_len)?)?;
                let moves: Vec<(u64, Loc)> = table
                    .chunks_exact(8 + LOC_SIZE)
                    .map(|e| {
                        let i = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
                        (i, Loc::decode(e[8..].try_into().expect("16 bytes")))
                    })
                    .collect();
                let bytes = body[8 + table_len..].to_vec();
                let want = moves
                    .iter()
                    .try_fold(0u64, |a, (_, l)| a.checked_add(u64::from(l.phys_length)))?;
                if moves.is_empty() || bytes.len() as u64 != want {
                    return None;
                }
                Some(Intent::Move { moves, bytes })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Codec;

    /// A one-record move intent as earlier builds wrote it (kind 2) still
    /// replays; a kind 3 body whose bytes or count disagree is refused.
    #[test]
    fn reads_the_one_record_move_and_refuses_inconsistent_moves() {
        let loc = Loc {
            offset: 7,
            phys_length: 3,
            logic_length: 3,
            chunk_id: 1,
        };
        let frame = |kind: u8, body: &[u8]| {
            let mut out = MAGIC.to_le_bytes().to_vec();
            out.extend_from_slice(&[VERSION, kind, 0, 0]);
            out.extend_from_slice(&(body.len() as u64).to_le_bytes());
            out.extend_from_slice(body);
            let h = fnv(&out);
            out.extend_from_slice(&h.to_le_bytes());
            out
        };
        let mut body = 5u64.to_le_bytes().to_vec();
        body.extend_from_slice(&loc.encode());
        body.extend_from_slice(&[7, 8, 9]);
        assert_eq!(
            Intent::decode(&frame(2, &body)),
            Some(Intent::Move {
                moves: vec![(5, loc)],
                bytes: vec![7, 8, 9]
            })
        );
        let moves = |count: u64, bytes: &[u8]| {
            let mut b = count.to_le_bytes().to_vec();
            b.extend_from_slice(&5u64.to_le_bytes());
            b.extend_from_slice(&loc.encode());
            b.extend_from_slice(bytes);
            frame(3, &b)
        };
        assert!(Intent::decode(&moves(1, &[7, 8, 9])).is_some());
        assert_eq!(Intent::decode(&moves(1, &[7, 8])), None, "bytes short");
        assert_eq!(Intent::decode(&moves(1, &[7, 8, 9, 1])), None, "bytes long");
        assert_eq!(
            Intent::decode(&moves(2, &[7, 8, 9])),
            None,
            "count past the table"
        );
        assert_eq!(Intent::decode(&moves(0, &[])), None, "no record");
        assert_eq!(
            Intent::decode(&moves(u64::MAX, &[])),
            None,
            "count overflows"
        );
    }

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
                moves: vec![(3, loc)],
                bytes: vec![1, 2, 3],
            },
            Intent::Move {
                moves: vec![
                    (3, loc),
                    (
                        9,
                        Loc {
                            offset: 10,
                            phys_length: 2,
                            ..loc
                        },
                    ),
                ],
                bytes: vec![1, 2, 3, 4, 5],
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
