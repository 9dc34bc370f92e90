//! Guards `.npy` interop with NumPy itself: files that numpy writes (every
//! numeric dtype, both byte orders, C and Fortran order, versions 1, 2 and 3,
//! structured dtypes) must read back element-exact, and what we write must be
//! byte-identical to `numpy.save` of the same array. NumPy runs live through
//! scripts/ref-venv.sh; without it the test fails rather than skips.

mod common;

use std::path::Path;

use ndarray::{ArrayD, IxDyn};
use zrecord::npy::{self, Parallelism};
use zrecord::{Bool, Complex, DType};

const DTYPES: &[&str] = &[
    "|b1", "|i1", "|u1", "<i2", ">i2", "<i4", ">i4", "<i8", ">i8", "<u2", ">u2", "<u4", ">u4",
    "<u8", ">u8", "<f2", ">f2", "<f4", ">f4", "<f8", ">f8", "<c8", ">c8", "<c16", ">c16",
];

/// Writes fixtures with numpy: `{name}.npy` and `{name}.raw` (the C-order,
/// little-endian bytes). Returns the names with their native dtype strings.
fn write_fixtures(dir: &Path) -> Vec<(String, String)> {
    let script = r#"
import sys, numpy as np
from numpy.lib import format as fmt
root = sys.argv[1]
dtypes = sys.argv[2].split(',')
rng = np.random.default_rng(7)
def make(dt, shape):
    dt = np.dtype(dt)
    n = int(np.prod(shape))
    if dt.kind == 'b':
        a = rng.random(n) > 0.5
    elif dt.kind in 'iu':
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, n, dtype=dt.newbyteorder('='), endpoint=True)
    elif dt.kind == 'f':
        a = rng.standard_normal(n) * 1e3
        a[:3] = [np.nan, -np.inf, -0.0]
    else:
        a = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    return a.astype(dt).reshape(shape)
specs = []
for dt in dtypes:
    for order in 'CF':
        for v in (1, 2, 3):
            a = make(dt, (3, 4, 5))
            a = np.asarray(a, order=order)
            name = f"{dt.replace('<','le').replace('>','be').replace('|','na')}_{order}_v{v}"
            with open(f'{root}/{name}.npy', 'wb') as f:
                fmt.write_array(f, a, version=(v, 0))
            open(f'{root}/{name}.raw', 'wb').write(a.astype(a.dtype.newbyteorder('<')).tobytes(order='C'))
            print(name, a.dtype.newbyteorder('<').str)
# structured, nested, big-endian, padded, and 0-d / empty shapes
sdt = np.dtype([('x', '>f4'), ('y', '<i2', (2,)), ('z', [('a', '>u8'), ('b', '?')])])
a = np.zeros((6,), sdt)
a['x'] = np.arange(6); a['y'] = [[i, -i] for i in range(6)]; a['z']['a'] = 2**40 + np.arange(6); a['z']['b'] = [True, False] * 3
for order in 'CF':
    b = np.asarray(np.stack([a, a[::-1]]), order=order)
    name = f'structured_{order}'
    np.save(f'{root}/{name}.npy', b)
    open(f'{root}/{name}.raw', 'wb').write(b.astype(sdt.newbyteorder('<')).tobytes(order='C'))
    print(name, 'structured')
# titled fields (nested and on a subarray field): the header's descr holds (title, name) tuples
tdt = np.dtype([(('Position', 'x'), '>f4'), (('Pair', 'y'), '<i2', (2,)), ('z', [(('Big', 'a'), '>u8'), ('b', '?')])])
t = np.zeros((5,), tdt); t['x'] = np.arange(5); t['Pair'] = [[i, -i] for i in range(5)]; t['z']['Big'] = 2**40 + np.arange(5)
np.save(f'{root}/titled.npy', t); open(f'{root}/titled.raw', 'wb').write(t.astype(tdt.newbyteorder('<')).tobytes()); print('titled', 'structured')
pdt = np.dtype({'names': ['a', 'b'], 'formats': ['<i4', '<i8'], 'offsets': [0, 8], 'itemsize': 24})
p = np.zeros((4,), pdt); p['a'] = [1, 2, 3, 4]; p['b'] = [5, 6, 7, 8]
np.save(f'{root}/padded.npy', p); open(f'{root}/padded.raw', 'wb').write(p.tobytes()); print('padded', 'structured')
for name, a in [('zerod', np.array(3.5)), ('empty', np.zeros((0, 3), '<f4')), ('big_first_dim', np.arange(70000, dtype='<u2'))]:
    np.save(f'{root}/{name}.npy', a); open(f'{root}/{name}.raw', 'wb').write(a.tobytes()); print(name, a.dtype.str)
