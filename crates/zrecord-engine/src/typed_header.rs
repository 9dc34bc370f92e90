//! `store.zr`: the typed layer's 32-byte header plus its encoded type
//! identity. The engine never reads it; the typed layer uses these helpers so
//! the byte layout lives in one crate.
//!
//! ```text
//! 0      4  5    6        8              16             24        32
//! | LXST | 1 | kind | 0 0 | record_bytes | identity_len | 0 ... 0 | identity ...
//! ```

use crate::error::{Error, Result};
use crate::format::{MAX_RECORD_LEN, STORE_FILE};
use crate::vfs::{OpenFlags, RealVfs, Vfs};
use std::path::Path;

/// `store.zr` magic, "LXST" as little-endian u32.
pub const MAGIC: u32 = 0x5453_584C;
/// Typed header version.
pub const VERSION: u8 = 1;
/// Header size before the identity.
pub const HEADER_SIZE: usize = 32;
/// Largest identity accepted (a dtype description is far smaller).
pub const MAX_IDENTITY: u64 = 1 << 20;

/// The store's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Fixed-width records.
    Dense = 1,
    /// Payload/shape record pairs.
    Ragged = 2,
}

/// The decoded `store.zr`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypedHeader {
    /// Dense or ragged.
    pub kind: Kind,
    /// Dense: bytes per record (> 0, ≤ 2^31). Ragged: 0.
    pub record_bytes: u64,
    /// The encoded type identity (MessagePack), opaque here.
    pub identity: Vec<u8>,
}

impl TypedHeader {
    /// The file's bytes.
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.check()?;
        let mut b = vec![0u8; HEADER_SIZE];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = VERSION;
        b[5] = self.kind as u8;
        b[8..16].copy_from_slice(&self.record_bytes.to_le_bytes());
        b[16..24].copy_from_slice(&(self.identity.len() as u64).to_le_bytes());
        b.extend_from_slice(&self.identity);
        Ok(b)
    }

    /// Parses a whole `store.zr`; `file` names it in errors.
    pub fn decode(bytes: &[u8], file: &Path) -> Result<TypedHeader> {
        let bad = |d: String| Error::corrupted(file, d);
        if bytes.len() < HEADER_SIZE {
            return Err(bad(format!(
                "size is {} bytes, shorter than the {HEADER_SIZE}-byte header",
                bytes.len()
            )));
        }
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let magic = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        if magic != MAGIC {
            return Err(bad(format!(
                "magic is {magic:#010x}, expected {MAGIC:#010x}"
            )));
        }
        if bytes[4] != VERSION {
            return Err(bad(format!("version is {}, expected {VERSION}", bytes[4])));
        }
        let kind = match bytes[5] {
            1 => Kind::Dense,
            2 => Kind::Ragged,
            k => {
                return Err(bad(format!(
                    "kind is {k}, expected 1 (dense) or 2 (ragged)"
                )));
            }
        };
        let record_bytes = u64_at(8);
        let identity_len = u64_at(16);
        let size_ok = (HEADER_SIZE as u64)
            .checked_add(identity_len)
            .is_some_and(|s| s == bytes.len() as u64);
        if !size_ok {
            return Err(bad(format!(
                "size is {} bytes, but identity_len {identity_len} needs {HEADER_SIZE} + {identity_len}",
                bytes.len()
            )));
        }
        let h = TypedHeader {
            kind,
            record_bytes,
            identity: bytes[HEADER_SIZE..].to_vec(),
        };
        h.check().map_err(|e| match e {
            Error::InvalidArgument(d) => bad(d),
            e => e,
        })?;
        Ok(h)
    }

    fn check(&self) -> Result<()> {
        match self.kind {
            Kind::Dense if self.record_bytes == 0 || self.record_bytes > MAX_RECORD_LEN => {
                Err(Error::InvalidArgument(format!(
                    "dense record_bytes is {}, must be in 1..=2^31",
                    self.record_bytes
                )))
            }
            Kind::Ragged if self.record_bytes != 0 => Err(Error::InvalidArgument(format!(
                "ragged record_bytes is {}, must be 0",
                self.record_bytes
            ))),
            _ if self.identity.len() as u64 > MAX_IDENTITY => Err(Error::InvalidArgument(format!(
                "identity is {} bytes, over the 1 MiB limit",
                self.identity.len()
            ))),
            _ => Ok(()),
        }
    }
}

/// Writes `dir/store.zr` atomically: a temporary file, fsync, rename, fsync
/// of the directory. Call [`Engine::sync`](crate::Engine::sync) first: the
/// typed header must be the last file of a store to become durable.
pub fn write(dir: &Path, h: &TypedHeader) -> Result<()> {
    write_with(&RealVfs, dir, h)
}

/// Reads and validates `dir/store.zr`. Its size is checked against the
/// claimed identity length before anything is allocated.
/// A missing file is [`Error::NotAStore`].
pub fn read(dir: &Path) -> Result<TypedHeader> {
    read_with(&RealVfs, dir)
}

