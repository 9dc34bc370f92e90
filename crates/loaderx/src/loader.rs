//! The pipeline: one producer, a pool of transform workers, bounded channels.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{
    Receiver, RecvTimeoutError, Sender, TryRecvError, bounded, select, unbounded,
};
use zsampler::{Mode, Sampler};

use crate::batch::{Batch, Layout, Pool, Slot};
use crate::error::{Error, Result};
use crate::stream::Stream;

/// How long dropping (or [`DataLoader::close`]) waits for the pipeline's
/// threads: a transform that blocks past it is left to finish on its own.
pub const CLOSE_WAIT: Duration = Duration::from_secs(30);

/// Largest [`LoaderOptions::prefetch`] accepted.
pub const MAX_PREFETCH: usize = 1 << 16;
/// Largest [`LoaderOptions::workers`] accepted.
pub const MAX_WORKERS: usize = 1 << 12;
/// Largest [`LoaderOptions::start_step`] accepted (`2^63 - 1`, as in the
/// Python binding): later steps could not be numbered without wrapping.
pub const MAX_START_STEP: u64 = i64::MAX as u64;

/// How a [`DataLoader`] samples and how far it runs ahead.
///
/// The loader samples from `0..n`, `n` being the streams' length when it is
/// built: records appended later are never drawn (see [`DataLoader`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoaderOptions {
    /// Records per (global) batch. Default 256. In [`Mode::Cyclic`] a
    /// store of `n < batch_size` records gives batches of `n` (each one a
    /// permutation of every record); the other modes always give
    /// `batch_size` (repeating records when `n < batch_size`).
    pub batch_size: usize,
    /// Sampler mode. Default [`Mode::Cyclic`] (the reference's `mode=2`).
    pub mode: Mode,
    /// Sampler seed. Default 42.
    pub seed: u64,
    /// First step to produce: a loader started at step `k` yields exactly
    /// the batches a loader started at 0 yields from its `k`-th on. At most
    /// [`MAX_START_STEP`].
    pub start_step: u64,
    /// `(rank, world_size)`: this process draws only its disjoint slice of
    /// every global batch. `None` is `(0, 1)`.
    pub shard: Option<(usize, usize)>,
    /// Finished batches that may wait for the consumer. Default 4.
    pub prefetch: usize,
    /// Threads running the transform. 0 runs it on the producer thread.
    /// Default 4.
    pub workers: usize,
    /// Deliver in step order (default). `false` hands out batches as
    /// workers finish them: a little faster, no longer deterministic.
    pub ordered: bool,
}

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions {
            batch_size: 256,
            mode: Mode::Cyclic,
            seed: 42,
            start_step: 0,
            shard: None,
            prefetch: 4,
            workers: 4,
            ordered: true,
        }
    }
}

impl LoaderOptions {
    /// Takes `(rank, world_size)` from the environment a multi-process
    /// launcher sets, if any: `LOADERX_RANK`/`LOADERX_WORLD_SIZE`, then
    /// `RANK`/`WORLD_SIZE` (torchrun, `torch.distributed`), then
    /// `SLURM_PROCID`/`SLURM_STEP_NUM_TASKS` (set by `srun` for each task of
    /// a job step; not `SLURM_NTASKS`, which an `sbatch --ntasks=N` script
    /// also sees when it runs one process without `srun`), then
    /// `OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE` (the cluster variables
    /// JAX's `jax.distributed.initialize()` auto-detects). Without any of
    /// them the options are returned unchanged.
    ///
    /// # Errors
    /// [`Error::Config`] when a variable is present but not a number, or
    /// when one variable of a pair is set without the other (`RANK` without
    /// `WORLD_SIZE`, say): running unsharded then would have every process
    /// read every batch. `SLURM_PROCID` alone is not an error: an `sbatch`
    /// script running one process itself sees it without a job step. The
    /// pairs are looked at in the order above, and the first one with
    /// either variable set decides: half of one is an error even when a
    /// later pair is complete (a stale `RANK` beside SLURM's pair, say).
    pub fn shard_from_env(self) -> Result<Self> {
        self.shard_from(|k| std::env::var(k).ok())
    }

