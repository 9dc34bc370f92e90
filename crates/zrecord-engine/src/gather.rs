//! Gather: a batch of records into caller memory, in parallel, decoded
//! straight into the destination.

use crate::aligned::{AlignedBuf, PAGE};
use crate::codec::Codec;
use crate::engine::{Engine, State};
use crate::error::{Error, Result};
use crate::format::Loc;
use rayon::prelude::*;
use zstd::bulk::Decompressor;

/// Bounce buffer size for positional reads into unaligned destinations.
const BOUNCE: usize = 256 << 10;

/// Per-worker scratch, created once per rayon job.
struct Worker<'a> {
    dctx: Option<Decompressor<'a>>,
    staging: Vec<u8>,
    bounce: Option<AlignedBuf>,
}

impl Engine {
    /// Reads the records at `indices` into `dst`, record k at
    /// `dst[k * record_bytes..]`. Every record must decode to exactly
    /// `record_bytes`. Indices are checked before any I/O.
    pub fn gather_fixed(&self, indices: &[u64], record_bytes: usize, dst: &mut [u8]) -> Result<()> {
        if record_bytes == 0 {
            return Err(Error::InvalidArgument("record_bytes must be > 0".into()));
        }
        let need = indices.len().checked_mul(record_bytes);
        if need != Some(dst.len()) {
            return Err(Error::InvalidArgument(format!(
                "destination is {} bytes, {} records of {record_bytes} bytes need {need:?}",
                dst.len(),
                indices.len()
            )));
        }
        let st = self.read_state();
        let locs = self.lookup(&st, indices, |_, i, l| {
            if l.logic_length as usize == record_bytes {
                Ok(())
            } else {
                Err(Error::corrupted(
                    self.loc_path(i),
                    format!(
                        "record {i} decodes to {} bytes, expected {record_bytes}",
                        l.logic_length
                    ),
                ))
            }
        })?;
        if indices.is_empty() {
            return Ok(());
        }
        let block = block_len(indices.len());
        dst.par_chunks_mut(record_bytes * block)
            .zip(locs.par_chunks(block).zip(indices.par_chunks(block)))
            .try_for_each_init(
                || self.worker(),
                |w, (d, (ls, ix))| {
                    for ((d, l), &i) in d.chunks_mut(record_bytes).zip(ls).zip(ix) {
                        self.read_one(&st, w, i, l, d)?;
                    }
                    Ok(())
                },
            )
    }

    /// Reads record k of `indices` into `dst[offsets[k]..offsets[k + 1]]`
    /// (`offsets.len() == indices.len() + 1`, nondecreasing). Each range's
    /// length must equal the record's decoded length (see
    /// [`Engine::record_lengths`]).
    pub fn gather_var(&self, indices: &[u64], dst: &mut [u8], offsets: &[usize]) -> Result<()> {
        if offsets.len() != indices.len() + 1 {
            return Err(Error::InvalidArgument(format!(
                "{} offsets for {} records (need n + 1)",
                offsets.len(),
                indices.len()
            )));
        }
        if offsets.windows(2).any(|w| w[1] < w[0]) || offsets[offsets.len() - 1] > dst.len() {
            return Err(Error::InvalidArgument(format!(
                "offsets must be nondecreasing and end within the {}-byte destination",
                dst.len()
            )));
        }
        let st = self.read_state();
        let locs = self.lookup(&st, indices, |k, i, l| {
            let want = offsets[k + 1] - offsets[k];
            if l.logic_length as usize == want {
                Ok(())
            } else {
                Err(Error::InvalidArgument(format!(
                    "record {i} decodes to {} bytes, but destination range {k} holds {want}",
                    l.logic_length
                )))
            }
        })?;
        // Carve the destination into one slice per record.
        let mut slices: Vec<&mut [u8]> = Vec::with_capacity(indices.len());
        let mut rest = &mut dst[offsets[0]..];
        for w in offsets.windows(2) {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(w[1] - w[0]);
            slices.push(head);
            rest = tail;
        }
        if indices.is_empty() {
            return Ok(());
        }
        let block = block_len(indices.len());
        slices
            .par_chunks_mut(block)
            .zip(locs.par_chunks(block).zip(indices.par_chunks(block)))
            .try_for_each_init(
                || self.worker(),
                |w, (ds, (ls, ix))| {
                    for ((d, l), &i) in ds.iter_mut().zip(ls).zip(ix) {
                        self.read_one(&st, w, i, l, d)?;
                    }
                    Ok(())
                },
            )
    }

