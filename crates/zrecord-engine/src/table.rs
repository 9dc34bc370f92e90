//! The location table: every live record's 16-byte entry, either copied
//! into memory or read in place through mappings of the `.loc` segments.
//!
//! A read-write handle owns a copy ([`Table::Owned`]): appends extend it,
//! deletes and compaction rewrite it. A read-only handle maps the segments
//! ([`Table::Mapped`]) so that every process opening a store shares one copy
//! of the table, the page cache's, instead of holding 16 B per record of its
//! own; it falls back to a copy where the file system cannot map.
//!
//! Mapped entries were validated at open like copied ones, but the bytes
//! stay on disk: a process that ignores the store lock could rewrite them.
//! [`View::get`] therefore reads each entry once into a [`Loc`] the caller
//! keeps, and the gather checks that copy again for what its read relies
//! on (see `engine::entry_reachable`) before it touches a chunk.

use crate::format::{LOC_SIZE, Loc};
use crate::vfs::Mapping;

/// The entries of records `0..len`.
#[derive(Debug)]
pub(crate) enum Table {
    /// A copy in memory.
    Owned(Vec<Loc>),
    /// The loc segments in place (read-only handles).
    Mapped(MappedTable),
}

/// Read-only mappings of the loc segments, plus the entries a read-only
/// open took from a pending delete intent (not in the files yet).
#[derive(Debug)]
pub(crate) struct MappedTable {
    /// Segment `s` holds entries `s * seg..`, exactly as many bytes mapped
    /// as the open checked the file holds for `len`.
    segs: Vec<Box<dyn Mapping>>,
    len: u64,
    seg: Segments,
    /// Entries that replace the files' (sorted by index, unique).
    overlay: Vec<(u64, Loc)>,
}

/// Entries per segment: a power of two (the format's 2^28) splits an index
/// with a shift and a mask; test configurations may use any count.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Segments {
    Pow2 { shift: u32, mask: u64 },
    Any(u64),
}

impl Segments {
    fn new(entries: u64) -> Segments {
        if entries.is_power_of_two() {
            Segments::Pow2 {
                shift: entries.trailing_zeros(),
                mask: entries - 1,
            }
        } else {
            Segments::Any(entries)
        }
    }

    /// (segment, entry within it).
    #[inline]
    fn split(self, i: u64) -> (u64, u64) {
        match self {
            Segments::Pow2 { shift, mask } => (i >> shift, i & mask),
            Segments::Any(n) => (i / n, i % n),
        }
    }
}

impl MappedTable {
    /// `segs[s]` maps at least the bytes of segment `s`'s entries below
    /// `len` (the caller checked each file's size before mapping it).
    pub(crate) fn new(
        segs: Vec<Box<dyn Mapping>>,
        len: u64,
        seg_entries: u64,
        overlay: Vec<(u64, Loc)>,
    ) -> MappedTable {
        debug_assert!(overlay.windows(2).all(|w| w[0].0 < w[1].0));
        MappedTable {
            segs,
            len,
            seg: Segments::new(seg_entries),
            overlay,
        }
    }
}

impl Table {
    /// Records in the table.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Table::Owned(v) => v.len() as u64,
            Table::Mapped(m) => m.len,
        }
    }

    /// A reader of the entries.
    pub(crate) fn view(&self) -> View<'_> {
        match self {
            Table::Owned(v) => View::Owned(v),
            Table::Mapped(m) => View::Mapped(MappedView {
                segs: m.segs.iter().map(|s| s.bytes().as_chunks().0).collect(),
                seg: m.seg,
                overlay: &m.overlay,
            }),
        }
    }

    /// Every entry, in index order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Loc> + '_ {
        let v = self.view();
        (0..self.len()).map(move |i| v.get(i))
    }

    /// A copy of every entry.
    pub(crate) fn to_vec(&self) -> Vec<Loc> {
        match self {
            Table::Owned(v) => v.clone(),
            Table::Mapped(_) => self.iter().collect(),
        }
    }

    /// The entries as a vector to edit. Only read-write handles edit their
    /// table, and theirs is always owned; a mapped one would be copied
    /// first.
    pub(crate) fn to_mut(&mut self) -> &mut Vec<Loc> {
        if let Table::Mapped(_) = self {
            debug_assert!(false, "a mapped location table is never edited");
            *self = Table::Owned(self.to_vec());
        }
        match self {
            Table::Owned(v) => v,
            Table::Mapped(_) => unreachable!("replaced by a copy above"),
        }
    }

    /// Heap bytes the table holds (its mappings excluded).
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Table::Owned(v) => v.capacity() * size_of::<Loc>(),
            Table::Mapped(m) => {
                m.overlay.capacity() * size_of::<(u64, Loc)>()
                    + m.segs.capacity() * size_of::<Box<dyn Mapping>>()
            }
        }
    }
}