    pub(crate) fn shard_from(mut self, var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        // (rank variable, world-size variable, whether the rank may be set
        // alone and mean "not sharded").
        const PAIRS: [(&str, &str, bool); 4] = [
            ("LOADERX_RANK", "LOADERX_WORLD_SIZE", false),
            ("RANK", "WORLD_SIZE", false),
            ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", true),
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", false),
        ];
        let half = |set: &str, missing: &str| Error::Config {
            option: "shard",
            detail: format!(
                "environment variable {set} is set but {missing} is not; set both, or neither to run unsharded"
            ),
        };
        for (rk, wk, rank_alone_ok) in PAIRS {
            match (var(rk), var(wk)) {
                (Some(r), Some(w)) => {
                    let parse = |k: &'static str, v: &str| {
                        v.trim().parse::<usize>().map_err(|_| Error::Config {
                            option: k,
                            detail: format!("environment variable {k}={v:?} is not a number"),
                        })
                    };
                    self.shard = Some((parse(rk, &r)?, parse(wk, &w)?));
                    return Ok(self);
                }
                (Some(_), None) if !rank_alone_ok => return Err(half(rk, wk)),
                (None, Some(_)) => return Err(half(wk, rk)),
                _ => {}
            }
        }
        Ok(self)
    }
}

/// One item of a loader: the value the transform made of batch `step`.
#[derive(Debug)]
pub struct Step<O> {
    /// The step the batch was drawn at.
    pub step: u64,
    /// The transform's output (a [`Batch`] for the identity transform).
    pub value: O,
}

type Transform<O> = dyn Fn(Batch) -> Result<O> + Send + Sync;
type Item<O> = (u64, Result<O>);

/// The endless, step-ordered, multi-threaded prefetch loader.
///
/// One producer thread samples a batch of indices per step and gathers every
/// stream at them (each gather is itself parallel); `workers` threads run the
/// transform; bounded channels give backpressure. At most
/// `prefetch + workers + 1` batches are in flight, and their buffers are
/// recycled. Dropping the loader stops every thread and waits for them (a
/// transform still blocked after [`CLOSE_WAIT`] is left to finish on its
/// own; [`DataLoader::close_within`] takes another limit).
///
/// The gathers run partly on rayon's global pool. A consumer may itself run
/// on a pool thread (one loader per thread of a `par_iter`, say): while it
/// waits for a batch, or for the threads on close, it runs the pool's
/// pending jobs instead of blocking the thread.
///
/// The record count `n` is fixed when the loader is built (all streams must
/// then hold `n`): records appended to a store afterwards are never sampled,
/// and an append to only one stream goes undetected. To see new records,
/// build a new loader (`start_step` continues the step count).
pub struct DataLoader<O> {
    out: Option<Receiver<Item<O>>>,
    credits: Sender<()>,
    shutdown: Option<Sender<()>>,
    threads: Vec<JoinHandle<()>>,
    /// One message per thread as it ends (sent from a drop guard, so also
    /// when it unwinds): lets a close wait with a deadline.
    exits: Receiver<()>,
    /// Set while the consumer blocks in `next()`; `hungry` wakes the
    /// producer then (see `Producer::slot`).
    waiting: Arc<AtomicBool>,
    hungry: Sender<()>,
    /// The batch pool, for [`DataLoader::slots_made`].
    slots: Arc<Pool>,
    pending: BTreeMap<u64, Result<O>>,
    next_step: u64,
    ordered: bool,
    failed: bool,
    /// Each stream's name and its length when the loader was built (the
    /// records it samples from), for `Debug`.
    lengths: Vec<(String, u64)>,
    /// The options it was built with, for `Debug`.
    options: LoaderOptions,
}

impl DataLoader<Batch> {
    /// A loader that hands out the gathered [`Batch`]es themselves.
    ///
    /// # Errors
    /// See [`DataLoader::with_transform`].
    pub fn new<N: Into<String>>(
        streams: impl IntoIterator<Item = (N, Stream)>,
        opts: LoaderOptions,
    ) -> Result<DataLoader<Batch>> {
        DataLoader::with_transform(streams, opts, Ok::<Batch, Error>)
    }
}

