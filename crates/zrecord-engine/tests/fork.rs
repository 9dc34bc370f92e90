//! A process forked after the engine used rayon's pool (a forked PyTorch
//! DataLoader worker, a `multiprocessing` child) inherits the pool without
//! its threads: parallel gathers, compression and writes there must run on
//! the calling thread instead of waiting forever for pool threads that
//! stayed in the parent.

mod common;
use common::*;
use zrecord_engine::{Codec, Engine, OpenMode, ReadPath};

/// Tests here run one at a time: a child forked by one test inherits the
/// other's lock descriptors until it exits, and its fork counts as one for
/// the other's handles.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records that cost far more than the inline threshold to gather.
fn fill(e: &Engine, n: u64) -> Vec<Vec<u8>> {
    let recs: Vec<Vec<u8>> = (0..n)
        .map(|i| record(i, 2000 + (i % 50) as usize))
        .collect();
    let mut off = vec![0];
    for r in &recs {
        off.push(off.last().unwrap() + r.len());
    }
    e.append_var(&recs.concat(), &off).unwrap();
    recs
}

#[cfg(unix)]
#[test]
fn a_forked_child_gathers_appends_and_compresses_on_its_own_thread() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tiny(ReadPath::Mmap);
    cfg.chunk_capacity = 1 << 20;
    let a = Engine::create_with(dir.path().join("a"), &options(Codec::Zstd), cfg.clone()).unwrap();
    let recs = fill(&a, 400);
    a.sync().unwrap();
    // The parent's parallel gather starts the pool.
    assert!(zrecord_engine::pool_usable());
    assert_matches(&a, &recs);

    let child = || -> i32 {
        // A hang is the failure mode: end it with SIGALRM, not a stuck test.
        // SAFETY: plain libc call in the child.
        unsafe { libc::alarm(30) };
        // The inherited handle reads, inline.
        let code = reads_back(&a, &recs);
        if code != 0 {
            return code;
        }
        // A store of its own: compression of many records and writes to
        // several chunks, then a gather through a fresh handle.
        let mut cfg = tiny(ReadPath::Pread);
        cfg.chunk_capacity = 64 << 10;
        let b = match Engine::create_with(dir.path().join("b"), &options(Codec::Zstd), cfg.clone())
        {
            Ok(b) => b,
            Err(_) => return 5,
        };
        let mine = fill(&b, 300);
        if b.close().is_err() {
            return 6;
        }
        let Ok(b) = Engine::open_with(dir.path().join("b"), OpenMode::ReadOnly, cfg) else {
            return 7;
        };
        assert_matches(&b, &mine);
        0
    };
    assert_eq!(exit_code_of_fork(child), 0);
    // The parent's pool still works.
    assert!(zrecord_engine::pool_usable());
    assert_matches(&a, &recs);
}

/// Whether every record of `e` reads back as `recs` (0) or which step failed.
fn reads_back(e: &Engine, recs: &[Vec<u8>]) -> i32 {
    let idx: Vec<u64> = (0..recs.len() as u64).rev().collect();
    let mut lens = vec![0u64; idx.len()];
    if e.record_lengths(&idx, &mut lens, None).is_err() {
        return 2;
    }
    let mut offsets = vec![0usize];
    for l in &lens {
        offsets.push(offsets.last().unwrap() + *l as usize);
    }
    let mut dst = vec![0u8; *offsets.last().unwrap()];
    if e.gather_var(&idx, &mut dst, &offsets).is_err() {
        return 3;
    }
    for (k, &i) in idx.iter().enumerate() {
        if dst[offsets[k]..offsets[k + 1]] != recs[i as usize][..] {
            return 4;
        }
    }
    0
}

#[cfg(unix)]
#[test]
fn compaction_refuses_while_a_forked_child_may_read_through_the_handle() {
    // The child's inherited handle keeps the record table and memory maps
    // of fork time; a compaction in the parent moved and truncated the
    // bytes under them (other records' bytes in the child, then SIGBUS).
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tiny(ReadPath::Mmap);
    cfg.chunk_capacity = 1 << 20;
    let p = dir.path().join("a");
    let mut a = Engine::create_with(&p, &options(Codec::Raw), cfg.clone()).unwrap();
    let recs = fill(&a, 400);
    a.sync().unwrap();
    let mut fds = [0i32; 2];
    // SAFETY: a plain pipe for the parent to say when it is done.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child runs engine calls only and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: plain libc calls in the child.
            unsafe { libc::alarm(30) };
            let mut b = [0u8; 1];
            // SAFETY: reads one byte into `b`: waits for the parent.
            unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 1) };
            reads_back(&a, &recs)
        }))
        .unwrap_or(9);
        // SAFETY: ends the child without running the parent's exit code.
        unsafe { libc::_exit(code) };
    }
    // Deletes leave the bytes where they are: the child's snapshot stays
    // valid. A compaction would not.
    let evens: Vec<u64> = (0..200).map(|i| i * 2).collect();
    a.delete(&evens).unwrap();
    let err = a.compact().unwrap_err();
    assert!(
        matches!(err, zrecord_engine::Error::ForkedSinceOpen { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("open it again"), "{err}");
    assert_eq!(a.len(), 200);
    // SAFETY: one byte to the child, then wait for it.
    unsafe { libc::write(fds[1], [1u8].as_ptr().cast(), 1) };
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status),
        "the child died (signal {})",
        libc::WTERMSIG(status)
    );
    assert_eq!(libc::WEXITSTATUS(status), 0, "the child read wrong records");
    // Once the child is gone the store reopens, and compacts.
    drop(a);
    let mut a = Engine::open_with(&p, OpenMode::ReadWrite, cfg).unwrap();
    a.compact().unwrap();
    assert_eq!(a.len(), 200);
    // SAFETY: closes the pipe's two ends.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}
