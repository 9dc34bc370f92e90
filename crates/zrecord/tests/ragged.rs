//! Ragged stores: guards against records coming back with the wrong shape
//! (scalars, rank-4, non-contiguous inputs), empty or mis-sized records being
//! stored instead of rejected with their position, a shape record that
//! disagrees with its payload being read as data instead of reported as
//! corruption of that index, deletes that split a payload from its shape,
//! and index forms that resolve differently from NumPy.

use ndarray::{Array, ArrayD, IxDyn, arr0, s};
use zrecord::{
    Codec, CreateOptions, DType, Error, Indices, OpenOptions, RaggedBatch, RaggedCore, RaggedStore,
};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn records() -> Vec<ArrayD<f32>> {
    vec![
        arr0(1.5f32).into_dyn(),
        Array::from_shape_fn(5, |i| i as f32).into_dyn(),
        Array::from_shape_fn((2, 3), |(i, j)| (i * 10 + j) as f32).into_dyn(),
        Array::from_shape_fn((2, 1, 3, 2), |(a, b, c, d)| {
            (a * 1000 + b * 100 + c * 10 + d) as f32
        })
        .into_dyn(),
        arr0(-3.0f32).into_dyn(),
    ]
}

#[test]
fn shapes_of_every_rank_round_trip_through_reopen() {
    let dir = tmp();
    for codec in [Codec::Raw, Codec::Zstd] {
        let path = dir.path().join(codec.name());
        let recs = records();
        {
            let s = RaggedStore::<f32>::create(&path, &CreateOptions::new(codec)).unwrap();
            assert_eq!(s.append(recs[..2].iter().map(|a| a.view())).unwrap(), 0);
            assert_eq!(s.append(recs[2..].iter().map(|a| a.view())).unwrap(), 2);
            s.sync().unwrap();
        }
        let s = RaggedStore::<f32>::open_with(&path, &OpenOptions::read_only()).unwrap();
        assert_eq!(s.len(), 5);
        assert_eq!(s.gather(..).unwrap(), recs);
        assert_eq!(s.get(0).unwrap().shape(), &[] as &[usize]);
        assert_eq!(s.get(3).unwrap().shape(), &[2, 1, 3, 2]);
        assert_eq!(s.get(-1).unwrap(), recs[4]);
        assert_eq!(s.stats().records, 5);
    }
}

#[test]
fn non_contiguous_views_are_stored_in_c_order() {
    let dir = tmp();
    let s =
        RaggedStore::<i16>::create(dir.path().join("t"), &CreateOptions::new(Codec::Raw)).unwrap();
    let a = Array::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as i16);
    let t = a.t();
    let every_other = a.slice(s![.., ..;2]);
    s.append([t.into_dyn(), every_other.into_dyn()]).unwrap();
    let got = s.gather(..).unwrap();
    assert_eq!(got[0], t.into_dyn());
    assert_eq!(got[1], every_other.into_dyn());
}

