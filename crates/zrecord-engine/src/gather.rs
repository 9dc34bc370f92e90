//! Gather: a batch of records into caller memory, in parallel, decoded
//! straight into the destination.

use crate::aligned::{AlignedBuf, PAGE};
use crate::codec::{Codec, CodecState};
use crate::engine::{Engine, Handle, State, check_entry, entry_reachable};
use crate::error::{Error, Result};
use crate::format::Loc;
use crate::table::View;
use crate::vfs::StorageFile as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLockReadGuard};
use std::time::{Duration, Instant};
use zstd::zstd_safe::DCtx;

/// Bounce buffer size for positional reads into unaligned destinations.
const BOUNCE: usize = 256 << 10;

/// Estimated cost of reading one record, in nanoseconds of one core: a
/// copy moves about 8 stored bytes per ns; a zstd frame costs about 1 us
/// of setup (header, Huffman/FSE tables: what dominates small frames) plus
/// about 4 ns per decoded byte.
fn record_cost(codec: Codec, loc: &Loc) -> usize {
    match codec {
        Codec::Raw => 20 + loc.phys_length as usize / 8,
        Codec::Zstd | Codec::ZstdDict => 1000 + 4 * loc.logic_length as usize,
    }
}

/// Gathers (and appends' compression) estimated below this many
/// nanoseconds run on the calling thread: splitting them costs about as
/// much as it saves (a helper thread needs microseconds to wake, far more
/// when other processes hold the cores). A batch of a few hundred KiB of
/// raw records stays here, and so do sixteen 4 KiB records at level 3.
pub(crate) const INLINE_COST: usize = 100_000;

/// Parallel jobs per thread: many and small (tens of microseconds each for
/// a batch of compressed records), so the threads finish within one small
/// job of each other. With 4 a job, the calling thread and its helper
/// ended about 50 us apart on a 540 us batch of 256 ragged zstd records.
const JOBS_PER_THREAD: usize = 16;

/// How long the calling thread of a parallel gather, its own share done,
/// polls for its running helpers to finish before blocking on the pool: a
/// blocked thread took about 45 us to be woken, longer than a helper's last
/// job usually has left. Helpers not yet started have no job left to do;
/// the caller blocks for them at once.
const FINISH_SPIN: Duration = Duration::from_micros(200);

/// How long a pool thread stays awake (see [`linger`]) after a parallel
/// gather, or after the last pool job it ran while lingering.
const LINGER: Duration = Duration::from_micros(200);

/// The longest one [`linger`] job runs. A pool thread may pick the job up
/// while it waits itself (in a join, a scope, `rayon::yield_now`) and then
/// cannot return to its own work until the job ends: with the pool never
/// out of work, a linger bounded only by [`LINGER`] without work held such a
/// thread for as long as the pool stayed busy. A job still running work at
/// this age leaves a successor on the pool and ends.
const LINGER_TURN: Duration = Duration::from_micros(1000);

/// Set while a [`linger`] job is queued or running (at most one at a time).
static LINGERING: AtomicBool = AtomicBool::new(false);

/// Keeps one pool thread awake for [`LINGER`] after a parallel gather,
/// running whatever pool work arrives meanwhile (`rayon::yield_now`), so
/// the helper job of the next gather (a training loop's next batch) starts
/// at once. A sleeping pool thread took 50 to 90 us to wake for it, a
/// sixth of a 500 us batch with one helper. A busy pool loses no work: the
/// lingering thread runs its jobs too; a thread that took the job up inside
/// a wait of its own (a join, loaderx's consumer on a pool thread) is back
/// to it within [`LINGER_TURN`] (and the pool job it ran last). An idle
/// pool spends at most `LINGER` of one core after the last gather, yielding
/// to the OS between polls. Gathers made on a pool thread leave no linger.
fn linger() {
    // A caller on a pool thread is part of that pool's own parallel work,
    // which keeps its threads busy; and the job would land on the caller's
    // own deque, to be run by its next wait.
    if rayon::current_thread_index().is_some() || LINGERING.swap(true, Ordering::AcqRel) {
        return;
    }
    rayon::spawn(linger_turn);
}

