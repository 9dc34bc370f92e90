//! Runtime dtypes: NumPy dtype strings and structured `descr` lists, their
//! persisted MessagePack identity, and the [`Element`] trait mapping Rust
//! types to dtypes.
//!
//! A [`DType`] is either a numeric scalar (`<f4`, `>i8`, `|b1`, `<c16`...) or a
//! structured record of named fields, each with its own dtype (possibly
//! structured again), subarray shape and optional title (NumPy's
//! `(('title', 'x'), '<f4')`). Object, string, void, datetime and
//! unknown dtypes are rejected with an error naming the string.
//!
//! The identity bytes ([`encode_identity_dense`], [`encode_identity_ragged`])
//! are byte-identical to what `loaderx==1.7.2` writes:
//! `msgpack.packb({"dtype": D, "item_shape": [...]})` where `D` is
//! `dtype.str` for a plain dtype and `dtype.descr` for a structured one.
//!
//! ```
//! use zrecord::dtype::{DType, decode_identity, encode_identity_dense};
//! let dt = DType::parse("<f4")?;
//! assert_eq!(dt.itemsize(), 4);
//! let bytes = encode_identity_dense(&dt, &[3, 2]);
//! let id = decode_identity(&bytes)?;
//! assert_eq!(id.dtype, dt);
//! assert_eq!(id.item_shape, Some(vec![3, 2]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::fmt;

use rmpv::Value;

use crate::error::{Error, Result};

/// Deepest nesting of structured dtypes accepted when decoding.
pub const MAX_NESTING: usize = 16;

/// Largest item size accepted for a decoded dtype (one record is at most 2^31
/// bytes in a store, see FORMAT.md).
pub const MAX_ITEMSIZE: u64 = 1 << 31;

/// Byte order of a multi-byte scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ByteOrder {
    /// Least significant byte first (`<`).
    Little,
    /// Most significant byte first (`>`).
    Big,
    /// One-byte types (`|`).
    NotApplicable,
}

impl ByteOrder {
    /// The host's byte order.
    pub const NATIVE: ByteOrder = if cfg!(target_endian = "little") {
        ByteOrder::Little
    } else {
        ByteOrder::Big
    };

    fn char(self) -> char {
        match self {
            ByteOrder::Little => '<',
            ByteOrder::Big => '>',
            ByteOrder::NotApplicable => '|',
        }
    }
}

/// The numeric family of a scalar dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarKind {
    /// `b1`: one byte, zero is false, anything else true.
    Bool,
    /// `i1`, `i2`, `i4`, `i8`.
    Int,
    /// `u1`, `u2`, `u4`, `u8`.
    UInt,
    /// `f2`, `f4`, `f8` (IEEE half, single, double).
    Float,
    /// `c8`, `c16`: two floats, real then imaginary.
    Complex,
}

impl ScalarKind {
    fn char(self) -> char {
        match self {
            ScalarKind::Bool => 'b',
            ScalarKind::Int => 'i',
            ScalarKind::UInt => 'u',
            ScalarKind::Float => 'f',
            ScalarKind::Complex => 'c',
        }
    }

    fn valid_size(self, size: usize) -> bool {
        match self {
            ScalarKind::Bool => size == 1,
            ScalarKind::Int | ScalarKind::UInt => matches!(size, 1 | 2 | 4 | 8),
            ScalarKind::Float => matches!(size, 2 | 4 | 8),
            ScalarKind::Complex => matches!(size, 8 | 16),
        }
    }

    /// Why `size` is refused for this kind. NumPy's long double
    /// (`np.longdouble`, `<f16` or `<f12` on x86, `<c32` for its complex) is
    /// an x87 80-bit float padded to 12 or 16 bytes on one platform and an
    /// IEEE quad or a double on others, so its bytes mean nothing portable.
    fn size_refusal(self, size: usize) -> &'static str {
        match (self, size) {
            (ScalarKind::Float, 10 | 12 | 16) | (ScalarKind::Complex, 20 | 24 | 32) => {
                "long double dtypes (np.longdouble, np.clongdouble) are not supported: \
                 their bytes differ between platforms; convert to float64 or complex128"
            }
            _ => "no such size for this kind",
        }
    }
}

/// A runtime dtype: a numeric scalar, a structured record, or (only as an
/// unnamed field of a structured record) padding bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DType {
    /// A numeric scalar. `order` is [`ByteOrder::NotApplicable`] exactly when
    /// `size == 1`.
    Scalar {
        /// Numeric family.
        kind: ScalarKind,
        /// Bytes per element.
        size: usize,
        /// Byte order.
        order: ByteOrder,
    },
    /// A packed structured record: fields laid out one after another in order.
    Structured(Vec<Field>),
    /// `n` bytes of padding (NumPy writes `('', '|V<n>')` in `descr` for
    /// aligned or offset structs). Only valid as an unnamed field.
    Padding(usize),
}

/// One field of a structured dtype.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Field {
    /// Field name; empty only for padding.
    pub name: String,
    /// NumPy's field title (`(('title', 'x'), '<f4')` in `descr`): a second
    /// key the field can be looked up by. It counts for equality, as in
    /// NumPy's `==` on dtypes. Only strings are supported; padding has none,
    /// and a title may not repeat the field's own name or any other field's
    /// name or title.
    pub title: Option<String>,
    /// The field's element dtype.
    pub dtype: DType,
    /// Subarray shape (empty for a plain field).
    pub shape: Vec<usize>,
}

impl DType {
    /// `T`'s dtype, checked against `T` itself: every typed store, batch and
    /// `.npy` reader goes through this, so an [`Element`] impl whose
    /// `dtype()` does not describe the type (a `[f32; 2]` newtype declared as
    /// `f32`) is an error here rather than a panic or miscounted records
    /// later.
    ///
    /// Normalised as a store keeps it (one-byte scalars `|`, an unset order
    /// native), so an impl that spells a one-byte field `<u1` still equals
    /// the `|u1` its store was created with, and reopens as itself.
    ///
    /// ```
    /// use zrecord::DType;
    /// assert_eq!(DType::of::<f32>().unwrap().to_numpy_str(), "<f4");
    /// ```
    pub fn of<T: Element>() -> Result<DType> {
        let dt = T::dtype();
        let size = std::mem::size_of::<T>();
        if dt.itemsize() != size {
            return Err(Error::invalid(format!(
                "the Element impl of {} says its dtype is {dt} ({} bytes an item), \
                 but the type is {size} bytes",
                std::any::type_name::<T>(),
                dt.itemsize()
            )));
        }
        Ok(dt.normalized())
    }

    /// Scalar helper with the order normalized for one-byte types.
    pub fn scalar(kind: ScalarKind, size: usize, order: ByteOrder) -> Result<DType> {
        if !kind.valid_size(size) {
            return Err(Error::unsupported(
                format!("{}{}", kind.char(), size),
                kind.size_refusal(size),
            ));
        }
        let order = if size == 1 {
            ByteOrder::NotApplicable
        } else if order == ByteOrder::NotApplicable {
            ByteOrder::NATIVE
        } else {
            order
        };
        Ok(DType::Scalar { kind, size, order })
    }

