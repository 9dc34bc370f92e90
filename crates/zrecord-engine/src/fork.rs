//! Rayon's global pool across `fork()`.
//!
//! A forked process inherits the pool's memory but not its threads: work
//! spawned on it there waits forever. That is the usual shape of a forked
//! PyTorch DataLoader worker or a `multiprocessing` child whose parent has
//! already gathered. Every parallel path of this workspace asks
//! [`pool_usable`] first and runs its work on the calling thread when the
//! answer is no.

use std::sync::atomic::{AtomicU32, Ordering};

/// The process that first used rayon's global pool through this library
/// (0: none yet).
static POOL_PID: AtomicU32 = AtomicU32::new(0);

/// Whether work handed to rayon's global pool runs in this process: false in
/// a process forked after this library first used the pool (its threads
/// stayed in the parent). The first call registers the calling process as
/// the pool's, so call it before anything that may start the pool
/// (`rayon::current_num_threads` included).
///
/// ```
/// // In the process that opened the store, parallel work runs on the pool.
/// assert!(zrecord_engine::pool_usable());
/// ```
pub fn pool_usable() -> bool {
    let me = std::process::id();
    match POOL_PID.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => true,
        Err(owner) => owner == me,
    }
}

/// `fork()`s this process made after [`forks`] was first called.
static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static FORK_HOOK: std::sync::Once = std::sync::Once::new();

/// Runs in the parent after each `fork()` (an atomic add: safe there).
extern "C" fn count_fork() {
    FORKS.fetch_add(1, Ordering::AcqRel);
}

/// How many times this process has forked since the first call (which
/// installs the counting hook). A handle compares it with its value at open:
/// a child forked in between may read through the inherited handle, which
/// shares its memory maps and record table with the parent's files.
pub(crate) fn forks() -> u64 {
    FORK_HOOK.call_once(|| {
        // SAFETY: registers a handler that only does an atomic add; the
        // other two handlers are absent. A failure (ENOMEM) leaves the count
        // at 0, as before this existed.
        unsafe {
            libc::pthread_atfork(None, Some(count_fork), None);
        }
    });
    FORKS.load(Ordering::Acquire)
}
