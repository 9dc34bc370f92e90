//! Guards against two writers corrupting one store: a second read-write
//! handle (thread or process) fails at once with StoreBusy, several
//! read-only handles (threads and processes) coexist, a writer excludes
//! readers, and read-only handles refuse every write.

use std::process::Command;
use zrecord_engine::{Codec, CreateOptions, Engine, Error, OpenMode};

/// Tests in this file run one at a time: a child process forked by one test
/// briefly inherits the lock descriptors of another test's handles (until it
/// execs), which would make that test's release look late.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn store() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s");
    let e = Engine::create(&p, &CreateOptions::new(Codec::Raw)).unwrap();
    e.append_fixed(b"abcdefgh", 4).unwrap();
    (dir, p)
}

/// Runs python3 taking a non-blocking flock on meta.zr; prints "ok" or "busy".
fn python_flock(meta: &std::path::Path, exclusive: bool) -> String {
    let op = if exclusive { "LOCK_EX" } else { "LOCK_SH" };
    let script = format!(
        "import fcntl,sys\nf=open(sys.argv[1],'rb')\ntry:\n fcntl.flock(f,fcntl.{op}|fcntl.LOCK_NB)\n print('ok')\nexcept BlockingIOError:\n print('busy')"
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(meta)
        .output()
        .expect("python3 is required for the cross-process lock test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn a_second_writer_is_rejected_in_this_process() {
    let _serial = serial();
    let (_d, p) = store();
    let w = Engine::open(&p, OpenMode::ReadWrite).unwrap();
    let p2 = p.clone();
    let r = std::thread::spawn(move || Engine::open(&p2, OpenMode::ReadWrite).map(|_| ()))
        .join()
        .unwrap();
    assert!(matches!(r, Err(Error::StoreBusy { .. })), "{r:?}");
    assert!(matches!(
        Engine::open(&p, OpenMode::ReadOnly),
        Err(Error::StoreBusy { .. })
    ));
    drop(w);
    // Released on drop.
    Engine::open(&p, OpenMode::ReadWrite).unwrap();
}

#[test]
fn several_readers_coexist_and_exclude_a_writer() {
    let _serial = serial();
    let (_d, p) = store();
    let readers: Vec<Engine> = (0..4)
        .map(|_| Engine::open(&p, OpenMode::ReadOnly).unwrap())
        .collect();
    std::thread::scope(|s| {
        for r in &readers {
            s.spawn(|| {
                let mut out = [0u8; 4];
                r.gather_fixed(&[1], 4, &mut out).unwrap();
                assert_eq!(&out, b"efgh");
            });
        }
    });
    assert!(matches!(
        Engine::open(&p, OpenMode::ReadWrite),
        Err(Error::StoreBusy { .. })
    ));
    // Another process can share the lock but not take it exclusively.
    let meta = p.join("meta.zr");
    assert_eq!(python_flock(&meta, false), "ok");
    assert_eq!(python_flock(&meta, true), "busy");
    drop(readers);
    assert_eq!(python_flock(&meta, true), "ok");
}

#[test]
fn a_writer_excludes_other_processes() {
    let _serial = serial();
    let (_d, p) = store();
    let meta = p.join("meta.zr");
    let w = Engine::open(&p, OpenMode::ReadWrite).unwrap();
    assert_eq!(python_flock(&meta, true), "busy");
    assert_eq!(python_flock(&meta, false), "busy");
    drop(w);
    assert_eq!(python_flock(&meta, true), "ok");
}

#[test]
fn a_store_locked_by_another_process_is_busy() {
    let _serial = serial();
    let (_d, p) = store();
    let meta = p.join("meta.zr");
    // The child holds an exclusive lock until it reads a line from stdin.
    let mut child = Command::new("python3")
        .arg("-c")
        .arg("import fcntl,sys\nf=open(sys.argv[1],'rb')\nfcntl.flock(f,fcntl.LOCK_EX)\nprint('locked',flush=True)\nsys.stdin.readline()")
        .arg(&meta)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 is required");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    assert!(matches!(
        Engine::open(&p, OpenMode::ReadWrite),
        Err(Error::StoreBusy { .. })
    ));
    assert!(matches!(
        Engine::open(&p, OpenMode::ReadOnly),
        Err(Error::StoreBusy { .. })
    ));
    drop(child.stdin.take());
    child.wait().unwrap();
    Engine::open(&p, OpenMode::ReadWrite).unwrap();
}