"#;
    let out = common::run_ref_python(script, &[dir.to_str().unwrap(), &DTYPES.join(",")]);
    out.lines()
        .map(|l| {
            let (a, b) = l.split_once(' ').unwrap();
            (a.to_string(), b.to_string())
        })
        .collect()
}

#[test]
fn numpy_files_read_element_exact_and_write_back_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = write_fixtures(dir.path());
    assert!(fixtures.len() > DTYPES.len() * 6);
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    for (name, dt) in &fixtures {
        let path = dir.path().join(format!("{name}.npy"));
        let raw = std::fs::read(dir.path().join(format!("{name}.raw"))).unwrap();
        let a = npy::read_untyped(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            a.data == raw,
            "{name}: payload differs from numpy's C-order bytes"
        );
        assert!(a.dtype.is_native(), "{name}");
        if dt != "structured" {
            assert_eq!(a.dtype, DType::parse(dt).unwrap(), "{name}");
        }
        if name == "titled" {
            // The titles survive the header parse (in native order now).
            assert_eq!(
                a.dtype.descr(),
                "[(('Position', 'x'), '<f4'), (('Pair', 'y'), '<i2', (2,)), \
                 ('z', [(('Big', 'a'), '<u8'), ('b', '|b1')])]",
                "{name}"
            );
        }
        // Also through the reader-based path.
        let b = npy::read_from(std::fs::File::open(&path).unwrap()).unwrap();
        assert_eq!(a, b, "{name}");
        npy::write_untyped(out_dir.join(format!("{name}.npy")), &a).unwrap();
    }
    // numpy reads what we wrote, gets the same values, and np.save of them
    // yields exactly our bytes.
    let script = r#"
import sys, io, os, numpy as np
src, out = sys.argv[1], sys.argv[2]
bad = []
for f in sorted(os.listdir(out)):
    ours = open(f'{out}/{f}', 'rb').read()
    a = np.load(f'{out}/{f}')
    orig = np.load(f'{src}/{f}')
    if orig.dtype.names is None:
        ok = a.dtype == orig.dtype.newbyteorder('<') and a.tobytes() == np.ascontiguousarray(orig.astype(a.dtype)).tobytes()
    else:
        ok = a.tobytes() == np.ascontiguousarray(orig.astype(orig.dtype.newbyteorder('<'))).tobytes() or orig.dtype.newbyteorder('<') == a.dtype
        ok = ok and a.shape == orig.shape
    if f == 'titled.npy':  # the titles came back through our header
        ok = ok and a.dtype == orig.dtype.newbyteorder('<') and a.dtype.fields['Position'][2] == 'Position'
    buf = io.BytesIO(); np.save(buf, a)
    if not ok or buf.getvalue() != ours:
        bad.append(f)
print(len(os.listdir(out)), ' '.join(bad))
"#;
    let res = common::run_ref_python(
        script,
        &[dir.path().to_str().unwrap(), out_dir.to_str().unwrap()],
    );
    let (count, bad) = res.trim_end().split_once(' ').unwrap_or((res.trim(), ""));
    assert_eq!(count.parse::<usize>().unwrap(), fixtures.len());
    assert_eq!(bad, "", "files numpy disagrees with");
}

