//! A store file replaced by something that is not a regular file: an open
//! (either mode) and a create over the directory must fail promptly with an
//! error naming the file. A FIFO under a store file's name used to block
//! `open` for good (opening a FIFO waits for the other end); a directory
//! gave a bare "Is a directory".

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;
use zrecord_engine::{Codec, CreateOptions, Engine, OpenMode};

fn mkfifo(p: &Path) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {p:?}"
    );
}

/// A store with records, every file durable, no handle open; its files.
fn store(codec: Codec) -> (tempfile::TempDir, PathBuf, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s");
    let opts = match codec {
        // Raw content (no dictionary magic) is a valid zstd dictionary.
        Codec::ZstdDict => CreateOptions::with_dictionary(b"records of sevens ".repeat(8)),
        c => CreateOptions::new(c),
    };
    let e = Engine::create(&p, &opts).unwrap();
    e.append_fixed(&[7u8; 64], 8).unwrap();
    e.sync().unwrap();
    drop(e);
    let mut names: Vec<String> = std::fs::read_dir(&p)
        .unwrap()
        .map(|d| d.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    (dir, p, names)
}

/// Runs `f` on a thread; its result, or a failure after 20 s (the thread
/// is left blocked; the test process ends with it).
fn promptly<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what}: still blocked after 20 s"))
}

#[test]
fn a_store_file_that_is_a_fifo_or_a_directory_fails_promptly_naming_it() {
    let mut cases = 0;
    for codec in [Codec::Raw, Codec::ZstdDict] {
        let (_keep, _, names) = store(codec);
        for name in names {
            for special in ["fifo", "dir"] {
                let (_keep, p, _) = store(codec);
                let f = p.join(&name);
                std::fs::remove_file(&f).unwrap();
                if special == "fifo" {
                    mkfifo(&f);
                } else {
                    std::fs::create_dir(&f).unwrap();
                }
                for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
                    let what = format!("{codec:?} {name} as a {special}, open {mode:?}");
                    let q = p.clone();
                    let r = promptly(&what, move || Engine::open(&q, mode).map(|_| ()));
                    let e = r.expect_err(&what).to_string();
                    assert!(e.contains(&name), "{what}: {e}");
                    cases += 1;
                }
                let what = format!("{codec:?} {name} as a {special}, create");
                let q = p.clone();
                let r = promptly(&what, move || {
                    Engine::create(&q, &CreateOptions::new(Codec::Raw)).map(|_| ())
                });
                assert!(r.is_err(), "{what}");
            }
        }
    }
    assert!(cases >= 16, "{cases}");
}