/// A reader of a [`Table`], made once per gather (a mapping's bytes are
/// looked up here, not per record).
pub(crate) enum View<'a> {
    Owned(&'a [Loc]),
    Mapped(MappedView<'a>),
}

/// A reader of a [`MappedTable`].
pub(crate) struct MappedView<'a> {
    segs: Vec<&'a [[u8; LOC_SIZE]]>,
    seg: Segments,
    overlay: &'a [(u64, Loc)],
}

impl View<'_> {
    /// The entry of record `i < len`. Never panics: an index the table does
    /// not cover (which its construction rules out) reads as an all-zero
    /// entry, which validation rejects as an empty record.
    #[inline]
    pub(crate) fn get(&self, i: u64) -> Loc {
        match self {
            View::Owned(v) => v.get(i as usize).copied().unwrap_or_default(),
            View::Mapped(m) => m.get(i),
        }
    }
}

impl MappedView<'_> {
    /// As [`View::get`].
    #[inline(always)]
    pub(crate) fn get(&self, i: u64) -> Loc {
        if !self.overlay.is_empty()
            && let Ok(k) = self.overlay.binary_search_by_key(&i, |&(j, _)| j)
        {
            return self.overlay[k].1;
        }
        let (s, k) = self.seg.split(i);
        self.segs
            .get(s as usize)
            .and_then(|b| b.get(k as usize))
            .map(Loc::decode)
            .unwrap_or_default()
    }

    /// The entries as one array, when the table is one segment without an
    /// overlay (any store under 2^28 records without a pending delete): a
    /// lookup is then an index, as in a copied table.
    #[inline]
    pub(crate) fn single(&self) -> Option<&[[u8; LOC_SIZE]]> {
        match &self.segs[..] {
            [only] if self.overlay.is_empty() => Some(only),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Bytes(Vec<u8>);
    impl Mapping for Bytes {
        fn bytes(&self) -> &[u8] {
            &self.0
        }
    }

    fn loc(i: u64) -> Loc {
        Loc {
            offset: i as u32 * 3,
            phys_length: 3,
            logic_length: 3,
            chunk_id: (i % 5) as u32,
        }
    }

    fn mapped(len: u64, seg: u64, overlay: Vec<(u64, Loc)>) -> Table {
        let segs = (0..len.div_ceil(seg))
            .map(|s| {
                let b: Vec<u8> = (s * seg..((s + 1) * seg).min(len))
                    .flat_map(|i| loc(i).encode())
                    .collect();
                Box::new(Bytes(b)) as Box<dyn Mapping>
            })
            .collect();
        Table::Mapped(MappedTable::new(segs, len, seg, overlay))
    }

    /// Entries across segment boundaries, with a power-of-two segment size
    /// (shift and mask) and another (division), read back in place, with
    /// the overlay's entries winning over the files'.
    #[test]
    fn mapped_entries_cross_segments_and_take_the_overlay_first() {
        let patched = Loc {
            offset: 7,
            ..loc(0)
        };
        for seg in [1, 3, 4, 8, 1000] {
            let t = mapped(21, seg, vec![(4, patched), (20, patched)]);
            assert_eq!(t.len(), 21);
            let want: Vec<Loc> = (0..21)
                .map(|i| if i == 4 || i == 20 { patched } else { loc(i) })
                .collect();
            assert_eq!(t.to_vec(), want, "segment of {seg}");
            assert_eq!(t.iter().count(), 21);
        }
    }

    /// Past the mapped bytes (impossible by construction) a read gives an
    /// empty entry, which validation refuses, not a panic.
    #[test]
    fn a_read_past_the_mappings_is_an_empty_entry() {
        let t = mapped(5, 4, Vec::new());
        let v = t.view();
        assert_eq!(v.get(4), loc(4));
        assert_eq!(v.get(5), Loc::default());
        assert_eq!(v.get(u64::MAX), Loc::default());
    }
}
