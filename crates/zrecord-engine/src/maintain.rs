//! Delete (swap-last) and in-place compaction.

use crate::deferred::{LogRecord, MAX_DEFERRED_DELETE, MAX_MARKER_BYTES};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::format::{self, Header, LOC_SIZE, Loc};
use crate::intent::{INTENT_FILE, Intent};
use crate::vfs::OpenFlags;
use crate::vfs::StorageFile as _;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

impl Engine {
    /// Deletes the records at `indices` (duplicates tolerated): each hole is
    /// filled by the last live record, in descending index order, so live
    /// records stay exactly `0..len`. Survivors may change index.
    ///
    /// Atomic: a crash leaves the store as it was before or after the
    /// delete, never in between. Under [`Durability::AtSync`] a delete of up
    /// to 8,192 records is deferred like an append: logged in `durable.zr`
    /// with the entries it overwrites, no fsync; the next append, sync or
    /// verify writes it in place (after one fsync of the log, and one of
    /// the directory for a new marker). A killed
    /// process keeps it, and it is durable at the next sync, close or
    /// compaction (a power cut before rolls it back with the appends).
    /// Otherwise the swapped entries and the new length are written as one
    /// intent first, and the delete is durable on return (about five
    /// fsyncs). See `docs/format.md`.
    ///
    /// [`Durability::AtSync`]: crate::Durability::AtSync
    pub fn delete(&mut self, indices: &[u64]) -> Result<()> {
        self.delete_groups(indices, 1)
    }

    /// Deletes groups of `group_size` physical records: group g is records
    /// `[g * k, g * k + k)`. The store length must be a multiple of `k`.
    /// Ragged stores delete item pairs with `k = 2`.
    pub fn delete_groups(&mut self, groups: &[u64], group_size: u64) -> Result<()> {
        self.check_writable()?;
        let k = group_size;
        if k == 0 {
            return Err(Error::InvalidArgument("group_size must be > 0".into()));
        }
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        let len = st.table.len();
        if !len.is_multiple_of(k) {
            return Err(Error::InvalidArgument(format!(
                "store length {len} is not a multiple of group size {k}"
            )));
        }
        let ngroups = len / k;
        for &g in groups {
            if g >= ngroups && k == 1 {
                return Err(Error::IndexOutOfRange {
                    path: self.dir.clone(),
                    index: g,
                    len,
                });
            }
            if g >= ngroups {
                return Err(Error::InvalidArgument(format!(
                    "group {g} is out of range: the store's {} make {} of {k}",
                    crate::error::records(len),
                    crate::error::count(ngroups, "group"),
                )));
            }
        }
        let mut order = groups.to_vec();
        order.sort_unstable_by(|a, b| b.cmp(a));
        order.dedup();
        if order.is_empty() {
            return Ok(());
        }
        // A handle that defers appends defers a delete of a few records
        // too: logged in `durable.zr`, written in place at the next flush.
        // Otherwise deferred appends become durable first: the intent
        // protocol below assumes the header it starts from is, and a stale
        // `durable.zr` must never roll a delete back.
        let deferred =
            self.defers() && (order.len() as u64).saturating_mul(k) <= MAX_DEFERRED_DELETE;
        if !deferred {
            self.settle()?;
        }
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        // The entries the swaps write, computed aside, so a failure leaves
        // memory as it was.
        let new_len = (ngroups - order.len() as u64) * k;
        let mut entries = {
            let table = st.table.to_mut();
            swap_last_entries(&order, ngroups, k, |i| table[i as usize])
        };
        let header = Header {
            length: new_len,
            ..st.header
        };
        if deferred {
            self.delete_deferred(len, &header, &entries)?;
        } else if entries.is_empty() {
            // Only the length shrinks: one atomic header write. It is made
            // durable at once, because the next append rewrites the entries
            // past the new length that the old header still names.
            self.write_header(&header)?;
            self.meta
                .file
                .sync()
                .map_err(|e| self.poison(Error::io(&self.meta.path, "sync", e)))?;
        } else {
            let it = Intent::Delete {
                header,
                entries: std::mem::take(&mut entries),
            };
            self.write_intent(&it)?;
            self.apply_intent(&it)?;
            self.clear_intent()?;
            if let Intent::Delete { entries: e, .. } = it {
                entries = e;
            }
        }
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        // The records that go are the ones at the deleted slots: a slot a
        // record moved into is never deleted after (descending order).
        let table = st.table.to_mut();
        let gone: u64 = order
            .iter()
            .flat_map(|&g| (g * k..g * k + k).map(|s| u64::from(table[s as usize].phys_length)))
            .sum();
        st.live_bytes = st.live_bytes.saturating_sub(gone);
        for (slot, loc) in entries {
            st.table.to_mut()[slot as usize] = loc;
        }
        st.table.to_mut().truncate(new_len as usize);
        st.header = header;
        self.len.store(new_len, Ordering::Release);
        Ok(())
    }