    /// Decoded (and optionally stored) lengths of the records at `indices`.
    /// No I/O: the table is in memory.
    pub fn record_lengths(
        &self,
        indices: &[u64],
        decoded: &mut [u64],
        stored: Option<&mut [u64]>,
    ) -> Result<()> {
        if decoded.len() != indices.len()
            || stored.as_ref().is_some_and(|s| s.len() != indices.len())
        {
            return Err(Error::InvalidArgument(
                "length buffers must hold one entry per index".into(),
            ));
        }
        let st = self.read_state();
        let locs = self.lookup(&st, indices, |_, _, _| Ok(()))?;
        for (d, l) in decoded.iter_mut().zip(&locs) {
            *d = u64::from(l.logic_length);
        }
        if let Some(s) = stored {
            for (d, l) in s.iter_mut().zip(&locs) {
                *d = u64::from(l.phys_length);
            }
        }
        Ok(())
    }

    /// Looks every index up, checking range and the caller's expected
    /// length before any I/O.
    fn lookup(
        &self,
        st: &State,
        indices: &[u64],
        check: impl Fn(usize, u64, &Loc) -> Result<()>,
    ) -> Result<Vec<Loc>> {
        let len = st.table.len() as u64;
        let mut out = Vec::with_capacity(indices.len());
        for (k, &i) in indices.iter().enumerate() {
            if i >= len {
                return Err(Error::IndexOutOfRange { index: i, len });
            }
            let l = st.table[i as usize];
            check(k, i, &l)?;
            out.push(l);
        }
        Ok(out)
    }

    fn worker(&self) -> Worker<'_> {
        Worker {
            dctx: None,
            staging: Vec::new(),
            bounce: None,
        }
    }

    /// Reads (and decodes) one record into `dst`, whose length is the
    /// record's decoded length.
    fn read_one<'e>(
        &'e self,
        st: &State,
        w: &mut Worker<'e>,
        index: u64,
        loc: &Loc,
        dst: &mut [u8],
    ) -> Result<()> {
        let h = &st.chunks[loc.chunk_id as usize];
        let off = u64::from(loc.offset);
        let phys = loc.phys_length as usize;
        let mapped = h
            .map
            .as_ref()
            .map(|m| &m.bytes()[off as usize..off as usize + phys]);
        if self.codec.codec == Codec::Raw {
            match mapped {
                Some(src) => dst.copy_from_slice(src),
                None => pread_into(h, w, off, dst)?,
            }
            return Ok(());
        }
        let src: &[u8] = match mapped {
            Some(src) => src,
            None => {
                w.staging.resize(phys, 0);
                h.file
                    .read_at(&mut w.staging, off)
                    .map_err(|e| Error::io(&h.path, "read", e))?;
                &w.staging
            }
        };
        if w.dctx.is_none() {
            w.dctx = Some(self.codec.decompressor().map_err(|e| {
                Error::InvalidArgument(format!("cannot create a zstd context: {e}"))
            })?);
        }
        let dctx = w.dctx.as_mut().expect("set above");
        // The destination is exactly the recorded length, so a frame can
        // never decode into more than that.
        let n = dctx.decompress_to_buffer(src, dst).map_err(|e| {
            Error::corrupted(
                &h.path,
                format!(
                    "record {index}: zstd frame fails to decode into {} bytes: {e}",
                    dst.len()
                ),
            )
        })?;
        if n != dst.len() {
            return Err(Error::corrupted(
                &h.path,
                format!(
                    "record {index}: decoded {n} bytes, its entry says {}",
                    dst.len()
                ),
            ));
        }
        Ok(())
    }
}

/// Positional read into `dst`; an unaligned destination goes through a
/// page-aligned bounce buffer, which the kernel copies into much faster.
fn pread_into(
    h: &crate::engine::Handle,
    w: &mut Worker<'_>,
    off: u64,
    dst: &mut [u8],
) -> Result<()> {
    let io = |e| Error::io(&h.path, "read", e);
    if (dst.as_ptr() as usize).is_multiple_of(PAGE) || dst.len() < PAGE {
        return h.file.read_at(dst, off).map_err(io);
    }
    let bounce = w.bounce.get_or_insert_with(|| AlignedBuf::zeroed(BOUNCE));
    let mut done = 0usize;
    while done < dst.len() {
        let take = (dst.len() - done).min(BOUNCE);
        h.file
            .read_at(&mut bounce[..take], off + done as u64)
            .map_err(io)?;
        dst[done..done + take].copy_from_slice(&bounce[..take]);
        done += take;
    }
    Ok(())
}

/// Records per parallel job: contiguous blocks, a few per thread.
fn block_len(n: usize) -> usize {
    let jobs = rayon::current_num_threads().max(1) * 4;
    n.div_ceil(jobs).max(1)
}
