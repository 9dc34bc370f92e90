//! `verify`: decode every record and check every structural invariant,
//! reporting all problems rather than the first.

use crate::engine::{Engine, check_entry};
use crate::error::Result;
use crate::format::{LOC_SIZE, Loc};
use crate::vfs::StorageFile as _;

/// Most records, and bytes, that `verify` decodes in one gather.
const VERIFY_BATCH: usize = 4096;
const VERIFY_BATCH_BYTES: usize = 64 << 20;
/// Entries `verify` reads from a loc segment at once.
const VERIFY_LOC_BLOCK: u64 = 1 << 16;

/// What [`Engine::verify`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Physical records checked.
    pub records: u64,
    /// Bytes the records decoded to.
    pub decoded_bytes: u64,
    /// Every bad record: its index and what is wrong with it (a record may
    /// appear more than once, once per problem).
    pub bad: Vec<(u64, String)>,
    /// Problems not tied to one record (files, frontier).
    pub problems: Vec<String>,
}

impl VerifyReport {
    /// Whether nothing is wrong.
    pub fn is_ok(&self) -> bool {
        self.bad.is_empty() && self.problems.is_empty()
    }
}

impl Engine {
    /// Checks the whole store: every live entry against the frontier and the
    /// chunk files, that no two records share stored bytes, that the loc
    /// files hold the entries in memory, and that every record decodes to
    /// exactly its recorded length. Reports every bad index. `Err` only when
    /// the check itself cannot run (the report carries what is wrong with
    /// the store).
    ///
    /// ```
    /// # use zrecord_engine::{Codec, CreateOptions, Engine};
    /// # let dir = tempfile::tempdir()?;
    /// let e = Engine::create(dir.path().join("s"), &CreateOptions::new(Codec::Zstd))?;
    /// e.append_var(b"abcdef", &[0, 2, 6])?;
    /// let report = e.verify()?;
    /// assert!(report.is_ok() && report.records == 2 && report.decoded_bytes == 6);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn verify(&self) -> Result<VerifyReport> {
        if !self.read_only && self.in_opener() {
            // Deferred deletes are compared from their files, not the log
            // (a poisoned handle writes nothing: its report says so).
            let _g = self.lock_append();
            if self.check_poisoned().is_ok() {
                self.flush_deletes()?;
            }
        }
        // In a forked child, the opener's deferred deletes at the fork: the
        // table holds them, the loc files only after the opener's next
        // flush (which the child may not do). Their slots are not compared.
        // `try_lock`: a lock another thread held at the fork stays held.
        let pending: std::collections::BTreeSet<u64> = if self.in_opener() {
            Default::default()
        } else {
            match self.log.try_lock() {
                Ok(g) => g
                    .as_ref()
                    .map(|l| l.pending.iter().map(|&(i, _)| i).collect())
                    .unwrap_or_default(),
                Err(_) => Default::default(),
            }
        };
        let mut rep = VerifyReport::default();
        let (table, header, chunk_ends, files) = {
            let st = self.read_state();
            let files: Vec<(std::path::PathBuf, std::io::Result<u64>)> = st
                .chunks
                .iter()
                .map(|h| (h.path.clone(), h.file.len()))
                .collect();
            (st.table.to_vec(), st.header, st.chunk_ends.clone(), files)
        };
        rep.records = table.len() as u64;
        if header.length != table.len() as u64 {
            rep.problems.push(format!(
                "meta.zr length {} != {} entries in memory",
                header.length,
                table.len()
            ));
        }
        if chunk_ends.len() != header.tail_chunk as usize + 1 {
            rep.problems.push(format!(
                "{} chunks open, tail_chunk is {}",
                chunk_ends.len(),
                header.tail_chunk
            ));
        }
        for (c, ((p, len), &end)) in files.iter().zip(&chunk_ends).enumerate() {
            match len {
                Ok(n) if *n < end => rep.problems.push(format!(
                    "{}: {n} bytes, shorter than its committed end {end}",
                    p.display()
                )),
                Ok(_) => {}
                Err(e) => rep
                    .problems
                    .push(format!("{}: stat failed: {e}", p.display())),
            }
            if c == header.tail_chunk as usize && end != u64::from(header.tail_offset) {
                rep.problems.push(format!(
                    "tail chunk end {end} != tail_offset {}",
                    header.tail_offset
                ));
            }
        }
        // Entries: each alone, then overlaps in physical order.
        let mut sound = Vec::with_capacity(table.len());
        for (i, l) in table.iter().enumerate() {
            match check_entry(l, i as u64, &header, &chunk_ends) {
                Ok(()) => sound.push(i as u64),
                Err(d) => rep.bad.push((i as u64, d)),
            }
        }
        let mut order = sound.clone();
        order.sort_unstable_by_key(|&i| (table[i as usize].chunk_id, table[i as usize].offset));
        let mut reach: Option<(u32, u64, u64)> = None; // (chunk, end, index)
        for &i in &order {
            let l = table[i as usize];
            if let Some((c, end, j)) = reach
                && c == l.chunk_id
                && end > u64::from(l.offset)
            {
                rep.bad
                    .push((i, format!("shares stored bytes with record {j}")));
                rep.bad
                    .push((j, format!("shares stored bytes with record {i}")));
            }
            if reach.is_none_or(|(c, end, _)| c != l.chunk_id || l.end() > end) {
                reach = Some((l.chunk_id, l.end(), i));
            }
        }
        // The loc files hold the table.
        self.verify_loc_files(&table, &pending, &mut rep);
        // Every sound record decodes to exactly its length: through the
        // parallel gather, a batch at a time (a batch that fails is checked
        // again record by record, to name each bad one), or, for a claimed
        // length larger than the stored bytes justify, by streaming (so a
        // hostile entry cannot make verify allocate 2 GiB).
        let streamed = |l: &Loc| (l.logic_length as usize) > (1 << 20).max(l.phys_length as usize);
        let mut buf = Vec::new();
        let mut batch: Vec<u64> = Vec::new();
        let mut offsets = vec![0usize];
        let mut sound_iter = sound.iter().copied().peekable();
        while sound_iter.peek().is_some() {
            batch.clear();
            offsets.truncate(1);
            while let Some(&i) = sound_iter.peek() {
                let l = table[i as usize];
                if streamed(&l) {
                    sound_iter.next();
                    match self.stream_decode_len(&l).and_then(|got| {
                        if got == u64::from(l.logic_length) {
                            Ok(())
                        } else {
                            Err(format!(
                                "decodes to {got} bytes, entry says {}",
                                l.logic_length
                            ))
                        }
                    }) {
                        Ok(()) => rep.decoded_bytes += u64::from(l.logic_length),
                        Err(e) => rep.bad.push((i, format!("does not decode: {e}"))),
                    }
                    continue;
                }
                let end = offsets[offsets.len() - 1] + l.logic_length as usize;
                if !batch.is_empty() && (end > VERIFY_BATCH_BYTES || batch.len() >= VERIFY_BATCH) {
                    break;
                }
                sound_iter.next();
                batch.push(i);
                offsets.push(end);
            }
            if batch.is_empty() {
                continue;
            }
            let total = offsets[offsets.len() - 1];
            buf.resize(total, 0);
            if self.gather_var(&batch, &mut buf, &offsets).is_ok() {
                rep.decoded_bytes += total as u64;
                continue;
            }
            for &i in &batch {
                let n = table[i as usize].logic_length as usize;
                // The chain: an I/O error's message names only the call
                // and file, its cause (the OS error) is its source.
                match self
                    .gather_var(&[i], &mut buf[..n], &[0, n])
                    .map_err(|e| crate::error::error_chain(&e))
                {
                    Ok(()) => rep.decoded_bytes += n as u64,
                    Err(e) => rep.bad.push((i, format!("does not decode: {e}"))),
                }
            }
        }
        rep.bad.sort_by_key(|b| b.0);
        Ok(rep)
    }

    /// Decoded length of one record, streamed through a small buffer
    /// (stops one byte past the recorded length).
    fn stream_decode_len(&self, l: &Loc) -> std::result::Result<u64, String> {
        use std::io::Read;
        let frame = {
            let st = self.read_state();
            let h = st
                .chunks
                .get(l.chunk_id as usize)
                .ok_or_else(|| "chunk missing".to_string())?;
            let mut f = vec![0u8; l.phys_length as usize];
            h.file
                .read_at(&mut f, u64::from(l.offset))
                .map_err(|e| e.to_string())?;
            f
        };
        let limit = u64::from(l.logic_length) + 1;
        let mut sink = std::io::sink();
        let n = match (self.codec.codec, self.codec.dictionary.as_deref()) {
            (crate::codec::Codec::Raw, _) => frame.len() as u64,
            (_, Some(d)) => {
                let dec = zstd::stream::read::Decoder::with_dictionary(&frame[..], d)
                    .map_err(|e| e.to_string())?;
                std::io::copy(&mut dec.take(limit), &mut sink).map_err(|e| e.to_string())?
            }
            (_, None) => {
                let dec = zstd::stream::read::Decoder::with_buffer(&frame[..])
                    .map_err(|e| e.to_string())?;
                std::io::copy(&mut dec.take(limit), &mut sink).map_err(|e| e.to_string())?
            }
        };
        Ok(n)
    }

    fn verify_loc_files(
        &self,
        table: &[Loc],
        pending: &std::collections::BTreeSet<u64>,
        rep: &mut VerifyReport,
    ) {
        let seg = self.cfg.loc_segment_entries;
        let st = self.read_state();
        let mut buf = Vec::new();
        // A block of entries per read, never past a segment's end.
        let mut first = 0u64;
        while first < table.len() as u64 {
            let s = first / seg;
            let n = (table.len() as u64 - first)
                .min(seg - first % seg)
                .min(VERIFY_LOC_BLOCK);
            let Some(h) = st.locs.get(s as usize) else {
                rep.problems
                    .push(format!("no loc segment for record {first}"));
                return;
            };
            buf.resize(n as usize * LOC_SIZE, 0);
            if let Err(e) = h.file.read_at(&mut buf, (first % seg) * LOC_SIZE as u64) {
                // Name every record the failed read covered.
                for i in first..first + n {
                    rep.bad
                        .push((i, format!("{}: read failed: {e}", h.path.display())));
                }
                first += n;
                continue;
            }
            for (k, bytes) in buf.as_chunks::<LOC_SIZE>().0.iter().enumerate() {
                let i = first + k as u64;
                if self.unapplied.contains(&i) || pending.contains(&i) {
                    // A read-only handle's entry from a pending delete
                    // intent: the file holds the entry from before or
                    // after the delete, until a read-write open applies it.
                    // Likewise a forked child's entry from the opener's
                    // deferred delete, until the opener flushes it.
                    continue;
                }
                let d = Loc::decode(bytes);
                let l = table[i as usize];
                if d != l {
                    rep.bad
                        .push((i, format!("{} holds {d:?}, memory {l:?}", h.path.display())));
                }
            }
            first += n;
        }
    }
}