    /// Parses a NumPy type string such as `<f4`, `>i8`, `|u1`, `|b1`, `=f4`,
    /// `f8` (no mark: native), `?` (bool).
    ///
    /// Object (`O`), strings (`U`, `S`, `a`), void (`V`), datetimes (`M`,
    /// `m`), long doubles and anything unknown are rejected with an error
    /// naming the string.
    pub fn parse(s: &str) -> Result<DType> {
        let bytes = s.as_bytes();
        let (order, rest) = match bytes.first() {
            Some(b'<') => (ByteOrder::Little, &s[1..]),
            Some(b'>') => (ByteOrder::Big, &s[1..]),
            Some(b'|') | Some(b'=') => (ByteOrder::NotApplicable, &s[1..]),
            _ => (ByteOrder::NotApplicable, s),
        };
        let rb = rest.as_bytes();
        let Some(&code) = rb.first() else {
            return Err(Error::unsupported(s, "empty type string"));
        };
        if rest == "?" {
            return DType::scalar(ScalarKind::Bool, 1, order);
        }
        let kind = match code {
            b'b' => ScalarKind::Bool,
            b'i' => ScalarKind::Int,
            b'u' => ScalarKind::UInt,
            b'f' => ScalarKind::Float,
            b'c' => ScalarKind::Complex,
            b'O' => return Err(Error::unsupported(s, "object dtypes are not supported")),
            b'U' | b'S' | b'a' => {
                return Err(Error::unsupported(s, "string dtypes are not supported"));
            }
            // NumPy gives a subarray dtype such as ('<f4', (3,)) the type
            // string |V12 too, so the string alone cannot tell the two apart.
            b'V' => return Err(Error::unsupported(s, TOP_LEVEL_VOID)),
            b'M' => {
                return Err(Error::unsupported(s, "datetime64 dtypes are not supported"));
            }
            b'm' => {
                return Err(Error::unsupported(
                    s,
                    "timedelta64 dtypes are not supported",
                ));
            }
            _ => return Err(Error::unsupported(s, "unknown type code")),
        };
        let digits = &rest[1..];
        if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::unsupported(
                s,
                "expected a size in bytes after the type code",
            ));
        }
        let size: usize = digits
            .parse()
            .map_err(|_| Error::unsupported(s, "bad size"))?;
        if !kind.valid_size(size) {
            return Err(Error::unsupported(s, kind.size_refusal(size)));
        }
        DType::scalar(kind, size, order)
    }

    /// Bytes per element (for structured dtypes, the packed record size).
    /// Saturates instead of overflowing for hand-built absurd dtypes; every
    /// dtype produced by [`DType::parse`] or [`decode_identity`] is at most
    /// [`MAX_ITEMSIZE`].
    pub fn itemsize(&self) -> usize {
        match self {
            DType::Scalar { size, .. } => *size,
            DType::Padding(n) => *n,
            DType::Structured(fields) => fields.iter().fold(0usize, |acc, f| {
                let n = f.shape.iter().fold(1usize, |a, &d| a.saturating_mul(d));
                acc.saturating_add(f.dtype.itemsize().saturating_mul(n))
            }),
        }
    }

    /// True when every scalar in the dtype is in the host's byte order (so
    /// its bytes can be reinterpreted as Rust values directly).
    pub fn is_native(&self) -> bool {
        match self {
            DType::Scalar { order, .. } => {
                *order == ByteOrder::NATIVE || *order == ByteOrder::NotApplicable
            }
            DType::Padding(_) => true,
            DType::Structured(fields) => fields.iter().all(|f| f.dtype.is_native()),
        }
    }

    /// The same dtype with every scalar in the host's byte order.
    pub fn to_native(&self) -> DType {
        self.map_orders(&|_, order| {
            if order == ByteOrder::NotApplicable {
                order
            } else {
                ByteOrder::NATIVE
            }
        })
    }

    /// The same dtype with each scalar's byte order replaced by
    /// `f(size, order)`.
    fn map_orders(&self, f: &impl Fn(usize, ByteOrder) -> ByteOrder) -> DType {
        match self {
            DType::Scalar { kind, size, order } => DType::Scalar {
                kind: *kind,
                size: *size,
                order: f(*size, *order),
            },
            DType::Padding(n) => DType::Padding(*n),
            DType::Structured(fields) => DType::Structured(
                fields
                    .iter()
                    .map(|fl| Field {
                        name: fl.name.clone(),
                        title: fl.title.clone(),
                        dtype: fl.dtype.map_orders(f),
                        shape: fl.shape.clone(),
                    })
                    .collect(),
            ),
        }
    }

    /// Exactly what NumPy prints for `dtype.str`: `<f4`, `|b1`, `>c16`; a
    /// structured dtype prints as `|V<itemsize>` (as in NumPy).
    pub fn to_numpy_str(&self) -> String {
        match self {
            DType::Scalar { kind, size, order } => {
                format!("{}{}{}", order.char(), kind.char(), size)
            }
            DType::Padding(n) => format!("|V{n}"),
            DType::Structured(_) => format!("|V{}", self.itemsize()),
        }
    }

    /// What NumPy prints for `dtype.descr`: `[('x', '<f4'), ('y', '<i4', (2,))]`
    /// for structured dtypes, `[('', '<f4')]` for scalars.
    pub fn descr(&self) -> String {
        match self {
            DType::Structured(_) => self.python_literal(),
            _ => format!("[('', '{}')]", self.to_numpy_str()),
        }
    }

    /// The value NumPy's `.npy` writer puts under `'descr'`: the type string
    /// for a plain dtype, the descr list for a structured one.
    pub(crate) fn python_literal(&self) -> String {
        match self {
            DType::Structured(fields) => {
                let mut out = String::from("[");
                for (i, f) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push('(');
                    match &f.title {
                        Some(t) => {
                            out.push('(');
                            out.push_str(&py_repr_str(t));
                            out.push_str(", ");
                            out.push_str(&py_repr_str(&f.name));
                            out.push(')');
                        }
                        None => out.push_str(&py_repr_str(&f.name)),
                    }
                    out.push_str(", ");
                    out.push_str(&f.dtype.python_literal());
                    if !f.shape.is_empty() {
                        out.push_str(", ");
                        out.push_str(&py_tuple(&f.shape));
                    }
                    out.push(')');
                }
                out.push(']');
                out
            }
            _ => format!("'{}'", self.to_numpy_str()),
        }
    }

    /// The generic literal tree of this dtype's identity value.
    pub(crate) fn to_lit(&self) -> Lit {
        match self {
            DType::Structured(fields) => Lit::Seq(
                fields
                    .iter()
                    .map(|f| {
                        // NumPy's descr holds a titled field's key as the
                        // tuple (title, name); msgpack writes it as a list.
                        let key = match &f.title {
                            Some(t) => {
                                Lit::Seq(vec![Lit::Str(t.clone()), Lit::Str(f.name.clone())])
                            }
                            None => Lit::Str(f.name.clone()),
                        };
                        let mut item = vec![key, f.dtype.to_lit()];
                        if !f.shape.is_empty() {
                            item.push(Lit::Seq(
                                f.shape.iter().map(|&d| Lit::Int(d as i128)).collect(),
                            ));
                        }
                        Lit::Seq(item)
                    })
                    .collect(),
            ),
            _ => Lit::Str(self.to_numpy_str()),
        }
    }

    /// Builds a dtype from a literal tree: a type string, or a descr list.
    pub(crate) fn from_lit(lit: &Lit) -> Result<DType> {
        let dt = Self::from_lit_depth(lit, 0)?;
        if dt.itemsize() as u64 > MAX_ITEMSIZE {
            return Err(Error::unsupported(
                lit.render(),
                format!("item size exceeds {MAX_ITEMSIZE} bytes"),
            ));
        }
        Ok(dt)
    }

    fn from_lit_depth(lit: &Lit, depth: usize) -> Result<DType> {
        match lit {
            Lit::Str(s) => DType::parse(s),
            Lit::Seq(fields) => {
                if depth >= MAX_NESTING {
                    return Err(Error::unsupported(
                        "<descr>",
                        format!("structured dtype nested deeper than {MAX_NESTING}"),
                    ));
                }
                if fields.is_empty() {
                    return Err(Error::unsupported("[]", "structured dtype without fields"));
                }
                let mut out = Vec::with_capacity(fields.len().min(1024));
                let mut keys = FieldKeys::default();
                let mut size: u64 = 0;
                for field in fields {
                    let f = Self::field_from_lit(field, depth)?;
                    keys.add(&f)
                        .map_err(|why| Error::unsupported(lit.render(), why))?;
                    let n = f
                        .shape
                        .iter()
                        .try_fold(1u64, |a, &d| a.checked_mul(d as u64))
                        .and_then(|n| n.checked_mul(f.dtype.itemsize() as u64))
                        .and_then(|b| b.checked_add(size))
                        .filter(|&b| b <= MAX_ITEMSIZE);
                    size = n.ok_or_else(|| {
                        Error::unsupported(
                            lit.render(),
                            format!("item size exceeds {MAX_ITEMSIZE} bytes"),
                        )
                    })?;
                    out.push(f);
                }
                Ok(DType::Structured(out))
            }
            other => Err(Error::unsupported(
                other.render(),
                "a dtype is a type string or a descr list",
            )),
        }
    }

    fn field_from_lit(lit: &Lit, depth: usize) -> Result<Field> {
        let bad = |why: &str| Error::unsupported(lit.render(), why.to_string());
        let Lit::Seq(items) = lit else {
            return Err(bad("a descr field is a (name, dtype[, shape]) tuple"));
        };
        if items.len() != 2 && items.len() != 3 {
            return Err(bad("a descr field is a (name, dtype[, shape]) tuple"));
        }
        let (title, name) = match &items[0] {
            Lit::Str(s) => (None, s.clone()),
            Lit::Seq(key) => match key.as_slice() {
                [Lit::Str(t), Lit::Str(n)] => (Some(t.clone()), n.clone()),
                [Lit::Str(_), other] => {
                    return Err(bad(&format!(
                        "a titled field is ((title, name), dtype) and its name {} is not a string",
                        other.render()
                    )));
                }
                [other, Lit::Str(n)] => {
                    return Err(bad(&format!(
                        "field {n:?}: title {} is not a string; only string titles are supported",
                        other.render()
                    )));
                }
                _ => return Err(bad("a titled field's key is a (title, name) pair")),
            },
            _ => return Err(bad("a field name is a string")),
        };
        let shape = match items.get(2) {
            None => Vec::new(),
            Some(Lit::Int(d)) => vec![dim(*d).ok_or_else(|| bad("negative subarray dim"))?],
            Some(Lit::Seq(ds)) => ds
                .iter()
                .map(|d| match d {
                    Lit::Int(d) => dim(*d).ok_or_else(|| bad("negative or huge subarray dim")),
                    _ => Err(bad("subarray dims are integers")),
                })
                .collect::<Result<Vec<_>>>()?,
            Some(_) => return Err(bad("a subarray shape is a tuple of integers")),
        };
        // Void is only meaningful as NumPy's unnamed padding.
        if let Lit::Str(s) = &items[1]
            && let Some(n) = parse_void(s)
        {
            if !name.is_empty() || !shape.is_empty() || title.is_some() {
                return Err(Error::unsupported(
                    s.clone(),
                    "void dtypes are only accepted as unnamed padding inside a structured descr",
                )
                .in_field(&name));
            }
            let n = n.ok_or_else(|| bad("bad padding size"))?;
            if n == 0 || n as u64 > MAX_ITEMSIZE {
                return Err(bad("bad padding size"));
            }
            return Ok(Field {
                name,
                title: None,
                dtype: DType::Padding(n),
                shape,
            });
        }
        if name.is_empty() {
            return Err(bad("only padding fields may be unnamed"));
        }
        if title.as_deref() == Some(name.as_str()) {
            return Err(bad(&format!(
                "field {name:?}: its title is its own name (NumPy refuses this too)"
            )));
        }
        let dtype = Self::from_lit_depth(&items[1], depth + 1).map_err(|e| e.in_field(&name))?;
        Ok(Field {
            name,
            title,
            dtype,
            shape,
        })
    }

    /// The same dtype with every scalar's byte order in the one form
    /// [`DType::parse`] and [`decode_identity`] produce: `|` for one-byte
    /// scalars, the host's order for a multi-byte scalar marked `|` (as
    /// [`DType::scalar`] does). A hand-built `Scalar { size: 1, order: Little }`
    /// prints as `<i1` but reads back as `|i1`; normalising first keeps a
    /// stored dtype equal to itself across a reopen.
    pub(crate) fn normalized(&self) -> DType {
        self.map_orders(&|size, order| {
            if size == 1 {
                ByteOrder::NotApplicable
            } else if order == ByteOrder::NotApplicable {
                ByteOrder::NATIVE
            } else {
                order
            }
        })
    }

    /// Converts `data` (a whole number of items of this dtype) in place from
    /// this dtype's byte order to the host's. A no-op for native dtypes.
    ///
    /// Does not panic for a hand-built dtype (the fields are public) whose
    /// sizes no parsed dtype has: a scalar of 0 or 1 bytes (a complex of
    /// under 2 bytes per part) has nothing to swap, and a structured dtype
    /// whose item size overflows `usize` or is larger than `data` fits no
    /// whole item, so `data` is left unchanged. Bytes past the last whole
    /// item are left as they are.
    pub fn swap_to_native(&self, data: &mut [u8]) {
        if self.is_native() {
            return;
        }
        match self {
            DType::Scalar { kind, size, .. } => {
                let w = if *kind == ScalarKind::Complex {
                    size / 2
                } else {
                    *size
                };
                if w > 1 {
                    for c in data.chunks_exact_mut(w) {
                        c.reverse();
                    }
                }
            }
            DType::Padding(_) => {}
            DType::Structured(_) => {
                // Checked before any op is listed: once the item fits in
                // `data`, every offset below is at most `data.len()` and the
                // ops are at most one per byte.
                let Some(item) = self.checked_itemsize() else {
                    return;
                };
                if item == 0 || item > data.len() {
                    return;
                }
                let mut ops = Vec::new();
                self.swap_ops(0, &mut ops);
                for rec in data.chunks_exact_mut(item) {
                    for &(off, width, count) in &ops {
                        for k in 0..count {
                            let s = off + k * width;
                            rec[s..s + width].reverse();
                        }
                    }
                }
            }
        }
    }

    /// Bytes per element, `None` where [`DType::itemsize`] would saturate.
    fn checked_itemsize(&self) -> Option<usize> {
        match self {
            DType::Scalar { size, .. } => Some(*size),
            DType::Padding(n) => Some(*n),
            DType::Structured(fields) => fields.iter().try_fold(0usize, |acc, f| {
                let n = f.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
                acc.checked_add(f.dtype.checked_itemsize()?.checked_mul(n)?)
            }),
        }
    }

    /// (offset, width, count) runs of non-native scalars inside one item.
    /// Only for a dtype whose [`DType::checked_itemsize`] is `Some`: every
    /// product below is then at most the item size.
    fn swap_ops(&self, base: usize, ops: &mut Vec<(usize, usize, usize)>) {
        match self {
            DType::Scalar { kind, size, order } => {
                if *order != ByteOrder::NATIVE && *order != ByteOrder::NotApplicable {
                    let (width, count) = if *kind == ScalarKind::Complex {
                        (size / 2, 2)
                    } else {
                        (*size, 1)
                    };
                    // A one-byte (or empty) scalar reads the same either way.
                    if width > 1 {
                        ops.push((base, width, count));
                    }
                }
            }
            DType::Padding(_) => {}
            DType::Structured(fields) => {
                let mut off = base;
                for f in fields {
                    let w = f.dtype.itemsize();
                    if w == 0 {
                        // Nothing to swap however many there are (their
                        // count alone may overflow).
                        continue;
                    }
                    let n: usize = f.shape.iter().product();
                    for k in 0..n {
                        f.dtype.swap_ops(off + k * w, ops);
                    }
                    off += w * n;
                }
            }
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DType::Structured(_) => f.write_str(&self.python_literal()),
            _ => f.write_str(&self.to_numpy_str()),
        }
    }
}

