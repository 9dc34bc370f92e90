//! Index forms and their resolution against a store's length.
//!
//! A gather, a `get` or a `delete` takes any of NumPy's ways of naming
//! records: one index, negative from the end, a range with a step (Python
//! slice semantics: clamped, never out of range), a list, or a boolean mask.
//! [`resolve`] turns each into plain record positions `0..len`.
//!
//! ```
//! use zrecord::{Indices, resolve};
//! assert_eq!(resolve(&Indices::One(-1), 10)?, vec![9]);
//! assert_eq!(resolve(&Indices::range(None, None, -3), 10)?, vec![9, 6, 3, 0]);
//! assert_eq!(resolve(&Indices::from(&[0i64, -2][..]), 10)?, vec![0, 8]);
//! assert!(resolve(&Indices::One(10), 10).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};
use std::path::Path;

use crate::error::{Error, Result};

/// Which records to read or delete. Negative values count from the end, as
/// in NumPy. More forms may come, so a `match` on it needs a `_` arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Indices<'a> {
    /// One record.
    One(i64),
    /// One record by unsigned position (what `From<u64>`, `From<usize>` and
    /// `From<u32>` give); never wraps. Kept unsigned so an out-of-range
    /// error names the very value passed, even past `i64::MAX`.
    Position(u64),
    /// A Python slice `start:stop:step`. Bounds are clamped to the length
    /// (never an error); `step` must not be zero.
    Range {
        /// First position (`None`: the start, or the end for a negative step).
        start: Option<i64>,
        /// One past the last position (`None`: the end, or before the start
        /// for a negative step).
        stop: Option<i64>,
        /// Stride; negative walks backwards.
        step: i64,
    },
    /// Positions in any order, duplicates allowed, negative from the end.
    List(&'a [i64]),
    /// Unsigned positions (as a sampler produces them); never wrap.
    Positions(&'a [u64]),
    /// One flag per record; its length must equal the store's.
    Mask(&'a [bool]),
}

impl Indices<'_> {
    /// The slice `start:stop:step`.
    pub fn range(start: Option<i64>, stop: Option<i64>, step: i64) -> Indices<'static> {
        Indices::Range { start, stop, step }
    }

    /// Every record.
    pub fn all() -> Indices<'static> {
        Indices::range(None, None, 1)
    }

    /// Whether the form names one record (a scalar index) rather than a set.
    pub fn is_one(&self) -> bool {
        matches!(self, Indices::One(_) | Indices::Position(_))
    }
}

/// Resolves `idx` against a store of `len` records into positions `0..len`.
///
/// Errors: [`Error::IndexOutOfRange`] naming the index as given and the
/// length; [`Error::InvalidArgument`] for a zero step or a mask whose length
/// is not `len`.
pub fn resolve(idx: &Indices<'_>, len: u64) -> Result<Vec<u64>> {
    match idx {
        Indices::One(i) => Ok(vec![wrap(*i, len)?]),
        Indices::Position(p) => {
            if *p >= len {
                return Err(Error::IndexOutOfRange {
                    path: None,
                    index: i128::from(*p),
                    len,
                });
            }
            Ok(vec![*p])
        }
        Indices::List(list) => list.iter().map(|&i| wrap(i, len)).collect(),
        Indices::Positions(pos) => {
            if let Some(&bad) = pos.iter().find(|&&p| p >= len) {
                return Err(Error::IndexOutOfRange {
                    path: None,
                    index: i128::from(bad),
                    len,
                });
            }
            Ok(pos.to_vec())
        }
        Indices::Mask(mask) => {
            if mask.len() as u64 != len {
                return Err(Error::invalid(format!(
                    "boolean mask of length {} for a store of {}",
                    mask.len(),
                    crate::error::records(len)
                )));
            }
            Ok(mask
                .iter()
                .enumerate()
                .filter(|(_, m)| **m)
                .map(|(i, _)| i as u64)
                .collect())
        }
        Indices::Range { start, stop, step } => slice_indices(*start, *stop, *step, len),
    }
}

/// [`resolve`] for the store at `path`, which an out-of-range error names.
pub(crate) fn resolve_in(idx: &Indices<'_>, len: u64, path: &Path) -> Result<Vec<u64>> {
    resolve(idx, len).map_err(|e| match e {
        Error::IndexOutOfRange {
            path: None,
            index,
            len,
        } => Error::IndexOutOfRange {
            path: Some(path.to_path_buf()),
            index,
            len,
        },
        e => e,
    })
}