    /// A deferred delete from `len` records to `header` that writes
    /// `entries` (see `deferred`): logged, unsynced, with the entries it is
    /// the first to overwrite since the marker (those below the marker's
    /// length: the holes it fills, and the tail slots it frees, which a
    /// later append overwrites). Its in-place writes wait for the next
    /// flush ([`Engine::flush_deletes`]), which fsyncs the log first: a
    /// loop of deletes costs one fsync, at the next sync, append or verify.
    fn delete_deferred(&self, len: u64, header: &Header, entries: &[(u64, Loc)]) -> Result<()> {
        let new_len = header.length;
        // The record's size, at most, and a done record's: 92 bytes of
        // frame and headers, 24 a pair, for a redo pair per entry and an
        // undo pair per overwritten slot (each entry's hole and each freed
        // tail slot, when first overwritten since the marker).
        let need = 92 + 24 * (2 * entries.len() as u64 + (len - new_len)) + 16;
        let room = self
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|l| l.end + need <= MAX_MARKER_BYTES);
        if !room {
            // No marker of this handle's yet, or a full one: end it (its
            // store becomes durable) and start another.
            self.settle()?;
            let current = self.read_state().header;
            self.arm(&current)?;
        }
        let l0 = self
            .durable_header
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map_or(0, |h| h.length);
        let st = self.read_state();
        let mut guard = self.log.lock().unwrap_or_else(|e| e.into_inner());
        // Armed above; `&mut self` in the caller keeps a sync from
        // another thread out.
        let log = guard.as_mut().ok_or_else(|| {
            self.poison(Error::Poisoned {
                path: self.dir.clone(),
            })
        })?;
        let view = st.table.view();
        let undo: Vec<(u64, Loc)> = entries
            .iter()
            .map(|&(i, _)| i)
            .chain(new_len..len)
            .filter(|i| *i < l0 && !log.undo.contains_key(i))
            .map(|i| (i, view.get(i)))
            .collect();
        let bytes = LogRecord::Delete {
            undo: undo.clone(),
            prev: st.header,
            header: *header,
            redo: entries.to_vec(),
        }
        .encode(log.salt);
        log.file
            .write_at(&bytes, log.end)
            .map_err(|e| self.poison(Error::io(&log.path, "write", e)))?;
        log.end += bytes.len() as u64;
        // Only an overwrite of a durable entry needs its old value on disk
        // first; the other writes are the page cache's, like an append's.
        log.unsynced |= !undo.is_empty();
        log.undo.extend(undo);
        log.pending.extend(entries.iter().copied());
        log.pending_header = Some(*header);
        Ok(())
    }

    /// Writes the deferred deletes logged since the last flush in place:
    /// fsyncs the log if it holds an entry not yet durable (and then the
    /// directory when the marker is new), writes their
    /// entries and the header, then logs *done*. The caller holds the
    /// append lock (or `&mut self`).
    pub(crate) fn flush_deletes(&self) -> Result<()> {
        let mut guard = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let Some(log) = guard.as_mut() else {
            return Ok(());
        };
        let Some(header) = log.pending_header else {
            return Ok(());
        };
        if log.unsynced {
            log.file
                .sync()
                .map_err(|e| self.poison(Error::io(&log.path, "sync", e)))?;
            log.unsynced = false;
        }
        if log.new_file {
            self.sync_directory()?;
            log.new_file = false;
        }
        // A later entry for a slot wins, a slot a later delete cut off
        // gets none; sorted, nearby slots go in one write.
        let entries: Vec<(u64, Loc)> = log
            .pending
            .iter()
            .copied()
            .collect::<BTreeMap<u64, Loc>>()
            .into_iter()
            .filter(|&(i, _)| i < header.length)
            .collect();
        let seg = self.cfg.loc_segment_entries;
        write_entries(&self.read_state(), &self.dir, seg, &entries, false, &|e| {
            self.poison(e)
        })?;
        self.write_header(&header)?;
        let done = LogRecord::Done.encode(log.salt);
        log.file
            .write_at(&done, log.end)
            .map_err(|e| self.poison(Error::io(&log.path, "write", e)))?;
        log.end += done.len() as u64;
        log.pending.clear();
        log.pending_header = None;
        Ok(())
    }

    /// Reclaims the bytes of deleted records, in place: live records are
    /// visited in physical order and each moves only backwards, its entry
    /// rewritten as it lands; then the tail chunk is truncated and chunks
    /// and loc segments past the live data are removed. Safe to re-run after
    /// an interruption.
    pub fn compact(&mut self) -> Result<()> {
        self.compact_steps(u64::MAX).map(|_| ())
    }

    /// Compaction that stops after moving `max_moves` records (a test hook
    /// for interruption). Returns whether it finished.
    #[doc(hidden)]
    pub fn compact_steps(&mut self, max_moves: u64) -> Result<bool> {
        self.check_writable()?;
        if self.cfg.vfs.shared_with_forks() && crate::fork::forks() != self.forks_at_open {
            return Err(Error::ForkedSinceOpen {
                path: self.dir.clone(),
            });
        }
        self.settle()?;
        let cap = self.cfg.chunk_capacity;
        let seg = self.cfg.loc_segment_entries;
        let vfs = self.cfg.vfs.clone();
        let dir = self.dir.clone();
        let poisoned = &self.poisoned;
        let boot = self.boot.clone();
        // As `Engine::poison` (the state is borrowed mutably below).
        let poison = |e: Error| {
            poisoned.store(true, Ordering::Release);
            crate::writeback::note(&*vfs, &dir, boot.as_deref(), &e);
            e
        };
        let loc_path = |i: u64| dir.join(format::loc_name(i / seg));
        // The header of the records about to move becomes durable first, so
        // a move intent never names a record past the durable length.
        self.meta
            .file
            .sync()
            .map_err(|e| poison(Error::io(&self.meta.path, "sync", e)))?;
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());

        // Physical order; overlapping entries make the store unsafe to move.
        // Sorted as packed keys `(chunk, offset, index)`: a sort by a key
        // looked up in the table per comparison was half of a compaction.
        let mut keyed: Vec<u128> = st
            .table
            .to_mut()
            .iter()
            .zip(0u64..)
            .map(|(l, i)| {
                (u128::from(l.chunk_id) << 96) | (u128::from(l.offset) << 64) | u128::from(i)
            })
            .collect();
        keyed.sort_unstable();
        let order = || keyed.iter().map(|&k| k as u64);
        for (i, j) in order().zip(order().skip(1)) {
            let (a, b) = (st.table.to_mut()[i as usize], st.table.to_mut()[j as usize]);
            if a.chunk_id == b.chunk_id && a.end() > u64::from(b.offset) {
                return Err(Error::corrupted(
                    loc_path(j),
                    format!("records {i} and {j} share stored bytes"),
                ));
            }
        }

        // A record that fills a whole chunk has no place (the store was
        // written with a larger chunk capacity than this handle's). Refused
        // before anything moves: a refusal midway would leave the moves
        // made so far uncommitted, their new entries in memory only.
        if let Some((l, i)) = st
            .table
            .to_mut()
            .iter()
            .zip(0u64..)
            .find(|(l, _)| u64::from(l.phys_length) >= cap)
        {
            return Err(Error::corrupted_record(
                loc_path(i),
                i,
                format!(
                    "its {} stored bytes do not fit a chunk of capacity {cap}",
                    l.phys_length
                ),
            ));
        }

        let mut chunk = 0u32;
        let mut off = 0u64;
        let mut moves = 0u64;
        // Packed end of every chunk before the final one.
        let mut packed_ends: Vec<u64> = Vec::new();
        let mut b = Batch::default();
        // A 64th of the chunk capacity in small test layouts, so that their
        // compactions take both ways.
        let intent_shift = (cap / 64).min(INTENT_SHIFT);
        // Commits the batch: its chunks' bytes durable, then its entries.
        let flush = |st: &crate::engine::State, b: &mut Batch| -> Result<()> {
            for &c in b.dirty.iter() {
                let h = &st.chunks[c];
                h.file
                    .sync()
                    .map_err(|e| poison(Error::io(&h.path, "sync", e)))?;
            }
            // One write per stretch of a segment, not one per entry: the
            // entries between two of the batch's, up to `LOC_GAP` of them,
            // are rewritten with the bytes they hold (the table in memory
            // has the batch's new entries and everyone else's durable ones),
            // cheaper than a write call each where deletes scattered the
            // indices that move.
            b.deferred.sort_unstable_by_key(|&(i, _)| i);
            let view = st.table.view();
            let mut dl = BTreeSet::new();
            let mut run: Vec<u8> = Vec::new();
            let mut rest = &b.deferred[..];
            while let Some(&(first, _)) = rest.first() {
                let s = first / seg;
                let mut len = 1;
                while let Some(&(i, _)) = rest.get(len)
                    && i / seg == s
                    && i - rest[len - 1].0 <= LOC_GAP
                {
                    len += 1;
                }
                run.clear();
                for i in first..=rest[len - 1].0 {
                    run.extend_from_slice(&view.get(i).encode());
                }
                debug_assert!(rest[..len].iter().all(|&(i, l)| view.get(i) == l));
                let h = &st.locs[s as usize];
                h.file
                    .write_at(&run, (first % seg) * LOC_SIZE as u64)
                    .map_err(|e| poison(Error::io(&h.path, "write", e)))?;
                dl.insert(s as usize);
                rest = &rest[len..];
            }
            for &s in dl.iter() {
                let h = &st.locs[s];
                h.file
                    .sync()
                    .map_err(|e| poison(Error::io(&h.path, "sync", e)))?;
            }
            b.pending.clear();
            b.deferred.clear();
            b.dirty.clear();
            Ok(())
        };
        // Moves the batch's run (see `Run`): one read and one write, not one
        // of each per record.
        let exec = |st: &mut crate::engine::State, b: &mut Batch| -> Result<()> {
            let Some(&(_, first, _)) = b.run.items.first() else {
                return Ok(());
            };
            // Read the sources packed: one read per stretch of them whose
            // holes are at most `HOLE_READ` (reading a small hole costs less
            // than a read call; a large one is skipped), then close the
            // stretch's holes in memory.
            b.buf
                .resize((b.run.src_end - u64::from(first.offset)) as usize, 0);
            let src = &st.chunks[first.chunk_id as usize];
            let mut w = 0usize;
            let mut k = 0;
            while k < b.run.items.len() {
                let start = u64::from(b.run.items[k].1.offset);
                let mut m = k + 1;
                while m < b.run.items.len()
                    && u64::from(b.run.items[m].1.offset) - b.run.items[m - 1].1.end() <= HOLE_READ
                {
                    m += 1;
                }
                let span = (b.run.items[m - 1].1.end() - start) as usize;
                src.file
                    .read_at(&mut b.buf[w..w + span], start)
                    .map_err(|e| poison(Error::io(&src.path, "read", e)))?;
                let base = w;
                for (_, old, _) in &b.run.items[k..m] {
                    let at = base + (u64::from(old.offset) - start) as usize;
                    let n = old.phys_length as usize;
                    if at != w {
                        b.buf.copy_within(at..at + n, w);
                    }
                    w += n;
                }
                k = m;
            }
            let (dst_chunk, dst_start) = (
                b.run.items[0].2.chunk_id,
                u64::from(b.run.items[0].2.offset),
            );
            let dst_end = dst_start + w as u64;
            if b.pending.overlaps(dst_chunk, dst_start, dst_end) {
                flush(st, b)?;
            }
            if b.run.intent {
                // Bytes and entries in `intent.zr` first: the destinations
                // may overwrite the run's own sources, and a crash replays
                // the intent.
                let moves: Vec<(u64, Loc)> =
                    b.run.items.iter().map(|&(i, _, new)| (i, new)).collect();
                let bytes = &b.buf[..w];
                write_intent_bytes(&*vfs, &dir, &Intent::encode_moves(&moves, bytes))
                    .map_err(poison)?;
                place_moves(st, &dir, seg, &moves, bytes, &poison)?;
                let p = dir.join(INTENT_FILE);
                vfs.remove(&p)
                    .map_err(|e| poison(Error::io(&p, "remove", e)))?;
                vfs.sync_dir(&dir)
                    .map_err(|e| poison(Error::io(&dir, "sync directory", e)))?;
                for &(i, _, new) in &b.run.items {
                    st.table.to_mut()[i as usize] = new;
                }
                let end = &mut st.chunk_ends[dst_chunk as usize];
                *end = (*end).max(dst_end);
                b.run.items.clear();
                return Ok(());
            }
            let dst = &st.chunks[dst_chunk as usize];
            dst.file
                .write_at(&b.buf[..w], dst_start)
                .map_err(|e| poison(Error::io(&dst.path, "write", e)))?;
            // The run's sources stay pending, one span per stretch without
            // a hole (a hole's bytes are free for a later destination).
            let mut k = 0;
            while k < b.run.items.len() {
                let start = u64::from(b.run.items[k].1.offset);
                let mut end = b.run.items[k].1.end();
                k += 1;
                while k < b.run.items.len() && u64::from(b.run.items[k].1.offset) == end {
                    end = b.run.items[k].1.end();
                    k += 1;
                }
                b.pending.push(first.chunk_id, start, end);
            }
            for &(i, _, new) in &b.run.items {
                b.deferred.push((i, new));
                st.table.to_mut()[i as usize] = new;
            }
            b.dirty.insert(dst_chunk as usize);
            let end = &mut st.chunk_ends[dst_chunk as usize];
            *end = (*end).max(dst_end);
            b.run.items.clear();
            Ok(())
        };
        for i in order() {
            let loc = st.table.to_mut()[i as usize];
            let phys = u64::from(loc.phys_length);
            // Only a chunk id past u32::MAX is left to fail here; runs may
            // be written by now, so the handle is poisoned.
            let (mut c, mut o) = format::place(chunk, off, phys, cap).ok_or_else(|| {
                poison(Error::corrupted_record(
                    loc_path(i),
                    i,
                    "its entry cannot be placed",
                ))
            })?;
            // Never move forwards (a record placed against the rule stays).
            if (c, o) > (loc.chunk_id, u64::from(loc.offset)) {
                (c, o) = (loc.chunk_id, u64::from(loc.offset));
            }
            if (c, o) != (loc.chunk_id, u64::from(loc.offset)) {
                if moves == max_moves {
                    exec(st, &mut b)?;
                    flush(st, &mut b)?;
                    return Ok(false);
                }
                let new = Loc {
                    offset: o as u32,
                    chunk_id: c,
                    ..loc
                };
                // Through an intent when the destination overlaps the
                // record's own bytes, or lies so close below them that
                // batches (each ending where a destination reaches a
                // pending source) would be tiny: fsync rounds of a batch per
                // few records after deleting one small record.
                let via_intent = c == loc.chunk_id
                    && (o + phys > u64::from(loc.offset)
                        || u64::from(loc.offset) - o < intent_shift);
                if !b.run.extends(loc, new, via_intent) {
                    exec(st, &mut b)?;
                    b.run.intent = via_intent;
                }
                b.run.push(i, loc, new);
                moves += 1;
            }
            while (packed_ends.len() as u32) < c {
                packed_ends.push(if packed_ends.len() as u32 == chunk {
                    off
                } else {
                    0
                });
            }
            chunk = c;
            off = o + phys;
        }
        exec(st, &mut b)?;

        // Moved bytes and entries durable before the header shrinks the frontier.
        flush(st, &mut b)?;
        // Only hand-made files get here (placement keeps every end below a
        // chunk capacity of at most 4 GiB); the moves are committed.
        let tail_offset = u32::try_from(off).map_err(|_| {
            poison(Error::corrupted(
                &st.chunks[chunk as usize].path,
                format!("its live records end at byte {off}, past what a tail offset holds"),
            ))
        })?;
        let header = Header {
            tail_chunk: chunk,
            tail_offset,
            ..st.header
        };
        self.meta
            .file
            .write_at(&header.encode(), 0)
            .and_then(|_| self.meta.file.sync())
            .map_err(|e| poison(Error::io(&self.meta.path, "write", e)))?;
        st.header = header;

        // Release the space: truncate every retained chunk to its packed
        // end (nothing live lies beyond it), drop later chunks.
        packed_ends.push(off);
        for (c, &end) in packed_ends.iter().enumerate() {
            let h = &st.chunks[c];
            h.file
                .set_len(end)
                .map_err(|e| poison(Error::io(&h.path, "truncate", e)))?;
            st.chunk_ends[c] = end;
        }
        while st.chunks.len() > chunk as usize + 1 {
            let h = st.chunks.pop().expect("nonempty");
            st.chunk_ends.pop();
            let p = h.path.clone();
            drop(h);
            vfs.remove(&p)
                .map_err(|e| poison(Error::io(&p, "remove", e)))?;
        }
        // Loc segments: keep exactly what `length` needs.
        let len = st.table.len();
        let nseg = len.div_ceil(seg) as usize;
        while st.locs.len() > nseg {
            let h = st.locs.pop().expect("nonempty");
            let p = h.path.clone();
            drop(h);
            vfs.remove(&p)
                .map_err(|e| poison(Error::io(&p, "remove", e)))?;
        }
        // Stray segments past those opened (left by an earlier failure).
        let names = vfs
            .list_dir(&dir)
            .map_err(|e| poison(Error::io(&dir, "list", e)))?;
        for n in names {
            if let Some(s) = format::parse_numbered(&n, "loc")
                && s >= nseg as u64
            {
                let p = dir.join(&n);
                vfs.remove(&p)
                    .map_err(|e| poison(Error::io(&p, "remove", e)))?;
            }
            if let Some(c) = format::parse_numbered(&n, "chunk")
                && c > u64::from(chunk)
            {
                let p = dir.join(&n);
                vfs.remove(&p)
                    .map_err(|e| poison(Error::io(&p, "remove", e)))?;
            }
        }
        if let Some(h) = st.locs.last() {
            let keep = (len - (nseg as u64 - 1) * seg) * LOC_SIZE as u64;
            h.file
                .set_len(keep)
                .map_err(|e| poison(Error::io(&h.path, "truncate", e)))?;
        }
        vfs.sync_dir(&dir)
            .map_err(|e| poison(Error::io(&dir, "sync directory", e)))?;
        Ok(true)
    }
}