impl<O: Send + 'static> DataLoader<O> {
    /// A loader whose items are `transform(batch)`.
    ///
    /// # Errors
    /// [`Error::NoStreams`], [`Error::DuplicateStream`],
    /// [`Error::UnequalLengths`] (listing every stream's length),
    /// [`Error::EmptyStreams`] when they hold no records,
    /// [`Error::Config`] for a zero prefetch depth, a count past its
    /// maximum or a batch whose buffers cannot be allocated (`batch_size`,
    /// naming the stream, or the batch's indices), and [`Error::Sampler`]
    /// for a zero or oversized batch or a bad shard.
    pub fn with_transform<N, F, E>(
        streams: impl IntoIterator<Item = (N, Stream)>,
        opts: LoaderOptions,
        transform: F,
    ) -> Result<DataLoader<O>>
    where
        N: Into<String>,
        F: Fn(Batch) -> std::result::Result<O, E> + Send + Sync + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        let (names, streams): (Vec<String>, Vec<Stream>) =
            streams.into_iter().map(|(n, s)| (n.into(), s)).unzip();
        if streams.is_empty() {
            return Err(Error::NoStreams);
        }
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(Error::DuplicateStream { name: n.clone() });
            }
        }
        let lengths: Vec<(String, u64)> = names
            .iter()
            .cloned()
            .zip(streams.iter().map(Stream::len))
            .collect();
        let n = lengths[0].1;
        if lengths.iter().any(|(_, l)| *l != n) {
            return Err(Error::UnequalLengths { lengths });
        }
        if n == 0 {
            return Err(Error::EmptyStreams { lengths });
        }
        if opts.prefetch == 0 {
            return Err(Error::Config {
                option: "prefetch",
                detail: "must be at least 1".into(),
            });
        }
        if opts.start_step > MAX_START_STEP {
            return Err(Error::Config {
                option: "start_step",
                detail: format!(
                    "{} is past {MAX_START_STEP}, where step numbers would wrap",
                    opts.start_step
                ),
            });
        }
        // Each counts batch buffers (or threads): a count past these is a
        // mistake that would otherwise end in a failed allocation (an abort).
        for (option, value, max) in [
            ("prefetch", opts.prefetch, MAX_PREFETCH),
            ("workers", opts.workers, MAX_WORKERS),
        ] {
            if value > max {
                return Err(Error::Config {
                    option,
                    detail: format!("{value} is more than the {max} allowed"),
                });
            }
        }
        let mut sampler = Sampler::new(n, opts.batch_size, opts.mode, opts.seed)?;
        if let Some((rank, world)) = opts.shard {
            sampler = sampler.sharded(rank, world)?;
        }
        let layout = Arc::new(Layout { names, streams });
        // The first batch's buffers, allocated now: a batch the allocator
        // refuses is a configuration error here, not a dead producer later
        // (one it grants under overcommit but cannot back is the kernel's
        // OOM killer's, as for any allocation).
        let batch_len = sampler.batch_len();
        let mut first_slot =
            Slot::sized(&layout, batch_len).map_err(|(i, source)| Error::Config {
                option: "batch_size",
                detail: format!(
                    "a batch of {batch_len} records of stream {:?} ({}): {}",
                    layout.names[i],
                    layout.streams[i].describe(),
                    crate::error::chain(&source)
                ),
            })?;
        // The producer's index buffer and the first batch's copy of it: on a
        // loader of ragged streams only, the largest allocations a batch
        // makes up front.
        let unindexable = || Error::Config {
            option: "batch_size",
            detail: format!(
                "a batch of {batch_len} indices ({} bytes) cannot be allocated",
                batch_len as u128 * 8
            ),
        };
        let indices = index_buf(batch_len).ok_or_else(unindexable)?;
        let first_indices = index_buf(batch_len).ok_or_else(unindexable)?;

        // Every batch in flight holds one credit from the moment the producer
        // starts it until the consumer takes it; the pool starts with one slot
        // per credit. Together they bound what the loader holds whatever the
        // transform does; batches the consumer keeps (an identity transform
        // collected) are the consumer's, and the pool makes new slots for
        // them rather than wait for their return.
        let window = opts.prefetch + opts.workers + 1;
        let (credit_tx, credit_rx) = bounded::<()>(window);
        for _ in 0..window {
            credit_tx.send(()).expect("the credit channel has room");
        }
        let (token_tx, token_rx) = unbounded::<()>();
        let pool = Arc::new(Pool {
            stack: Mutex::new(Vec::with_capacity(window)),
            tokens: token_tx,
            made: std::sync::atomic::AtomicUsize::new(window),
        });
        for _ in 1..window {
            pool.put(Slot::new());
        }
        // Last in, so the producer takes it first.
        first_slot.indices = first_indices;
        pool.put(first_slot);
        let (shutdown_tx, shutdown_rx) = bounded::<()>(0);
        let (out_tx, out_rx) = bounded::<Item<O>>(opts.prefetch);

        let transform: Arc<Transform<O>> = Arc::new(move |b: Batch| {
            let step = b.step;
            transform(b).map_err(|e| {
                let source: Box<dyn std::error::Error + Send + Sync> = e.into();
                // Our own errors (e.g. from a typed view inside the
                // transform) pass through as themselves.
                match source.downcast::<Error>() {
                    Ok(own) => *own,
                    Err(source) => Error::Transform { step, source },
                }
            })
        });

        let (exit_tx, exit_rx) = unbounded::<()>();
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            let exit = ExitGuard(exit_tx.clone());
            std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    let _exit = exit;
                    f()
                })
                .map_err(Error::Thread)
        };
        let waiting = Arc::new(AtomicBool::new(false));
        let (hungry_tx, hungry_rx) = bounded::<()>(1);
        let producer = Producer {
            sampler,
            layout,
            indices,
            step: opts.start_step,
            pool,
            free: token_rx,
            credits: credit_rx,
            shutdown: shutdown_rx.clone(),
            waiting: Arc::clone(&waiting),
            hungry: hungry_rx,
        };
        let slots = Arc::clone(&producer.pool);
        let mut threads = Vec::with_capacity(opts.workers + 1);
        if opts.workers == 0 {
            threads.push(spawn(
                "loaderx-producer".into(),
                Box::new(move || {
                    producer.run(|step, item| {
                        let item = item.and_then(|b| run(&*transform, step, b));
                        out_tx.send((step, item)).is_ok()
                    })
                }),
            )?);
        } else {
            // A failed gather travels through a worker like any batch, so it
            // reaches the consumer in step order after every earlier batch.
            let (work_tx, work_rx) = bounded::<(u64, Result<Batch>)>(1);
            for w in 0..opts.workers {
                let rx = work_rx.clone();
                let out = out_tx.clone();
                let t = Arc::clone(&transform);
                let stop = shutdown_rx.clone();
                threads.push(spawn(
                    format!("loaderx-worker-{w}"),
                    Box::new(move || worker(&rx, &out, &*t, &stop)),
                )?);
            }
            drop(out_tx);
            let stop = shutdown_rx;
            threads.push(spawn(
                "loaderx-producer".into(),
                Box::new(move || {
                    producer.run(|step, item| {
                        select! {
                            send(work_tx, (step, item)) -> r => r.is_ok(),
                            recv(stop) -> _ => false,
                        }
                    })
                }),
            )?);
        }
        Ok(DataLoader {
            out: Some(out_rx),
            credits: credit_tx,
            shutdown: Some(shutdown_tx),
            threads,
            exits: exit_rx,
            waiting,
            hungry: hungry_tx,
            slots,
            pending: BTreeMap::new(),
            next_step: opts.start_step,
            ordered: opts.ordered,
            failed: false,
            lengths,
            options: opts,
        })
    }
}

