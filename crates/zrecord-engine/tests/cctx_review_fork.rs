//! Review probe: pooled compression contexts across `fork()`. A forked
//! child cannot append through a handle it inherited (refused before any
//! compression, so it never takes the parent's pooled contexts, nor
//! waits on a pool lock a parent thread held at fork time); through a
//! handle of its own it compresses inline, small and big batches alike,
//! into the frames a brand-new compressor writes.

mod common;
use common::*;
use zrecord_engine::{Codec, Engine, EngineConfig, ReadPath};

fn append_batch(e: &Engine, recs: &[Vec<u8>]) -> zrecord_engine::Result<u64> {
    let mut off = vec![0];
    for r in recs {
        off.push(off.last().unwrap() + r.len());
    }
    e.append_var(&recs.concat(), &off)
}

#[cfg(unix)]
#[test]
fn a_forked_child_writes_brand_new_frames_only_through_its_own_handle() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a");
    let cfg = EngineConfig {
        chunk_capacity: 1 << 30,
        read_path: ReadPath::Pread,
        ..EngineConfig::default()
    };
    let opts = options(Codec::ZstdDict);
    let dict = opts.dictionary.clone().unwrap();
    let level = Codec::ZstdDict.default_level();
    let a = Engine::create_with(&p, &opts, cfg.clone()).unwrap();
    // Small (inline) and big (pool) batches: the pool holds contexts, and
    // the parent's rayon pool is started.
    let recs: Vec<Vec<u8>> = (0..200).map(|i| record(i, 3000)).collect();
    append_batch(&a, &recs).unwrap();
    append_batch(&a, &recs[..1]).unwrap();
    a.sync().unwrap();
    assert!(zrecord_engine::pool_usable());
    let mine: Vec<Vec<u8>> = (0..150).map(|i| record(10_000 + i, 2500)).collect();

    let child = || -> i32 {
        // SAFETY: plain libc call in the child; a hang ends with SIGALRM.
        unsafe { libc::alarm(60) };
        if append_batch(&a, &mine[..1]).is_ok() {
            return 2; // an inherited handle must refuse writes
        }
        let q = dir.path().join("b");
        let Ok(b) = Engine::create_with(&q, &opts, cfg.clone()) else {
            return 5;
        };
        if append_batch(&b, &mine[..1]).is_err() || append_batch(&b, &mine[1..]).is_err() {
            return 6;
        }
        if b.sync().is_err() {
            return 3;
        }
        let chunk = std::fs::read(q.join("0.chunk")).unwrap();
        let prepared = zstd::dict::EncoderDictionary::copy(&dict, level);
        let want: Vec<u8> = mine
            .iter()
            .flat_map(|r| {
                zstd::bulk::Compressor::with_prepared_dictionary(&prepared)
                    .unwrap()
                    .compress(r)
                    .unwrap()
            })
            .collect();
        if chunk != want {
            return 4;
        }
        0
    };
    assert_eq!(exit_code_of_fork(child), 0, "the child's appends");
    // The parent's handle still appends.
    append_batch(&a, &recs[..3]).unwrap();
    assert_eq!(a.len(), 204);
}