/// Most slots apart two written loc entries may be for one write to cover
/// both, rewriting the unchanged entries between them (4 KiB of them cost
/// less than a write call): compaction's batches and [`write_entries`].
/// The entries between are then under a page, so a joined write dirties no
/// page that the written entries do not (an fsync writes no more).
const LOC_GAP: u64 = 256;

/// Most source bytes one run of a compaction reads at once.
const RUN_SPAN: u64 = 4 << 20;
/// Largest hole between two sources of a run read through rather than
/// skipped with a read call of its own.
const HOLE_READ: u64 = 64 << 10;
/// Most records in one run (4 MiB of 1-byte records would be 4 M).
const RUN_RECORDS: usize = 1 << 16;

/// Below this distance between a record's bytes and its destination in the
/// same chunk (or a 64th of the chunk capacity, if less), it moves through
/// an intent: a batch per few records would cost more fsyncs than an
/// intent per `RUN_SPAN`.
const INTENT_SHIFT: u64 = 1 << 20;

/// Records of a compaction that move as one: sources ascending in one
/// chunk (holes of deleted bytes between them allowed), destinations back
/// to back in one chunk. Either batched, none over a source of the run
/// (they are all pending until the batch is durable), or through an
/// intent that holds their bytes. `(index, old entry, new entry)`.
#[derive(Debug, Default)]
struct Run {
    items: Vec<(u64, Loc, Loc)>,
    /// End of the last source.
    src_end: u64,
    /// Moves through an intent.
    intent: bool,
}