impl std::str::FromStr for DType {
    type Err = Error;
    fn from_str(s: &str) -> Result<DType> {
        DType::parse(s)
    }
}

/// The names and titles of one structured dtype's fields. NumPy looks a
/// field up by either (`a['x']`, `a['title']`), so no key may be used twice:
/// NumPy itself refuses such a dtype ("field 'y' occurs more than once").
#[derive(Default)]
struct FieldKeys {
    /// key -> (the field that holds it, whether it is that field's title).
    seen: HashMap<String, (String, bool)>,
}

impl FieldKeys {
    /// Records `f`'s name and title (padding has neither), or says which
    /// field already holds one of them.
    fn add(&mut self, f: &Field) -> std::result::Result<(), String> {
        if f.name.is_empty() {
            return Ok(());
        }
        for (key, is_title) in [(Some(&f.name), false), (f.title.as_ref(), true)] {
            let Some(key) = key else { continue };
            if let Some((owner, owner_title)) = self.seen.get(key.as_str()) {
                return Err(match (is_title, owner_title) {
                    (false, false) => format!("duplicate field name {key:?}"),
                    (false, true) => {
                        format!("field name {key:?} is already the title of field {owner:?}")
                    }
                    (true, false) => format!(
                        "field {:?}: title {key:?} is already the name of field {owner:?}",
                        f.name
                    ),
                    (true, true) => format!(
                        "field {:?}: title {key:?} is already the title of field {owner:?}",
                        f.name
                    ),
                });
            }
            self.seen.insert(key.clone(), (f.name.clone(), is_title));
        }
        Ok(())
    }
}