#[test]
fn typed_reads_match_untyped_for_every_element_type() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = write_fixtures(dir.path());
    fn check<T: zrecord::Element + PartialEq>(dir: &Path, name: &str) {
        let path = dir.join(format!("{name}.npy"));
        let typed: ArrayD<T> = npy::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let untyped = npy::read_untyped(&path).unwrap();
        assert_eq!(typed.shape(), &untyped.shape[..]);
        let bytes: &[u8] = bytemuck::cast_slice(typed.as_slice().unwrap());
        assert!(bytes == &untyped.data[..], "{name}");
        let again = untyped.into_typed::<T>().unwrap();
        let again: &[u8] = bytemuck::cast_slice(again.as_slice().unwrap());
        assert!(again == bytes, "{name}");
    }
    let mut n = 0;
    for (name, dt) in &fixtures {
        let d = dir.path();
        match dt.as_str() {
            "|b1" => check::<Bool>(d, name),
            "|i1" => check::<i8>(d, name),
            "|u1" => check::<u8>(d, name),
            "<i2" => check::<i16>(d, name),
            "<i4" => check::<i32>(d, name),
            "<i8" => check::<i64>(d, name),
            "<u2" => check::<u16>(d, name),
            "<u4" => check::<u32>(d, name),
            "<u8" => check::<u64>(d, name),
            "<f2" => check::<half::f16>(d, name),
            "<f4" => check::<f32>(d, name),
            "<f8" => check::<f64>(d, name),
            "<c8" => check::<Complex<f32>>(d, name),
            "<c16" => check::<Complex<f64>>(d, name),
            _ => continue,
        }
        n += 1;
    }
    assert!(n >= DTYPES.len() * 6);
    // A dtype mismatch names both.
    let err = npy::read::<f32>(dir.path().join("lef8_C_v1.npy")).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("<f8") && msg.contains("<f4"), "{msg}");
}

#[test]
fn prefix_and_block_reads_agree_with_the_full_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.npy");
    // 64 x 32 x 1024 f32 = 8 MiB: enough for more than one block task.
    let a = ArrayD::from_shape_fn(IxDyn(&[64, 32, 1024]), |i| {
        (i[0] * 1_000_000 + i[1] * 1000 + i[2]) as f32
    });
    npy::write(&path, &a).unwrap();
    let full: ArrayD<f32> = npy::read(&path).unwrap();
    assert_eq!(full, a);
    for rows in [0, 1, 17, 64] {
        let p: ArrayD<f32> = npy::read_prefix(&path, rows, Some(&[32, 1024])).unwrap();
        assert_eq!(p, a.slice(ndarray::s![..rows, .., ..]).into_dyn());
        let p: ArrayD<f32> = npy::read_prefix(&path, rows, None).unwrap();
        assert_eq!(p.shape(), &[rows, 32, 1024]);
    }
    for bad in [&[32usize, 1000][..], &[32], &[32, 1024, 1]] {
        assert!(matches!(
            npy::read_prefix::<f32>(&path, 2, Some(bad)),
            Err(zrecord::Error::ShapeMismatch { .. })
        ));
    }
    assert!(matches!(
        npy::read_prefix::<f32>(&path, 65, None),
        Err(zrecord::Error::ShapeMismatch { .. })
    ));
    for p in [
        Parallelism::Sequential,
        Parallelism::Tasks(2),
        Parallelism::Tasks(3),
        Parallelism::Auto,
    ] {
        let blocks: Vec<ArrayD<f32>> = npy::read_blocks(&path, p).unwrap();
        assert_eq!(blocks.len(), 64);
        for (i, b) in blocks.iter().enumerate() {
            assert_eq!(b, &a.index_axis(ndarray::Axis(0), i).into_dyn());
        }
    }
    // Fortran order: prefix and block reads refuse with the reason.
    let f = dir.path().join("f.npy");
    let fa = a.t().as_standard_layout().into_owned(); // a's Fortran-order payload
    let mut fortran = npy::header_bytes(&DType::parse("<f4").unwrap(), a.shape(), true).unwrap();
    fortran.extend_from_slice(bytemuck::cast_slice(fa.as_slice().unwrap()));
    std::fs::write(&f, fortran).unwrap();
    assert_eq!(npy::read::<f32>(&f).unwrap(), a);
    for err in [
        npy::read_prefix::<f32>(&f, 1, None).unwrap_err(),
        npy::read_blocks::<f32>(&f, Parallelism::Auto).unwrap_err(),
    ] {
        assert!(matches!(err, zrecord::Error::FortranOrder { .. }), "{err}");
        assert!(err.to_string().contains("Fortran"));
    }
    // A truncated prefix only needs its own rows.
    let t = dir.path().join("t.npy");
    let bytes = std::fs::read(&path).unwrap();
    let h = npy::read_header(&path).unwrap();
    std::fs::write(
        &t,
        &bytes[..h.data_offset as usize + h.payload_bytes as usize / 2],
    )
    .unwrap();
    let p: ArrayD<f32> = npy::read_prefix(&t, 32, None).unwrap();
    assert_eq!(p, a.slice(ndarray::s![..32, .., ..]).into_dyn());
    assert!(matches!(
        npy::read_prefix::<f32>(&t, 33, None),
        Err(zrecord::Error::NpyTruncated { .. })
    ));
    assert!(matches!(
        npy::read_blocks::<f32>(&t, Parallelism::Tasks(2)),
        Err(zrecord::Error::NpyTruncated { .. })
    ));
}