/// The current batch of a compaction. A destination never overlaps a
/// pending source: the batch is made durable first (one fsync round per
/// batch, not per record).
#[derive(Debug, Default)]
struct Batch {
    /// Sources of moves whose new entries are not yet durable (their
    /// durable entries still point there).
    pending: PendingSources,
    /// Chunks written.
    dirty: BTreeSet<usize>,
    /// New entries, written only once the bytes are durable: an entry
    /// must never reach the disk before the bytes it points to.
    deferred: Vec<(u64, Loc)>,
    /// Moves not yet made.
    run: Run,
    /// Bytes read for a move.
    buf: Vec<u8>,
}

impl Run {
    /// Adds the move `old -> new` of record `index`.
    fn push(&mut self, index: u64, old: Loc, new: Loc) {
        self.items.push((index, old, new));
        self.src_end = old.end();
    }

    /// Whether the move `old -> new` can join (`intent`: it must go through
    /// an intent, as it would alone; a batched move is not onto its own
    /// bytes).
    fn extends(&self, old: Loc, new: Loc, intent: bool) -> bool {
        let (Some(&(_, first, first_new)), Some(&(_, _, last_new))) =
            (self.items.first(), self.items.last())
        else {
            return false;
        };
        let new_end = new.end();
        self.intent == intent
            && self.items.len() < RUN_RECORDS
            && old.chunk_id == first.chunk_id
            && new.chunk_id == first_new.chunk_id
            && u64::from(new.offset) == last_new.end()
            && old.end() - u64::from(first.offset) <= RUN_SPAN
            && (intent || new.chunk_id != old.chunk_id || new_end <= u64::from(first.offset))
    }
}

/// The sources of the current compaction batch's moves. Compaction visits
/// records in physical order and checks that no two overlap, so the spans
/// arrive disjoint and ascending in (chunk, start), hence also in (chunk,
/// end): whether a destination overlaps one is a binary search, not a scan
/// (a batch holds up to one move per record reclaimed so far, so a scan made
/// compaction quadratic in the deleted count).
#[derive(Debug, Default)]
struct PendingSources {
    spans: Vec<(u32, u64, u64)>,
    /// Spans compared so far (tests bound the work per query).
    probes: u64,
}

impl PendingSources {
    fn push(&mut self, chunk: u32, start: u64, end: u64) {
        debug_assert!(
            self.spans
                .last()
                .is_none_or(|&(c, _, e)| (c, e) <= (chunk, start)),
            "pending sources out of physical order"
        );
        self.spans.push((chunk, start, end));
    }

    /// Whether `[start, end)` of `chunk` overlaps a pending source.
    fn overlaps(&mut self, chunk: u32, start: u64, end: u64) -> bool {
        // The first span ending past `start` is the only candidate: the
        // ones before end at or before it, the ones after start later.
        let probes = &mut self.probes;
        let i = self.spans.partition_point(|&(c, _, e)| {
            *probes += 1;
            (c, e) <= (chunk, start)
        });
        self.spans
            .get(i)
            .is_some_and(|&(c, s, _)| c == chunk && s < end)
    }

    fn clear(&mut self) {
        self.spans.clear();
    }
}

impl Engine {
    /// Writes `intent.zr` and makes it and its directory entry durable.
    pub(crate) fn write_intent(&self, it: &Intent) -> Result<()> {
        write_intent_file(&*self.cfg.vfs, &self.dir, it).map_err(|e| self.poison(e))
    }

    /// Removes `intent.zr`, durably (a stale intent must never replay over
    /// later operations).
    pub(crate) fn clear_intent(&self) -> Result<()> {
        let p = self.dir.join(INTENT_FILE);
        let vfs = &self.cfg.vfs;
        vfs.remove(&p)
            .map_err(|e| self.poison(Error::io(&p, "remove", e)))?;
        vfs.sync_dir(&self.dir)
            .map_err(|e| self.poison(Error::io(&self.dir, "sync directory", e)))
    }

