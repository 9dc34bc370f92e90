//! The byte layout of `meta.zr` and `.loc` entries (see `docs/format.md`).
//!
//! Everything is encoded explicitly little-endian; nothing depends on the
//! host's byte order or on struct layout.

use crate::codec::Codec;

/// `meta.zr` magic, "ZREC" as little-endian u32.
pub const META_MAGIC: u32 = 0x4345_525A;
/// The one physical format version we read and write.
pub const META_VERSION: u8 = 4;
/// Size of `meta.zr`.
pub const META_SIZE: usize = 32;
/// Size of one location entry.
pub const LOC_SIZE: usize = 16;
/// Largest record, in bytes (decoded or stored).
pub const MAX_RECORD_LEN: u64 = 1 << 31;
/// Logical chunk capacity of the real format.
pub const CHUNK_CAPACITY: u64 = 1 << 32;
/// Entries per `.loc` segment in the real format.
pub const LOC_SEGMENT_ENTRIES: u64 = 1 << 28;

/// File names.
pub const META_FILE: &str = "meta.zr";
/// Dictionary file.
pub const DICT_FILE: &str = "dict.zr";
/// Typed header file.
pub const STORE_FILE: &str = "store.zr";

/// `{id}.chunk`
pub fn chunk_name(id: u64) -> String {
    format!("{id}.chunk")
}

/// `{id}.loc`
pub fn loc_name(id: u64) -> String {
    format!("{id}.loc")
}

/// Parses `{decimal}.{ext}` without padding; `None` for anything else.
pub fn parse_numbered(name: &str, ext: &str) -> Option<u64> {
    let stem = name.strip_suffix(ext)?.strip_suffix('.')?;
    if stem.is_empty() || (stem.len() > 1 && stem.starts_with('0')) {
        return None;
    }
    if !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// The physical header: the commit point of the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The store's codec.
    pub codec: Codec,
    /// Chunk holding the write frontier.
    pub tail_chunk: u32,
    /// Frontier offset inside `tail_chunk`.
    pub tail_offset: u32,
    /// Physical record count.
    pub length: u64,
}

/// Why a header failed to decode (the caller adds the file name).
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Wrong size.
    Size(usize),
    /// Wrong magic.
    Magic(u32),
    /// Unsupported version.
    Version(u8),
    /// Unknown codec byte.
    Codec(u8),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Size(n) => write!(f, "size is {n} bytes, expected {META_SIZE}"),
            HeaderError::Magic(m) => {
                write!(f, "magic is {m:#010x}, expected {META_MAGIC:#010x}")
            }
            HeaderError::Version(v) => write!(f, "version is {v}, expected {META_VERSION}"),
            HeaderError::Codec(c) => write!(f, "codec is {c}, expected 0, 1 or 2"),
        }
    }
}

impl Header {
    /// Encodes the 32 packed bytes.
    pub fn encode(&self) -> [u8; META_SIZE] {
        let mut b = [0u8; META_SIZE];
        b[0..4].copy_from_slice(&META_MAGIC.to_le_bytes());
        b[4] = META_VERSION;
        b[5] = self.codec.as_u8();
        b[6..10].copy_from_slice(&self.tail_chunk.to_le_bytes());
        b[10..14].copy_from_slice(&self.tail_offset.to_le_bytes());
        b[14..22].copy_from_slice(&self.length.to_le_bytes());
        b
    }

    /// Decodes and validates magic, version and codec.
    pub fn decode(b: &[u8]) -> Result<Header, HeaderError> {
        if b.len() != META_SIZE {
            return Err(HeaderError::Size(b.len()));
        }
        let magic = u32::from_le_bytes(b[0..4].try_into().expect("4 bytes"));
        if magic != META_MAGIC {
            return Err(HeaderError::Magic(magic));
        }
        if b[4] != META_VERSION {
            return Err(HeaderError::Version(b[4]));
        }
        let codec = Codec::from_u8(b[5]).ok_or(HeaderError::Codec(b[5]))?;
        Ok(Header {
            codec,
            tail_chunk: u32::from_le_bytes(b[6..10].try_into().expect("4 bytes")),
            tail_offset: u32::from_le_bytes(b[10..14].try_into().expect("4 bytes")),
            length: u64::from_le_bytes(b[14..22].try_into().expect("8 bytes")),
        })
    }
}