/// Header dicts on the edges of NumPy's checks: our header reader must take
/// exactly those `np.load` takes, with the same shape, but for the kept,
/// documented refusals (docs/compatibility.md: integers spelled in hex or
/// with `_`, a key given twice), which NumPy's `literal_eval` accepts and no
/// writer produces.
#[test]
fn headers_load_exactly_when_numpy_loads_them() {
    let kept_refusals = [
        "{'descr': '<f8', 'fortran_order': False, 'shape': (0x2,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (1_0,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'descr': '<f4'}",
    ];
    let mut dicts = vec![
        "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
        "{\"descr\": '<f8', 'fortran_order': False, 'shape': (2,)}",
        "{'shape': ((2)), 'fortran_order': False, 'descr': '<f8'}",
        "{'shape': ((2,)), 'fortran_order': True, 'descr': '<f8'}",
        // A list is no tuple to NumPy, also in grouping parentheses.
        "{'descr': '<f8', 'fortran_order': False, 'shape': [2], }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': [], }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': ([2]), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': ([2],), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (2), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': 2, }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (2.0,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (True,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }",
        "{'descr': '<f8', 'fortran_order': 0, 'shape': (2,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
        "{'descr': '<f8', 'fortran_order': False}",
        "{'descr': [('a', '<f4'), ('b', '<f4')], 'fortran_order': False, 'shape': (1,)}",
        // Python 3 integers: no leading zero but in 0 itself; Python 2's L.
        "{'descr': '<f8', 'fortran_order': False, 'shape': (03,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 00), }",
        "{'descr': [('a', '<f4', (02,))], 'fortran_order': False, 'shape': (1,)}",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (3L,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (+3,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (3l,), }",
        "{'descr': [('a\rb', '<f4')], 'fortran_order': False, 'shape': (1,)}",
    ];
    dicts.extend(kept_refusals);
    let dir = tempfile::tempdir().unwrap();
    for (i, d) in dicts.iter().enumerate() {
        let mut h = d.as_bytes().to_vec();
        let pad = 64 - (10 + h.len() + 1) % 64;
        h.extend(std::iter::repeat_n(b' ', pad % 64));
        h.push(b'\n');
        let mut f = b"\x93NUMPY\x01\x00".to_vec();
        f.extend_from_slice(&(h.len() as u16).to_le_bytes());
        f.extend_from_slice(&h);
        f.extend_from_slice(&[0u8; 128]);
        std::fs::write(dir.path().join(format!("{i}.npy")), f).unwrap();
    }
    let out = common::run_ref_python(
        r#"
import sys, numpy as np
for i in range(int(sys.argv[2])):
    try:
        print(i, np.load(f"{sys.argv[1]}/{i}.npy").shape)
    except (ValueError, TypeError, SyntaxError) as e:
        print(i, "error")
"#,
        &[dir.path().to_str().unwrap(), &dicts.len().to_string()],
    );
    let verdicts: Vec<&str> = out.lines().collect();
    assert_eq!(verdicts.len(), dicts.len(), "{out}");
    for (i, (d, verdict)) in dicts.iter().zip(&verdicts).enumerate() {
        let ours = npy::read_header(dir.path().join(format!("{i}.npy")));
        let verdict = verdict.split_once(' ').unwrap().1;
        match ours {
            Ok(h) if kept_refusals.contains(d) => {
                panic!("{d}: now accepted ({h:?}): update the docs")
            }
            Err(_) if kept_refusals.contains(d) => assert_ne!(verdict, "error", "{d}"),
            Ok(h) => {
                let shape: Vec<String> = h.shape.iter().map(|d| d.to_string()).collect();
                let py = match shape.len() {
                    1 => format!("({},)", shape[0]),
                    _ => format!("({})", shape.join(", ")),
                };
                assert_eq!(py, verdict, "{d}");
            }
            Err(e) => assert_eq!(verdict, "error", "{d}: ours: {e}"),
        }
    }
}