#[test]
fn empty_and_mis_sized_records_are_rejected_with_their_position() {
    let dir = tmp();
    let s =
        RaggedStore::<f32>::create(dir.path().join("e"), &CreateOptions::new(Codec::Zstd)).unwrap();
    let ok = Array::<f32, _>::zeros(3).into_dyn();
    let empty = Array::<f32, _>::zeros((2, 0)).into_dyn();
    match s.append([ok.view(), ok.view(), empty.view()]) {
        Err(Error::EmptyRecord { position: 2 }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(s.len(), 0, "nothing of a refused batch lands");
    let nothing: [ndarray::ArrayViewD<'_, f32>; 0] = [];
    assert!(s.append(nothing).is_err());
    let core = s.core();
    match core.append_records([
        (&[3u64][..], &[0u8; 12][..]),
        (&[2u64, 2][..], &[0u8; 12][..]),
    ]) {
        Err(Error::RecordSize {
            position: 1,
            expected: Some(16),
            found: 12,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    match core.append_records([(&[u64::MAX, 4][..], &[0u8; 4][..])]) {
        Err(Error::RecordSize {
            position: 0,
            expected: None,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        core.append_records([(&[0u64][..], &[][..])]),
        Err(Error::EmptyRecord { position: 0 })
    ));
    assert_eq!(s.len(), 0);
}

#[test]
fn byte_records_for_u8_stores_only() {
    let dir = tmp();
    let s =
        RaggedStore::<u8>::create(dir.path().join("b"), &CreateOptions::new(Codec::Zstd)).unwrap();
    let texts: [&[u8]; 3] = [b"hello", b"\x89PNG\r\n\x1a\n...", b"x"];
    s.append_bytes(texts).unwrap();
    let got = s.gather(..).unwrap();
    for (g, t) in got.iter().zip(texts) {
        assert_eq!(g.shape(), &[t.len()]);
        assert_eq!(g.as_slice().unwrap(), t);
    }
    assert!(matches!(
        s.append_bytes([&b""[..]]),
        Err(Error::EmptyRecord { position: 0 })
    ));
    let f = RaggedCore::create(
        dir.path().join("f"),
        &DType::parse("<f4").unwrap(),
        &CreateOptions::new(Codec::Raw),
    )
    .unwrap();
    let e = f.append_bytes([&b"abcd"[..]]).unwrap_err();
    assert!(
        e.to_string().contains("<f4") && e.to_string().contains("|u1"),
        "{e}"
    );
}

#[test]
fn gather_into_reuses_a_batch_and_views_without_copying() {
    let dir = tmp();
    let s =
        RaggedStore::<f64>::create(dir.path().join("v"), &CreateOptions::new(Codec::Zstd)).unwrap();
    let recs: Vec<ArrayD<f64>> = (1..=20)
        .map(|n| Array::from_shape_fn(n, |i| (n * 100 + i) as f64).into_dyn())
        .collect();
    s.append(recs.iter().map(|a| a.view())).unwrap();
    let mut batch = RaggedBatch::new();
    for idx in [vec![19u64, 0, 7], vec![3], vec![], vec![5, 5, 18, 1]] {
        s.gather_into(&idx, &mut batch).unwrap();
        assert_eq!(batch.len(), idx.len());
        assert_eq!(batch.data().as_ptr() as usize % 8, 0);
        for (k, &i) in idx.iter().enumerate() {
            assert_eq!(batch.view::<f64>(k).unwrap(), recs[i as usize].view());
            assert_eq!(batch.shape(k), &[i + 1]);
            assert_eq!(batch.bytes(k).len(), (i as usize + 1) * 8);
        }
        assert_eq!(*batch.offsets().last().unwrap(), batch.data().len());
    }
    assert!(batch.view::<f32>(0).is_err());
    assert!(matches!(
        s.gather_into(&[20], &mut batch),
        Err(Error::IndexOutOfRange {
            index: 20,
            len: 20,
            ..
        })
    ));
}

#[test]
fn every_index_form_and_out_of_range() {
    let dir = tmp();
    let s =
        RaggedStore::<i32>::create(dir.path().join("i"), &CreateOptions::new(Codec::Raw)).unwrap();
    let recs: Vec<ArrayD<i32>> = (0..6)
        .map(|n| Array::from_elem(n + 1, n as i32).into_dyn())
        .collect();
    s.append(recs.iter().map(|a| a.view())).unwrap();
    let firsts =
        |idx: Indices<'_>| -> Vec<i32> { s.gather(idx).unwrap().iter().map(|a| a[[0]]).collect() };
    assert_eq!(firsts(Indices::One(-6)), vec![0]);
    assert_eq!(firsts(Indices::range(Some(-1), None, -2)), vec![5, 3, 1]);
    assert_eq!(firsts(Indices::List(&[-1, 0, -1])), vec![5, 0, 5]);
    assert_eq!(
        firsts(Indices::Mask(&[false, true, false, false, true, false])),
        vec![1, 4]
    );
    assert_eq!(firsts((1..3).into()), vec![1, 2]);
    for bad in [6i64, -7] {
        assert!(matches!(
            s.get(bad),
            Err(Error::IndexOutOfRange { len: 6, .. })
        ));
    }
}

#[test]
fn delete_moves_payload_and_shape_together() {
    let dir = tmp();
    let path = dir.path().join("d");
    let mut s = RaggedStore::<u16>::create(&path, &CreateOptions::new(Codec::Zstd)).unwrap();
    let recs: Vec<ArrayD<u16>> = (0..10)
        .map(|n| Array::from_elem(IxDyn(&vec![2; n % 4]), n as u16).into_dyn())
        .collect();
    s.append(recs.iter().map(|a| a.view())).unwrap();
    s.delete(Indices::List(&[0, 3, 3, -1])).unwrap();
    assert_eq!(s.len(), 7);
    s.compact().unwrap();
    drop(s);
    let s = RaggedStore::<u16>::open(&path).unwrap();
    let mut got: Vec<(u16, Vec<usize>)> = s
        .gather(..)
        .unwrap()
        .into_iter()
        .map(|a| (*a.iter().next().unwrap(), a.shape().to_vec()))
        .collect();
    got.sort();
    let want: Vec<(u16, Vec<usize>)> = [1u16, 2, 4, 5, 6, 7, 8]
        .iter()
        .map(|&n| (n, vec![2; n as usize % 4]))
        .collect();
    assert_eq!(got, want);
}

/// Rewrites the shape record of logical record `i` in a raw store (found by
/// scanning the chunk for the exact bytes) to `new`, which must be the same
/// length.
fn overwrite_shape(path: &std::path::Path, old: &[u8], new: &[u8]) {
    let chunk = path.join("0.chunk");
    let mut bytes = std::fs::read(&chunk).unwrap();
    let at = bytes
        .windows(old.len())
        .position(|w| w == old)
        .expect("shape record present");
    bytes[at..at + new.len()].copy_from_slice(new);
    std::fs::write(&chunk, bytes).unwrap();
}

fn shape_record(dims: &[u64]) -> Vec<u8> {
    let mut v = (dims.len() as u64).to_le_bytes().to_vec();
    for d in dims {
        v.extend_from_slice(&d.to_le_bytes());
    }
    v
}

#[test]
fn a_shape_that_disagrees_with_its_payload_is_corruption_naming_the_index() {
    let dir = tmp();
    let path = dir.path().join("c");
    {
        let s = RaggedStore::<u8>::create(&path, &CreateOptions::new(Codec::Raw)).unwrap();
        s.append_bytes([&[1u8; 16][..], &[2u8; 77][..], &[3u8; 5][..]])
            .unwrap();
        s.sync().unwrap();
    }
    // Record 1's shape [77] becomes [78]: the payload is 77 bytes.
    overwrite_shape(&path, &shape_record(&[77]), &shape_record(&[78]));
    let s = RaggedStore::<u8>::open(&path).unwrap();
    assert_eq!(s.get(0).unwrap().len(), 16);
    match s.gather(&[0i64, 1][..]) {
        Err(Error::Corrupted { index: 1, .. }) => {}
        other => panic!("{other:?}"),
    }
    drop(s);
    // A rank that disagrees with the record's length.
    overwrite_shape(&path, &shape_record(&[5]), &[2, 0, 0, 0, 0, 0, 0, 0]);
    let s = RaggedStore::<u8>::open(&path).unwrap();
    match s.get(2) {
        Err(e @ Error::Corrupted { index: 2, .. }) => {
            assert!(e.to_string().contains("rank"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

/// Regression: a gather that failed at its second record left the batch
/// half-filled (two offsets, no payload), so `bytes(0)` panicked. A failed
/// gather must leave the batch as `RaggedBatch::new()` makes it.
#[test]
fn a_failed_gather_leaves_the_batch_empty_not_half_filled() {
    let dir = tmp();
    let path = dir.path().join("h");
    {
        let s = RaggedStore::<u8>::create(&path, &CreateOptions::new(Codec::Raw)).unwrap();
        s.append_bytes([&[1u8; 16][..], &[2u8; 77][..]]).unwrap();
        s.sync().unwrap();
    }
    overwrite_shape(&path, &shape_record(&[77]), &shape_record(&[78]));
    let s = RaggedStore::<u8>::open(&path).unwrap();
    let mut batch = RaggedBatch::new();
    s.gather_into(&[0], &mut batch).unwrap();
    assert_eq!(batch.len(), 1);
    for bad in [&[0u64, 1][..], &[0, 9][..]] {
        assert!(s.gather_into(bad, &mut batch).is_err());
        assert_eq!(batch.len(), 0, "{bad:?}");
        assert_eq!(batch.offsets(), &[0]);
        assert_eq!(batch.dim_offsets(), &[0]);
        assert!(batch.data().is_empty() && batch.dims().is_empty());
        assert_eq!(batch.dtype(), None);
        // Refills as usual afterwards.
        s.gather_into(&[0, 0], &mut batch).unwrap();
        assert_eq!(batch.bytes(1), &[1u8; 16]);
    }
}

/// Regression: `RaggedBatch::default()` had `offsets() == []`, while
/// `new()` has `[0]` and the docs promise `len() + 1` entries.
#[test]
fn a_default_batch_is_a_new_batch() {
    let d = RaggedBatch::default();
    assert_eq!(d.offsets(), RaggedBatch::new().offsets());
    assert_eq!(d.offsets(), &[0]);
    assert_eq!(d.dim_offsets(), &[0]);
    assert_eq!((d.len(), d.dtype()), (0, None));
}

/// Regression (audit f11): a shape whose byte count overflows printed
/// "needs None bytes".
#[test]
fn a_stored_shape_that_overflows_says_so_in_words() {
    let dir = tmp();
    let path = dir.path().join("o");
    {
        let s = RaggedStore::<f32>::create(&path, &CreateOptions::new(Codec::Raw)).unwrap();
        s.append([Array::from_elem(4, 1f32).into_dyn().view()])
            .unwrap();
        s.sync().unwrap();
    }
    overwrite_shape(&path, &shape_record(&[4]), &shape_record(&[1 << 62]));
    let s = RaggedStore::<f32>::open(&path).unwrap();
    let e = s.get(0).unwrap_err();
    assert!(matches!(e, Error::Corrupted { index: 0, .. }), "{e:?}");
    let m = e.to_string();
    assert!(
        m.contains("needs a byte count that overflows 64 bits, payload decodes to 16"),
        "{m}"
    );
    let rep = s.core().verify().unwrap();
    assert!(
        rep.bad[0]
            .1
            .contains("needs a byte count that overflows 64 bits"),
        "{:?}",
        rep.bad
    );
}

/// The byte engine under a ragged store holds logical record `i` as two
/// physical records, payload `2i` and shape record `2i + 1`.
fn loc_entry(path: &std::path::Path, phys: u64) -> (u32, u32) {
    let loc = std::fs::read(path.join("0.loc")).unwrap();
    let e = &loc[16 * phys as usize..16 * phys as usize + 16];
    let w = |k: usize| u32::from_le_bytes(e[4 * k..4 * k + 4].try_into().unwrap());
    (w(0), w(1))
}

/// Regression (audit f04): corruption found by the byte engine named its
/// physical record ("record 6: zstd frame fails to decode") when the caller
/// asked for record 3.
#[test]
fn engine_corruption_names_the_logical_record_and_which_half() {
    let dir = tmp();
    let recs: Vec<ArrayD<f32>> = (0..10)
        .map(|i| Array::from_shape_fn(i + 1, |k| k as f32).into_dyn())
        .collect();
    let make = |name: &str| {
        let path = dir.path().join(name);
        let s = RaggedStore::<f32>::create(&path, &CreateOptions::new(Codec::Zstd)).unwrap();
        s.append(recs.iter().map(|a| a.view())).unwrap();
        s.close().unwrap();
        path
    };
    // Record 3's payload frame zeroed: found on gather.
    let path = make("gather");
    let (off, phys_len) = loc_entry(&path, 6);
    let mut chunk = std::fs::read(path.join("0.chunk")).unwrap();
    chunk[off as usize..(off + phys_len) as usize].fill(0);
    std::fs::write(path.join("0.chunk"), chunk).unwrap();
    let s = RaggedStore::<f32>::open(&path).unwrap();
    assert_eq!(s.get(2).unwrap(), recs[2]);
    let e = s.gather(&[1i64, 3][..]).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Engine(zrecord_engine::Error::Corrupted {
                record: Some(3),
                ..
            })
        ),
        "{e:?}"
    );
    let m = e.to_string();
    assert!(
        m.contains("0.chunk: record 3: payload (physical record 6): zstd frame fails to decode"),
        "{m}"
    );
    drop(s);
    // Record 5's shape-record entry says it decodes to 0 bytes: found on open.
    let path = make("open");
    let mut loc = std::fs::read(path.join("0.loc")).unwrap();
    loc[16 * 11 + 8..16 * 11 + 12].fill(0);
    std::fs::write(path.join("0.loc"), loc).unwrap();
    let m = RaggedStore::<f32>::open(&path).unwrap_err().to_string();
    assert!(
        m.contains("0.loc: record 5: shape record (physical record 11): "),
        "{m}"
    );
}

/// Regression: a rank-65 record was appended and read back, but `verify`
/// then reported the store's own record as corrupt (its shape record is
/// longer than a rank plus 64 dims). Appends now refuse what verify refuses.
#[test]
fn ranks_past_numpys_64_are_refused_at_append_and_64_verifies_clean() {
    let d = tmp();
    let s =
        RaggedStore::<i32>::create(d.path().join("r"), &CreateOptions::new(Codec::Raw)).unwrap();
    let ok = ArrayD::<i32>::zeros(IxDyn(&[1usize; zrecord::ragged::MAX_RANK]));
    let too_deep = ArrayD::<i32>::zeros(IxDyn(&[1usize; 65]));
    match s.append([ok.view(), too_deep.view()]) {
        Err(
            e @ Error::RankTooHigh {
                position: 1,
                rank: 65,
            },
        ) => {
            let msg = e.to_string();
            assert!(msg.contains("record 1") && msg.contains("rank 65"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.len(), 0, "a refused batch appends nothing");
    let shape = vec![1u64; 65];
    assert!(matches!(
        s.core().append_records([(shape.as_slice(), &[0u8; 4][..])]),
        Err(Error::RankTooHigh {
            position: 0,
            rank: 65
        })
    ));
    s.append([ok.view()]).unwrap();
    assert_eq!(s.get(0).unwrap().ndim(), 64);
    let rep = s.core().verify().unwrap();
    assert!(rep.bad.is_empty(), "{rep:?}");
}

#[test]
fn core_and_stores_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<RaggedCore>();
    check::<zrecord::DenseCore>();
    check::<RaggedStore<f32>>();
    check::<zrecord::DenseStore<u8>>();
    check::<RaggedBatch>();
}

/// A batch's buffer handed out (`into_data`) and back in (`with_buffer`)
/// full of another batch's words, too long or too short: every gather into
/// it reads back exactly what was appended, shapes included, its payloads
/// start 64-aligned, and a buffer long enough is reused in place (the
/// recycling the Python binding relies on to skip allocating and zeroing).
#[test]
fn a_recycled_buffer_full_of_old_words_gathers_exactly() {
    let dir = tmp();
    let recs = records();
    for codec in [Codec::Raw, Codec::Zstd] {
        let s = RaggedStore::<f32>::create(
            dir.path().join(format!("b{}", codec.name())),
            &CreateOptions::new(codec),
        )
        .unwrap();
        s.append(recs.iter().map(|r| r.view())).unwrap();
        let core = s.core();
        let mut words = vec![u64::MAX; 3];
        for picks in [&[3u64, 1, 2][..], &[0, 4], &[3, 3, 3, 3], &[1]] {
            let before = (words.as_ptr(), words.len());
            let mut batch = RaggedBatch::with_buffer(std::mem::take(&mut words));
            core.gather_into(picks, &mut batch).unwrap();
            assert_eq!(batch.len(), picks.len());
            assert_eq!(batch.data().as_ptr() as usize % 64, 0);
            for (k, &i) in picks.iter().enumerate() {
                let want = &recs[i as usize];
                let got = batch.view::<f32>(k).unwrap();
                assert_eq!(got.shape(), want.shape());
                assert_eq!(got, want.view());
            }
            let (w, range) = batch.into_data();
            let bytes: &[u8] = bytemuck::cast_slice(&w);
            let want: Vec<u8> = picks
                .iter()
                .flat_map(|&i| {
                    bytemuck::cast_slice::<f32, u8>(recs[i as usize].as_slice().unwrap()).to_vec()
                })
                .collect();
            assert_eq!(&bytes[range], &want[..]);
            if before.1 >= w.len() {
                assert_eq!(
                    w.as_ptr(),
                    before.0,
                    "a buffer long enough is filled in place"
                );
            }
            words = w;
            words.iter_mut().for_each(|x| *x = 0xA5A5_A5A5_A5A5_A5A5);
        }
    }
}
