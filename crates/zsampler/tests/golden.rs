//! Guards determinism across runs, platforms and releases: a checkpoint
//! records only `(seed, step)`, so any change to the generator, the Feistel
//! network, the Lemire reduction or the step-to-position arithmetic would
//! silently change which records a resumed run reads. These vectors were
//! produced by this implementation and must never change without a version
//! note in docs/sampler.md.

use zsampler::{CounterRng, Mode, Sampler};

type Golden = (Mode, u64, usize, u64, u64, &'static [u64]);

const GOLDEN: &[Golden] = &[
    (Mode::Sequential, 10, 4, 42, 2, &[8, 9, 0, 1]),
    (
        Mode::Iid,
        1_000_003,
        8,
        42,
        0,
        &[292346, 475978, 9992, 289225, 382268, 810706, 528874, 156224],
    ),
    (
        Mode::Iid,
        1_000_003,
        8,
        42,
        123_456_789,
        &[
            713520, 401458, 479531, 847717, 910797, 850613, 427796, 977081,
        ],
    ),
    (
        Mode::Iid,
        (1 << 63) + 5,
        4,
        7,
        3,
        &[
            4690499190377345872,
            782263057080787420,
            3255846727430993476,
            4709933306372702278,
        ],
    ),
    (Mode::Cyclic, 10, 4, 42, 0, &[9, 0, 8, 1]),
    (Mode::Cyclic, 10, 4, 42, 2, &[1, 0, 7, 9]),
    (Mode::Cyclic, 3, 4, 42, 5, &[0, 1, 2]),
    (
        Mode::Cyclic,
        1_000_003,
        8,
        42,
        999_999,
        &[
            638928, 319559, 321613, 768831, 302249, 160200, 214596, 340556,
        ],
    ),
    (
        Mode::Cyclic,
        (1 << 63) - 1,
        4,
        9,
        u64::MAX,
        &[
            9071266924538024803,
            5833152872751120984,
            4643771831358602952,
            4299357729285625343,
        ],
    ),
];

#[test]
fn batches_match_the_golden_vectors() {
    for &(mode, n, batch, seed, step, expect) in GOLDEN {
        let s = Sampler::new(n, batch, mode, seed).unwrap();
        assert_eq!(
            s.batch(step),
            expect,
            "{mode:?} n={n} B={batch} seed={seed} step={step}"
        );
    }
}

#[test]
fn shards_of_golden_batches_are_their_slices() {
    for &(mode, n, batch, seed, step, expect) in GOLDEN {
        if expect.len() < 2 {
            continue;
        }
        let s = Sampler::new(n, batch, mode, seed)
            .unwrap()
            .sharded(1, 2)
            .unwrap();
        assert_eq!(s.batch(step), expect[expect.len() / 2..], "{mode:?} n={n}");
    }
}

#[test]
fn counter_rng_words_match_the_golden_vector() {
    let r = CounterRng::new(42);
    let words: Vec<u64> = (0..4).map(|d| r.word_at(d)).collect();
    assert_eq!(
        words,
        [
            0x4ad72b776a51dc55,
            0x79d99a73d9832574,
            0x028ed80167da5d52,
            0x4a0a9ef053469b22
        ]
    );
}
