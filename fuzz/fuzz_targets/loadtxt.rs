//! Fuzzes the text parser with every option shape: the first bytes choose
//! the delimiter, comment byte (`#` or any byte), skip_rows, usecols
//! (negative and repeated columns too), max_rows and chunk size.
//! Also differential: a small chunk size and one whole-text chunk must give
//! the same array (bit for bit) or both an error.
//! Runs inside one persistent 1-thread pool: with `threads: 1` outside such
//! a pool, every call would start (and drop) a rayon pool, which costs a
//! thread spawn per execution and makes LeakSanitizer report the workers
//! still exiting when the fuzzer stops.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use zrecord::text::{LoadTxtOptions, loadtxt_bytes};

static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("one thread")
    });
    pool.install(|| run(data));
});

fn run(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
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
    let small = loadtxt_bytes::<f64>(text, &opts);
    let _ = loadtxt_bytes::<f32>(text, &opts);
    // Differential: the chunking (where the row parsers restart, where the
    // vector rows fall back) must not change the result.
    let whole = loadtxt_bytes::<f64>(
        text,
        &LoadTxtOptions {
            chunk_bytes: usize::MAX,
            ..opts
        },
    );
    match (&small, &whole) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.dim(), b.dim());
            assert!(
                a.iter()
                    .zip(b.iter())
                    .all(|(x, y)| x.to_bits() == y.to_bits())
            );
        }
        (Err(_), Err(_)) => {}
        _ => panic!("chunking changed the outcome: {small:?} vs {whole:?}"),
    }
}