fn dim(d: i128) -> Option<usize> {
    usize::try_from(d)
        .ok()
        .filter(|&d| d as u64 <= MAX_ITEMSIZE)
}

/// `Some(Some(n))` for `|V<n>` / `V<n>`, `Some(None)` for a malformed void.
/// Why a void type string (`|V12`) is refused outside padding: it is raw
/// bytes, or a subarray dtype whose shape NumPy folded into the string.
const TOP_LEVEL_VOID: &str = "void dtypes are not supported on their own: |V<n> is raw bytes, or a subarray dtype such as ('<f4', (3,)); subarray dtypes are supported only as fields of a structured dtype (or store the base dtype and put the subarray's shape in item_shape), and raw bytes can be stored as u1";

fn parse_void(s: &str) -> Option<Option<usize>> {
    let rest = s.strip_prefix(['|', '<', '>', '=']).unwrap_or(s);
    let digits = rest.strip_prefix('V')?;
    if digits.is_empty() || digits.len() > 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Some(None);
    }
    Some(digits.parse().ok())
}

fn py_tuple(dims: &[usize]) -> String {
    match dims {
        [d] => format!("({d},)"),
        _ => {
            let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
            format!("({})", parts.join(", "))
        }
    }
}

/// Python's `repr` of a str (quotes chosen as Python does).
pub(crate) fn py_repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// A generic literal tree: what both a MessagePack identity and a Python
/// literal (`.npy` header) decode to before they are interpreted.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Lit {
    Str(String),
    Int(i128),
    Bool(bool),
    None,
    /// A list or a tuple.
    Seq(Vec<Lit>),
    /// A dict, in source order.
    Map(Vec<(Lit, Lit)>),
    /// Anything else (floats, ext types) — carried for error messages only.
    Other(String),
}

impl Lit {
    /// A short rendering for error messages (bounded length).
    pub(crate) fn render(&self) -> String {
        let mut s = String::new();
        self.render_into(&mut s, 0);
        if s.len() > 200 {
            let mut cut = 200;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
            s.push_str("...");
        }
        s
    }

    fn render_into(&self, out: &mut String, depth: usize) {
        if out.len() > 200 || depth > 20 {
            return;
        }
        match self {
            Lit::Str(s) => out.push_str(&py_repr_str(s)),
            Lit::Int(i) => out.push_str(&i.to_string()),
            Lit::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
            Lit::None => out.push_str("None"),
            Lit::Other(s) => out.push_str(s),
            Lit::Seq(items) => {
                out.push('[');
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    it.render_into(out, depth + 1);
                    if out.len() > 200 {
                        break;
                    }
                }
                out.push(']');
            }
            Lit::Map(items) => {
                out.push('{');
                for (i, (k, v)) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    k.render_into(out, depth + 1);
                    out.push_str(": ");
                    v.render_into(out, depth + 1);
                    if out.len() > 200 {
                        break;
                    }
                }
                out.push('}');
            }
        }
    }

    fn from_msgpack(v: &Value) -> Lit {
        match v {
            Value::String(s) => match s.as_str() {
                Some(s) => Lit::Str(s.to_string()),
                None => Lit::Other("<invalid utf-8 str>".into()),
            },
            Value::Binary(b) => match std::str::from_utf8(b) {
                Ok(s) => Lit::Str(s.to_string()),
                Err(_) => Lit::Other("<invalid utf-8 bin>".into()),
            },
            Value::Integer(i) => match (i.as_u64(), i.as_i64()) {
                (Some(u), _) => Lit::Int(u as i128),
                (None, Some(s)) => Lit::Int(s as i128),
                _ => Lit::Other("<int>".into()),
            },
            Value::Boolean(b) => Lit::Bool(*b),
            Value::Nil => Lit::None,
            Value::Array(items) => Lit::Seq(items.iter().map(Lit::from_msgpack).collect()),
            Value::Map(items) => Lit::Map(
                items
                    .iter()
                    .map(|(k, v)| (Lit::from_msgpack(k), Lit::from_msgpack(v)))
                    .collect(),
            ),
            Value::F32(f) => Lit::Other(f.to_string()),
            Value::F64(f) => Lit::Other(f.to_string()),
            Value::Ext(t, _) => Lit::Other(format!("<ext {t}>")),
        }
    }

    fn to_msgpack(&self) -> Value {
        match self {
            Lit::Str(s) => Value::from(s.as_str()),
            Lit::Int(i) => {
                if *i >= 0 {
                    Value::from(*i as u64)
                } else {
                    Value::from(*i as i64)
                }
            }
            Lit::Bool(b) => Value::Boolean(*b),
            Lit::None | Lit::Other(_) => Value::Nil,
            Lit::Seq(items) => Value::Array(items.iter().map(Lit::to_msgpack).collect()),
            Lit::Map(items) => Value::Map(
                items
                    .iter()
                    .map(|(k, v)| (k.to_msgpack(), v.to_msgpack()))
                    .collect(),
            ),
        }
    }
}

/// A decoded type identity (the MessagePack map persisted in `store.zr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The stored dtype.
    pub dtype: DType,
    /// `Some(item_shape)` for a dense store, `None` for a ragged one.
    pub item_shape: Option<Vec<u64>>,
}

