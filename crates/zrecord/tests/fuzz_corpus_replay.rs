//! Replays every committed fuzz input (fuzz/seeds/*, including crash
//! reproducers once any are found) through the same calls the fuzz targets
//! make, so a fixed crash stays fixed without nightly or cargo-fuzz.

use std::path::Path;

use zrecord::text::{LoadTxtOptions, loadtxt_bytes};

fn inputs(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    out.sort();
    out
}

#[test]
fn npy_header_corpus_replays_without_panic() {
    let all = inputs("npy_header");
    assert!(!all.is_empty());
    let mut parsed = 0;
    for data in &all {
        parsed += zrecord::npy::NpyHeader::parse(data).is_ok() as usize;
        let _ = zrecord::npy::read_from(&data[..]);
    }
    assert!(parsed >= 1, "the seed header must parse");
}

#[test]
fn loadtxt_corpus_replays_without_panic() {
    let all = inputs("loadtxt");
    assert!(!all.is_empty());
    for data in all.iter().filter(|d| d.len() >= 4) {
        let (cfg, text) = data.split_at(4);
        let opts = LoadTxtOptions {
            delimiter: (cfg[0] & 1 == 1).then_some(cfg[1]),
            comments: (cfg[0] & 2 == 2).then_some(if cfg[0] & 64 == 64 { cfg[2] } else { b'#' }),
            skip_rows: (cfg[0] >> 2 & 3) as usize,
            // A negative column, and with it maybe one named twice.
            usecols: (cfg[0] & 16 == 16).then(|| match (cfg[2] & 3) as isize {
                c if cfg[0] & 128 == 128 => vec![c - 4, c],
                c => vec![c],
            }),
            max_rows: (cfg[0] & 32 == 32).then_some((cfg[2] >> 2) as usize),
            threads: 1,
            chunk_bytes: 1 + (cfg[3] as usize),
        };
        let _ = loadtxt_bytes::<f64>(text, &opts);
        let _ = loadtxt_bytes::<f32>(text, &opts);
    }
}

#[test]
fn identity_corpus_replays_and_round_trips() {
    let all = inputs("identity");
    assert!(!all.is_empty());
    let mut decoded = 0;
    for data in &all {
        decoded += zrecord::dtype::decode_identity(data).is_ok() as usize;
        zrecord::dtype::fuzz_identity(data);
    }
    assert!(decoded >= 6, "the seed identities must decode");
}