/// The streams (names and the lengths sampled from), the options, the next
/// step and whether it has failed; no batch data.
impl<O> std::fmt::Debug for DataLoader<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataLoader")
            .field("streams", &self.lengths)
            .field("options", &self.options)
            .field("step", &self.next_step)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl<O> DataLoader<O> {
    /// The step of the next item [`Iterator::next`] returns (in unordered
    /// mode: the start step plus the items delivered so far).
    pub fn step(&self) -> u64 {
        self.next_step
    }

    /// Batch buffers made so far: `prefetch + workers + 1` at the start, one
    /// more for each batch the consumer kept while it waited for the next
    /// (a test hook: the pool must not grow for a consumer that drops its
    /// batches).
    #[doc(hidden)]
    pub fn slots_made(&self) -> usize {
        self.slots.made.load(Ordering::Relaxed)
    }

    /// Stops the pipeline and waits for its threads, up to [`CLOSE_WAIT`];
    /// the same as dropping it.
    pub fn close(self) {}

    /// Stops the pipeline and waits up to `limit` for its threads. Returns
    /// whether every thread ended; a transform still running past the limit
    /// finishes on its own (its result dropped), holding its batch and the
    /// stores until then. Called from the loader's own transform (a
    /// transform that owns the loader), the calling thread is not waited
    /// for: it ends when that transform returns. A limit too long to add to
    /// the clock (`Duration::MAX`) waits as long as the threads take.
    pub fn close_within(mut self, limit: Duration) -> bool {
        self.stop_within(limit)
    }

    fn deliver(&mut self, step: u64, item: Result<O>) -> Option<Result<Step<O>>> {
        self.next_step += 1;
        // The batch has left the pipeline: let the producer start another.
        let _ = self.credits.try_send(());
        match item {
            Ok(value) => Some(Ok(Step { step, value })),
            Err(e) => {
                // The error goes out at once: another worker may sit in a
                // slow transform, which close or drop waits for (up to
                // CLOSE_WAIT), not the report of the failure.
                self.failed = true;
                self.signal_stop();
                Some(Err(e))
            }
        }
    }

    fn stop(&mut self) {
        self.stop_within(CLOSE_WAIT);
    }

    /// Tells every thread to end, without waiting. Disconnecting these wakes
    /// each wherever it waits: the producer on credits, the pool or the work
    /// queue (shutdown), the workers on the work queue (shutdown) or on a
    /// full output queue (its receiver is gone). Only a transform that does
    /// not return keeps its thread.
    fn signal_stop(&mut self) {
        self.shutdown.take();
        self.out.take();
        self.pending.clear();
    }

    fn stop_within(&mut self, limit: Duration) -> bool {
        self.signal_stop();
        // Called on one of the pipeline's own threads (a transform that
        // held the loader's last handle), that thread cannot end while it
        // waits here: leave it out (detached), and it ends as soon as its
        // transform returns, its output having nowhere to go.
        let me = std::thread::current().id();
        self.threads.retain(|t| t.thread().id() != me);
        // A limit past what an `Instant` can hold (`Duration::MAX`, say)
        // is no limit: wait as long as it takes.
        let deadline = Instant::now().checked_add(limit);
        let mut running = self.threads.len();
        while running > 0 && recv_helping(&self.exits, deadline).is_ok() {
            running -= 1;
        }
        for t in self.threads.drain(..) {
            // A thread whose guard has reported is ending: join it. One
            // still in its transform is detached instead of blocking here.
            if running == 0 || t.is_finished() {
                let _ = t.join();
            }
        }
        running == 0
    }
}