#[test]
fn read_only_handles_refuse_writes() {
    let _serial = serial();
    let (_d, p) = store();
    let mut r = Engine::open(&p, OpenMode::ReadOnly).unwrap();
    assert!(r.is_read_only());
    assert!(matches!(
        r.append_fixed(b"zzzz", 4),
        Err(Error::ReadOnly { .. })
    ));
    assert!(matches!(
        r.append_var(b"z", &[0, 1]),
        Err(Error::ReadOnly { .. })
    ));
    assert!(matches!(r.delete(&[0]), Err(Error::ReadOnly { .. })));
    assert!(matches!(r.compact(), Err(Error::ReadOnly { .. })));
    r.sync().unwrap();
    assert_eq!(r.len(), 2);
}

/// A file system that logs the order of directory listings and lock calls.
#[derive(Debug)]
struct LoggingVfs {
    log: std::sync::Arc<std::sync::Mutex<Vec<&'static str>>>,
}

#[derive(Debug)]
struct LoggingFile {
    inner: Box<dyn zrecord_engine::vfs::StorageFile>,
    log: std::sync::Arc<std::sync::Mutex<Vec<&'static str>>>,
}

impl zrecord_engine::vfs::StorageFile for LoggingFile {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.inner.sync()
    }
    fn try_lock(&self, exclusive: bool) -> std::io::Result<bool> {
        self.log.lock().unwrap().push("lock");
        self.inner.try_lock(exclusive)
    }
}

impl zrecord_engine::vfs::Vfs for LoggingVfs {
    fn open(
        &self,
        path: &std::path::Path,
        flags: zrecord_engine::vfs::OpenFlags,
    ) -> std::io::Result<Box<dyn zrecord_engine::vfs::StorageFile>> {
        let inner = zrecord_engine::vfs::RealVfs.open(path, flags)?;
        Ok(Box::new(LoggingFile {
            inner,
            log: self.log.clone(),
        }))
    }
    fn exists(&self, path: &std::path::Path) -> std::io::Result<bool> {
        zrecord_engine::vfs::RealVfs.exists(path)
    }
    fn remove(&self, path: &std::path::Path) -> std::io::Result<()> {
        zrecord_engine::vfs::RealVfs.remove(path)
    }
    fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
        zrecord_engine::vfs::RealVfs.rename(from, to)
    }
    fn link(&self, from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
        zrecord_engine::vfs::RealVfs.link(from, to)
    }
    fn is_plain_file(&self, path: &std::path::Path) -> std::io::Result<bool> {
        zrecord_engine::vfs::RealVfs.is_plain_file(path)
    }
    fn list_dir(&self, dir: &std::path::Path) -> std::io::Result<Vec<String>> {
        self.log.lock().unwrap().push("list");
        zrecord_engine::vfs::RealVfs.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &std::path::Path) -> std::io::Result<()> {
        zrecord_engine::vfs::RealVfs.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &std::path::Path) -> std::io::Result<()> {
        zrecord_engine::vfs::RealVfs.sync_dir(dir)
    }
    fn boot_id(&self) -> Option<Vec<u8>> {
        zrecord_engine::vfs::RealVfs.boot_id()
    }
}

#[test]
fn open_lists_the_directory_only_under_the_lock() {
    // A listing taken before the lock can miss the `intent.zr` of a holder
    // killed mid-delete in between: the opener then serves the half-applied
    // delete (a record twice), and a writer's later appends are undone when
    // the stale intent replays at the next open.
    let _g = serial();
    let (_d, p) = store();
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let cfg = zrecord_engine::EngineConfig {
            vfs: std::sync::Arc::new(LoggingVfs { log: log.clone() }),
            ..Default::default()
        };
        let e = Engine::open_with(&p, mode, cfg).unwrap();
        assert_eq!(e.len(), 2);
        drop(e);
        let log = log.lock().unwrap().clone();
        let lock = log.iter().position(|&c| c == "lock").expect("a lock call");
        assert!(
            !log[..lock].contains(&"list"),
            "{mode:?}: listed before locking: {log:?}"
        );
    }
}
