//! Append: compress in parallel, place at the frontier, write payloads, then
//! loc entries, then the header (the commit), then publish in memory. Under
//! each-append durability the payloads and entries are fsynced before the
//! header and the header after it; deferred appends sync nothing (see
//! `deferred`).

use crate::codec::Codec;
use crate::engine::{Engine, Handle};
use crate::error::{Error, Result};
use crate::format::{self, Header, LOC_SIZE, Loc, MAX_RECORD_LEN};
use crate::gather::INLINE_COST;
use crate::vfs::OpenFlags;
use crate::vfs::StorageFile as _;
use rayon::prelude::*;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// One vectored write: consecutive byte runs landing back to back.
struct WriteGroup<'a> {
    chunk: u32,
    offset: u64,
    bufs: Vec<&'a [u8]>,
}

impl Engine {
    /// Appends `data.len() / record_bytes` records of `record_bytes` each.
    /// Returns the index of the first new record (the old length). Empty
    /// `data` appends nothing and returns the length: a no-op, not an error
    /// (the typed stores above refuse an empty batch themselves).
    pub fn append_fixed(&self, data: &[u8], record_bytes: usize) -> Result<u64> {
        if record_bytes == 0 {
            return Err(Error::InvalidArgument("record_bytes must be > 0".into()));
        }
        if !data.len().is_multiple_of(record_bytes) {
            return Err(Error::InvalidArgument(format!(
                "{} bytes are not a whole number of {record_bytes}-byte records",
                data.len()
            )));
        }
        let recs: Vec<&[u8]> = data.chunks_exact(record_bytes).collect();
        self.append_records(&recs)
    }

    /// Appends variable-width records: record k is
    /// `data[offsets[k]..offsets[k + 1]]` (`offsets.len() == n + 1`,
    /// `offsets[0] == 0`, nondecreasing, last `== data.len()`). Records must
    /// be non-empty; zero records (`offsets == [0]`) is a no-op returning
    /// the length, as in [`Engine::append_fixed`].
    pub fn append_var(&self, data: &[u8], offsets: &[usize]) -> Result<u64> {
        let recs = split_var(data, offsets, "")?;
        self.append_records(&recs)
    }

    /// Appends items made of a payload record and a metadata record: item k
    /// becomes physical records `2k'` (payload) and `2k' + 1` (meta), all in
    /// one commit. Returns the first new physical index.
    pub fn append_paired(
        &self,
        payload: &[u8],
        payload_offsets: &[usize],
        meta: &[u8],
        meta_offsets: &[usize],
    ) -> Result<u64> {
        let p = split_var(payload, payload_offsets, "payload ")?;
        let m = split_var(meta, meta_offsets, "meta ")?;
        if p.len() != m.len() {
            return Err(Error::InvalidArgument(format!(
                "{} payload records but {} meta records",
                p.len(),
                m.len()
            )));
        }
        let recs: Vec<&[u8]> = p.iter().zip(&m).flat_map(|(a, b)| [*a, *b]).collect();
        self.append_inner(&recs, true)
    }

    /// The one append path: every public form lands here.
    pub(crate) fn append_records(&self, recs: &[&[u8]]) -> Result<u64> {
        self.append_inner(recs, false)
    }