    /// Writes an intent's effect to its files and makes it durable. Does not
    /// touch the in-memory table (the caller, or open, has it already).
    pub(crate) fn apply_intent(&self, it: &Intent) -> Result<()> {
        let st = self.read_state();
        let seg = self.cfg.loc_segment_entries;
        let poison = |e: Error| self.poison(e);
        match it {
            Intent::Delete { header, entries } => {
                write_entries(&st, &self.dir, seg, entries, true, &poison)?;
                self.write_header(header)?;
            }
            Intent::Move { moves, bytes } => {
                place_moves(&st, &self.dir, seg, moves, bytes, &poison)?;
            }
        }
        self.meta
            .file
            .sync()
            .map_err(|e| self.poison(Error::io(&self.meta.path, "sync", e)))
    }
}

/// The entries a swap-last delete of `order` (distinct groups of `k`
/// records, descending) from `ngroups` groups writes, ascending by slot.
/// Step `t` fills hole `order[t]` with what the last live group (number
/// `ngroups - 1 - t`) holds then: its own records, or, if it is a deleted
/// group a step before filled, what that step put there. Only the holes
/// below the new end are written (the rest are cut off). `loc(i)` is
/// record `i`'s entry before.
fn swap_last_entries(
    order: &[u64],
    ngroups: u64,
    k: u64,
    loc: impl Fn(u64) -> Loc,
) -> Vec<(u64, Loc)> {
    let new_n = ngroups - order.len() as u64;
    // `order` descending: the deleted groups past the new end come first.
    let split = order.partition_point(|&g| g >= new_n);
    // The group whose records step `t` moved (for the steps past the end).
    let mut moved = vec![0u64; split];
    let mut holes: Vec<(u64, u64)> = Vec::with_capacity(order.len() - split);
    let mut at = 0;
    for (t, &g) in order.iter().enumerate() {
        let last = ngroups - 1 - t as u64;
        while at < split && order[at] > last {
            at += 1;
        }
        // `last` was a deleted group an earlier step filled, or holds its own.
        let src = if at < t && order[at] == last {
            moved[at]
        } else {
            last
        };
        if t < split {
            moved[t] = src;
        } else {
            holes.push((g, src));
        }
    }
    let mut out = Vec::with_capacity(holes.len() * k as usize);
    for &(h, src) in holes.iter().rev() {
        for j in 0..k {
            out.push((h * k + j, loc(src * k + j)));
        }
    }
    out
}

/// The most entries one spanning write covers (1 MiB).
const SPAN_MAX: u64 = 1 << 16;

/// Writes `entries` (record index, entry) to their loc segments (a later
/// entry for a slot wins), then, with `sync`, fsyncs the segments written.
///
/// Slots close together in a segment go in one write: the entries between
/// them are read first and written back unchanged (the same bytes, so a
/// torn write cannot change them), which turns a scattered delete's tens
/// of thousands of 16-byte writes into a few large ones. (Compaction's
/// batches fill their gaps from the table in memory instead, which holds
/// what the files do there; the put-backs of an open's roll-back and of a
/// failed sync write entries the memory no longer matches, so this reads.)
pub(crate) fn write_entries(
    st: &crate::engine::State,
    dir: &std::path::Path,
    seg: u64,
    entries: &[(u64, Loc)],
    sync: bool,
    poison: &dyn Fn(Error) -> Error,
) -> Result<()> {
    let sorted;
    let entries = if entries.windows(2).all(|w| w[0].0 < w[1].0) {
        entries
    } else {
        let last_wins: BTreeMap<u64, Loc> = entries.iter().copied().collect();
        sorted = last_wins.into_iter().collect::<Vec<_>>();
        &sorted[..]
    };
    let mut touched = BTreeSet::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut rest = entries;
    while let Some(&(first, _)) = rest.first() {
        let s = first / seg;
        let h = st.locs.get(s as usize).ok_or_else(|| {
            Error::corrupted(
                dir.join(format::loc_name(s)),
                "intent names a missing segment",
            )
        })?;
        let n = 1 + rest
            .windows(2)
            .take_while(|w| {
                let (prev, next) = (w[0].0, w[1].0);
                next / seg == s && next - prev <= LOC_GAP && next - first < SPAN_MAX
            })
            .count();
        let span = &rest[..n];
        let last = span[n - 1].0;
        let offset = (first % seg) * LOC_SIZE as u64;
        buf.clear();
        buf.resize(((last - first + 1) * LOC_SIZE as u64) as usize, 0);
        // A span past the end of a short segment (an open repairing a
        // damaged store) cannot be read: its runs are written one by one.
        let whole = last - first + 1 == n as u64
            || match h.file.read_at(&mut buf, offset) {
                Ok(()) => true,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => false,
                Err(e) => return Err(poison(Error::io(&h.path, "read", e))),
            };
        if whole {
            for (i, l) in span {
                let at = ((i - first) * LOC_SIZE as u64) as usize;
                buf[at..at + LOC_SIZE].copy_from_slice(&l.encode());
            }
            h.file
                .write_at(&buf, offset)
                .map_err(|e| poison(Error::io(&h.path, "write", e)))?;
        } else {
            let mut runs = span;
            while let Some(&(start, _)) = runs.first() {
                let len = runs
                    .iter()
                    .zip(start..)
                    .take_while(|&(&(i, _), want)| i == want)
                    .count();
                buf.clear();
                for (_, l) in &runs[..len] {
                    buf.extend_from_slice(&l.encode());
                }
                h.file
                    .write_at(&buf, (start % seg) * LOC_SIZE as u64)
                    .map_err(|e| poison(Error::io(&h.path, "write", e)))?;
                runs = &runs[len..];
            }
        }
        touched.insert(s);
        rest = &rest[n..];
    }
    if !sync {
        return Ok(());
    }
    for s in touched {
        let h = &st.locs[s as usize];
        h.file
            .sync()
            .map_err(|e| poison(Error::io(&h.path, "sync", e)))?;
    }
    Ok(())
}

/// Places moved records: `bytes` holds their stored bytes back to back in
/// the order of `moves`, written one write per stretch of destinations
/// back to back in one chunk; the chunks are fsynced, then the entries
/// written and fsynced (`write_entries`).
fn place_moves(
    st: &crate::engine::State,
    dir: &std::path::Path,
    seg: u64,
    moves: &[(u64, Loc)],
    bytes: &[u8],
    poison: &dyn Fn(Error) -> Error,
) -> Result<()> {
    let mut touched = BTreeSet::new();
    let (mut at, mut k) = (0usize, 0usize);
    while k < moves.len() {
        let (index, first) = moves[k];
        let c = st.chunks.get(first.chunk_id as usize).ok_or_else(|| {
            Error::corrupted(
                dir.join(format::loc_name(index / seg)),
                "intent names a missing chunk",
            )
        })?;
        let (mut end, mut n) = (first.end(), first.phys_length as usize);
        k += 1;
        while let Some(&(_, l)) = moves.get(k)
            && l.chunk_id == first.chunk_id
            && u64::from(l.offset) == end
        {
            end = l.end();
            n += l.phys_length as usize;
            k += 1;
        }
        let src = bytes.get(at..at + n).ok_or_else(|| {
            Error::corrupted(dir.join(INTENT_FILE), "moves name more bytes than it holds")
        })?;
        c.file
            .write_at(src, u64::from(first.offset))
            .map_err(|e| poison(Error::io(&c.path, "write", e)))?;
        touched.insert(first.chunk_id as usize);
        at += n;
    }
    for c in touched {
        let h = &st.chunks[c];
        h.file
            .sync()
            .map_err(|e| poison(Error::io(&h.path, "sync", e)))?;
    }
    write_entries(st, dir, seg, moves, true, poison)
}

