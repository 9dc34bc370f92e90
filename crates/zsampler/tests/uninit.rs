//! `batch_at_uninit` / `next_into_uninit` (the fills into uninitialised
//! memory a binding uses for fresh arrays) against `batch_at` / `next_into`:
//! exactly the same values in every mode, sharded or not, every element of
//! the batch written, nothing past it touched, nothing written on error.
//!
//! The buffers start filled with distinct sentinels (a `MaybeUninit` one made
//! with `MaybeUninit::new`), so reading them back is sound whatever the fill
//! did, and an element a fill skipped shows up as its sentinel.

use proptest::prelude::*;
use std::mem::MaybeUninit;
use zsampler::{Error, Mode, Sampler};

/// Sentinels: the `&mut [u64]` buffer starts at `INIT`, the `MaybeUninit`
/// one at `UNINIT`, so an element left unwritten by either fill differs.
const INIT: u64 = u64::MAX;
const UNINIT: u64 = u64::MAX - 1;
/// Extra elements past the batch, which neither fill may touch.
const SLACK: usize = 3;

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Sequential), Just(Mode::Iid), Just(Mode::Cyclic)]
}

fn n() -> impl Strategy<Value = u64> {
    prop_oneof![
        1u64..300,
        1u64..2_000_000,
        1u64..=u64::MAX,
        (1u64 << 62)..=(1u64 << 63)
    ]
}

/// Reads back a buffer every element of which was initialised when made.
fn read(buf: &[MaybeUninit<u64>]) -> Vec<u64> {
    // SAFETY: every element was made with `MaybeUninit::new` (see `uninit`),
    // and a fill only ever writes initialised values over them.
    buf.iter().map(|x| unsafe { x.assume_init() }).collect()
}

fn uninit(len: usize) -> Vec<MaybeUninit<u64>> {
    vec![MaybeUninit::new(UNINIT); len]
}

/// A sampler from the strategy's values; `shard` picks rank and world (kept
/// within the batch).
fn sampler(n: u64, batch: usize, mode: Mode, seed: u64, shard: (usize, usize)) -> Sampler {
    let s = Sampler::new(n, batch, mode, seed).unwrap();
    let world = shard.1.min(s.global_batch_len());
    s.sharded(shard.0 % world, world).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn uninit_fill_equals_the_u64_fill(
        n in n(), batch in 1usize..600, mode in mode(), seed: u64, step: u64,
        shard in (0usize..16, 1usize..=16),
    ) {
        let s = sampler(n, batch, mode, seed, shard);
        let len = s.batch_len();
        let mut a = vec![INIT; len + SLACK];
        let mut b = uninit(len + SLACK);
        prop_assert_eq!(s.batch_at(step, &mut a), Ok(len));
        prop_assert_eq!(s.batch_at_uninit(step, &mut b), Ok(len));
        let b = read(&b);
        prop_assert_eq!(&a[..len], &b[..len]);
        prop_assert!(b[..len].iter().all(|&i| i < n));
        prop_assert!(a[len..].iter().all(|&x| x == INIT));
        prop_assert!(b[len..].iter().all(|&x| x == UNINIT));
    }

    #[test]
    fn uninit_cursor_equals_the_u64_cursor(
        n in n(), batch in 1usize..600, mode in mode(), seed: u64, step: u64,
        shard in (0usize..16, 1usize..=16),
    ) {
        let mut s = sampler(n, batch, mode, seed, shard);
        s.seek(step);
        let mut t = s.clone();
        let len = s.batch_len();
        for k in 0..3u64 {
            let mut a = vec![INIT; len];
            let mut b = uninit(len);
            prop_assert_eq!(s.next_into(&mut a), Ok(len));
            prop_assert_eq!(t.next_into_uninit(&mut b), Ok(len));
            prop_assert_eq!(&a, &read(&b));
            prop_assert_eq!(t.step(), step.wrapping_add(k + 1));
        }
    }
}

/// The large batches the Python binding draws (and the 16-lane blocks of the
/// cyclic fill with a remainder), at the n the benchmarks use.
#[test]
fn uninit_fill_equals_the_u64_fill_at_bench_sizes() {
    for mode in [Mode::Sequential, Mode::Iid, Mode::Cyclic] {
        for batch in [256, 1024, 8192, 8191] {
            let s = Sampler::new(1_000_003, batch, mode, 42).unwrap();
            for step in [0, 1, 121, u64::MAX] {
                let mut a = vec![INIT; batch];
                let mut b = uninit(batch);
                s.batch_at(step, &mut a).unwrap();
                s.batch_at_uninit(step, &mut b).unwrap();
                assert_eq!(a, read(&b), "{mode:?} B={batch} step={step}");
            }
        }
    }
}

#[test]
fn short_uninit_buffer_is_an_error_and_nothing_moves() {
    let mut s = Sampler::new(10, 4, Mode::Cyclic, 1).unwrap();
    let mut b = uninit(3);
    assert_eq!(
        s.next_into_uninit(&mut b),
        Err(Error::BufferTooSmall { needed: 4, got: 3 })
    );
    assert_eq!(s.step(), 0);
    assert_eq!(read(&b), [UNINIT; 3]);
    assert_eq!(
        s.batch_at_uninit(0, &mut b),
        Err(Error::BufferTooSmall { needed: 4, got: 3 })
    );
}
