//! Guards whole-store compatibility with the reference, loaderx 1.7.2, at
//! the typed layer: stores the reference writes (dense and ragged; raw, zstd
//! and zstd_dict; plain, big-endian, boolean, complex and structured dtypes;
//! scalar to rank-3 ragged records) must open in `DenseCore`/`RaggedCore`
//! with the same dtype and shape and read back bit-exact, and stores we
//! write must open in the reference and read back bit-exact there. The
//! reference runs live (scripts/ref-venv.sh); without Python this test fails,
//! it never skips.

mod common;

use std::fmt::Write as _;
use std::path::Path;

use common::run_ref_python;
use zrecord::{
    Codec, CreateOptions, DType, DenseCore, DictSource, DictTier, OpenOptions, RaggedBatch,
    RaggedCore, train_dict,
};

/// (name, numpy dtype expression, our dtype, item shape)
fn dense_table() -> Vec<(&'static str, &'static str, DType, Vec<u64>)> {
    let structured = zrecord::dtype::decode_identity(&[
        0x81, 0xa5, b'd', b't', b'y', b'p', b'e', 0x92, // {"dtype": [
        0x92, 0xa1, b'x', 0xa3, b'<', b'f', b'4', // ["x", "<f4"],
        0x93, 0xa1, b'y', 0xa3, b'>', b'i', b'2', 0x91, 0x02, // ["y", ">i2", [2]]
    ])
    .unwrap()
    .dtype;
    vec![
        ("f4", "'<f4'", DType::parse("<f4").unwrap(), vec![3, 20]),
        ("i8be", "'>i8'", DType::parse(">i8").unwrap(), vec![16]),
        ("b1", "'?'", DType::parse("|b1").unwrap(), vec![40]),
        ("c8", "'<c8'", DType::parse("<c8").unwrap(), vec![10]),
        ("rec", "[('x','<f4'),('y','>i2',(2,))]", structured, vec![8]),
    ]
}

fn ragged_table() -> Vec<(&'static str, &'static str, DType)> {
    vec![
        ("i4", "'<i4'", DType::parse("<i4").unwrap()),
        ("f8be", "'>f8'", DType::parse(">f8").unwrap()),
        ("u1", "'u1'", DType::parse("|u1").unwrap()),
    ]
}

const CODECS: [Codec; 3] = [Codec::Raw, Codec::Zstd, Codec::ZstdDict];

fn python_table() -> String {
    let mut s = String::from("DENSE = [");
    for (name, expr, _, shape) in dense_table() {
        let dims: Vec<String> = shape.iter().map(|d| format!("{d},")).collect();
        write!(s, "({name:?}, np.dtype({expr}), ({})),", dims.join("")).unwrap();
    }
    s.push_str("]\nRAGGED = [");
    for (name, expr, _) in ragged_table() {
        write!(s, "({name:?}, np.dtype({expr})),").unwrap();
    }
    s.push_str("]\nCODECS = ['raw', 'zstd', 'zstd_dict']\n");
    s
}

const WRITE_REF: &str = r#"
import sys, numpy as np
from loaderx.zrecord import DenseStore, RaggedStore
from loaderx.utils import train_dict
base = sys.argv[1]
rng = np.random.default_rng(5)
def payload(nbytes, dt):
    # Low-entropy bytes (a dictionary has something to learn); booleans 0/1.
    hi = 2 if dt.kind == 'b' else 4
    return rng.integers(0, hi, size=nbytes, dtype=np.uint8)
for codec in CODECS:
    for name, dt, shape in DENSE:
        n = 2000
        arr = payload(n * int(np.prod(shape, dtype=np.int64)) * dt.itemsize, dt).view(dt).reshape((n,) + shape)
        d = train_dict(arr, tier='fast') if codec == 'zstd_dict' else None
        path = f"{base}/dense-{name}-{codec}"
        with DenseStore(path, dtype=dt, item_shape=shape, codec=codec, dict_bytes=d) as s:
            s.append(arr[:1500]); s.append(arr[1500:]); s.sync()
        open(path + ".bin", "wb").write(arr.tobytes())
    for name, dt in RAGGED:
        recs = []
        for i in range(1500):
            rank = int(rng.integers(0, 4))
            shape = tuple(int(x) for x in rng.integers(1, 6, size=rank))
            nb = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            recs.append(payload(nb, dt).view(dt).reshape(shape))
        d = train_dict(recs, tier='fast') if codec == 'zstd_dict' else None
        path = f"{base}/ragged-{name}-{codec}"
        with RaggedStore(path, dtype=dt, codec=codec, dict_bytes=d) as s:
            s.append(recs[:700]); s.append(recs[700:]); s.sync()
        open(path + ".bin", "wb").write(b"".join(r.tobytes() for r in recs))
        open(path + ".shapes", "w").write("".join(" ".join(map(str, r.shape)) + "\n" for r in recs))
print("ok")
"#;

fn read_shapes(path: &Path) -> Vec<Vec<u64>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().map(|d| d.parse().unwrap()).collect())
        .collect()
}

