//! Third review of deferred deletes: checksum-valid but hostile records in
//! `durable.zr`'s log, on the boot that wrote the marker. An open either
//! serves the store's records or fails with `Corrupted`, and never writes
//! over a live entry.

mod common;
use common::workload::read_all;
use std::path::Path;
use zrecord_engine::sim::SimVfs;
use zrecord_engine::{Codec, CreateOptions, Durability, Engine, Error, OpenMode};

const DIR: &str = "/s";

fn fnv(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut b = (body.len() as u32).to_le_bytes().to_vec();
    b.extend_from_slice(body);
    let h = fnv(&b);
    b.extend_from_slice(&h.to_le_bytes());
    b
}

fn delete(
    undo: &[(u64, [u8; 16])],
    prev: &[u8],
    header: &[u8],
    redo: &[(u64, [u8; 16])],
) -> Vec<u8> {
    let mut body = vec![1, 0, 0, 0];
    body.extend_from_slice(&(undo.len() as u32).to_le_bytes());
    body.extend_from_slice(&(redo.len() as u32).to_le_bytes());
    body.extend_from_slice(&[0; 4]);
    body.extend_from_slice(prev);
    body.extend_from_slice(header);
    for (slot, loc) in undo.iter().chain(redo) {
        body.extend_from_slice(&slot.to_le_bytes());
        body.extend_from_slice(loc);
    }
    frame(&body)
}

fn loc(offset: u32, len: u32, chunk: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&offset.to_le_bytes());
    b[4..8].copy_from_slice(&len.to_le_bytes());
    b[8..12].copy_from_slice(&len.to_le_bytes());
    b[12..16].copy_from_slice(&chunk.to_le_bytes());
    b
}

#[test]
fn hostile_log_records_give_clear_errors_or_the_stores_records() {
    let v = SimVfs::new();
    let opts = CreateOptions {
        durability: Durability::AtSync,
        ..CreateOptions::new(Codec::Raw)
    };
    let mut e = Engine::create_with(DIR, &opts, common::sim(&v)).unwrap();
    for k in 0..6u8 {
        e.append_var(&[k; 20], &[0, 20]).unwrap();
    }
    e.sync().unwrap();
    // A marker of this boot: the next deferred append writes it.
    e.append_var(&[9; 20], &[0, 20]).unwrap();
    e.sync().unwrap();
    e.delete(&[6]).unwrap();
    let dir = Path::new(DIR);
    let m = v.read_file(&dir.join("durable.zr")).unwrap();
    drop(e);
    let fixed = 8 + 32 + usize::from(m[5]) + 8;
    let base = &m[..fixed];
    let meta = v.read_file(&dir.join("meta.zr")).unwrap();
    let mut want =
        read_all(&Engine::open_with(DIR, OpenMode::ReadOnly, common::sim(&v)).unwrap()).unwrap();
    // The marker's own state (a fallback to it) holds the deleted record.
    want.push(vec![9; 20]);
    let entry0: [u8; 16] = v.read_file(&dir.join("0.loc")).unwrap()[..16]
        .try_into()
        .unwrap();
    let with = |f: &dyn Fn(&mut [u8])| {
        let mut h = meta.clone();
        f(&mut h);
        h
    };
    let huge = with(&|h| h[14..22].copy_from_slice(&(1u64 << 40).to_le_bytes()));
    let zstd = with(&|h| h[5] = Codec::Zstd.as_u8());
    let chunks = with(&|h| h[6..10].copy_from_slice(&7u32.to_le_bytes()));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "absurd slots",
            delete(
                &[(u64::MAX, entry0)],
                &meta,
                &meta,
                &[(u64::MAX - 1, loc(1, 2, 3))],
            ),
        ),
        ("absurd length", delete(&[], &meta, &huge, &[])),
        ("another codec", delete(&[], &meta, &zstd, &[])),
        ("missing chunks", delete(&[], &meta, &chunks, &[])),
        (
            "garbage entry",
            delete(&[(0, entry0)], &meta, &meta, &[(0, loc(1 << 30, 7, 0))]),
        ),
        (
            "entry in a missing chunk",
            delete(&[(0, entry0)], &meta, &meta, &[(0, loc(0, 20, 9))]),
        ),
        (
            "length cut to zero",
            delete(&[], &meta, &with(&|h| h[14..22].fill(0)), &[]),
        ),
    ];
    for (name, rec) in cases {
        for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
            let img = v.fork();
            let mut b = base.to_vec();
            b.extend_from_slice(&rec);
            img.write_file(&dir.join("durable.zr"), &b);
            let locs: Vec<_> = (0..2)
                .map(|s| img.read_file(&dir.join(format!("{s}.loc"))))
                .collect();
            match Engine::open_with(DIR, mode, common::sim(&img)) {
                Ok(r) => {
                    let got = read_all(&r).unwrap();
                    // A log taken at its word may drop records; it never
                    // makes up or repeats one.
                    for g in &got {
                        assert!(want.contains(g), "{name} {mode:?}: {g:?}");
                    }
                    assert!(r.verify().unwrap().is_ok(), "{name} {mode:?}");
                }
                Err(Error::Corrupted { file, .. }) => {
                    assert!(file.starts_with(DIR), "{name} {mode:?}: {}", file.display());
                    let after: Vec<_> = (0..2)
                        .map(|s| img.read_file(&dir.join(format!("{s}.loc"))))
                        .collect();
                    assert_eq!(locs, after, "{name} {mode:?}: a failed open wrote entries");
                }
                Err(err) => panic!("{name} {mode:?}: {err}"),
            }
        }
    }
}
