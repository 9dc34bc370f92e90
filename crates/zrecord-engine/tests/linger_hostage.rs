//! The job a parallel gather leaves on the pool to keep one thread awake
//! for the next gather ("linger") runs whatever pool work arrives while it
//! waits. A rayon thread that picks it up while itself waiting (in
//! `rayon::yield_now`, as loaderx's consumer on a pool thread does, or in a
//! join or scope) runs it on top of that wait, and cannot return to its own
//! work until the linger ends. The linger must therefore end within a
//! bounded time even when the pool never runs out of work; it used to go on
//! for as long as a job arrived every 200 us. Found by an adversarial
//! review. Both tests failed before the fix: a waiting pool thread held
//! 455 ms of the one second that gathers ran, and a pool thread that
//! gathered itself held the whole second (its gather no longer leaves a
//! linger; the other case is what the 1 ms bound on a linger turn is for).
//!
//! Its own test binary: the linger is one per process, and another test's
//! gathers could hold it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use zrecord_engine::{Codec, CreateOptions, Engine};

/// A pool job that, until `stop`, leaves its successor on the pool: a pool
/// that always has work.
fn chain(stop: Arc<AtomicBool>) {
    if !stop.load(Ordering::SeqCst) {
        rayon::spawn(move || chain(stop));
    }
}

/// Gathers made outside the pool (a loader's producer thread) while the
/// one free thread of the global pool waits in `rayon::yield_now` (a
/// loaderx consumer on a pool thread): that wait runs the gathers' helper
/// jobs and, between them, the linger job, which keeps finding a helper job
/// within 200 us as long as the gathers go on. Every wait must still end
/// within about a turn of the linger, not when the gathers stop.
/// Pool threads held by jobs that wait for [`Gate::open`].
#[derive(Clone)]
struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    /// Holds `n` threads: spawns `n` waiting jobs with `spawn` and returns
    /// once every one of them runs.
    fn hold(n: usize, spawn: impl Fn(Box<dyn FnOnce() + Send>)) -> Gate {
        let gate = Gate(Arc::new((Mutex::new(false), Condvar::new())));
        let running = Arc::new(AtomicUsize::new(0));
        for _ in 0..n {
            let (gate, running) = (gate.clone(), running.clone());
            spawn(Box::new(move || {
                running.fetch_add(1, Ordering::SeqCst);
                let (open, cv) = &*gate.0;
                let mut g = open.lock().unwrap();
                while !*g {
                    g = cv.wait(g).unwrap();
                }
            }));
        }
        while running.load(Ordering::SeqCst) < n {
            std::thread::sleep(Duration::from_millis(1));
        }
        gate
    }

    fn open(&self) {
        let (open, cv) = &*self.0;
        *open.lock().unwrap() = true;
        cv.notify_all();
    }
}

#[test]
fn a_waiting_pool_thread_is_not_held_while_another_thread_keeps_gathering() {
    const W: usize = 4096;
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::create(dir.path().join("s"), &CreateOptions::new(Codec::Zstd)).unwrap();
    let data: Vec<u8> = (0..128 * W).map(|i| (i * 7 / 5) as u8).collect();
    e.append_fixed(&data, W).unwrap();
    let picks: Vec<u64> = (0..128).collect();

    // All but one thread of the global pool blocked until the end.
    let threads = rayon::current_num_threads();
    assert!(threads >= 2, "a parallel gather needs two pool threads");
    let gate = Gate::hold(threads - 1, rayon::spawn);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let stop = stop.clone();
        rayon::spawn(move || {
            let mut longest = Duration::ZERO;
            while !stop.load(Ordering::SeqCst) {
                let t = Instant::now();
                rayon::yield_now();
                longest = longest.max(t.elapsed());
            }
            tx.send(longest).unwrap();
        });
    }
    let t = Instant::now();
    let mut out = vec![0u8; 128 * W];
    while t.elapsed() < Duration::from_secs(1) {
        e.gather_fixed(&picks, W, &mut out).unwrap();
        assert_eq!(out, data);
    }
    stop.store(true, Ordering::SeqCst);
    let longest = rx.recv().unwrap();
    gate.open();
    assert!(
        longest < Duration::from_millis(300),
        "a waiting pool thread was held {longest:?} by the linger job"
    );
}

#[test]
fn a_pool_thread_running_the_linger_gets_back_to_its_own_work_while_the_pool_stays_busy() {
    const W: usize = 1000;
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::create(dir.path().join("s"), &CreateOptions::new(Codec::Zstd)).unwrap();
    let data: Vec<u8> = (0..64 * W).map(|i| (i * 7 / 5) as u8).collect();
    e.append_fixed(&data, W).unwrap();
    let picks: Vec<u64> = (0..64).collect();

    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    // One of the two threads held until the end, so nothing the gather
    // spawns is stolen: it stays on the other thread's deque.
    let gate = Gate::hold(1, |job| pool.spawn(job));
    let stop = Arc::new(AtomicBool::new(false));
    let timer = {
        let (stop, gate) = (stop.clone(), gate.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(1));
            stop.store(true, Ordering::SeqCst);
            gate.open();
        })
    };
    let held = pool.install(|| {
        let stop = stop.clone();
        rayon::spawn(move || chain(stop));
        let mut out = vec![0u8; 64 * W];
        e.gather_fixed(&picks, W, &mut out).unwrap();
        assert_eq!(out, data);
        // A linger this gather left would sit on top of this thread's
        // deque, and waiting once would run it (gathers on a pool thread
        // leave none now; before, this wait lasted the whole chain).
        let t = Instant::now();
        rayon::yield_now();
        t.elapsed()
    });
    timer.join().unwrap();
    assert!(
        held < Duration::from_millis(300),
        "a pool thread was held {held:?} by the linger job"
    );
}