#[test]
fn stores_written_by_the_reference_read_bit_exact() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    let script = format!("import numpy as np\n{}{WRITE_REF}", python_table());
    assert_eq!(
        run_ref_python(&script, &[base.to_str().unwrap()]).trim(),
        "ok"
    );
    for codec in CODECS {
        for (name, _, dtype, shape) in dense_table() {
            let path = base.join(format!("dense-{name}-{}", codec.name()));
            let want = std::fs::read(format!("{}.bin", path.display())).unwrap();
            let core = DenseCore::open(
                &path,
                &OpenOptions::read_only()
                    .dtype(dtype.clone())
                    .item_shape(&shape)
                    .codec(codec),
            )
            .unwrap();
            assert_eq!(core.len(), 2000);
            assert_eq!(core.has_dict(), codec == Codec::ZstdDict);
            let mut got = vec![0u8; want.len()];
            core.gather_bytes_into(&(0..2000).collect::<Vec<_>>(), &mut got)
                .unwrap();
            assert!(got == want, "{}", path.display());
        }
        for (name, _, dtype) in ragged_table() {
            let path = base.join(format!("ragged-{name}-{}", codec.name()));
            let want = std::fs::read(format!("{}.bin", path.display())).unwrap();
            let shapes = read_shapes(Path::new(&format!("{}.shapes", path.display())));
            let core = RaggedCore::open(
                &path,
                &OpenOptions::read_only().dtype(dtype.clone()).codec(codec),
            )
            .unwrap();
            assert_eq!(core.len(), shapes.len() as u64);
            let mut b = RaggedBatch::new();
            core.gather_into(&(0..core.len()).collect::<Vec<_>>(), &mut b)
                .unwrap();
            assert!(b.data() == &want[..], "{}", path.display());
            for (k, s) in shapes.iter().enumerate() {
                assert_eq!(b.shape(k), &s[..], "{} record {k}", path.display());
            }
        }
    }
}

struct Rng(u64);
impl Rng {
    fn byte(&mut self, hi: u64) -> u8 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % hi) as u8
    }
}

const READ_OURS: &str = r#"
import sys, numpy as np
from loaderx.zrecord import DenseStore, RaggedStore
base = sys.argv[1]
for codec in CODECS:
    for name, dt, shape in DENSE:
        path = f"{base}/dense-{name}-{codec}"
        with DenseStore(path) as s:
            assert s.dtype == dt, (path, s.dtype, dt)
            assert s.item_shape == shape, (path, s.item_shape, shape)
            assert s.codec == codec and s.has_dict() == (codec == 'zstd_dict'), path
            got = s[np.arange(len(s))]
            assert got.shape == (len(s),) + shape
            assert got.tobytes() == open(path + ".bin", "rb").read(), path
    for name, dt in RAGGED:
        path = f"{base}/ragged-{name}-{codec}"
        shapes = [tuple(int(x) for x in l.split()) for l in open(path + ".shapes")]
        with RaggedStore(path) as s:
            assert s.dtype == dt and s.codec == codec, path
            got = s[np.arange(len(s))]
            assert [g.shape for g in got] == shapes, path
            assert b"".join(g.tobytes() for g in got) == open(path + ".bin", "rb").read(), path
print("ok")
"#;

#[test]
fn stores_we_write_read_bit_exact_in_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    let mut rng = Rng(0xABCDEF);
    for codec in CODECS {
        for (name, _, dtype, shape) in dense_table() {
            let path = base.join(format!("dense-{name}-{}", codec.name()));
            let rb = shape.iter().product::<u64>() as usize * dtype.itemsize();
            let hi = if dtype == DType::parse("|b1").unwrap() {
                2
            } else {
                4
            };
            let data: Vec<u8> = (0..rb * 2000).map(|_| rng.byte(hi)).collect();
            let opts = if codec == Codec::ZstdDict {
                let d = train_dict(
                    DictSource::Array {
                        data: &data,
                        record_bytes: rb,
                    },
                    DictTier::Fast,
                )
                .unwrap();
                CreateOptions::with_dictionary(d)
            } else {
                CreateOptions::new(codec)
            };
            let core = DenseCore::create(&path, &dtype, &shape, &opts).unwrap();
            core.append_bytes(&data[..rb * 1200]).unwrap();
            core.append_bytes(&data[rb * 1200..]).unwrap();
            core.sync().unwrap();
            std::fs::write(format!("{}.bin", path.display()), &data).unwrap();
        }
        for (name, _, dtype) in ragged_table() {
            let path = base.join(format!("ragged-{name}-{}", codec.name()));
            let mut shapes = Vec::new();
            let mut payloads = Vec::new();
            for _ in 0..1500 {
                let rank = rng.byte(4) as usize;
                let shape: Vec<u64> = (0..rank).map(|_| 1 + rng.byte(5) as u64).collect();
                let nb = shape.iter().product::<u64>() as usize * dtype.itemsize();
                payloads.push((0..nb).map(|_| rng.byte(4)).collect::<Vec<u8>>());
                shapes.push(shape);
            }
            let opts = if codec == Codec::ZstdDict {
                let d = train_dict(
                    DictSource::records(payloads.iter().map(|p| &p[..])),
                    DictTier::Fast,
                )
                .unwrap();
                CreateOptions::with_dictionary(d)
            } else {
                CreateOptions::new(codec)
            };
            let core = RaggedCore::create(&path, &dtype, &opts).unwrap();
            core.append_records(shapes.iter().zip(&payloads).map(|(s, p)| (&s[..], &p[..])))
                .unwrap();
            core.sync().unwrap();
            std::fs::write(format!("{}.bin", path.display()), payloads.concat()).unwrap();
            let text: String = shapes
                .iter()
                .map(|s| {
                    let d: Vec<String> = s.iter().map(u64::to_string).collect();
                    d.join(" ") + "\n"
                })
                .collect();
            std::fs::write(format!("{}.shapes", path.display()), text).unwrap();
        }
    }
    let script = format!("import numpy as np\n{}{READ_OURS}", python_table());
    assert_eq!(
        run_ref_python(&script, &[base.to_str().unwrap()]).trim(),
        "ok"
    );
}