/// [`write`] through a given file system.
#[doc(hidden)]
pub fn write_with(vfs: &dyn Vfs, dir: &Path, h: &TypedHeader) -> Result<()> {
    let bytes = h.encode()?;
    let tmp = dir.join("store.zr.tmp");
    let path = dir.join(STORE_FILE);
    let f = vfs
        .open(&tmp, OpenFlags::CreateTruncate)
        .map_err(|e| Error::io(&tmp, "create", e))?;
    f.write_at(&bytes, 0)
        .map_err(|e| Error::io(&tmp, "write", e))?;
    f.sync().map_err(|e| Error::io(&tmp, "sync", e))?;
    drop(f);
    vfs.rename(&tmp, &path)
        .map_err(|e| Error::io(&path, "rename", e))?;
    vfs.sync_dir(dir)
        .map_err(|e| Error::io(dir, "sync directory", e))
}

/// [`read`] through a given file system.
#[doc(hidden)]
pub fn read_with(vfs: &dyn Vfs, dir: &Path) -> Result<TypedHeader> {
    let path = dir.join(STORE_FILE);
    let f = match vfs.open(&path, OpenFlags::Read) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NotAStore { path });
        }
        Err(e) => return Err(Error::io(&path, "open", e)),
    };
    let size = f.len().map_err(|e| Error::io(&path, "stat", e))?;
    if size > HEADER_SIZE as u64 + MAX_IDENTITY {
        return Err(Error::corrupted(
            &path,
            format!("size is {size} bytes, over the limit for a header and identity"),
        ));
    }
    let mut head = [0u8; HEADER_SIZE];
    if size < HEADER_SIZE as u64 {
        return TypedHeader::decode(&head[..size as usize], &path);
    }
    f.read_at(&mut head, 0)
        .map_err(|e| Error::io(&path, "read", e))?;
    // Validate the fixed part (and the claimed size) before allocating.
    let identity_len = u64::from_le_bytes(head[16..24].try_into().expect("8 bytes"));
    if (HEADER_SIZE as u64).checked_add(identity_len) != Some(size) {
        return TypedHeader::decode(&head, &path).and_then(|_| {
            Err(Error::corrupted(
                &path,
                format!("size is {size} bytes, but identity_len {identity_len} needs {HEADER_SIZE} + {identity_len}"),
            ))
        });
    }
    let mut bytes = vec![0u8; size as usize];
    f.read_at(&mut bytes, 0)
        .map_err(|e| Error::io(&path, "read", e))?;
    TypedHeader::decode(&bytes, &path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_the_reference() {
        // store.zr of loaderx 1.7.2 DenseStore(dtype=float32, item_shape=(2, 3)).
        let identity = b"\x82\xa5dtype\xa3<f4\xaaitem_shape\x92\x02\x03".to_vec();
        let h = TypedHeader {
            kind: Kind::Dense,
            record_bytes: 24,
            identity,
        };
        let b = h.encode().unwrap();
        assert_eq!(&b[..8], b"LXST\x01\x01\x00\x00");
        assert_eq!(&b[8..16], &24u64.to_le_bytes());
        assert_eq!(&b[16..24], &25u64.to_le_bytes());
        assert_eq!(b.len(), 57);
        assert_eq!(TypedHeader::decode(&b, Path::new("x")).unwrap(), h);
    }

    #[test]
    fn rejects_bad_headers() {
        let h = TypedHeader {
            kind: Kind::Ragged,
            record_bytes: 0,
            identity: vec![1, 2, 3],
        };
        let good = h.encode().unwrap();
        let p = Path::new("store.zr");
        for (at, v) in [(0usize, 0u8), (4, 2), (5, 3), (8, 1), (16, 4)] {
            let mut b = good.clone();
            b[at] = v;
            assert!(TypedHeader::decode(&b, p).is_err(), "byte {at} = {v}");
        }
        assert!(TypedHeader::decode(&good[..31], p).is_err());
        assert!(TypedHeader::decode(&good[..34], p).is_err());
        let dense0 = TypedHeader {
            kind: Kind::Dense,
            record_bytes: 0,
            identity: vec![],
        };
        assert!(dense0.encode().is_err());
    }

    #[test]
    fn file_round_trip_and_huge_claim() {
        let d = tempfile::tempdir().unwrap();
        assert!(matches!(read(d.path()), Err(Error::NotAStore { .. })));
        let h = TypedHeader {
            kind: Kind::Dense,
            record_bytes: 4,
            identity: b"\x81\xa5dtype\xa3<f4".to_vec(),
        };
        write(d.path(), &h).unwrap();
        assert_eq!(read(d.path()).unwrap(), h);
        // A header that claims a huge identity is refused before allocation.
        let mut b = h.encode().unwrap();
        b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(d.path().join(STORE_FILE), &b).unwrap();
        assert!(matches!(read(d.path()), Err(Error::Corrupted { .. })));
    }
}