/// Endless: `next()` returns `None` only after it has returned an error.
impl<O> Iterator for DataLoader<O> {
    type Item = Result<Step<O>>;

    fn next(&mut self) -> Option<Result<Step<O>>> {
        if self.failed {
            return None;
        }
        loop {
            if self.ordered
                && let Some(item) = self.pending.remove(&self.next_step)
            {
                let step = self.next_step;
                return self.deliver(step, item);
            }
            let out = self.out.as_ref()?;
            let received = match out.try_recv() {
                Ok(item) => Some(item),
                Err(TryRecvError::Disconnected) => None,
                Err(TryRecvError::Empty) => {
                    // About to block: if the producer waits for a batch slot
                    // meanwhile, they are all in the batches this consumer
                    // keeps, and it makes a new one.
                    self.waiting.store(true, Ordering::Release);
                    let _ = self.hungry.try_send(());
                    let r = recv_helping(out, None).ok();
                    self.waiting.store(false, Ordering::Release);
                    r
                }
            };
            match received {
                Some((step, item)) if !self.ordered => return self.deliver(step, item),
                Some((step, item)) => {
                    self.pending.insert(step, item);
                }
                None => {
                    // Every thread is gone without reporting an error: one
                    // died outside the transform (a panic in a gather).
                    self.failed = true;
                    self.stop();
                    return Some(Err(Error::PipelineDied {
                        step: self.next_step,
                    }));
                }
            }
        }
    }
}

/// How long a waiting consumer on a rayon pool thread blocks before it
/// looks for pool work again (see [`recv_helping`]).
const HELP_POLL: Duration = Duration::from_micros(100);