/// One [`linger`] job: ends after `LINGER` without pool work, clearing
/// `LINGERING`, or after `LINGER_TURN`, handing on to a successor.
fn linger_turn() {
    let start = Instant::now();
    let mut until = start + LINGER;
    loop {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => {
                let now = Instant::now();
                if now - start >= LINGER_TURN {
                    // `LINGERING` stays set for the successor.
                    rayon::spawn(linger_turn);
                    return;
                }
                until = now + LINGER;
            }
            Some(rayon::Yield::Idle) if Instant::now() < until => std::thread::yield_now(),
            _ => break,
        }
    }
    LINGERING.store(false, Ordering::Release);
}

/// Per-job scratch. The zstd context comes from the handle's pool on first
/// use and goes back when the job ends.
struct Worker<'a> {
    codec: &'a CodecState,
    dctx: Option<DCtx<'static>>,
    staging: Vec<u8>,
    bounce: Option<AlignedBuf>,
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        if let Some(d) = self.dctx.take() {
            self.codec.put_dctx(d);
        }
    }
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
            return Err(Error::InvalidArgument(match need {
                Some(need) => format!(
                    "destination is {} bytes, {} records of {record_bytes} bytes need {need}",
                    dst.len(),
                    indices.len()
                ),
                None => format!(
                    "destination is {} bytes, {} records of {record_bytes} bytes need more than the address space",
                    dst.len(),
                    indices.len()
                ),
            }));
        }
        let st = self.read_state();
        let locs = self.lookup(&st, indices, |_, i, l| {
            if l.logic_length as usize == record_bytes {
                Ok(())
            } else {
                Err(Error::RecordLength {
                    record: i,
                    stored: l.logic_length.into(),
                    loc: crate::format::loc_name(i / self.cfg.loc_segment_entries),
                    asked: record_bytes as u64,
                })
            }
        })?;
        let mut slices: Vec<&mut [u8]> = dst.chunks_mut(record_bytes).collect();
        self.read_all(st, &locs, indices, &mut slices)
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
                Err(Error::RecordLength {
                    record: i,
                    stored: l.logic_length.into(),
                    loc: crate::format::loc_name(i / self.cfg.loc_segment_entries),
                    asked: want as u64,
                })
            }
        })?;
        let mut slices = carve(&mut dst[offsets[0]..], offsets);
        self.read_all(st, &locs, indices, &mut slices)
    }

    /// Reads the records at `indices` back to back, with one table lookup
    /// per record (where [`Engine::record_lengths`] then
    /// [`Engine::gather_var`] look each up twice).
    ///
    /// Replaces `offsets` with the `indices.len() + 1` record boundaries
    /// (decoded lengths from the table, before any I/O), then calls `dst`
    /// with them: it returns a destination of at least the last offset in
    /// bytes (or an error, which aborts the gather before any I/O). Record
    /// k lands in `dst[offsets[k]..offsets[k + 1]]`. `dst` runs while the
    /// gather holds the store's read lock, so it must not call back into
    /// this engine.
    ///
    /// ```
    /// use zrecord_engine::{Codec, CreateOptions, Engine};
    /// let dir = tempfile::tempdir()?;
    /// let e = Engine::create(dir.path().join("s"), &CreateOptions::new(Codec::Zstd))?;
    /// e.append_var(b"abcdef", &[0, 2, 6])?;
    /// let (mut offsets, mut buf) = (Vec::new(), Vec::new());
    /// e.gather_packed(&[1, 0], &mut offsets, |o| {
    ///     buf.resize(o[o.len() - 1], 0);
    ///     Ok::<_, zrecord_engine::Error>(&mut buf[..])
    /// })?;
    /// assert_eq!((&buf[..], &offsets[..]), (&b"cdefab"[..], &[0, 4, 6][..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn gather_packed<'d, E: From<Error>>(
        &self,
        indices: &[u64],
        offsets: &mut Vec<usize>,
        dst: impl FnOnce(&[usize]) -> std::result::Result<&'d mut [u8], E>,
    ) -> std::result::Result<(), E> {
        let st = self.read_state();
        let locs = self.lookup(&st, indices, |_, _, _| Ok(()))?;
        offsets.clear();
        offsets.reserve(locs.len() + 1);
        offsets.push(0);
        let mut at = 0usize;
        for l in &locs {
            at = at
                .checked_add(l.logic_length as usize)
                .ok_or_else(|| Error::InvalidArgument("gather size overflows".into()))?;
            offsets.push(at);
        }
        let dst = dst(offsets)?;
        if dst.len() < at {
            return Err(Error::InvalidArgument(format!(
                "destination is {} bytes, the records need {at}",
                dst.len()
            ))
            .into());
        }
        let mut slices = carve(dst, offsets);
        Ok(self.read_all(st, &locs, indices, &mut slices)?)
    }

    /// Decoded (and optionally stored) lengths of the records at `indices`.
    /// No I/O call: the table is in memory, or mapped.
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
    ///
    /// An entry read from a mapped loc segment is checked again for what
    /// the reads rely on (see [`entry_reachable`]): a process that ignores
    /// the store lock may have rewritten it since the open validated it,
    /// and the reads index the chunks and their mappings by it. Entries
    /// copied at open were validated then and cannot change.
    fn lookup(
        &self,
        st: &State,
        indices: &[u64],
        check: impl Fn(usize, u64, &Loc) -> Result<()>,
    ) -> Result<Vec<Loc>> {
        let len = st.table.len();
        let out_of_range = |i| Error::IndexOutOfRange {
            path: self.dir.clone(),
            index: i,
            len,
        };
        let mut out = Vec::with_capacity(indices.len());
        match st.table.view() {
            View::Owned(table) => {
                for (k, &i) in indices.iter().enumerate() {
                    if i >= len {
                        return Err(out_of_range(i));
                    }
                    let l = table[i as usize];
                    check(k, i, &l)?;
                    out.push(l);
                }
            }
            View::Mapped(view) => {
                let (header, ends) = (&st.header, &st.chunk_ends[..]);
                if let Some(table) = view.single() {
                    for (k, &i) in indices.iter().enumerate() {
                        let Some(e) = table.get(i as usize).filter(|_| i < len) else {
                            return Err(out_of_range(i));
                        };
                        let l = Loc::decode(e);
                        if !entry_reachable(&l, header, ends) {
                            return Err(self.unsound(st, i, &l));
                        }
                        check(k, i, &l)?;
                        out.push(l);
                    }
                } else {
                    for (k, &i) in indices.iter().enumerate() {
                        if i >= len {
                            return Err(out_of_range(i));
                        }
                        let l = view.get(i);
                        if !entry_reachable(&l, header, ends) {
                            return Err(self.unsound(st, i, &l));
                        }
                        check(k, i, &l)?;
                        out.push(l);
                    }
                }
            }
        }
        Ok(out)
    }

    /// The error for entry `l` of record `i`, which failed
    /// [`entry_reachable`] (and so [`check_entry`]).
    #[cold]
    #[inline(never)]
    fn unsound(&self, st: &State, i: u64, l: &Loc) -> Error {
        let d = check_entry(l, i, &st.header, &st.chunk_ends)
            .err()
            .unwrap_or_default();
        Error::corrupted_record(self.loc_path(i), i, format!("its entry: {d}"))
    }

    /// Reads record k (`indices[k]`, entry `locs[k]`) into `dsts[k]`, whose
    /// length is its decoded length: on the calling thread when the gather
    /// is small, else in parallel jobs of about equal estimated cost, a few
    /// per thread.
    fn read_all(
        &self,
        st: RwLockReadGuard<'_, State>,
        locs: &[Loc],
        indices: &[u64],
        dsts: &mut [&mut [u8]],
    ) -> Result<()> {
        let cost = |l: &Loc| record_cost(self.codec.codec, l);
        let total: usize = locs.iter().map(cost).sum();
        // Small gathers (a one-record read among them) run here before any
        // question about the pool: asking costs a `getpid`, about a tenth
        // of a one-record read from Python.
        if total <= INLINE_COST || locs.len() < 2 {
            return self.read_run(&st.chunks, &mut self.worker(), dsts, locs, indices);
        }
        if !crate::pool_usable() {
            // A forked child: the pool's threads are in the parent.
            return self.read_run(&st.chunks, &mut self.worker(), dsts, locs, indices);
        }
        if rayon::current_num_threads() <= 1 {
            return self.read_run(&st.chunks, &mut self.worker(), dsts, locs, indices);
        }
        let threads = rayon::current_num_threads();
        // The state lock is released before waiting on the pool: a rayon
        // thread that waits runs other queued jobs meanwhile, and an append
        // among them would wait forever for the write lock this thread's
        // read lock holds back (and, with that writer queued, so would
        // another gather's read lock). The chunk handles are all the reads
        // need; they stay valid without the lock, since only compaction,
        // which takes `&mut self`, drops or truncates chunks.
        let chunks: Vec<Arc<Handle>> = st.chunks.clone();
        drop(st);
        let chunks = &chunks[..];
        // Cut into jobs of about `target` cost each.
        let target = total.div_ceil(threads * JOBS_PER_THREAD);
        let mut jobs = Vec::with_capacity(threads * JOBS_PER_THREAD + 1);
        let (mut rest_d, mut rest_l, mut rest_i) = (dsts, locs, indices);
        while !rest_l.is_empty() {
            let mut acc = 0usize;
            let mut n = 0usize;
            while n < rest_l.len() && acc < target {
                acc += cost(&rest_l[n]);
                n += 1;
            }
            let (d, d2) = std::mem::take(&mut rest_d).split_at_mut(n);
            let (l, l2) = rest_l.split_at(n);
            let (i, i2) = rest_i.split_at(n);
            jobs.push(Mutex::new(Some((d, l, i))));
            (rest_d, rest_l, rest_i) = (d2, l2, i2);
        }
        // The calling thread works through the jobs at once, taking them in
        // order from a shared counter, while `threads - 1` helpers spawned
        // on the pool join in as soon as they wake: a caller outside the
        // pool never sits blocked while a pool thread wakes up to start.
        let next = AtomicUsize::new(0);
        let failed: Mutex<Option<Error>> = Mutex::new(None);
        let stop = AtomicBool::new(false);
        let helpers = threads.min(jobs.len()).saturating_sub(1);
        let (started, finished) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let run = || {
            let mut w = self.worker();
            loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                if j >= jobs.len() || stop.load(Ordering::Relaxed) {
                    return;
                }
                let job = jobs[j].lock().unwrap_or_else(|e| e.into_inner()).take();
                let Some((ds, ls, ix)) = job else { continue };
                if let Err(e) = self.read_run(chunks, &mut w, ds, ls, ix) {
                    stop.store(true, Ordering::Relaxed);
                    failed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get_or_insert(e);
                    return;
                }
            }
        };
        rayon::in_place_scope(|s| {
            for _ in 0..helpers {
                s.spawn(|_| {
                    started.fetch_add(1, Ordering::Relaxed);
                    run();
                    finished.fetch_add(1, Ordering::Release);
                });
            }
            run();
            // Every job is taken: poll (yielding the core to anything else
            // runnable) while the helpers finish their last ones, then let
            // the scope block for any still out.
            let since = Instant::now();
            while started.load(Ordering::Relaxed) == helpers
                && finished.load(Ordering::Acquire) < helpers
                && since.elapsed() < FINISH_SPIN
            {
                std::thread::yield_now();
            }
        });
        linger();
        match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Reads a run of records in order, hinting the CPU to fetch the
    /// stored bytes of the record `PREFETCH_AHEAD` places on while the
    /// current one is copied or decoded: random records in a mapped file are
    /// cache (and TLB) misses that would otherwise stall each copy.
    fn read_run(
        &self,
        chunks: &[Arc<Handle>],
        w: &mut Worker<'_>,
        ds: &mut [&mut [u8]],
        ls: &[Loc],
        ix: &[u64],
    ) -> Result<()> {
        for l in ls.iter().take(PREFETCH_AHEAD) {
            prefetch(chunks, l);
        }
        for (k, ((d, l), &i)) in ds.iter_mut().zip(ls).zip(ix).enumerate() {
            if let Some(ahead) = ls.get(k + PREFETCH_AHEAD) {
                prefetch(chunks, ahead);
            }
            self.read_one(chunks, w, i, l, d)?;
        }
        Ok(())
    }

    fn worker(&self) -> Worker<'_> {
        Worker {
            codec: &self.codec,
            dctx: None,
            staging: Vec::new(),
            bounce: None,
        }
    }

    /// Reads (and decodes) one record into `dst`, whose length is the
    /// record's decoded length.
    fn read_one(
        &self,
        chunks: &[Arc<Handle>],
        w: &mut Worker<'_>,
        index: u64,
        loc: &Loc,
        dst: &mut [u8],
    ) -> Result<()> {
        let h = &chunks[loc.chunk_id as usize];
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
        let mut dctx = match w.dctx.take() {
            Some(d) => d,
            None => self.codec.take_dctx()?,
        };
        // The destination is exactly the recorded length, so a frame can
        // never decode into more than that.
        let n = self.codec.decompress(&mut dctx, src, dst).map_err(|e| {
            // The context is dropped, not pooled, after a failed frame.
            Error::corrupted_record(
                &h.path,
                index,
                format!("zstd frame fails to decode into {} bytes: {e}", dst.len()),
            )
        })?;
        w.dctx = Some(dctx);
        if n != dst.len() {
            return Err(Error::corrupted_record(
                &h.path,
                index,
                format!("decoded {n} bytes, its entry says {}", dst.len()),
            ));
        }
        Ok(())
    }
}