fn encode_map(entries: Vec<(Lit, Lit)>) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &Lit::Map(entries).to_msgpack())
        .expect("writing MessagePack to a Vec cannot fail");
    out
}

/// Identity bytes of a dense store: `{"dtype": D, "item_shape": [...]}`,
/// byte-identical to loaderx 1.7.2.
pub fn encode_identity_dense(dtype: &DType, item_shape: &[u64]) -> Vec<u8> {
    encode_map(vec![
        (Lit::Str("dtype".into()), dtype.to_lit()),
        (
            Lit::Str("item_shape".into()),
            Lit::Seq(item_shape.iter().map(|&d| Lit::Int(d as i128)).collect()),
        ),
    ])
}

/// Identity bytes of a ragged store: `{"dtype": D}`, byte-identical to
/// loaderx 1.7.2.
pub fn encode_identity_ragged(dtype: &DType) -> Vec<u8> {
    encode_map(vec![(Lit::Str("dtype".into()), dtype.to_lit())])
}

/// Decodes identity bytes written by [`encode_identity_dense`],
/// [`encode_identity_ragged`] or loaderx 1.7.2.
///
/// Strings may be MessagePack `str` or `bin`. The map must hold exactly
/// `dtype` (ragged) or `dtype` and `item_shape` (dense); trailing bytes,
/// other keys and duplicates are errors. Never panics, whatever the input.
pub fn decode_identity(bytes: &[u8]) -> Result<Identity> {
    let bad = |detail: String| Error::BadIdentity { detail };
    let mut rd = bytes;
    let value = rmpv::decode::read_value_with_max_depth(&mut rd, 4 * MAX_NESTING + 8)
        .map_err(|e| bad(format!("not MessagePack: {e}")))?;
    if !rd.is_empty() {
        return Err(bad(format!("{} trailing bytes after the map", rd.len())));
    }
    let Lit::Map(entries) = Lit::from_msgpack(&value) else {
        return Err(bad("the identity is not a map".into()));
    };
    let mut dtype = None;
    let mut item_shape = None;
    for (k, v) in &entries {
        match k {
            Lit::Str(s) if s == "dtype" && dtype.is_none() => dtype = Some(v),
            Lit::Str(s) if s == "item_shape" && item_shape.is_none() => item_shape = Some(v),
            other => {
                return Err(bad(format!(
                    "unexpected or repeated key {}; expected \"dtype\" and, for dense stores, \"item_shape\"",
                    other.render()
                )));
            }
        }
    }
    let dtype = dtype.ok_or_else(|| bad("missing key \"dtype\"".into()))?;
    let dtype = DType::from_lit(dtype)?;
    let item_shape = match item_shape {
        None => None,
        Some(Lit::Seq(dims)) => Some(
            dims.iter()
                .map(|d| match d {
                    Lit::Int(d) => u64::try_from(*d)
                        .map_err(|_| bad(format!("negative item_shape dimension {d}"))),
                    other => Err(bad(format!(
                        "item_shape dimension {} is not an integer",
                        other.render()
                    ))),
                })
                .collect::<Result<Vec<_>>>()?,
        ),
        Some(other) => {
            return Err(bad(format!("item_shape {} is not a list", other.render())));
        }
    };
    Ok(Identity { dtype, item_shape })
}

/// The body of the `identity` fuzz target (and of its corpus replay test):
/// decodes `data` as a type identity and, when that succeeds, checks that
/// encoding the result and decoding it again gives it back. Panics only on a
/// failed round trip, which is a bug.
#[doc(hidden)]
pub fn fuzz_identity(data: &[u8]) {
    let Ok(id) = decode_identity(data) else {
        return;
    };
    let bytes = match &id.item_shape {
        Some(shape) => encode_identity_dense(&id.dtype, shape),
        None => encode_identity_ragged(&id.dtype),
    };
    match decode_identity(&bytes) {
        Ok(again) => assert_eq!(again, id, "identity changed in a round trip"),
        Err(e) => panic!("re-encoded identity {id:?} does not decode: {e}"),
    }
}

/// Checks that a caller's `dtype` can be stored and returns it normalised
/// (see [`DType::normalized`]): what a store persists must decode back, with
/// the code [`decode_identity`] runs at open, to the very same dtype, or the
/// store would be written but never reopen.
///
/// Refused, with the offending field named by its path (`"outer"."inner"`,
/// `#2` for an unnamed field at position 2): a top-level padding dtype, a
/// scalar size its kind does not have (`f3`), a structured dtype without
/// fields or nested deeper than [`MAX_NESTING`], an unnamed field that is not
/// padding, a named, shaped or titled padding field, padding of 0 bytes, a
/// name or title used twice in one structure (a title equal to its own
/// field's name included), subarray dims or an item size past [`MAX_ITEMSIZE`]. The
/// normalised dtype is then encoded and decoded exactly as open does and must
/// come back equal, so create and open cannot disagree.
pub(crate) fn check_storable(dtype: &DType) -> Result<DType> {
    let dt = dtype.normalized();
    let refuse = |reason: String| Error::unsupported(dt.to_lit().render(), reason);
    if let DType::Padding(_) = dt {
        return Err(refuse("void dtypes cannot be stored".into()));
    }
    check_fields(&dt, &mut Vec::new(), 0).map_err(refuse)?;
    if dt.itemsize() as u64 > MAX_ITEMSIZE {
        return Err(refuse(format!("item size exceeds {MAX_ITEMSIZE} bytes")));
    }
    match decode_identity(&encode_identity_ragged(&dt)) {
        Ok(id) if id.dtype == dt => Ok(dt),
        Ok(id) => Err(refuse(format!(
            "it would be stored as {} and reopen as {}",
            dt, id.dtype
        ))),
        Err(e) => Err(refuse(format!("it would be stored but not reopen: {e}"))),
    }
}

/// The structural rules of [`DType::from_lit_depth`] and
/// [`DType::field_from_lit`], walked over a built dtype; `path` names the
/// field being checked, `depth` counts enclosing structured dtypes as the
/// decoder does.
fn check_fields(
    dt: &DType,
    path: &mut Vec<String>,
    depth: usize,
) -> std::result::Result<(), String> {
    let at = |path: &[String]| {
        if path.is_empty() {
            String::from("the dtype")
        } else {
            format!("field {}", path.join("."))
        }
    };
    match dt {
        DType::Scalar { kind, size, .. } => {
            if kind.valid_size(*size) {
                Ok(())
            } else {
                Err(format!(
                    "{}: {} is not a dtype (no such size for this kind)",
                    at(path),
                    dt.to_numpy_str()
                ))
            }
        }
        // Only reached for a field; its rules are checked by the parent.
        DType::Padding(_) => Ok(()),
        DType::Structured(fields) => {
            if depth >= MAX_NESTING {
                return Err(format!(
                    "{}: structured dtype nested deeper than {MAX_NESTING}",
                    at(path)
                ));
            }
            if fields.is_empty() {
                return Err(format!("{}: structured dtype without fields", at(path)));
            }
            let mut keys = FieldKeys::default();
            for (pos, f) in fields.iter().enumerate() {
                path.push(if f.name.is_empty() {
                    format!("#{pos}")
                } else {
                    format!("{:?}", f.name)
                });
                let here = at(path);
                if let Some(&d) = f.shape.iter().find(|&&d| d as u64 > MAX_ITEMSIZE) {
                    return Err(format!("{here}: subarray dim {d} exceeds {MAX_ITEMSIZE}"));
                }
                match &f.dtype {
                    DType::Padding(n) => {
                        if !f.name.is_empty() {
                            return Err(format!(
                                "{here}: padding (|V{n}) must be unnamed; a named void field cannot be stored"
                            ));
                        }
                        if !f.shape.is_empty() {
                            return Err(format!("{here}: padding cannot have a subarray shape"));
                        }
                        if let Some(t) = &f.title {
                            return Err(format!("{here}: padding cannot have a title ({t:?})"));
                        }
                        if *n == 0 || *n as u64 > MAX_ITEMSIZE {
                            return Err(format!("{here}: bad padding size {n}"));
                        }
                    }
                    inner => {
                        if f.name.is_empty() {
                            return Err(format!(
                                "{here}: only padding fields may be unnamed, this one is {}",
                                inner.to_numpy_str()
                            ));
                        }
                        if f.title.as_deref() == Some(f.name.as_str()) {
                            return Err(format!(
                                "{here}: its title is its own name (NumPy refuses this too)"
                            ));
                        }
                        keys.add(f).map_err(|why| format!("{here}: {why}"))?;
                        check_fields(inner, path, depth + 1)?;
                    }
                }
                path.pop();
            }
            Ok(())
        }
    }
}