/// Refuses a move intent that no compaction writes, before its replay
/// writes anything (the open checked each of its entries against the
/// committed chunk ends, but replay writes every entry's bytes): a record
/// named twice (only its last entry was checked), two destinations that
/// overlap, or a destination over bytes of a live record the intent does
/// not move (whose bytes it does not hold). `table` holds every live entry,
/// the intent's included; `path` is the intent's. O(live records x log
/// moved records), paid only by an open that replays a move.
pub(crate) fn check_moves(
    moves: &[(u64, Loc)],
    table: &[Loc],
    path: &std::path::Path,
) -> Result<()> {
    let mut indices: Vec<u64> = moves.iter().map(|&(i, _)| i).collect();
    indices.sort_unstable();
    if let Some(w) = indices.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::corrupted(
            path,
            format!("the pending move names record {} twice", w[0]),
        ));
    }
    // (chunk, start, end, record), disjoint once checked: ascending in
    // (chunk, end) too.
    let mut spans: Vec<(u32, u64, u64, u64)> = moves
        .iter()
        .map(|&(i, l)| (l.chunk_id, u64::from(l.offset), l.end(), i))
        .collect();
    spans.sort_unstable();
    if let Some(w) = spans
        .windows(2)
        .find(|w| w[0].0 == w[1].0 && w[0].2 > w[1].1)
    {
        return Err(Error::corrupted(
            path,
            format!(
                "the pending move puts records {} and {} on the same bytes of chunk {}",
                w[0].3, w[1].3, w[0].0
            ),
        ));
    }
    for (l, i) in table.iter().zip(0u64..) {
        // The first destination ending past this record's start is the
        // only one that can overlap it.
        let k = spans.partition_point(|&(c, _, e, _)| (c, e) <= (l.chunk_id, u64::from(l.offset)));
        if let Some(&(c, s, _, j)) = spans.get(k)
            && c == l.chunk_id
            && s < l.end()
            && j != i
        {
            return Err(Error::corrupted(
                path,
                format!("the pending move puts record {j} on bytes of record {i}"),
            ));
        }
    }
    Ok(())
}

/// Writes `intent.zr` and makes it and its directory entry durable.
fn write_intent_file(vfs: &dyn crate::vfs::Vfs, dir: &std::path::Path, it: &Intent) -> Result<()> {
    write_intent_bytes(vfs, dir, &it.encode())
}

/// Writes `intent.zr` holding `encoded` (an encoded [`Intent`]) and makes
/// it and its directory entry durable.
fn write_intent_bytes(
    vfs: &dyn crate::vfs::Vfs,
    dir: &std::path::Path,
    encoded: &[u8],
) -> Result<()> {
    let p = dir.join(INTENT_FILE);
    let f = vfs
        .open(&p, OpenFlags::CreateTruncate)
        .map_err(|e| Error::io(&p, "create", e))?;
    f.write_at(encoded, 0)
        .and_then(|_| f.sync())
        .map_err(|e| Error::io(&p, "write", e))?;
    vfs.sync_dir(dir)
        .map_err(|e| Error::io(dir, "sync directory", e))
}

#[cfg(test)]
mod tests {
    use super::{PendingSources, RUN_RECORDS, RUN_SPAN, Run, write_entries};
    use crate::format::{LOC_SIZE, Loc};

    /// A simulated disk's layout of 160-byte chunks and 4-entry segments.
    fn tiny_sim(v: &crate::sim::SimVfs) -> crate::EngineConfig {
        crate::EngineConfig {
            vfs: std::sync::Arc::new(v.clone()),
            chunk_capacity: 160,
            loc_segment_entries: 4,
            flush_bytes: 24,
            read_path: crate::ReadPath::Pread,
        }
    }

    /// Record `k`: `10 + k` bytes of `k`.
    fn ten_byte_plus(k: u8) -> Vec<u8> {
        vec![k; 10 + k as usize]
    }

    /// A raw store at `dir` on a new simulated disk (`tiny_sim`) holding
    /// records `ten_byte_plus(0..10)`, closed.
    fn ten_records(dir: &std::path::Path) -> crate::sim::SimVfs {
        let v = crate::sim::SimVfs::new();
        let opts = crate::CreateOptions::new(crate::Codec::Raw);
        let e = crate::Engine::create_with(dir, &opts, tiny_sim(&v)).unwrap();
        for k in 0..10u8 {
            let r = ten_byte_plus(k);
            e.append_var(&r, &[0, r.len()]).unwrap();
        }
        e.close().unwrap();
        v
    }

    /// Record `i`'s entry as its loc file (4-entry segments) holds it.
    fn stored_entry(v: &crate::sim::SimVfs, dir: &std::path::Path, i: u64) -> Loc {
        let b = v.read_file(&dir.join(format!("{}.loc", i / 4))).unwrap();
        let at = (i % 4) as usize * 16;
        Loc::decode(b[at..at + 16].try_into().unwrap())
    }

    fn loc(chunk_id: u32, offset: u32, phys_length: u32) -> Loc {
        Loc {
            offset,
            phys_length,
            logic_length: phys_length,
            chunk_id,
        }
    }