/// Receives from `rx`, waiting until `deadline` (`None`: for as long as it
/// takes). On a thread of a rayon pool, it runs that pool's pending jobs
/// while it waits: the producer's gathers hand part of their work to rayon's
/// global pool and wait for it, so a consumer that blocked a pool thread
/// outright, with every other pool thread blocked the same way (one loader
/// per thread of a `par_iter`), would wait for itself for good.
fn recv_helping<T>(
    rx: &Receiver<T>,
    deadline: Option<Instant>,
) -> std::result::Result<T, RecvTimeoutError> {
    if rayon::current_thread_index().is_none() {
        return match deadline {
            Some(d) => rx.recv_deadline(d),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
    }
    loop {
        // After running a job, only check for a message; when the pool had
        // nothing to run, wait a little before looking again.
        let pause = match rayon::yield_now() {
            Some(rayon::Yield::Executed) => Duration::ZERO,
            _ => HELP_POLL,
        };
        let now = Instant::now();
        let until = deadline.map_or(now + pause, |d| d.min(now + pause));
        // `recv_deadline` takes a ready message even past its deadline.
        match rx.recv_deadline(until) {
            Err(RecvTimeoutError::Timeout) if deadline.is_none_or(|d| until < d) => {}
            r => return r,
        }
    }
}

impl<O> Drop for DataLoader<O> {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Producer {
    sampler: Sampler,
    layout: Arc<Layout>,
    /// The sampler's output buffer, `batch_len()` long.
    indices: Vec<u64>,
    step: u64,
    pool: Arc<Pool>,
    /// One token per free slot in `pool`.
    free: Receiver<()>,
    credits: Receiver<()>,
    shutdown: Receiver<()>,
    /// The consumer blocks in `next()` (with `hungry` as its wake-up).
    waiting: Arc<AtomicBool>,
    hungry: Receiver<()>,
}

/// Reports its thread's end when dropped, unwinding included.
struct ExitGuard(Sender<()>);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

impl Producer {
    /// A free batch slot, or a new one when the consumer blocks waiting for
    /// a batch while none is free: every slot is then in a batch it keeps
    /// (with credits in hand, the pipeline holds fewer than the pool made),
    /// so waiting would stall for good. `None` on shutdown.
    fn slot(&self) -> Option<Slot> {
        loop {
            select! {
                recv(self.free) -> t => {
                    t.ok()?;
                    // Every token stands for a slot on the stack.
                    return self.pool.take();
                },
                recv(self.shutdown) -> _ => return None,
                recv(self.hungry) -> h => {
                    h.ok()?;
                    // `select!` picks among ready channels at random: a free
                    // slot that is ready too goes first.
                    if self.free.try_recv().is_ok() {
                        return self.pool.take();
                    }
                    if self.waiting.load(Ordering::Acquire) {
                        self.pool.made.fetch_add(1, Ordering::Relaxed);
                        return Some(Slot::new());
                    }
                    // A stale wake-up: the consumer got a batch since.
                },
            }
        }
    }

    /// Produces batches from `self.step` on until `emit` returns false, a
    /// gather fails (after emitting the error) or the loader shuts down.
    fn run(mut self, mut emit: impl FnMut(u64, Result<Batch>) -> bool) {
        let mut indices = std::mem::take(&mut self.indices);
        loop {
            select! {
                recv(self.credits) -> c => if c.is_err() { return },
                recv(self.shutdown) -> _ => return,
            }
            let Some(mut slot) = self.slot() else { return };
            let step = self.step;
            let item = match self.sampler.batch_at(step, &mut indices) {
                Ok(len) => slot.fill(&self.layout, &indices[..len], step),
                Err(e) => Err(Error::Sampler(e)),
            };
            let batch = Batch {
                step,
                slot: Some(slot),
                layout: Arc::clone(&self.layout),
                pool: Arc::clone(&self.pool),
            };
            let item = item.map(|()| batch);
            let failed = item.is_err();
            if !emit(step, item) || failed {
                return;
            }
            self.step += 1;
        }
    }
}

/// `len` zeroed indices, or `None` when the allocator refuses them (where
/// `vec!` would abort the process).
fn index_buf(len: usize) -> Option<Vec<u64>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    v.resize(len, 0);
    Some(v)
}

fn run<O>(transform: &Transform<O>, step: u64, batch: Batch) -> Result<O> {
    match catch_unwind(AssertUnwindSafe(|| transform(batch))) {
        Ok(r) => r,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".into());
            // A payload whose own drop panics would unwind this thread here,
            // outside the transform: its step would never come (an ordered
            // consumer waiting for it for good while other workers live).
            // Drop it under `catch_unwind` too, and leak what that throws.
            if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
                std::mem::forget(again);
            }
            Err(Error::TransformPanicked { step, message })
        }
    }
}

