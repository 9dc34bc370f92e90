//! Guards against drifting from the reference format: the real reference
//! package (loaderx 1.7.2, installed by scripts/ref-venv.sh) writes dense and
//! ragged stores for every codec and we read them bit-exact; then we write
//! stores (with a store.zr we encode) that the reference reads bit-exact.
//! If Python or pip is missing this test fails; it never skips.

use std::path::{Path, PathBuf};
use std::process::Command;
use zrecord_engine::typed_header::{self, Kind, TypedHeader};
use zrecord_engine::{Codec, CreateOptions, Engine, OpenMode, train_dictionary};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> PathBuf {
    let out = Command::new("bash")
        .arg(workspace().join("scripts/ref-venv.sh"))
        .output()
        .expect("bash is required to set up the reference venv");
    assert!(
        out.status.success(),
        "scripts/ref-venv.sh failed (python3 + pip + network needed for the interop test):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn run_python(py: &Path, script: &str, arg: &Path) -> String {
    let out = Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(arg)
        .output()
        .expect("run the reference python");
    assert!(
        out.status.success(),
        "reference python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const CODECS: [Codec; 3] = [Codec::Raw, Codec::Zstd, Codec::ZstdDict];

/// The reference writes stores and dumps what it wrote.
const REF_WRITES: &str = r#"
import sys, os, struct, numpy as np, msgpack
from loaderx.zrecord import DenseStore, RaggedStore
from loaderx.utils import train_dict
root = sys.argv[1]
rng = np.random.default_rng(7)
base = rng.integers(0, 16, size=(1500, 64)).astype(np.float32)
dense = np.cumsum(base, axis=1).astype(np.float32)   # compressible rows
shapes = [(int(rng.integers(1, 40)),) if k % 5 else () for k in range(1200)]
shapes[3] = (2, 3, 4)
ragged = [np.asarray(rng.integers(0, 9, size=s), dtype=np.int32) for s in shapes]
for codec in ["raw", "zstd", "zstd_dict"]:
    kw = {}
    if codec == "zstd_dict":
        kw["dict_bytes"] = train_dict(dense, tier="fast")
    with DenseStore(f"{root}/dense_{codec}", dtype=np.float32, item_shape=(64,), codec=codec, **kw) as ds:
        ds.append(dense[:700]); ds.append(dense[700:])
    kw = {}
    if codec == "zstd_dict":
        kw["dict_bytes"] = train_dict(ragged, tier="fast")
    with RaggedStore(f"{root}/ragged_{codec}", dtype=np.int32, codec=codec, **kw) as rs:
        rs.append(ragged[:500]); rs.append(ragged[500:])
with open(f"{root}/dense.bin", "wb") as f:
    f.write(dense.tobytes())
with open(f"{root}/ragged.bin", "wb") as f, open(f"{root}/ragged.len", "wb") as g:
    for a in ragged:
        meta = np.asarray((a.ndim, *a.shape), dtype=np.uint64).tobytes()
        pay = np.ascontiguousarray(a).tobytes()
        f.write(pay); f.write(meta)
        g.write(struct.pack("<QQ", len(pay), len(meta)))
with open(f"{root}/dense.identity", "wb") as f:
    f.write(msgpack.packb({"dtype": "<f4", "item_shape": [64]}))
with open(f"{root}/ragged.identity", "wb") as f:
    f.write(msgpack.packb({"dtype": "<i4"}))
print("written")
"#;

#[test]
fn we_read_what_the_reference_writes() {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    run_python(&py, REF_WRITES, root);
    let dense = std::fs::read(root.join("dense.bin")).unwrap();
    let ragged = std::fs::read(root.join("ragged.bin")).unwrap();
    let lens: Vec<usize> = std::fs::read(root.join("ragged.len"))
        .unwrap()
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()) as usize)
        .collect();
    for codec in CODECS {
        // Dense: one record per row.
        let p = root.join(format!("dense_{}", codec.name()));
        let th = typed_header::read(&p).unwrap();
        assert_eq!(th.kind, Kind::Dense);
        assert_eq!(th.record_bytes, 256);
        assert_eq!(
            th.identity,
            std::fs::read(root.join("dense.identity")).unwrap()
        );
        let e = Engine::open(&p, OpenMode::ReadOnly).unwrap();
        assert_eq!(e.codec(), codec);
        assert_eq!(e.len(), 1500);
        let idx: Vec<u64> = (0..1500).collect();
        let mut out = vec![0u8; dense.len()];
        e.gather_fixed(&idx, 256, &mut out).unwrap();
        assert!(out == dense, "dense {} differs", codec.name());
        // Random order too.
        let perm: Vec<u64> = (0..1500u64).map(|i| (i * 7919) % 1500).collect();
        e.gather_fixed(&perm, 256, &mut out).unwrap();
        for (k, &i) in perm.iter().enumerate() {
            assert_eq!(
                &out[k * 256..(k + 1) * 256],
                &dense[i as usize * 256..][..256]
            );
        }
        drop(e);
        // Ragged: physical 2i payload, 2i + 1 shape metadata.
        let p = root.join(format!("ragged_{}", codec.name()));
        let th = typed_header::read(&p).unwrap();
        assert_eq!((th.kind, th.record_bytes), (Kind::Ragged, 0));
        assert_eq!(
            th.identity,
            std::fs::read(root.join("ragged.identity")).unwrap()
        );
        // Read-write open works too (the reference released its lock).
        let e = Engine::open(&p, OpenMode::ReadWrite).unwrap();
        assert_eq!(e.len(), lens.len() as u64);
        let idx: Vec<u64> = (0..lens.len() as u64).collect();
        let mut decoded = vec![0u64; idx.len()];
        e.record_lengths(&idx, &mut decoded, None).unwrap();
        assert_eq!(
            decoded.iter().map(|&d| d as usize).collect::<Vec<_>>(),
            lens
        );
        let mut offsets = vec![0usize];
        for l in &lens {
            offsets.push(offsets.last().unwrap() + l);
        }
        let mut out = vec![0u8; ragged.len()];
        e.gather_var(&idx, &mut out, &offsets).unwrap();
        assert!(out == ragged, "ragged {} differs", codec.name());
        let s = e.stats();
        assert_eq!((s.records, s.reclaimable), (lens.len() as u64, 0));
    }
}

/// The reference reads our stores and compares with the expected bytes.
const REF_READS: &str = r#"
import sys, numpy as np
from loaderx.zrecord import DenseStore, RaggedStore
root = sys.argv[1]
dense = np.fromfile(f"{root}/dense.bin", dtype=np.float32).reshape(-1, 4, 3)
flat = np.fromfile(f"{root}/ragged.bin", dtype=np.int32)
shapes = [tuple(int(x) for x in l.split()) for l in open(f"{root}/ragged.shapes").read().splitlines()]
for codec in ["raw", "zstd", "zstd_dict"]:
    with DenseStore(f"{root}/dense_{codec}") as ds:
        assert ds.codec == codec, ds.codec
        assert ds.dtype == np.float32 and ds.item_shape == (4, 3), (ds.dtype, ds.item_shape)
        assert len(ds) == len(dense), len(ds)
        got = ds[:]
        assert got.tobytes() == dense.tobytes(), f"dense {codec}"
        idx = np.arange(len(dense))[::-3]
        assert ds[idx].tobytes() == dense[idx].tobytes()
        assert ds.stats()["records"] == len(dense)
    with RaggedStore(f"{root}/ragged_{codec}") as rs:
        assert rs.codec == codec and rs.dtype == np.int32
        assert len(rs) == len(shapes), len(rs)
        got = rs[:]
        pos = 0
        for a, s in zip(got, shapes):
            n = int(np.prod(s, dtype=np.int64))
            assert a.shape == s, (a.shape, s)
            assert a.tobytes() == flat[pos:pos + n].tobytes(), f"ragged {codec}"
            pos += n
        assert pos == len(flat)
print("reference read OK")
"#;

fn f32_bytes(v: impl Iterator<Item = f32>) -> Vec<u8> {
    v.flat_map(f32::to_le_bytes).collect()
}

#[test]
fn the_reference_reads_what_we_write() {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // Dense rows of 4x3 float32, compressible.
    let n = 900usize;
    let dense = f32_bytes((0..n * 12).map(|i| ((i * 31) % 97) as f32 * 0.5));
    std::fs::write(root.join("dense.bin"), &dense).unwrap();
    // Ragged int32 records with their shapes (scalars included).
    let shapes: Vec<Vec<u64>> = (0..700u64)
        .map(|k| match k % 4 {
            0 => vec![],
            1 => vec![1 + k % 17],
            2 => vec![2, 1 + k % 5],
            _ => vec![1 + k % 3, 2, 2],
        })
        .collect();
    let mut payloads: Vec<Vec<u8>> = Vec::new();
    let mut metas: Vec<Vec<u8>> = Vec::new();
    for (k, s) in shapes.iter().enumerate() {
        let count: u64 = s.iter().product();
        payloads.push(
            (0..count)
                .flat_map(|j| ((k as i32 * 13 + j as i32) % 50 - 7).to_le_bytes())
                .collect(),
        );
        let mut m = (s.len() as u64).to_le_bytes().to_vec();
        for d in s {
            m.extend_from_slice(&d.to_le_bytes());
        }
        metas.push(m);
    }
    std::fs::write(root.join("ragged.bin"), payloads.concat()).unwrap();
    let text: String = shapes
        .iter()
        .map(|s| {
            s.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(" ")
                + "\n"
        })
        .collect();
    std::fs::write(root.join("ragged.shapes"), text).unwrap();
    let offsets = |v: &[Vec<u8>]| {
        let mut o = vec![0usize];
        for r in v {
            o.push(o.last().unwrap() + r.len());
        }
        o
    };
    // msgpack.packb({"dtype": "<f4", "item_shape": [4, 3]}) and {"dtype": "<i4"}.
    let dense_identity = b"\x82\xa5dtype\xa3<f4\xaaitem_shape\x92\x04\x03".to_vec();
    let ragged_identity = b"\x81\xa5dtype\xa3<i4".to_vec();
    for codec in CODECS {
        let opts = |samples: &[u8], sizes: &[usize]| match codec {
            Codec::ZstdDict => {
                CreateOptions::with_dictionary(train_dictionary(samples, sizes, 8192).unwrap())
            }
            c => CreateOptions::new(c),
        };
        let p = root.join(format!("dense_{}", codec.name()));
        let e = Engine::create(&p, &opts(&dense, &vec![48; n])).unwrap();
        // Several appends, so the reference sees a multi-batch table.
        e.append_fixed(&dense[..48 * 500], 48).unwrap();
        e.append_fixed(&dense[48 * 500..], 48).unwrap();
        e.sync().unwrap();
        typed_header::write(
            &p,
            &TypedHeader {
                kind: Kind::Dense,
                record_bytes: 48,
                identity: dense_identity.clone(),
            },
        )
        .unwrap();
        drop(e);
        let p = root.join(format!("ragged_{}", codec.name()));
        let sizes: Vec<usize> = payloads.iter().map(Vec::len).collect();
        let e = Engine::create(&p, &opts(&payloads.concat(), &sizes)).unwrap();
        for (a, b) in [(0usize, 300usize), (300, 700)] {
            e.append_paired(
                &payloads[a..b].concat(),
                &offsets(&payloads[a..b]),
                &metas[a..b].concat(),
                &offsets(&metas[a..b]),
            )
            .unwrap();
        }
        e.sync().unwrap();
        typed_header::write(
            &p,
            &TypedHeader {
                kind: Kind::Ragged,
                record_bytes: 0,
                identity: ragged_identity.clone(),
            },
        )
        .unwrap();
        drop(e);
    }
    let out = run_python(&py, REF_READS, root);
    assert!(out.contains("reference read OK"), "{out}");
}