    /// `append_records`; `paired`: the store's length must be even (checked
    /// under the append lock, so no other append can change it in between).
    fn append_inner(&self, recs: &[&[u8]], paired: bool) -> Result<u64> {
        self.check_writable()?;
        for (i, r) in recs.iter().enumerate() {
            if r.len() as u64 > MAX_RECORD_LEN {
                return Err(Error::InvalidArgument(format!(
                    "record {i} is {} bytes, over the 2^31-byte limit",
                    r.len()
                )));
            }
        }
        if recs.is_empty() {
            let len = self.len();
            if paired && !len.is_multiple_of(2) {
                return Err(odd_length(len));
            }
            return Ok(len);
        }
        // Compress (in parallel, one context per rayon job) or store as is,
        // before taking the append lock: a rayon thread waiting for its
        // share of the compression runs other queued jobs meanwhile, and one
        // of them may be another append on this handle, which would block
        // on the lock this thread holds.
        let frames: Vec<Vec<u8>>;
        let stored: Vec<&[u8]> = if self.codec.codec == Codec::Raw {
            recs.to_vec()
        } else {
            frames = self.compress_all(recs)?;
            frames.iter().map(|f| &f[..]).collect()
        };
        let _guard = self.lock_append();
        self.check_poisoned()?;
        // Deferred deletes reach their slots before this append writes
        // past them (and a header that includes theirs).
        self.flush_deletes()?;
        let (header, tail_handle, nlocs) = {
            let st = self.read_state();
            (
                st.header,
                st.chunks.last().expect("chunk 0 always exists").clone(),
                st.locs.len(),
            )
        };
        let first = header.length;
        if paired && !first.is_multiple_of(2) {
            return Err(odd_length(first));
        }
        let n = recs.len() as u64;
        let new_len = first
            .checked_add(n)
            .ok_or_else(|| Error::InvalidArgument("store length overflows".into()))?;

        // Placement, in table order.
        let cap = self.cfg.chunk_capacity;
        let mut chunk = header.tail_chunk;
        let mut off = u64::from(header.tail_offset);
        let mut ends: Vec<u64> = vec![off]; // ends[c - tail_chunk]
        let mut locs = Vec::with_capacity(recs.len());
        for (i, (s, r)) in stored.iter().zip(recs).enumerate() {
            let phys = s.len() as u64;
            let (c, o) = format::place(chunk, off, phys, cap).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "record {i} stores {phys} bytes, which no chunk of capacity {cap} can hold"
                ))
            })?;
            if c != chunk {
                ends.push(0);
            }
            chunk = c;
            off = o + phys;
            *ends.last_mut().expect("nonempty") = off;
            locs.push(Loc {
                offset: o as u32,
                phys_length: phys as u32,
                logic_length: r.len() as u32,
                chunk_id: c,
            });
        }

        let defers = self.defers();
        // Deferred appends with no deferred delete before them since the
        // last durable point commit to `durable.zr`, not `meta.zr`.
        let pending = defers && !self.armed.load(Ordering::Acquire);

        // New chunk files past the tail; truncated, as a failed earlier
        // append may have left bytes in them.
        let mut new_chunks: Vec<Arc<Handle>> = Vec::new();
        for c in (u64::from(header.tail_chunk) + 1)..=u64::from(chunk) {
            let p = self.dir.join(format::chunk_name(c));
            self.dir_dirty.store(true, Ordering::Release);
            let f = self
                .cfg
                .vfs
                .open(&p, OpenFlags::CreateTruncate)
                .map_err(|e| self.poison(Error::io(&p, "create", e)))?;
            let map = Self::map_chunk(&self.cfg, &*f);
            new_chunks.push(Arc::new(Handle {
                file: crate::vfs::Tracked::new(f),
                path: p,
                map,
            }));
        }
        let handle_of = |c: u32| -> &Arc<Handle> {
            if c == header.tail_chunk {
                &tail_handle
            } else {
                &new_chunks[(c - header.tail_chunk - 1) as usize]
            }
        };

        // Payloads: vectored writes of about flush_bytes, one file after
        // the other in order, files in parallel. Two threads writing one
        // file only queue on its inode lock (the kernel spins on it: a
        // quarter of a 256 x 4 KiB append loop's time when they did).
        let groups = self.write_groups(&stored, &locs);
        let write_file = |gs: &[WriteGroup]| {
            gs.iter().try_for_each(|g| {
                let h = handle_of(g.chunk);
                h.file
                    .write_vectored_at(&g.bufs, g.offset)
                    .map_err(|e| self.poison(Error::io(&h.path, "write", e)))
            })
        };
        let per_chunk: Vec<&[WriteGroup]> = groups.chunk_by(|a, b| a.chunk == b.chunk).collect();
        match per_chunk[..] {
            [one] => write_file(one)?,
            _ if !may_wait_on_pool() => per_chunk.iter().try_for_each(|gs| write_file(gs))?,
            _ => per_chunk.par_iter().try_for_each(|gs| write_file(gs))?,
        }

        // Loc entries, split at segment boundaries.
        let seg = self.cfg.loc_segment_entries;
        let mut new_locs: Vec<Arc<Handle>> = Vec::new();
        let mut enc = Vec::with_capacity(locs.len() * LOC_SIZE);
        for l in &locs {
            enc.extend_from_slice(&l.encode());
        }
        let mut idx = first;
        let mut pos = 0usize;
        while idx < new_len {
            let s = idx / seg;
            let take = (new_len - idx).min(seg - idx % seg);
            let bytes = &enc[pos..pos + take as usize * LOC_SIZE];
            let handle = if (s as usize) < nlocs {
                self.read_state().locs[s as usize].clone()
            } else {
                let k = s as usize - nlocs;
                if k == new_locs.len() {
                    let p = self.dir.join(format::loc_name(s));
                    self.dir_dirty.store(true, Ordering::Release);
                    let f = self
                        .cfg
                        .vfs
                        .open(&p, OpenFlags::Create)
                        .map_err(|e| self.poison(Error::io(&p, "create", e)))?;
                    new_locs.push(Arc::new(Handle {
                        file: crate::vfs::Tracked::new(f),
                        path: p,
                        map: None,
                    }));
                }
                new_locs[k].clone()
            };
            handle
                .file
                .write_at(bytes, (idx % seg) * LOC_SIZE as u64)
                .map_err(|e| self.poison(Error::io(&handle.path, "write", e)))?;
            idx += take;
            pos += bytes.len();
        }

        // Power-loss ordering, each-append durability: everything the new
        // header names is durable before the header is written (one fsync
        // per touched file, and one of the directory when the append created
        // files), and the header after it. Deferred appends skip both: a
        // pending one leaves `meta.zr` as it is (durable) until the sync,
        // and after a deferred delete the marker written by `arm` lets an
        // open after a power cut go back to the last durable header.
        if !defers {
            self.sync_before_commit(&tail_handle, &new_chunks, first, nlocs, &new_locs)?;
        }
        // The commit.
        let new_header = Header {
            codec: header.codec,
            tail_chunk: chunk,
            tail_offset: off as u32,
            length: new_len,
        };
        if pending {
            self.write_pending(&header, &new_header)?;
        } else {
            self.write_header(&new_header)?;
        }
        if !defers {
            self.meta
                .file
                .sync()
                .map_err(|e| self.poison(Error::io(&self.meta.path, "sync", e)))?;
        }

        // Publish.
        let mut st = self.write_state();
        st.table.to_mut().extend_from_slice(&locs);
        st.live_bytes += locs.iter().map(|l| u64::from(l.phys_length)).sum::<u64>();
        let t = header.tail_chunk as usize;
        for (k, e) in ends.iter().enumerate() {
            if t + k < st.chunk_ends.len() {
                st.chunk_ends[t + k] = *e;
            } else {
                st.chunk_ends.push(*e);
            }
        }
        st.chunks.extend(new_chunks);
        st.locs.extend(new_locs);
        st.header = new_header;
        self.len.store(new_len, Ordering::Release);
        Ok(first)
    }

    /// fsyncs every file an append touched (and the directory when it
    /// created files), so the header written next names only durable bytes.
    fn sync_before_commit(
        &self,
        tail_handle: &Arc<Handle>,
        new_chunks: &[Arc<Handle>],
        first: u64,
        nlocs: usize,
        new_locs: &[Arc<Handle>],
    ) -> Result<()> {
        let seg = self.cfg.loc_segment_entries;
        let mut touched: Vec<&Arc<Handle>> = vec![tail_handle];
        touched.extend(new_chunks.iter());
        let first_seg = (first / seg) as usize;
        let old_locs: Vec<Arc<Handle>> = if first_seg < nlocs {
            self.read_state().locs[first_seg..].to_vec()
        } else {
            Vec::new()
        };
        touched.extend(old_locs.iter());
        touched.extend(new_locs.iter());
        // Concurrently: on a journaling file system the flushes of the chunk
        // and the loc segment can then share one journal commit.
        let sync = |h: &&Arc<Handle>| {
            h.file
                .sync()
                .map_err(|e| self.poison(Error::io(&h.path, "sync", e)))
        };
        if may_wait_on_pool() {
            touched.par_iter().try_for_each(sync)?;
        } else {
            touched.iter().try_for_each(sync)?;
        }
        if !new_chunks.is_empty() || !new_locs.is_empty() {
            self.cfg
                .vfs
                .sync_dir(&self.dir)
                .map_err(|e| self.poison(Error::io(&self.dir, "sync directory", e)))?;
        }

        Ok(())
    }

    fn compress_all(&self, recs: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        let level = self.codec.level;
        let total = recs.iter().fold(0usize, |t, r| {
            t.saturating_add(compress_cost(level, r.len()))
        });
        // Small appends (one record, a few small ones) compress here: handing
        // them to the pool costs a wake-up each way, more than the work.
        if total <= INLINE_COST
            || recs.len() < 2
            || !crate::pool_usable()
            || rayon::current_num_threads() <= 1
        {
            let mut c = self.codec.compressor();
            return recs.iter().map(|r| c.compress(r)).collect();
        }
        recs.par_iter()
            .with_min_len(4)
            .map_init(|| self.codec.compressor(), |c, r| c.compress(r))
            .collect()
    }

    /// Packs the stored bytes into vectored writes of about `flush_bytes`
    /// (at most 1024 buffers each), splitting large records, never crossing
    /// a chunk.
    fn write_groups<'a>(&self, stored: &[&'a [u8]], locs: &[Loc]) -> Vec<WriteGroup<'a>> {
        let flush = self.cfg.flush_bytes;
        let mut groups: Vec<WriteGroup<'a>> = Vec::new();
        let mut cur: Option<(WriteGroup<'a>, usize)> = None;
        for (s, l) in stored.iter().zip(locs) {
            let mut rest: &'a [u8] = s;
            let mut at = u64::from(l.offset);
            while !rest.is_empty() {
                let contiguous = matches!(&cur, Some((g, bytes))
                    if g.chunk == l.chunk_id && g.offset + *bytes as u64 == at
                        && *bytes < flush && g.bufs.len() < 1024);
                if !contiguous {
                    if let Some((g, _)) = cur.take() {
                        groups.push(g);
                    }
                    cur = Some((
                        WriteGroup {
                            chunk: l.chunk_id,
                            offset: at,
                            bufs: Vec::new(),
                        },
                        0,
                    ));
                }
                let (g, bytes) = cur.as_mut().expect("set above");
                let take = rest.len().min(flush - *bytes);
                g.bufs.push(&rest[..take]);
                *bytes += take;
                at += take as u64;
                rest = &rest[take..];
            }
        }
        if let Some((g, _)) = cur {
            groups.push(g);
        }
        groups
    }
}