/// One record's location (a 16-byte `.loc` entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Loc {
    /// Byte offset inside the chunk.
    pub offset: u32,
    /// Stored bytes.
    pub phys_length: u32,
    /// Decoded bytes.
    pub logic_length: u32,
    /// Chunk id.
    pub chunk_id: u32,
}

impl Loc {
    /// Encodes the 16 bytes.
    pub fn encode(&self) -> [u8; LOC_SIZE] {
        let mut b = [0u8; LOC_SIZE];
        b[0..4].copy_from_slice(&self.offset.to_le_bytes());
        b[4..8].copy_from_slice(&self.phys_length.to_le_bytes());
        b[8..12].copy_from_slice(&self.logic_length.to_le_bytes());
        b[12..16].copy_from_slice(&self.chunk_id.to_le_bytes());
        b
    }

    /// Decodes 16 bytes.
    #[inline]
    pub fn decode(b: &[u8; LOC_SIZE]) -> Loc {
        // One 16-byte little-endian load, split in registers: field by
        // field, the compiler assembled the entry on the stack and read it
        // back whole, a store-forwarding stall per entry on the gather path.
        let v = u128::from_le_bytes(*b);
        Loc {
            offset: v as u32,
            phys_length: (v >> 32) as u32,
            logic_length: (v >> 64) as u32,
            chunk_id: (v >> 96) as u32,
        }
    }

    /// End offset of the stored bytes inside the chunk.
    pub fn end(&self) -> u64 {
        u64::from(self.offset) + u64::from(self.phys_length)
    }
}

/// The chunk placement rule: where a record of `len` stored bytes goes when
/// the frontier is at (`chunk`, `offset`). A record that would reach the
/// capacity (`offset + len >= capacity`) starts the next chunk at offset 0.
/// Returns `None` if the record cannot be placed (it does not fit even an
/// empty chunk, or the chunk id would overflow).
pub fn place(chunk: u32, offset: u64, len: u64, capacity: u64) -> Option<(u32, u64)> {
    if offset.checked_add(len)? < capacity {
        Some((chunk, offset))
    } else if len < capacity && offset > 0 {
        Some((chunk.checked_add(1)?, 0))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_bytes_match_the_reference_layout() {
        let h = Header {
            codec: Codec::Zstd,
            tail_chunk: 0,
            tail_offset: 0x42,
            length: 2,
        };
        let b = h.encode();
        // Captured from a loaderx 1.7.2 store with two zstd records.
        let expected: [u8; 32] = [
            0x5a, 0x52, 0x45, 0x43, 0x04, 0x01, 0, 0, 0, 0, 0x42, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(b, expected);
        assert_eq!(Header::decode(&b), Ok(h));
    }

    #[test]
    fn header_rejects_bad_fields() {
        let mut b = Header {
            codec: Codec::Raw,
            tail_chunk: 1,
            tail_offset: 2,
            length: 3,
        }
        .encode();
        assert_eq!(Header::decode(&b[..31]), Err(HeaderError::Size(31)));
        b[5] = 3;
        assert_eq!(Header::decode(&b), Err(HeaderError::Codec(3)));
        b[4] = 5;
        assert_eq!(Header::decode(&b), Err(HeaderError::Version(5)));
        b[0] = 0;
        assert!(matches!(Header::decode(&b), Err(HeaderError::Magic(_))));
    }

    #[test]
    fn loc_round_trips_little_endian() {
        let l = Loc {
            offset: 0x0102_0304,
            phys_length: 5,
            logic_length: 6,
            chunk_id: 7,
        };
        let b = l.encode();
        assert_eq!(&b[0..4], &[4, 3, 2, 1]);
        assert_eq!(Loc::decode(&b), l);
    }

    #[test]
    fn placement_rolls_over_at_greater_or_equal() {
        assert_eq!(place(0, 90, 9, 100), Some((0, 90)));
        assert_eq!(place(0, 90, 10, 100), Some((1, 0)));
        assert_eq!(place(0, 0, 100, 100), None);
        assert_eq!(place(u32::MAX, 90, 10, 100), None);
    }

    #[test]
    fn numbered_names_are_strict() {
        assert_eq!(parse_numbered("12.chunk", "chunk"), Some(12));
        assert_eq!(parse_numbered("0.loc", "loc"), Some(0));
        assert_eq!(parse_numbered("012.loc", "loc"), None);
        assert_eq!(parse_numbered(".loc", "loc"), None);
        assert_eq!(parse_numbered("1.loc.tmp", "loc"), None);
        assert_eq!(parse_numbered("+1.loc", "loc"), None);
    }
}
