//! The bodies of the `fuzz/` targets `store_open` and `store_ops`, here so
//! the committed seeds and crash inputs replay in `cargo test` (see
//! `tests/fuzz_replay.rs`) without nightly or cargo-fuzz. Each panics only
//! on a real bug.

use crate::sim::{SimRng, SimVfs};
use crate::typed_header;
use crate::vfs::Vfs;
use crate::{Codec, CreateOptions, Durability, Engine, EngineConfig, OpenMode, ReadPath};
use std::path::Path;
use std::sync::Arc;

const DIR: &str = "/s";
/// File names an input can fill (index = first byte of a file record).
pub const NAMES: [&str; 10] = [
    "meta.zr",
    "store.zr",
    "dict.zr",
    "intent.zr",
    "0.loc",
    "1.loc",
    "0.chunk",
    "1.chunk",
    "durable.zr",
    "writeback.zr",
];

/// The layout the targets open stores with (4 KiB chunks, 8-entry
/// segments), over `v`.
pub fn cfg(v: &SimVfs) -> EngineConfig {
    EngineConfig {
        vfs: Arc::new(v.clone()),
        chunk_capacity: 4096,
        loc_segment_entries: 8,
        flush_bytes: 64,
        read_path: ReadPath::Pread,
    }
}

/// Encodes a store's files as a `store_open` input: per file, its name's
/// index in [`NAMES`], a u16 length and the bytes.
pub fn encode_image(v: &SimVfs, dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, n) in NAMES.iter().enumerate() {
        if let Some(b) = v.read_file(&dir.join(n)) {
            let b = &b[..b.len().min(u16::MAX as usize)];
            out.push(k as u8);
            out.extend_from_slice(&(b.len() as u16).to_le_bytes());
            out.extend_from_slice(b);
        }
    }
    out
}

/// Reads every record of a bounded size (a hostile entry may claim 2 GiB).
fn gather_bounded(e: &Engine) {
    let idx: Vec<u64> = (0..e.len()).collect();
    let mut lens = vec![0u64; idx.len()];
    if e.record_lengths(&idx, &mut lens, None).is_err() {
        return;
    }
    let mut budget = 16u64 << 20;
    for (&i, &l) in idx.iter().zip(&lens) {
        if l > budget {
            continue;
        }
        budget -= l;
        let mut buf = vec![0u8; l as usize];
        let _ = e.gather_var(&[i], &mut buf, &[0, l as usize]);
    }
}

/// Target `store_open`: arbitrary file contents, then open (both modes),
/// gather and verify. Must never panic. Returns whether a read-write open
/// succeeded with a store that verifies clean.
pub fn store_open(data: &[u8]) -> bool {
    let v = SimVfs::new();
    let dir = Path::new(DIR);
    let _ = v.create_dir_all(dir);
    let mut rest = data;
    while rest.len() >= 3 {
        let name = NAMES[rest[0] as usize % NAMES.len()];
        let n = (u16::from_le_bytes([rest[1], rest[2]]) as usize).min(rest.len() - 3);
        v.write_file(&dir.join(name), &rest[3..3 + n]);
        rest = &rest[3 + n..];
    }
    let mut clean = false;
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        if let Ok(e) = Engine::open_with(dir, mode, cfg(&v)) {
            gather_bounded(&e);
            clean = e.verify().is_ok_and(|r| r.is_ok() && r.records > 0);
        }
    }
    let _ = typed_header::read_with(&v, dir);
    clean
}

#[derive(Clone, Debug)]
enum Op {
    Append(Vec<Vec<u8>>),
    Paired(Vec<Vec<u8>>),
    Delete(Vec<u64>, u64),
    Compact,
    Sync,
}

fn apply(m: &mut Vec<Vec<u8>>, op: &Op) {
    match op {
        Op::Append(r) | Op::Paired(r) => m.extend(r.iter().cloned()),
        Op::Delete(g, k) => {
            let k = *k as usize;
            let mut order = g.clone();
            order.sort_unstable_by(|a, b| b.cmp(a));
            order.dedup();
            let mut live = m.len() / k;
            for g in order {
                let (g, last) = (g as usize, live - 1);
                if g != last {
                    for j in 0..k {
                        m[g * k + j] = m[last * k + j].clone();
                    }
                }
                live -= 1;
            }
            m.truncate(live * k);
        }
        Op::Compact | Op::Sync => {}
    }
}

fn run(e: &mut Engine, op: &Op) -> crate::Result<()> {
    let flat = |r: &[Vec<u8>]| {
        let mut o = vec![0usize];
        let mut d = Vec::new();
        for x in r {
            d.extend_from_slice(x);
            o.push(d.len());
        }
        (d, o)
    };
    match op {
        Op::Append(r) => {
            let (d, o) = flat(r);
            e.append_var(&d, &o).map(|_| ())
        }
        Op::Paired(r) => {
            let a: Vec<Vec<u8>> = r.iter().step_by(2).cloned().collect();
            let b: Vec<Vec<u8>> = r.iter().skip(1).step_by(2).cloned().collect();
            let ((da, oa), (db, ob)) = (flat(&a), flat(&b));
            e.append_paired(&da, &oa, &db, &ob).map(|_| ())
        }
        Op::Delete(g, k) => e.delete_groups(g, *k),
        Op::Compact => e.compact(),
        Op::Sync => e.sync(),
    }
}