fn wrap(i: i64, len: u64) -> Result<u64> {
    let len_i = i128::from(len);
    let j = if i < 0 {
        i128::from(i) + len_i
    } else {
        i128::from(i)
    };
    if j < 0 || j >= len_i {
        return Err(Error::IndexOutOfRange {
            path: None,
            index: i128::from(i),
            len,
        });
    }
    Ok(j as u64)
}

/// Python's `slice(start, stop, step).indices(len)` followed by `range`.
fn slice_indices(start: Option<i64>, stop: Option<i64>, step: i64, len: u64) -> Result<Vec<u64>> {
    if step == 0 {
        return Err(Error::invalid("slice step cannot be zero"));
    }
    let n = i128::from(len);
    let step = i128::from(step);
    let clamp = |v: Option<i64>, default: i128, lo: i128, hi: i128| -> i128 {
        match v {
            None => default,
            Some(v) => {
                let mut v = i128::from(v);
                if v < 0 {
                    v += n;
                }
                v.clamp(lo, hi)
            }
        }
    };
    let (start, stop) = if step > 0 {
        (clamp(start, 0, 0, n), clamp(stop, n, 0, n))
    } else {
        (clamp(start, n - 1, -1, n - 1), clamp(stop, -1, -1, n - 1))
    };
    let count = if step > 0 {
        if stop > start {
            (stop - start + step - 1) / step
        } else {
            0
        }
    } else if start > stop {
        (start - stop + (-step) - 1) / (-step)
    } else {
        0
    };
    Ok((0..count).map(|k| (start + k * step) as u64).collect())
}

macro_rules! from_signed {
    ($($t:ty),*) => {$(
        impl From<$t> for Indices<'static> {
            fn from(i: $t) -> Self {
                Indices::One(i64::from(i))
            }
        }
    )*};
}

macro_rules! from_unsigned {
    ($($t:ty),*) => {$(
        impl From<$t> for Indices<'static> {
            fn from(i: $t) -> Self {
                // Lossless (usize is at most 64 bits on every target Rust
                // supports), so an error names the value as passed.
                Indices::Position(i as u64)
            }
        }
    )*};
}

// Range bounds past i64::MAX saturate: a slice clamps them to the length
// anyway, so no error can name them.
macro_rules! from_int_ranges {
    ($($t:ty),*) => {$(
        impl From<Range<$t>> for Indices<'static> {
            fn from(r: Range<$t>) -> Self {
                Indices::range(Some(sat(r.start)), Some(sat(r.end)), 1)
            }
        }
        impl From<RangeInclusive<$t>> for Indices<'static> {
            fn from(r: RangeInclusive<$t>) -> Self {
                // An iterated-out `a..=b` still reports `a` and `b` but
                // yields nothing: it names no record. (Only then is a range
                // with `start <= end` empty; `2..=-1` is "2 through the
                // last" and not emptied here.)
                if r.start() <= r.end() && r.is_empty() {
                    return Indices::range(Some(0), Some(0), 1);
                }
                Indices::range(Some(sat(*r.start())), inclusive_stop(sat(*r.end())), 1)
            }
        }
        impl From<RangeFrom<$t>> for Indices<'static> {
            fn from(r: RangeFrom<$t>) -> Self {
                Indices::range(Some(sat(r.start)), None, 1)
            }
        }
        impl From<RangeTo<$t>> for Indices<'static> {
            fn from(r: RangeTo<$t>) -> Self {
                Indices::range(None, Some(sat(r.end)), 1)
            }
        }
        impl From<RangeToInclusive<$t>> for Indices<'static> {
            fn from(r: RangeToInclusive<$t>) -> Self {
                Indices::range(None, inclusive_stop(sat(r.end)), 1)
            }
        }
    )*};
}

fn sat<T: TryInto<i64>>(v: T) -> i64 {
    v.try_into().unwrap_or(i64::MAX)
}

/// The exclusive stop of a range that ends at `end` inclusive. `..=-1`
/// means "through the last record", which no exclusive stop can express
/// after wrapping (`0` would be empty): `None`.
fn inclusive_stop(end: i64) -> Option<i64> {
    if end == -1 {
        None
    } else {
        Some(end.saturating_add(1))
    }
}

from_signed!(i32, i64);
from_unsigned!(u32, u64, usize);
from_int_ranges!(i32, i64, u32, u64, usize);