/// A Rust type whose values are stored as one fixed dtype, in native order.
///
/// Your own `Pod` types can be elements too (a `#[repr(C)]` struct for a
/// structured dtype): override `dtype()` (then `KIND`, which only the
/// default `dtype()` reads, can be anything). It must describe exactly
/// `size_of::<Self>()` bytes, which every store, batch and reader checks
/// ([`DType::of`]).
///
/// Implemented for `i8`..`i64`, `u8`..`u64`, `f32`, `f64`, [`half::f16`],
/// [`Bool`] (NumPy `b1`) and [`Complex<f32>`] / [`Complex<f64>`] (NumPy `c8` /
/// `c16`). `bool` itself is not an `Element`: arbitrary bytes are not valid
/// `bool`s, so booleans travel as [`Bool`], a byte.
pub trait Element: bytemuck::Pod + Send + Sync + fmt::Debug + 'static {
    /// Numeric family.
    const KIND: ScalarKind;
    /// The dtype of this type in the host's byte order.
    fn dtype() -> DType {
        let size = std::mem::size_of::<Self>();
        DType::Scalar {
            kind: Self::KIND,
            size,
            order: if size == 1 {
                ByteOrder::NotApplicable
            } else {
                ByteOrder::NATIVE
            },
        }
    }
}

/// A NumPy boolean (`|b1`): one byte, 0 is false and anything else true.
/// Any byte is a valid `Bool`, which is why `bool` is not used directly.
#[repr(transparent)]
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    PartialOrd,
    Ord,
    bytemuck::Pod,
    bytemuck::Zeroable,
)]
pub struct Bool(pub u8);

impl Bool {
    /// The truth value (any non-zero byte is true, as in NumPy).
    pub fn get(self) -> bool {
        self.0 != 0
    }
}

impl From<bool> for Bool {
    fn from(b: bool) -> Bool {
        Bool(b as u8)
    }
}

impl From<Bool> for bool {
    fn from(b: Bool) -> bool {
        b.get()
    }
}

/// A complex number laid out as NumPy stores it: real part, then imaginary.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Complex<T> {
    /// Real part.
    pub re: T,
    /// Imaginary part.
    pub im: T,
}