    /// What may join a run: a source later in the run's chunk (a hole
    /// before it is fine) landing right after the run's last destination,
    /// in the same destination chunk, never over the run's first source,
    /// with the run's source span at most `RUN_SPAN`.
    #[test]
    fn a_run_takes_only_moves_that_cannot_overwrite_its_sources() {
        let mut run = Run::default();
        assert!(
            !run.extends(loc(0, 100, 10), loc(0, 0, 10), false),
            "empty run"
        );
        run.items.push((7, loc(0, 100, 10), loc(0, 0, 10)));
        run.src_end = 110;
        // Adjacent source, adjacent destination, below the first source.
        assert!(run.extends(loc(0, 110, 10), loc(0, 10, 10), false));
        // A hole of deleted bytes between the sources.
        assert!(run.extends(loc(0, 150, 40), loc(0, 10, 40), false));
        // Ending exactly at the first source; one byte over it.
        assert!(run.extends(loc(0, 150, 90), loc(0, 10, 90), false));
        assert!(!run.extends(loc(0, 150, 91), loc(0, 10, 91), false));
        // A gap in the destinations, or another destination chunk.
        assert!(!run.extends(loc(0, 110, 10), loc(0, 11, 10), false));
        assert!(!run.extends(loc(0, 110, 10), loc(1, 10, 10), false));
        // Another source chunk.
        assert!(!run.extends(loc(1, 0, 10), loc(0, 10, 10), false));
        // Into an earlier chunk, the destinations never meet the sources.
        let mut across = Run::default();
        across.items.push((1, loc(1, 0, 50), loc(0, 900, 50)));
        across.src_end = 50;
        assert!(across.extends(loc(1, 50, 500), loc(0, 950, 500), false));
        // The span read at once is bounded.
        let span = RUN_SPAN as u32;
        let mut big = Run::default();
        big.items.push((1, loc(0, span, 10), loc(0, 0, 10)));
        big.src_end = u64::from(span) + 10;
        assert!(big.extends(loc(0, 2 * span - 10, 10), loc(0, 10, 10), false));
        assert!(!big.extends(loc(0, 2 * span - 9, 10), loc(0, 10, 10), false));
        // So is the number of records in it.
        let mut many = Run::default();
        many.items.push((0, loc(0, 100, 0), loc(0, 0, 0)));
        many.src_end = 100;
        while many.items.len() < RUN_RECORDS {
            assert!(many.extends(loc(0, 100, 0), loc(0, 0, 0), false));
            many.items.push((0, loc(0, 100, 0), loc(0, 0, 0)));
        }
        assert!(!many.extends(loc(0, 100, 0), loc(0, 0, 0), false));
        // Through an intent, a destination may cover the run's sources
        // (the intent holds the bytes); the two kinds never mix.
        let mut via = Run {
            intent: true,
            ..Run::default()
        };
        via.push(3, loc(0, 100, 10), loc(0, 95, 10));
        assert!(via.extends(loc(0, 110, 40), loc(0, 105, 40), true));
        assert!(!via.extends(loc(0, 110, 40), loc(0, 105, 40), false));
        assert!(!run.extends(loc(0, 110, 10), loc(0, 10, 10), true));
    }

    /// A delete intent replayed at open is applied in its order, the last
    /// entry for a slot winning, as the open's overlay reads it: the engine
    /// writes sorted, distinct slots, but the bytes on disk are not bound
    /// to. Unsorted slots, a run of consecutive ones across a segment
    /// boundary, repeats; the files after the replay give the same records
    /// as the handle that replayed.
    #[test]
    fn a_delete_intent_replays_in_order_with_repeats_and_unsorted_slots() {
        use crate::format::Header;
        use crate::intent::Intent;
        use crate::{Engine, OpenMode};
        use std::path::Path;
        let (cfg, dir, rec) = (tiny_sim, Path::new("/s"), ten_byte_plus);
        let v = ten_records(dir);
        let entry = |i: u64| stored_entry(&v, dir, i);
        let header = Header::decode(&v.read_file(&dir.join("meta.zr")).unwrap()).unwrap();
        // Slots 2..7 end as records 2, 9, 8, 7, 3: first 4..7 take record
        // 0 (unsorted), then 2..5 run across the segment boundary, then
        // 6, and 5 twice.
        let it = Intent::Delete {
            header: Header {
                length: 7,
                ..header
            },
            entries: vec![
                (6, entry(0)),
                (4, entry(0)),
                (5, entry(0)),
                (2, entry(2)),
                (3, entry(9)),
                (4, entry(8)),
                (6, entry(3)),
                (5, entry(0)),
                (5, entry(7)),
            ],
        };
        super::write_intent_file(&v, dir, &it).unwrap();
        let want: Vec<u8> = vec![0, 1, 2, 9, 8, 7, 3];
        let firsts = |e: &Engine| -> Vec<u8> {
            (0..e.len())
                .map(|i| {
                    let n = rec(want[i as usize]).len();
                    let mut b = vec![0u8; n];
                    e.gather_var(&[i], &mut b, &[0, n]).unwrap();
                    assert!(b.iter().all(|&x| x == b[0]), "record {i} torn");
                    b[0]
                })
                .collect()
        };
        let e = Engine::open_with(dir, OpenMode::ReadWrite, cfg(&v)).unwrap();
        assert_eq!(firsts(&e), want, "the replaying handle");
        drop(e);
        // The intent is gone: these come from the files alone.
        let cut = v.snapshot().crash_image(0);
        let e = Engine::open_with(dir, OpenMode::ReadOnly, cfg(&cut)).unwrap();
        assert_eq!(firsts(&e), want, "the files after the replay");
    }

    /// A move intent with a valid checksum but entries no compaction
    /// writes is refused at open before anything is written: a record named
    /// twice (only the last entry was checked, but every entry's bytes were
    /// written, one of them over record 9 or past the chunk's committed
    /// end), a destination over another live record's bytes, two records
    /// moved onto the same bytes, a missing chunk, a record past the length.
    #[test]
    fn a_hostile_move_intent_is_refused_before_it_writes() {
        use crate::intent::Intent;
        use crate::sim::SimVfs;
        use crate::{Engine, Error, OpenMode};
        use std::path::Path;
        let (cfg, dir) = (tiny_sim, Path::new("/s"));
        // Records 0..10 of 10..19 bytes: chunk 0 holds bytes 0..145.
        let v0 = ten_records(dir);
        let entry = |i: u64| stored_entry(&v0, dir, i);
        let at = |l: Loc, offset: u32| Loc { offset, ..l };
        let junk = |l: Loc| vec![0xEE; l.phys_length as usize];
        let (e2, e3) = (entry(2), entry(3));
        let cases: Vec<(&str, Vec<(u64, Loc)>)> = vec![
            (
                "record 2 twice, first over record 9",
                vec![(2, at(e2, 130)), (2, e2)],
            ),
            (
                "record 2 twice, first past the end",
                vec![(2, at(e2, 4000)), (2, e2)],
            ),
            ("onto record 5's bytes", vec![(2, at(e2, entry(5).offset))]),
            (
                "two records onto the same bytes",
                vec![(2, at(e2, e3.offset)), (3, e3)],
            ),
            ("a missing chunk", vec![(2, Loc { chunk_id: 3, ..e2 })]),
            ("a record past the length", vec![(2, e2), (10, e3)]),
        ];
        for (what, moves) in cases {
            let v = v0.fork();
            let bytes: Vec<u8> = moves.iter().flat_map(|&(_, l)| junk(l)).collect();
            let it = Intent::Move { moves, bytes };
            super::write_intent_file(&v, dir, &it).unwrap();
            let files = |v: &SimVfs| -> Vec<Option<Vec<u8>>> {
                ["0.chunk", "0.loc", "1.loc", "2.loc", "meta.zr"]
                    .iter()
                    .map(|n| v.read_file(&dir.join(n)))
                    .collect()
            };
            let before = files(&v);
            match Engine::open_with(dir, OpenMode::ReadWrite, cfg(&v)) {
                Err(Error::Corrupted { file, .. }) => {
                    assert!(
                        file.ends_with("intent.zr")
                            || file.ends_with("0.loc")
                            || file.ends_with("2.loc"),
                        "{what}: names {}",
                        file.display()
                    )
                }
                Err(err) => panic!("{what}: {err}"),
                Ok(_) => panic!("{what}: the open replayed it"),
            }
            assert!(files(&v) == before, "{what}: the refused open wrote");
        }
    }