/// How many records ahead [`Engine::read_run`] prefetches.
const PREFETCH_AHEAD: usize = 8;
/// Cache lines prefetched per record; the hardware prefetcher streams the
/// rest of a record once its first lines are touched.
#[cfg(target_arch = "x86_64")]
const PREFETCH_LINES: usize = 8;

/// Hints the CPU to load the first lines of a record's stored bytes (mmap
/// read path; a no-op otherwise). A prefetch never faults.
#[inline]
fn prefetch(chunks: &[Arc<Handle>], loc: &Loc) {
    #[cfg(target_arch = "x86_64")]
    if let Some(m) = chunks
        .get(loc.chunk_id as usize)
        .and_then(|h| h.map.as_ref())
    {
        let bytes = m.bytes();
        let start = loc.offset as usize;
        let end = start
            .saturating_add(loc.phys_length as usize)
            .min(bytes.len());
        for at in (start..end).step_by(64).take(PREFETCH_LINES) {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            // SAFETY: SSE is part of the x86-64 baseline, so the
            // instruction exists; a prefetch is only a cache hint on an
            // address inside the mapping, and never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(bytes[at..].as_ptr().cast()) };
        }
    }
    // Elsewhere (aarch64's prefetch intrinsic is not stable) the hardware
    // prefetcher is left to find the records alone.
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (chunks, loc);
}