// SAFETY: `Complex<f32>` is `repr(C)` with two `f32` fields: size 8, align 4,
// no padding, and every bit pattern of its bytes is a valid pair of `f32`.
unsafe impl bytemuck::Zeroable for Complex<f32> {}
// SAFETY: as above; `f32` is Pod, the struct is Copy + 'static, no padding.
unsafe impl bytemuck::Pod for Complex<f32> {}
// SAFETY: `Complex<f64>` is `repr(C)` with two `f64` fields: size 16, align 8,
// no padding, every bit pattern valid.
unsafe impl bytemuck::Zeroable for Complex<f64> {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for Complex<f64> {}

const _: () = assert!(std::mem::size_of::<Complex<f32>>() == 8);
const _: () = assert!(std::mem::size_of::<Complex<f64>>() == 16);

macro_rules! element {
    ($($t:ty => $k:ident),* $(,)?) => {$(
        impl Element for $t {
            const KIND: ScalarKind = ScalarKind::$k;
        }
    )*};
}

element!(
    i8 => Int, i16 => Int, i32 => Int, i64 => Int,
    u8 => UInt, u16 => UInt, u32 => UInt, u64 => UInt,
    f32 => Float, f64 => Float, half::f16 => Float,
    Bool => Bool, Complex<f32> => Complex, Complex<f64> => Complex,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_prints_back_as_numpy_str() {
        for (input, expect) in [
            ("<f4", "<f4"),
            ("=f4", "<f4"),
            ("f8", "<f8"),
            ("|b1", "|b1"),
            ("?", "|b1"),
            ("<u1", "|u1"),
            ("i1", "|i1"),
            (">i8", ">i8"),
            ("<f2", "<f2"),
            ("<c8", "<c8"),
            (">c16", ">c16"),
            ("|f4", "<f4"),
        ] {
            assert_eq!(
                DType::parse(input).unwrap().to_numpy_str(),
                expect,
                "{input}"
            );
        }
    }

    #[test]
    fn rejects_non_numeric_with_the_string_named() {
        for s in [
            "|O", "<U5", "|S3", "|V4", "<M8[ns]", "<m8", "<f16", "<c32", "<x4", "", "<", "<i3",
            "<f4x", "<i0004",
        ] {
            match DType::parse(s) {
                Err(Error::UnsupportedDType { dtype, .. }) => assert_eq!(dtype, s),
                other => panic!("{s}: {other:?}"),
            }
        }
    }

    /// Regression (audit f13): timedelta64 was called datetime, object
    /// dtypes "cannot be stored" even while loading a .npy, and a subarray
    /// dtype (type string |V12) was told it could only be padding.
    #[test]
    fn refusals_say_what_the_dtype_is_and_what_is_supported() {
        let reason = |s: &str| match DType::parse(s) {
            Err(Error::UnsupportedDType { reason, .. }) => reason,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(reason("<m8[s]"), "timedelta64 dtypes are not supported");
        assert_eq!(reason("<M8[ns]"), "datetime64 dtypes are not supported");
        assert_eq!(reason("|O"), "object dtypes are not supported");
        let void = reason("|V12");
        assert!(
            void.contains("subarray dtype such as ('<f4', (3,))")
                && void.contains("supported only as fields of a structured dtype")
                && void.contains("item_shape"),
            "{void}"
        );
        assert!(!void.contains("only accepted as unnamed padding"), "{void}");
    }

    /// Regression (docs review, session 11): `np.longdouble` (`<f16` on
    /// x86-64) was refused with "no such size for this kind", which reads
    /// as if a float of 16 bytes were a typo rather than a dtype we refuse.
    #[test]
    fn long_double_refusal_says_long_double() {
        for s in ["<f16", "<f12", ">f16", "<c32", "<c24"] {
            let Err(Error::UnsupportedDType { reason, .. }) = DType::parse(s) else {
                panic!("{s} parsed");
            };
            assert!(reason.contains("long double"), "{s}: {reason}");
            assert!(reason.contains("float64"), "{s}: {reason}");
        }
        for s in ["<f3", "<i16", "<c4", "|b2"] {
            let Err(Error::UnsupportedDType { reason, .. }) = DType::parse(s) else {
                panic!("{s} parsed");
            };
            assert_eq!(reason, "no such size for this kind", "{s}");
        }
    }

    /// Regression (audit f13): an unsupported field type inside a
    /// structured dtype was reported without the field's name.
    #[test]
    fn an_unsupported_field_type_names_the_field() {
        let field = |name: &str, ty: Lit| Lit::Seq(vec![Lit::Str(name.into()), ty]);
        let lit = Lit::Seq(vec![
            field("x", Lit::Str("<f4".into())),
            field("name", Lit::Str("|S3".into())),
        ]);
        let e = DType::from_lit(&lit).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"unsupported dtype "|S3": field "name": string dtypes are not supported"#
        );
        // Nested: the path of field names.
        let nested = Lit::Seq(vec![field("outer", lit)]);
        let m = DType::from_lit(&nested).unwrap_err().to_string();
        assert!(m.contains(r#"field "outer.name": string dtypes"#), "{m}");
        // A named void field.
        let named_void = Lit::Seq(vec![field("raw", Lit::Str("|V4".into()))]);
        let m = DType::from_lit(&named_void).unwrap_err().to_string();
        assert!(m.contains(r#"field "raw": void dtypes"#), "{m}");
    }

    #[test]
    fn element_dtypes() {
        assert_eq!(f32::dtype().to_numpy_str(), "<f4");
        assert_eq!(u8::dtype().to_numpy_str(), "|u1");
        assert_eq!(Bool::dtype().to_numpy_str(), "|b1");
        assert_eq!(half::f16::dtype().to_numpy_str(), "<f2");
        assert_eq!(Complex::<f64>::dtype().to_numpy_str(), "<c16");
        assert_eq!(Complex::<f32>::dtype().to_numpy_str(), "<c8");
    }

    #[test]
    fn structured_descr_and_swap() {
        let lit = Lit::Seq(vec![
            Lit::Seq(vec![Lit::Str("x".into()), Lit::Str(">f4".into())]),
            Lit::Seq(vec![Lit::Str("".into()), Lit::Str("|V4".into())]),
            Lit::Seq(vec![
                Lit::Str("y".into()),
                Lit::Str(">i2".into()),
                Lit::Seq(vec![Lit::Int(2)]),
            ]),
        ]);
        let dt = DType::from_lit(&lit).unwrap();
        assert_eq!(dt.itemsize(), 12);
        assert_eq!(
            dt.descr(),
            "[('x', '>f4'), ('', '|V4'), ('y', '>i2', (2,))]"
        );
        assert_eq!(dt.to_numpy_str(), "|V12");
        let mut bytes = [1, 2, 3, 4, 9, 9, 9, 9, 5, 6, 7, 8];
        dt.swap_to_native(&mut bytes);
        assert_eq!(bytes, [4, 3, 2, 1, 9, 9, 9, 9, 6, 5, 8, 7]);
        assert!(dt.to_native().is_native());
    }

    /// Regression: `swap_to_native` panicked on hand-built dtypes: a size-0
    /// scalar ("chunk size must be non-zero") and a structured dtype whose
    /// field shape overflows `usize` (multiply overflow).
    #[test]
    fn swap_to_native_of_a_hand_built_dtype_does_not_panic() {
        let other = if ByteOrder::NATIVE == ByteOrder::Little {
            ByteOrder::Big
        } else {
            ByteOrder::Little
        };
        let scalar = |kind, size| DType::Scalar {
            kind,
            size,
            order: other,
        };
        let field = |dtype, shape: Vec<usize>| Field {
            name: "a".into(),
            title: None,
            dtype,
            shape,
        };
        for dt in [
            scalar(ScalarKind::Int, 0),
            scalar(ScalarKind::Int, 1),
            scalar(ScalarKind::Complex, 0),
            scalar(ScalarKind::Complex, 2),
        ] {
            let mut b = [1u8, 2, 3, 4];
            dt.swap_to_native(&mut b);
            assert_eq!(b, [1, 2, 3, 4], "{dt:?}");
        }
        let i4 = scalar(ScalarKind::Int, 4);
        for shape in [
            vec![usize::MAX, 2],
            // Wraps to 0 bytes in a release build.
            vec![1 << 62, 4],
            // Fits in usize, but no whole item in 64 bytes (and listing
            // its 2^40 swaps would exhaust memory).
            vec![1 << 40],
        ] {
            let dt = DType::Structured(vec![field(i4.clone(), shape.clone())]);
            let mut b: Vec<u8> = (0..64).collect();
            dt.swap_to_native(&mut b);
            assert_eq!(b, (0..64).collect::<Vec<u8>>(), "{shape:?}");
        }
        // A zero-size field, however many, leaves the others swapped.
        let dt = DType::Structured(vec![
            field(scalar(ScalarKind::Int, 0), vec![usize::MAX]),
            Field {
                name: "b".into(),
                title: None,
                dtype: i4,
                shape: vec![],
            },
        ]);
        let mut b = [1u8, 2, 3, 4, 5, 6, 7, 8];
        dt.swap_to_native(&mut b);
        assert_eq!(b, [4, 3, 2, 1, 8, 7, 6, 5]);
    }

    #[test]
    fn identity_rejects_extra_and_missing_keys() {
        let with_extra = encode_map(vec![
            (Lit::Str("dtype".into()), Lit::Str("<f4".into())),
            (Lit::Str("extra".into()), Lit::Int(1)),
        ]);
        assert!(matches!(
            decode_identity(&with_extra),
            Err(Error::BadIdentity { .. })
        ));
        let missing = encode_map(vec![(Lit::Str("item_shape".into()), Lit::Seq(vec![]))]);
        assert!(matches!(
            decode_identity(&missing),
            Err(Error::BadIdentity { .. })
        ));
        let mut trailing = encode_identity_ragged(&DType::parse("<f4").unwrap());
        trailing.push(0);
        assert!(decode_identity(&trailing).is_err());
    }

    #[test]
    fn identity_accepts_bin_strings() {
        let v = Value::Map(vec![(Value::from("dtype"), Value::Binary(b"<i8".to_vec()))]);
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &v).unwrap();
        let id = decode_identity(&bytes).unwrap();
        assert_eq!(id.dtype.to_numpy_str(), "<i8");
        assert_eq!(id.item_shape, None);
    }

    #[test]
    fn deep_nesting_is_rejected_not_overflowed() {
        let mut lit = Lit::Str("<f4".into());
        for _ in 0..(MAX_NESTING + 2) {
            lit = Lit::Seq(vec![Lit::Seq(vec![Lit::Str("a".into()), lit])]);
        }
        assert!(DType::from_lit(&lit).is_err());
        let mut bytes = vec![0x81, 0xa5, b'd', b't', b'y', b'p', b'e'];
        bytes.extend(std::iter::repeat_n(0x91, 100_000));
        bytes.push(0xc0);
        assert!(decode_identity(&bytes).is_err());
    }

    fn s(x: &str) -> Lit {
        Lit::Str(x.into())
    }

    /// `((title, name), dtype[, shape])`, as msgpack and `.npy` descrs hold it.
    fn titled(title: Lit, name: &str, ty: Lit) -> Lit {
        Lit::Seq(vec![Lit::Seq(vec![title, s(name)]), ty])
    }

    fn unsupported_reason(lit: &Lit) -> String {
        match DType::from_lit(lit) {
            Err(Error::UnsupportedDType { reason, .. }) => reason,
            other => panic!("{}: {other:?}", lit.render()),
        }
    }

    #[test]
    fn titled_fields_parse_render_and_round_trip_the_identity() {
        // np.dtype([(('title', 'x'), '<f4'), ('y', 'u1')]).descr
        let lit = Lit::Seq(vec![
            titled(s("title"), "x", s("<f4")),
            Lit::Seq(vec![s("y"), s("|u1")]),
        ]);
        let dt = DType::from_lit(&lit).unwrap();
        let DType::Structured(fields) = &dt else {
            panic!("{dt:?}")
        };
        assert_eq!(fields[0].name, "x");
        assert_eq!(fields[0].title.as_deref(), Some("title"));
        assert_eq!(fields[1].title, None);
        assert_eq!(dt.itemsize(), 5);
        assert_eq!(dt.descr(), "[(('title', 'x'), '<f4'), ('y', '|u1')]");
        // msgpack.packb({'dtype': dt.descr}): the (title, name) tuple is a
        // two-element array.
        let mut want = vec![0x81, 0xa5];
        want.extend(b"dtype");
        want.extend([0x92, 0x92, 0x92, 0xa5]);
        want.extend(b"title");
        want.push(0xa1);
        want.extend(b"x");
        want.push(0xa3);
        want.extend(b"<f4");
        want.extend([0x92, 0xa1, b'y', 0xa3]);
        want.extend(b"|u1");
        let bytes = encode_identity_ragged(&dt);
        assert_eq!(bytes, want);
        assert_eq!(decode_identity(&bytes).unwrap().dtype, dt);
        let dense = encode_identity_dense(&dt, &[2]);
        assert_eq!(decode_identity(&dense).unwrap().dtype, dt);
        assert_eq!(check_storable(&dt).unwrap(), dt);
    }

    #[test]
    fn titles_count_for_equality() {
        let with = |title: Option<&str>| {
            let key = match title {
                Some(t) => Lit::Seq(vec![s(t), s("x")]),
                None => s("x"),
            };
            DType::from_lit(&Lit::Seq(vec![Lit::Seq(vec![key, s("<f4")])])).unwrap()
        };
        // As NumPy's ==: a titled dtype equals neither the untitled one nor
        // one with another title.
        assert_ne!(with(Some("a")), with(None));
        assert_ne!(with(Some("a")), with(Some("b")));
        assert_eq!(with(Some("a")), with(Some("a")));
    }

    #[test]
    fn titles_on_nested_and_subarray_fields_round_trip() {
        // np.dtype([(('T', 'o'), [(('ti', 'i'), '<i2', (2,))]), (('S', 's'), '>f8', (3,))])
        let lit = Lit::Seq(vec![
            titled(
                s("T"),
                "o",
                Lit::Seq(vec![Lit::Seq(vec![
                    Lit::Seq(vec![s("ti"), s("i")]),
                    s("<i2"),
                    Lit::Seq(vec![Lit::Int(2)]),
                ])]),
            ),
            Lit::Seq(vec![
                Lit::Seq(vec![s("S"), s("s")]),
                s(">f8"),
                Lit::Seq(vec![Lit::Int(3)]),
            ]),
        ]);
        let dt = DType::from_lit(&lit).unwrap();
        assert_eq!(
            dt.descr(),
            "[(('T', 'o'), [(('ti', 'i'), '<i2', (2,))]), (('S', 's'), '>f8', (3,))]"
        );
        assert_eq!(dt.itemsize(), 4 + 24);
        assert_eq!(
            decode_identity(&encode_identity_ragged(&dt)).unwrap().dtype,
            dt
        );
        // Byte swapping keeps the titles.
        let native = dt.to_native();
        assert!(
            native.descr().contains("(('S', 's'), '<f8', (3,))"),
            "{native}"
        );
        // A title that needs quoting renders as Python's repr.
        let q = DType::from_lit(&Lit::Seq(vec![titled(s("it's"), "x", s("<f4"))])).unwrap();
        assert_eq!(q.descr(), r#"[(("it's", 'x'), '<f4')]"#);
    }

    #[test]
    fn a_title_equal_to_a_name_or_title_is_refused_naming_the_field() {
        let plain = |name: &str| Lit::Seq(vec![s(name), s("|u1")]);
        for (fields, want) in [
            (
                vec![titled(s("y"), "x", s("<f4")), plain("y")],
                r#"field name "y" is already the title of field "x""#,
            ),
            (
                vec![plain("y"), titled(s("y"), "x", s("<f4"))],
                r#"field "x": title "y" is already the name of field "y""#,
            ),
            (
                vec![titled(s("t"), "x", s("<f4")), titled(s("t"), "y", s("<f4"))],
                r#"field "y": title "t" is already the title of field "x""#,
            ),
            (
                vec![titled(s("x"), "x", s("<f4"))],
                r#"field "x": its title is its own name"#,
            ),
            (vec![plain("y"), plain("y")], r#"duplicate field name "y""#),
        ] {
            let reason = unsupported_reason(&Lit::Seq(fields));
            assert!(reason.contains(want), "{reason} / {want}");
        }
        // Nested: the enclosing field is named too.
        let inner = Lit::Seq(vec![titled(s("b"), "a", s("<f4")), plain("b")]);
        let e = DType::from_lit(&Lit::Seq(vec![Lit::Seq(vec![s("outer"), inner])]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("outer") && e.contains(r#""b""#), "{e}");
    }

    #[test]
    fn non_string_titles_and_titled_padding_are_refused() {
        for (title, shown) in [
            (Lit::Int(1), "1"),
            (Lit::None, "None"),
            (Lit::Seq(vec![s("a")]), "['a']"),
        ] {
            let reason = unsupported_reason(&Lit::Seq(vec![titled(title, "x", s("<f4"))]));
            assert!(
                reason.contains(&format!(r#"field "x": title {shown} is not a string"#)),
                "{reason}"
            );
        }
        let reason = unsupported_reason(&Lit::Seq(vec![Lit::Seq(vec![
            Lit::Seq(vec![s("t"), Lit::Int(3)]),
            s("<f4"),
        ])]));
        assert!(reason.contains("name 3 is not a string"), "{reason}");
        let reason = unsupported_reason(&Lit::Seq(vec![Lit::Seq(vec![
            Lit::Seq(vec![s("a"), s("b"), s("c")]),
            s("<f4"),
        ])]));
        assert!(reason.contains("(title, name) pair"), "{reason}");
        // Padding never has a title (NumPy's descr writes ('', '|V4')).
        let padded = Lit::Seq(vec![
            Lit::Seq(vec![s("x"), s("<f4")]),
            titled(s("t"), "", s("|V4")),
        ]);
        assert!(DType::from_lit(&padded).is_err());
    }

    #[test]
    fn storing_a_hand_built_titled_dtype_applies_the_same_rules() {
        let f = |name: &str, title: Option<&str>, dtype: DType| Field {
            name: name.into(),
            title: title.map(String::from),
            dtype,
            shape: vec![],
        };
        let f4 = DType::parse("<f4").unwrap();
        let ok = DType::Structured(vec![
            f("x", Some("X"), f4.clone()),
            f("y", None, f4.clone()),
        ]);
        assert_eq!(check_storable(&ok).unwrap(), ok);
        for (dt, want) in [
            (
                DType::Structured(vec![
                    f("x", Some("y"), f4.clone()),
                    f("y", None, f4.clone()),
                ]),
                r#"field "y": field name "y" is already the title of field "x""#,
            ),
            (
                DType::Structured(vec![f("x", Some("x"), f4.clone())]),
                r#"field "x": its title is its own name"#,
            ),
            (
                DType::Structured(vec![
                    f("x", None, f4.clone()),
                    f("", Some("p"), DType::Padding(4)),
                ]),
                "field #1: padding cannot have a title",
            ),
        ] {
            let e = check_storable(&dt).unwrap_err().to_string();
            assert!(e.contains(want), "{e} / {want}");
        }
    }
}