fn read_all(e: &Engine) -> crate::Result<Vec<Vec<u8>>> {
    let idx: Vec<u64> = (0..e.len()).collect();
    let mut lens = vec![0u64; idx.len()];
    e.record_lengths(&idx, &mut lens, None)?;
    let mut out = Vec::new();
    for (&i, &l) in idx.iter().zip(&lens) {
        let mut b = vec![0u8; l as usize];
        e.gather_var(&[i], &mut b, &[0, l as usize])?;
        out.push(b);
    }
    Ok(out)
}

/// Target `store_ops`: the input scripts operations (checked against a
/// model) under either durability, and picks a crash point and image: a
/// power-cut image must open to the last durable state or a later committed
/// one, a killed-process image (image seed 200 and up) to the state after
/// every operation that returned, or that plus the one in flight. Panics on
/// a violation.
pub fn store_ops(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
    let codec = if data[0] & 1 == 0 {
        Codec::Raw
    } else {
        Codec::Zstd
    };
    let durability = if data[0] & 2 == 0 {
        Durability::EachAppend
    } else {
        Durability::AtSync
    };
    let pick = u16::from_le_bytes([data[1], data[2]]) as usize;
    let image_seed = u64::from(data[3]);
    let mut bytes = data[4..].iter().copied().take(256);
    let mut rng = SimRng(0xF022);
    let mut next = move || bytes.next();
    let v = SimVfs::new();
    let dir = Path::new(DIR);
    let opts = CreateOptions {
        durability,
        ..CreateOptions::new(codec)
    };
    let mut e = Engine::create_with(dir, &opts, cfg(&v)).expect("create");
    let mut states = vec![Vec::<Vec<u8>>::new()];
    let mut ops = Vec::new();
    let mut starts = Vec::new();
    v.record(true);
    while let Some(b) = next() {
        let len = states.last().expect("nonempty").len();
        let rec = |rng: &mut SimRng, n: usize| -> Vec<u8> {
            (0..n.max(1)).map(|_| rng.next_u64() as u8 & 0x0F).collect()
        };
        let arg = next().unwrap_or(0) as usize;
        let op = match b % 6 {
            0 => Op::Append(
                (0..1 + arg % 4)
                    .map(|k| rec(&mut rng, 1 + (arg * 7 + k * 13) % 90))
                    .collect(),
            ),
            1 if len.is_multiple_of(2) => Op::Paired(
                (0..2 + 2 * (arg % 2))
                    .map(|k| rec(&mut rng, 1 + (arg + k * 29) % 70))
                    .collect(),
            ),
            2 | 3 if len > 0 => {
                let k = if b % 6 == 3 && len.is_multiple_of(2) {
                    2
                } else {
                    1
                };
                let groups = (len / k) as u64;
                Op::Delete(
                    vec![arg as u64 % groups, (arg as u64 / 3) % groups],
                    k as u64,
                )
            }
            4 => Op::Compact,
            5 => Op::Sync,
            _ => Op::Append(vec![rec(&mut rng, 1 + arg % 50)]),
        };
        starts.push(v.snapshot_count());
        run(&mut e, &op).expect("operation on a healthy disk");
        let mut m = states.last().expect("nonempty").clone();
        apply(&mut m, &op);
        states.push(m);
        ops.push(op);
    }
    v.record(false);
    assert_eq!(
        &read_all(&e).expect("read"),
        states.last().expect("nonempty")
    );
    let mut snaps = v.take_snapshots();
    snaps.push(v.snapshot());
    drop(e);
    let p = pick % snaps.len();
    let last = p == snaps.len() - 1;
    let j = starts.iter().rposition(|&s| s <= p).unwrap_or(0);
    let done = |k: usize| {
        if k + 1 < starts.len() {
            starts[k + 1] <= p
        } else {
            last
        }
    };
    let synced = (0..ops.len())
        .filter(|&k| {
            done(k)
                && match ops[k] {
                    Op::Sync | Op::Compact => true,
                    // A deferring handle's delete is durable at the next sync.
                    Op::Delete(..) => durability == Durability::EachAppend,
                    _ => false,
                }
        })
        .map(|k| k + 1)
        .max()
        .unwrap_or(0);
    let hi = if last {
        ops.len()
    } else {
        (j + 1).min(ops.len())
    };
    let returned = (0..ops.len())
        .filter(|&k| done(k))
        .map(|k| k + 1)
        .max()
        .unwrap_or(0);
    let (image, lo) = if image_seed >= 200 {
        (snaps[p].kill_image(), returned)
    } else {
        (snaps[p].crash_image(image_seed), synced)
    };
    let r = Engine::open_with(dir, OpenMode::ReadWrite, cfg(&image)).unwrap_or_else(|err| {
        panic!(
            "crash point {p}: open failed: {}",
            crate::error::error_chain(&err)
        )
    });
    let got = read_all(&r).expect("read after crash");
    assert!(
        states[lo..=hi].contains(&got),
        "crash point {p} ({durability:?}, image {image_seed}): state matches no committed state in {lo}..={hi}"
    );
    assert!(r.verify().expect("verify").is_ok());
}