fn worker<O>(
    work: &Receiver<(u64, Result<Batch>)>,
    out: &Sender<Item<O>>,
    transform: &Transform<O>,
    stop: &Receiver<()>,
) {
    loop {
        let (step, item) = select! {
            recv(work) -> w => match w { Ok(w) => w, Err(_) => return },
            recv(stop) -> _ => return,
        };
        let item = item.and_then(|b| run(transform, step, b));
        if out.send((step, item)).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_gone_without_an_error_end_the_loader_with_one() {
        // What a panic outside the transform leaves: every sender dropped.
        let (out_tx, out_rx) = bounded::<Item<u8>>(1);
        let (credits, _credit_rx) = bounded::<()>(4);
        let (exit_tx, exits) = unbounded::<()>();
        let (hungry, _hungry_rx) = bounded::<()>(1);
        drop((out_tx, exit_tx));
        let mut loader = DataLoader {
            out: Some(out_rx),
            credits,
            shutdown: None,
            threads: Vec::new(),
            exits,
            waiting: Arc::new(AtomicBool::new(false)),
            hungry,
            slots: Arc::new(Pool {
                stack: Mutex::new(Vec::new()),
                tokens: unbounded().0,
                made: std::sync::atomic::AtomicUsize::new(0),
            }),
            pending: BTreeMap::new(),
            next_step: 5,
            ordered: true,
            failed: false,
            lengths: Vec::new(),
            options: LoaderOptions::default(),
        };
        match loader.next() {
            Some(Err(Error::PipelineDied { step: 5 })) => {}
            other => panic!("expected PipelineDied, got {other:?}"),
        }
        assert!(loader.next().is_none());
    }

    /// An environment holding just `pairs`, for `shard_from`.
    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k: &str| {
            pairs
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn shard_from_env_prefers_loaderx_then_torchrun_variables() {
        let o = LoaderOptions::default();
        assert_eq!(o.clone().shard_from(env(&[])).unwrap().shard, None);
        let got = o
            .clone()
            .shard_from(env(&[("RANK", "3"), ("WORLD_SIZE", "8")]))
            .unwrap();
        assert_eq!(got.shard, Some((3, 8)));
        let got = o
            .clone()
            .shard_from(env(&[
                ("RANK", "3"),
                ("WORLD_SIZE", "8"),
                ("LOADERX_RANK", "1"),
                ("LOADERX_WORLD_SIZE", "2"),
            ]))
            .unwrap();
        assert_eq!(got.shard, Some((1, 2)));
        // What an `sbatch --ntasks=4` script sees when it runs one process
        // itself: not a shard (that process must read every batch).
        let got = o
            .clone()
            .shard_from(env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")]))
            .unwrap();
        assert_eq!(got.shard, None);
        // A task of `srun -n 4`.
        let got = o
            .clone()
            .shard_from(env(&[
                ("SLURM_PROCID", "2"),
                ("SLURM_NTASKS", "4"),
                ("SLURM_STEP_NUM_TASKS", "4"),
            ]))
            .unwrap();
        assert_eq!(got.shard, Some((2, 4)));
        let err = o
            .shard_from(env(&[("RANK", "x"), ("WORLD_SIZE", "2")]))
            .unwrap_err();
        assert!(err.to_string().contains("RANK"), "{err}");
    }

    /// Regression: `RANK` without `WORLD_SIZE` (or the reverse) ran
    /// unsharded without a word, so every process read every batch.
    #[test]
    fn shard_from_env_refuses_half_a_pair_naming_both_variables() {
        for (pairs, set, missing) in [
            (&[("RANK", "1")][..], "RANK", "WORLD_SIZE"),
            (&[("WORLD_SIZE", "4")][..], "WORLD_SIZE", "RANK"),
            (
                &[("LOADERX_RANK", "0"), ("RANK", "1"), ("WORLD_SIZE", "2")][..],
                "LOADERX_RANK",
                "LOADERX_WORLD_SIZE",
            ),
            (
                &[("SLURM_STEP_NUM_TASKS", "4")][..],
                "SLURM_STEP_NUM_TASKS",
                "SLURM_PROCID",
            ),
            (
                &[("OMPI_COMM_WORLD_RANK", "3")][..],
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
            ),
        ] {
            match LoaderOptions::default().shard_from(env(pairs)) {
                Err(
                    e @ Error::Config {
                        option: "shard", ..
                    },
                ) => {
                    let m = e.to_string();
                    assert!(
                        m.contains(&format!("{set} is set but {missing} is not")),
                        "{m}"
                    );
                }
                other => panic!("{pairs:?}: {other:?}"),
            }
        }
    }
}