/// Carves `dst` into one slice per record: `offsets[k]..offsets[k + 1]`,
/// relative to `offsets[0]` at the start of `dst` (nondecreasing, ending
/// within `dst`: checked by the callers).
fn carve<'d>(dst: &'d mut [u8], offsets: &[usize]) -> Vec<&'d mut [u8]> {
    let mut slices: Vec<&mut [u8]> = Vec::with_capacity(offsets.len().saturating_sub(1));
    let mut rest = dst;
    for w in offsets.windows(2) {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(w[1] - w[0]);
        slices.push(head);
        rest = tail;
    }
    slices
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{CreateOptions, train_dictionary};

    /// Records of 1..=`max` bytes, compressible, different per index.
    fn records(n: usize, max: usize) -> (Vec<u8>, Vec<usize>) {
        let mut data = Vec::new();
        let mut offsets = vec![0];
        for i in 0..n {
            let len = 1 + (i * 7919) % max;
            data.extend((0..len).map(|j| ((i + j / 3) % 251) as u8));
            offsets.push(data.len());
        }
        (data, offsets)
    }

    /// Small gathers (run on the caller) and large ones (parallel jobs
    /// sized by stored bytes), repeated so pooled zstd contexts are reused,
    /// with and without a dictionary, all agree with what was appended.
    #[test]
    fn packed_gathers_match_inline_and_parallel_with_pooled_contexts() {
        let (data, offsets) = records(600, 3000);
        let dict = train_dictionary(
            &data,
            &offsets.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>(),
            4096,
        )
        .unwrap();
        for opts in [
            CreateOptions::new(Codec::Raw),
            CreateOptions::new(Codec::Zstd),
            CreateOptions::with_dictionary(dict),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let e = Engine::create(dir.path().join("s"), &opts).unwrap();
            e.append_var(&data, &offsets).unwrap();
            for picks in [vec![5u64, 3], (0..600u64).rev().step_by(2).collect()] {
                for _ in 0..3 {
                    gather_and_check(&e, &picks, &data, &offsets);
                }
            }
            assert!(e.codec.dctx_pool_len() <= rayon::current_num_threads());
        }
    }

    /// Gathers `picks` from `e` and checks every record against `data`.
    fn gather_and_check(e: &Engine, picks: &[u64], data: &[u8], offsets: &[usize]) {
        let (mut offs, mut buf) = (Vec::new(), Vec::new());
        e.gather_packed(picks, &mut offs, |o| {
            buf.resize(o[o.len() - 1], 0);
            Ok::<_, Error>(&mut buf[..])
        })
        .unwrap();
        for (k, &i) in picks.iter().enumerate() {
            let i = i as usize;
            assert_eq!(
                &buf[offs[k]..offs[k + 1]],
                &data[offsets[i]..offsets[i + 1]]
            );
        }
    }

    /// Parallel gathers whose helpers cannot start (every pool thread held
    /// by other work) finish once the pool frees up, with the caller doing
    /// every job; gathers made on pool threads of another pool, and from
    /// many threads at once (the lingering thread running their helpers),
    /// all return the records appended.
    #[test]
    fn parallel_gathers_survive_a_busy_pool_pool_callers_and_concurrency() {
        use std::sync::{Condvar, Mutex as M};
        let (data, offsets) = records(800, 3000);
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::create(dir.path().join("s"), &CreateOptions::new(Codec::Zstd)).unwrap();
        e.append_var(&data, &offsets).unwrap();
        let picks: Vec<u64> = (0..800u64).rev().step_by(3).collect();

        // Every thread of the global pool blocked on a gate.
        let threads = rayon::current_num_threads();
        let gate = Arc::new((M::new(false), Condvar::new()));
        let running = Arc::new(AtomicUsize::new(0));
        for _ in 0..threads {
            let (gate, running) = (gate.clone(), running.clone());
            rayon::spawn(move || {
                running.fetch_add(1, Ordering::SeqCst);
                let (open, cv) = &*gate;
                let mut g = open.lock().unwrap();
                while !*g {
                    g = cv.wait(g).unwrap();
                }
            });
        }
        while running.load(Ordering::SeqCst) < threads {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::scope(|s| {
            let t = s.spawn(|| gather_and_check(&e, &picks, &data, &offsets));
            std::thread::sleep(Duration::from_millis(30));
            let (open, cv) = &*gate;
            *open.lock().unwrap() = true;
            cv.notify_all();
            t.join().unwrap();
        });

        // Callers on the threads of another pool (helpers and the lingering
        // job go to that pool).
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| {
            rayon::scope(|s| {
                for _ in 0..6 {
                    s.spawn(|_| {
                        for _ in 0..5 {
                            gather_and_check(&e, &picks, &data, &offsets);
                        }
                    });
                }
            })
        });

        // Callers outside any pool, at once, with pool work in between.
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (e, picks, data, offsets) = (&e, &picks, &data, &offsets);
                s.spawn(move || {
                    for r in 0..10u64 {
                        gather_and_check(e, picks, data, offsets);
                        let (a, b) = rayon::join(|| t + r, || t * r);
                        assert_eq!((a, b), (t + r, t * r));
                    }
                });
            }
        });
    }

    /// A destination shorter than the records is refused before any read,
    /// and so is an index past the end.
    #[test]
    fn packed_gather_checks_destination_and_range() {
        let (data, offsets) = records(10, 100);
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::create(dir.path().join("s"), &CreateOptions::new(Codec::Zstd)).unwrap();
        e.append_var(&data, &offsets).unwrap();
        let mut offs = Vec::new();
        let mut short = [0u8; 1];
        let r = e.gather_packed(&[0, 1], &mut offs, |_| Ok::<_, Error>(&mut short[..]));
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        let r = e.gather_packed(&[10], &mut offs, |_| Ok::<_, Error>(&mut short[..]));
        assert!(
            matches!(
                r,
                Err(Error::IndexOutOfRange {
                    index: 10,
                    len: 10,
                    ..
                })
            ),
            "{r:?}"
        );
    }
}