impl From<RangeFull> for Indices<'static> {
    fn from(_: RangeFull) -> Self {
        Indices::all()
    }
}

impl<'a> From<&'a [i64]> for Indices<'a> {
    fn from(l: &'a [i64]) -> Self {
        Indices::List(l)
    }
}

impl<'a> From<&'a Vec<i64>> for Indices<'a> {
    fn from(l: &'a Vec<i64>) -> Self {
        Indices::List(l)
    }
}

impl<'a, const N: usize> From<&'a [i64; N]> for Indices<'a> {
    fn from(l: &'a [i64; N]) -> Self {
        Indices::List(l)
    }
}

impl<'a> From<&'a [u64]> for Indices<'a> {
    fn from(l: &'a [u64]) -> Self {
        Indices::Positions(l)
    }
}

impl<'a> From<&'a Vec<u64>> for Indices<'a> {
    fn from(l: &'a Vec<u64>) -> Self {
        Indices::Positions(l)
    }
}

impl<'a> From<&'a [bool]> for Indices<'a> {
    fn from(m: &'a [bool]) -> Self {
        Indices::Mask(m)
    }
}

impl<'a> From<&'a Vec<bool>> for Indices<'a> {
    fn from(m: &'a Vec<bool>) -> Self {
        Indices::Mask(m)
    }
}

