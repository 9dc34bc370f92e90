//! A typed create over what a killed create left. Regression: the files of
//! a create killed part-way (a `meta.zr.creating.*` file; `meta.zr` empty
//! or of no records beside an empty `0.chunk`, with no `store.zr`) made
//! every later create fail (`ForeignFiles`), and the create-or-open probe
//! call the directory a store whose "creation did not finish"; re-running
//! the killed program failed until someone removed the files by hand. Now
//! a create clears them and makes the store; an open still reports them,
//! and anything beside them (a record, a foreign file) is refused as
//! before, untouched.

use std::path::Path;
use zrecord::{Codec, CreateOptions, DenseStore, Error, RaggedStore};

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// What a create killed at one of three points leaves in `dir`.
fn plant(dir: &Path, kind: usize) {
    std::fs::create_dir_all(dir).unwrap();
    match kind {
        // Before it linked meta.zr.
        0 => std::fs::write(dir.join("meta.zr.creating.999999.0"), b"").unwrap(),
        // Before it wrote the engine header.
        1 => {
            std::fs::write(dir.join("meta.zr"), b"").unwrap();
            std::fs::write(dir.join("0.chunk"), b"").unwrap();
        }
        // Before it renamed store.zr.tmp into place (a float64 store's).
        _ => {
            let t = tempfile::tempdir().unwrap();
            let s = t.path().join("s");
            drop(DenseStore::<f64>::create(&s, &[7], &CreateOptions::new(Codec::Raw)).unwrap());
            for n in ["meta.zr", "0.chunk"] {
                std::fs::copy(s.join(n), dir.join(n)).unwrap();
            }
            std::fs::copy(s.join("store.zr"), dir.join("store.zr.tmp")).unwrap();
        }
    }
}

#[test]
fn a_typed_create_takes_over_a_killed_creates_files() {
    let tmp = tempfile::tempdir().unwrap();
    for kind in 0..3 {
        for ragged in [false, true] {
            let dir = tmp.path().join(format!("s{kind}{ragged}"));
            plant(&dir, kind);
            if kind != 0 {
                // An open (and a probe) still says what it is.
                let e = zrecord::probe(&dir).unwrap_err();
                assert!(matches!(e, Error::BadStore { .. }), "{e}");
                assert!(e.to_string().contains("create the store again"), "{e}");
                assert!(DenseStore::<f32>::open(&dir).is_err());
            }
            assert_eq!(zrecord::probe_to_create(&dir).unwrap(), None, "{kind}");
            let opts = CreateOptions::new(Codec::Zstd);
            let what = format!("kind {kind}, ragged {ragged}");
            if ragged {
                let s = RaggedStore::<u16>::create(&dir, &opts)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                s.append([ndarray::arr1(&[1u16, 2, 3]).view()]).unwrap();
                drop(s);
                let s = RaggedStore::<u16>::open(&dir).unwrap();
                assert_eq!(s.len(), 1, "{what}");
            } else {
                let s = DenseStore::<f32>::create(&dir, &[3], &opts)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                s.append(ndarray::arr2(&[[1.0f32, 2.0, 3.0]]).view())
                    .unwrap();
                drop(s);
                let s = DenseStore::<f32>::open(&dir).unwrap();
                assert_eq!(s.len(), 1, "{what}");
                assert_eq!(s.item_shape(), &[3], "{what}");
            }
            let names: Vec<String> = files(&dir).into_iter().map(|(n, _)| n).collect();
            assert!(
                !names
                    .iter()
                    .any(|n| n.contains("creating") || n.ends_with(".tmp")),
                "{what}: {names:?}"
            );
        }
    }
}

#[test]
fn leftovers_beside_a_record_or_a_foreign_file_are_refused_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    // A store with a record whose store.zr is gone.
    let a = tmp.path().join("a");
    let s = DenseStore::<f32>::create(&a, &[1], &CreateOptions::new(Codec::Raw)).unwrap();
    s.append(ndarray::arr2(&[[1.0f32]]).view()).unwrap();
    drop(s);
    std::fs::remove_file(a.join("store.zr")).unwrap();
    std::fs::write(a.join("meta.zr.creating.999999.0"), b"").unwrap();
    // Leftovers beside a file of the user's.
    let b = tmp.path().join("b");
    plant(&b, 2);
    std::fs::write(b.join("notes.txt"), b"mine").unwrap();
    for (dir, named) in [(&a, "0.loc"), (&b, "notes.txt")] {
        let before = files(dir);
        let e = zrecord::probe_to_create(dir).unwrap_err();
        assert!(
            e.to_string().contains("remove the directory's files"),
            "{e}"
        );
        match DenseStore::<f32>::create(dir, &[1], &CreateOptions::new(Codec::Raw)).map(drop) {
            Err(Error::Engine(zrecord_engine::Error::ForeignFiles { file, .. })) => {
                assert_eq!(file, named)
            }
            r => panic!("{}: {r:?}", dir.display()),
        }
        assert_eq!(files(dir), before, "{}", dir.display());
    }
}

/// A `meta.zr` that is a FIFO (no `store.zr`): the probe that tells a
/// creating store from a broken one opened it to try its lock, and opening
/// a FIFO waits for a writer: the probe, and so every open and
/// create-or-open of the directory, blocked for good. Now both are refused
/// at once, naming the store's files.
#[cfg(target_os = "linux")]
#[test]
fn a_fifo_meta_zr_is_refused_without_blocking() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s");
    std::fs::create_dir(&p).unwrap();
    let meta = std::ffi::CString::new(p.join("meta.zr").as_os_str().as_bytes()).unwrap();
    // SAFETY: `meta` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(meta.as_ptr(), 0o600) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let q = p.clone();
    std::thread::spawn(move || {
        let probe = zrecord::probe(&q).map_err(|e| e.to_string());
        let create = DenseStore::<f32>::create(&q, &[2], &CreateOptions::new(Codec::Raw))
            .map(|_| ())
            .map_err(|e| e.to_string());
        let _ = tx.send((probe, create));
    });
    let (probe, create) = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("probe/create still blocked on a FIFO meta.zr after 20 s");
    let probe = probe.expect_err("a FIFO meta.zr is no store");
    assert!(
        probe.contains("store.zr") || probe.contains("meta.zr"),
        "{probe}"
    );
    let create = create.expect_err("a FIFO meta.zr is not taken over");
    assert!(create.contains("meta.zr"), "{create}");
}