    /// The overlap test of a batch of `n` pending sources costs O(log n)
    /// comparisons, so a compaction whose batches grow with the space
    /// reclaimed (one move per deleted record so far) stays near-linear.
    /// A linear scan needed about n/2 comparisons per query here.
    /// The swap-last entries match a step-by-step simulation of the swaps
    /// (each hole takes the current last group, later entries win, slots
    /// past the new end dropped), for random deletes of groups of 1 and 2.
    #[test]
    fn swap_last_entries_match_the_swaps_one_by_one() {
        let mut seed = 0x5eed_u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for case in 0..2000 {
            let k = 1 + case % 2;
            let ngroups = 1 + next(40);
            let m = 1 + next(ngroups);
            let mut order: Vec<u64> = (0..m).map(|_| next(ngroups)).collect();
            order.sort_unstable_by(|a, b| b.cmp(a));
            order.dedup();
            let loc = |i: u64| super::Loc {
                offset: i as u32,
                phys_length: 1,
                logic_length: 1,
                chunk_id: 0,
            };
            let mut overlay = std::collections::BTreeMap::new();
            let mut live = ngroups;
            for &g in &order {
                let last = live - 1;
                if g != last {
                    for j in 0..k {
                        let from = overlay
                            .get(&(last * k + j))
                            .copied()
                            .unwrap_or(loc(last * k + j));
                        overlay.insert(g * k + j, from);
                    }
                }
                live -= 1;
            }
            overlay.retain(|&slot, _| slot < live * k);
            let want: Vec<(u64, super::Loc)> = overlay.into_iter().collect();
            let got = super::swap_last_entries(&order, ngroups, k, loc);
            assert_eq!(
                got, want,
                "case {case}: delete {order:?} of {ngroups} groups of {k}"
            );
        }
    }

    /// A delete of records scattered over a segment writes their entries
    /// in a few spans (the entries between them rewritten as they were),
    /// deferred or through an intent, and the store reads back exactly.
    #[test]
    fn a_scattered_delete_writes_a_segment_in_spans_not_entry_by_entry() {
        use crate::{Durability, OpenMode};
        let dir = std::path::Path::new("/scattered");
        for durability in [Durability::AtSync, Durability::EachAppend] {
            let v = crate::sim::SimVfs::new();
            let cfg = crate::EngineConfig {
                loc_segment_entries: 1 << 12,
                chunk_capacity: 1 << 20,
                ..tiny_sim(&v)
            };
            let opts = crate::CreateOptions::new(crate::Codec::Raw);
            let e = crate::Engine::create_with(dir, &opts, cfg.clone()).unwrap();
            let n = 6000u32;
            let data: Vec<u8> = (0..n).flat_map(u32::to_le_bytes).collect();
            let offsets: Vec<usize> = (0..=n as usize).map(|i| 4 * i).collect();
            e.append_var(&data, &offsets).unwrap();
            e.close().unwrap();
            let mut e = crate::Engine::open_with(dir, OpenMode::ReadWrite, cfg.clone()).unwrap();
            e.set_durability(durability).unwrap();
            // Every 7th of the first 5,000, and slots in both segments.
            let doomed: Vec<u64> = (0..5000).step_by(7).collect();
            let mut model: Vec<u32> = (0..n).collect();
            for &i in doomed.iter().rev() {
                model.swap_remove(i as usize);
            }
            let calls = v.calls();
            e.delete(&doomed).unwrap();
            e.sync().unwrap();
            let made = v.calls() - calls;
            // Entry by entry this was over 700 writes.
            assert!(
                made < 40,
                "{durability:?}: {made} I/O calls for {} deletes",
                doomed.len()
            );
            e.close().unwrap();
            let e = crate::Engine::open_with(dir, OpenMode::ReadOnly, cfg).unwrap();
            assert_eq!(e.len(), model.len() as u64);
            let idx: Vec<u64> = (0..e.len()).collect();
            let offsets: Vec<usize> = (0..=idx.len()).map(|i| 4 * i).collect();
            let mut got = vec![0u8; 4 * idx.len()];
            e.gather_var(&idx, &mut got, &offsets).unwrap();
            let want: Vec<u8> = model.iter().flat_map(|k| k.to_le_bytes()).collect();
            assert!(
                got == want,
                "{durability:?}: records differ after the delete"
            );
            e.verify().unwrap();
        }
    }

    /// Entries past the end of a short loc segment (a repair over damaged
    /// files) cannot be read around: each run is written on its own, and
    /// the slots between keep their bytes.
    #[test]
    fn a_span_past_a_short_segment_is_written_run_by_run() {
        let dir = std::path::Path::new("/short");
        let v = ten_records(dir);
        let e = crate::Engine::open_with(dir, crate::OpenMode::ReadWrite, tiny_sim(&v)).unwrap();
        let p = dir.join("0.loc");
        let mut b = v.read_file(&p).unwrap();
        b.truncate(2 * LOC_SIZE);
        v.write_file(&p, &b);
        let (a, z) = (loc(0, 1, 2), loc(0, 3, 4));
        write_entries(&e.read_state(), dir, 4, &[(0, a), (3, z)], false, &|e| e).unwrap();
        let after = v.read_file(&p).unwrap();
        assert_eq!(after.len(), 4 * LOC_SIZE);
        assert_eq!(stored_entry(&v, dir, 0), a);
        assert_eq!(after[LOC_SIZE..2 * LOC_SIZE], b[LOC_SIZE..2 * LOC_SIZE]);
        assert_eq!(after[2 * LOC_SIZE..3 * LOC_SIZE], [0; LOC_SIZE]);
        assert_eq!(stored_entry(&v, dir, 3), z);
        // In a whole segment the same two entries go in one write.
        let calls = v.calls();
        write_entries(&e.read_state(), dir, 4, &[(0, z), (3, a)], false, &|e| e).unwrap();
        assert_eq!(v.calls() - calls, 2, "one read and one write");
        assert_eq!((stored_entry(&v, dir, 0), stored_entry(&v, dir, 3)), (z, a));
    }

    #[test]
    fn pending_overlap_is_a_search_not_a_scan() {
        let n = 1u64 << 16;
        let mut p = PendingSources::default();
        // 32-byte sources with 16-byte gaps, over two chunks.
        for k in 0..n {
            let (c, at) = ((k >= n / 2) as u32, (k % (n / 2)) * 48);
            p.push(c, at, at + 32);
        }
        let mut queries = 0u64;
        for k in 0..n {
            let (c, at) = ((k >= n / 2) as u32, (k % (n / 2)) * 48);
            // Inside the gap: no overlap; touching both neighbours' ends: none.
            assert!(!p.overlaps(c, at + 32, at + 48), "gap after source {k}");
            // Reaching one byte into the next source, or into this one.
            assert_eq!(
                p.overlaps(c, at + 40, at + 49),
                k % (n / 2) + 1 < n / 2,
                "into the source after {k}"
            );
            assert!(p.overlaps(c, at + 31, at + 32), "last byte of source {k}");
            queries += 3;
        }
        // A query past the last chunk's sources, and one in a chunk with none.
        assert!(!p.overlaps(1, (n / 2) * 48, u64::MAX));
        assert!(!p.overlaps(2, 0, 10));
        queries += 2;
        let per_query = p.probes as f64 / queries as f64;
        assert!(
            per_query <= 18.0,
            "{per_query:.1} comparisons per overlap query over {n} sources"
        );
    }
}
