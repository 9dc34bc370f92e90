//! A store keeps one file open per chunk. When the process runs out of file
//! descriptors below its hard limit, the engine raises the soft limit to the
//! hard one and goes on, instead of failing the append (which poisoned the
//! handle) or the open. Alone in its test binary: it changes a
//! process-wide limit.

mod common;
use common::*;
use zrecord_engine::{Codec, Engine, OpenMode, ReadPath};

// `rlim_t` is `u64` on some targets and an alias of it on others.
#[allow(clippy::unnecessary_cast)]
fn nofile() -> (u64, u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the `rlimit` we own.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) }, 0);
    (l.rlim_cur as u64, l.rlim_max as u64)
}

#[allow(clippy::unnecessary_cast)]
fn set_soft(soft: u64) {
    let (_, hard) = nofile();
    let l = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: a valid `rlimit`; lowering the soft limit is always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) }, 0);
}

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd")
        .or_else(|_| std::fs::read_dir("/dev/fd"))
        .unwrap()
        .count() as u64
}

#[test]
fn a_store_with_more_chunks_than_the_soft_limit_allows_appends_and_reopens() {
    let (soft, hard) = nofile();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let cfg = tiny(ReadPath::Mmap);
    // 200-byte records in 300-byte chunks: one chunk (one open file) each.
    let records = 240u64;
    let limit = open_fds() + 60;
    assert!(
        hard >= limit + records + 20,
        "hard limit {hard} too low to test"
    );
    set_soft(limit);

    let e = Engine::create_with(&path, &options(Codec::Raw), cfg.clone()).unwrap();
    let recs: Vec<Vec<u8>> = (0..records).map(|i| record(i, 200)).collect();
    for r in &recs {
        e.append_var(r, &[0, r.len()]).unwrap();
    }
    assert!(nofile().0 > limit, "the soft limit was not raised");
    assert_matches(&e, &recs);
    drop(e);

    // A fresh process starts at the low limit again: the open raises it.
    set_soft(limit);
    let ro = Engine::open_with(&path, OpenMode::ReadOnly, cfg).unwrap();
    assert_matches(&ro, &recs);
    drop(ro);
    set_soft(soft);
}