fn odd_length(len: u64) -> Error {
    Error::InvalidArgument(format!("paired append on a store of odd length {len}"))
}

/// Estimated cost of compressing one record of `len` bytes at `level`, in
/// nanoseconds of one core; rough, since only its sum against
/// [`INLINE_COST`] matters. Measured with a reused context: 3.9 us for a
/// 4 KiB record at level 3 (about 1 ns a byte, plus a frame's setup), and
/// at level 19 34 ns a byte at 4 KiB, 460 at 256 KiB.
fn compress_cost(level: i32, len: usize) -> usize {
    let per_byte: usize = match level {
        ..=3 => 1,
        4..=9 => 8,
        10..=15 => 30,
        _ => 100,
    };
    per_byte.saturating_mul(len).saturating_add(2000)
}

/// Whether a thread holding the append lock may hand work to rayon's pool
/// and wait for it. Not in a forked child (the pool's threads are in the
/// parent), and not on a pool thread: while it waits, it runs other queued
/// jobs, and one that appends to this handle would block on the lock it
/// holds, forever.
fn may_wait_on_pool() -> bool {
    crate::pool_usable() && rayon::current_thread_index().is_none()
}

/// Splits `data` at `offsets` into non-empty records.
fn split_var<'a>(data: &'a [u8], offsets: &[usize], what: &str) -> Result<Vec<&'a [u8]>> {
    if offsets.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{what}offsets must hold n + 1 entries (got none)"
        )));
    }
    if offsets[0] != 0 || *offsets.last().expect("nonempty") != data.len() {
        return Err(Error::InvalidArgument(format!(
            "{what}offsets must start at 0 and end at the data length {} (got {} .. {})",
            data.len(),
            offsets[0],
            offsets.last().expect("nonempty")
        )));
    }
    let mut recs = Vec::with_capacity(offsets.len() - 1);
    for (k, w) in offsets.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(Error::InvalidArgument(format!(
                "{what}offsets decrease at record {k}"
            )));
        }
        if w[1] == w[0] {
            return Err(Error::InvalidArgument(format!(
                "{what}record {k} is empty (records must be non-empty)"
            )));
        }
        recs.push(&data[w[0]..w[1]]);
    }
    Ok(recs)
}
