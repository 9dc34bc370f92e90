//! Guards against damaged or hostile bytes making the library panic or
//! misbehave: every byte of `meta.zr`, `store.zr` and a loc segment is set to
//! three other values, and every file is truncated at each length of its
//! first 64 bytes. Each case must open cleanly (and then read and verify
//! without panicking) or fail with an error that names a file.

mod common;
use common::Rng;
use common::workload::{apply, random_op, read_all, run};
use std::path::Path;
use zrecord_engine::sim::SimVfs;
use zrecord_engine::typed_header::{self, Kind, TypedHeader};
use zrecord_engine::{Codec, CreateOptions, Engine, EngineConfig, Error, OpenMode};

fn cfg(vfs: &SimVfs) -> EngineConfig {
    common::sim(vfs)
}

fn build(codec: Codec) -> SimVfs {
    let dir = Path::new("/store");
    let v = SimVfs::new();
    let mut e = Engine::create_with(dir, &CreateOptions::new(codec), cfg(&v)).unwrap();
    let mut rng = Rng(42);
    let mut model = Vec::new();
    while model.len() < 7 {
        let op = random_op(&mut rng, model.len(), 30);
        run(&mut e, &op).unwrap();
        apply(&mut model, &op);
    }
    e.sync().unwrap();
    drop(e);
    typed_header::write_with(
        &v,
        dir,
        &TypedHeader {
            kind: Kind::Ragged,
            record_bytes: 0,
            identity: vec![
                0x81, 0xa5, b'd', b't', b'y', b'p', b'e', 0xa3, b'<', b'f', b'4',
            ],
        },
    )
    .unwrap();
    v
}

/// Opens (both modes) and reads everything; returns whether it opened.
fn exercise(v: &SimVfs, what: &str) -> bool {
    let dir = Path::new("/store");
    let mut opened = false;
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        match Engine::open_with(dir, mode, cfg(v)) {
            Ok(e) => {
                opened = true;
                let _ = read_all(&e);
                let _ = e.verify();
            }
            Err(err) => {
                let msg = err.to_string();
                assert!(
                    matches!(
                        err,
                        Error::Corrupted { .. } | Error::NotAStore { .. } | Error::Io { .. }
                    ),
                    "{what}: unexpected error {msg}"
                );
                assert!(msg.contains("/store"), "{what}: error names no file: {msg}");
            }
        }
    }
    let _ = typed_header::read_with(v, dir);
    opened
}

#[test]
fn flipped_and_truncated_files_never_panic() {
    let dir = Path::new("/store");
    let mut cases = 0;
    let mut opened = 0;
    for codec in [Codec::Raw, Codec::Zstd] {
        let base = build(codec);
        for name in ["meta.zr", "store.zr", "0.loc", "1.loc"] {
            let p = dir.join(name);
            let orig = base.read_file(&p).unwrap();
            for i in 0..orig.len() {
                for val in [0x00, 0xFF, orig[i] ^ 0x80] {
                    if val == orig[i] {
                        continue;
                    }
                    let v = base.fork();
                    let mut b = orig.clone();
                    b[i] = val;
                    v.write_file(&p, &b);
                    opened += exercise(&v, &format!("{name} byte {i} = {val:#x}")) as u64;
                    if name == "store.zr" {
                        let r = typed_header::read_with(&v, dir);
                        if let Err(e) = r {
                            assert!(e.to_string().contains("store.zr"), "{e}");
                        }
                    }
                    cases += 1;
                }
            }
        }
        for name in ["meta.zr", "store.zr", "0.loc", "1.loc", "0.chunk"] {
            let p = dir.join(name);
            let orig = base.read_file(&p).unwrap();
            for n in 0..orig.len().min(64) {
                let v = base.fork();
                v.write_file(&p, &orig[..n]);
                opened += exercise(&v, &format!("{name} truncated to {n}")) as u64;
                cases += 1;
            }
        }
    }
    eprintln!("hostile bytes: {cases} cases, {opened} opened");
    assert!(cases > 500);
}