impl<'a, 'b> From<&'b Indices<'a>> for Indices<'a> {
    fn from(i: &'b Indices<'a>) -> Self {
        i.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Python's `list(range(len))[start:stop:step]`, computed the slow way.
    fn python_slice(start: Option<i64>, stop: Option<i64>, step: i64, len: u64) -> Vec<u64> {
        let n = len as i64;
        let norm = |v: i64| if v < 0 { v + n } else { v };
        let mut out = Vec::new();
        if step > 0 {
            let s = start.map(norm).unwrap_or(0).clamp(0, n);
            let e = stop.map(norm).unwrap_or(n).clamp(0, n);
            let mut i = s;
            while i < e {
                out.push(i as u64);
                i += step;
            }
        } else {
            let s = start.map(norm).unwrap_or(n - 1).clamp(-1, n - 1);
            let e = stop.map(norm).unwrap_or(-1).clamp(-1, n - 1);
            let mut i = s;
            while i > e {
                out.push(i as u64);
                i += step;
            }
        }
        out
    }

    #[test]
    fn slices_match_python_semantics() {
        let bounds = [
            None,
            Some(-12),
            Some(-10),
            Some(-3),
            Some(-1),
            Some(0),
            Some(2),
            Some(9),
            Some(10),
            Some(15),
        ];
        for len in [0u64, 1, 10] {
            for &start in &bounds {
                for &stop in &bounds {
                    for step in [-4i64, -1, 1, 2, 3, 11] {
                        assert_eq!(
                            resolve(&Indices::range(start, stop, step), len).unwrap(),
                            python_slice(start, stop, step, len),
                            "{start:?}:{stop:?}:{step} of {len}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn hand_checked_slices() {
        assert_eq!(
            resolve(&Indices::range(Some(1), Some(8), 3), 10).unwrap(),
            vec![1, 4, 7]
        );
        assert_eq!(
            resolve(&Indices::range(None, None, -1), 4).unwrap(),
            vec![3, 2, 1, 0]
        );
        assert_eq!(resolve(&(2..).into(), 4).unwrap(), vec![2, 3]);
        assert_eq!(resolve(&(..2).into(), 4).unwrap(), vec![0, 1]);
        assert_eq!(resolve(&(1..=2).into(), 4).unwrap(), vec![1, 2]);
        assert_eq!(resolve(&(-2..=-1).into(), 4).unwrap(), vec![2, 3]);
        assert_eq!(resolve(&(..).into(), 3).unwrap(), vec![0, 1, 2]);
    }

    /// Regression: every other range form converted, `..=k` did not.
    #[test]
    fn range_to_inclusive_converts_like_the_other_ranges() {
        assert_eq!(resolve(&(..=2).into(), 4).unwrap(), vec![0, 1, 2]);
        assert_eq!(resolve(&(..=2u64).into(), 4).unwrap(), vec![0, 1, 2]);
        assert_eq!(resolve(&(..=-1i64).into(), 4).unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(resolve(&(..=-2).into(), 4).unwrap(), vec![0, 1, 2]);
        assert_eq!(resolve(&(..=9usize).into(), 4).unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(resolve(&(..=u64::MAX).into(), 2).unwrap(), vec![0, 1]);
        // Sampler output converts from a slice or a Vec of u64 as it is.
        let picked: Vec<u64> = vec![3, 1];
        assert_eq!(resolve(&(&picked).into(), 4).unwrap(), vec![3, 1]);
        assert_eq!(resolve(&picked[..].into(), 4).unwrap(), vec![3, 1]);
    }

    /// Regression: an `a..=b` iterated to its end still reports `a` and
    /// `b`, and converted to the records `a..=b` instead of none.
    #[test]
    fn an_exhausted_inclusive_range_names_no_record() {
        let mut r = 1..=1i64;
        assert_eq!(r.next(), Some(1));
        assert_eq!(resolve(&r.into(), 4).unwrap(), Vec::<u64>::new());
        let mut r = 0..=1u64;
        r.by_ref().for_each(drop);
        assert_eq!(resolve(&r.into(), 4).unwrap(), Vec::<u64>::new());
        let mut r = 0..=2usize;
        r.next();
        assert_eq!(resolve(&r.into(), 4).unwrap(), vec![1, 2]);
        // Built at run time: clippy rightly calls these literals empty
        // Rust ranges, which is the case being checked.
        let (two, three, minus_one, one) = std::hint::black_box((2i64, 3i64, -1i64, 1i64));
        assert_eq!(resolve(&(two..=minus_one).into(), 4).unwrap(), vec![2, 3]);
        assert_eq!(
            resolve(&(three..=one).into(), 4).unwrap(),
            Vec::<u64>::new()
        );
    }

    #[test]
    fn zero_step_is_an_error() {
        assert!(matches!(
            resolve(&Indices::range(None, None, 0), 3),
            Err(Error::InvalidArgument { .. })
        ));
    }

    #[test]
    fn negative_and_out_of_range_scalars() {
        assert_eq!(resolve(&Indices::One(-3), 3).unwrap(), vec![0]);
        for bad in [3i64, -4, i64::MAX, i64::MIN] {
            match resolve(&Indices::One(bad), 3) {
                Err(Error::IndexOutOfRange { index, len, .. }) => {
                    assert_eq!((index, len), (i128::from(bad), 3))
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert!(resolve(&Indices::One(0), 0).is_err());
    }

    /// Regression: `From<u64>` saturated to `i64::MAX`, so
    /// `gather(u64::MAX)` said "index 9223372036854775807 is out of range",
    /// a number the caller never passed.
    #[test]
    fn unsigned_scalars_are_named_as_passed_when_out_of_range() {
        for (idx, want) in [
            (Indices::from(u64::MAX), i128::from(u64::MAX)),
            (Indices::from(1u64 << 63), 1i128 << 63),
            (Indices::from(usize::MAX), usize::MAX as i128),
            (Indices::from(u32::MAX), i128::from(u32::MAX)),
            (Indices::from(3u64), 3),
        ] {
            assert!(idx.is_one());
            match resolve(&idx, 3) {
                Err(e @ Error::IndexOutOfRange { .. }) => {
                    assert!(
                        matches!(e, Error::IndexOutOfRange { index, len: 3, .. } if index == want)
                    );
                    assert!(e.to_string().contains(&want.to_string()), "{e}");
                }
                other => panic!("{idx:?}: {other:?}"),
            }
        }
        assert_eq!(resolve(&Indices::from(2u64), 3).unwrap(), vec![2]);
        assert_eq!(resolve(&Indices::from(0usize), 1).unwrap(), vec![0]);
    }

    #[test]
    fn lists_positions_and_masks() {
        assert_eq!(
            resolve(&Indices::List(&[2, -1, 0, 2]), 4).unwrap(),
            vec![2, 3, 0, 2]
        );
        match resolve(&Indices::List(&[0, 5]), 4) {
            Err(Error::IndexOutOfRange {
                index: 5, len: 4, ..
            }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(
            resolve(&Indices::Positions(&[3, 1]), 4).unwrap(),
            vec![3, 1]
        );
        assert!(resolve(&Indices::Positions(&[4]), 4).is_err());
        assert_eq!(
            resolve(&Indices::Mask(&[true, false, true]), 3).unwrap(),
            vec![0, 2]
        );
        assert!(matches!(
            resolve(&Indices::Mask(&[true]), 3),
            Err(Error::InvalidArgument { .. })
        ));
    }
}
