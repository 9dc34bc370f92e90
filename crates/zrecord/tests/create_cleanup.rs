//! Guards against a typed create that fails after the engine's part leaving
//! a half-made store behind. The engine removes what it made when its own
//! part of a create fails, but the typed layer then syncs and writes
//! `store.zr`, and a failure there (a full disk, a quota) left `meta.zr`
//! and `0.chunk` without `store.zr`: every later open called it a store
//! whose "creation did not finish" and every create refused the directory,
//! until the user removed its files by hand.
//!
//! The failure is made real with a file-size limit (`RLIMIT_FSIZE`): the
//! engine's files fit under it (`meta.zr` is 32 bytes, `0.chunk` empty),
//! `store.zr` (a 32-byte header plus the type identity) does not. The limit
//! is the process's, which is why this is a test binary of its own, with
//! one test.

use std::path::Path;
use zrecord::{Codec, CreateOptions, DenseStore, Error};

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Runs `f` with files limited to `bytes` bytes (a write past it fails
/// with `EFBIG` rather than killing the process).
fn with_file_size_limit<R>(bytes: u64, f: impl FnOnce() -> R) -> R {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: SIG_IGN is a valid disposition for SIGXFSZ, and `old` is a
    // valid `rlimit` for getrlimit to fill.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut old), 0);
    }
    let lower = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: old.rlim_max,
    };
    // SAFETY: `lower` is a valid `rlimit`, at most the current hard limit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &lower) }, 0);
    let r = f();
    // SAFETY: `old` is the limit read above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &old) }, 0);
    r
}

#[test]
fn a_typed_create_that_fails_writing_store_zr_leaves_the_directory_as_it_found_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let opts = CreateOptions::new(Codec::Zstd);
    let r = with_file_size_limit(33, || {
        DenseStore::<f32>::create(&dir, &[3], &opts).map(drop)
    });
    let Err(Error::Engine(zrecord_engine::Error::Io { path, source, .. })) = r else {
        panic!("{r:?}");
    };
    assert!(path.starts_with(&dir), "{}", path.display());
    assert_eq!(source.raw_os_error(), Some(libc::EFBIG), "{source}");
    assert_eq!(names(&dir), Vec::<String>::new());
    assert_eq!(zrecord::probe(&dir).unwrap(), None);
    // So a create there (with room) succeeds.
    let s = DenseStore::<f32>::create(&dir, &[3], &opts).unwrap();
    s.append(ndarray::arr2(&[[1.0f32, 2.0, 3.0]]).view())
        .unwrap();
    drop(s);
    assert_eq!(DenseStore::<f32>::open(&dir).unwrap().len(), 1);
}
