//! Guards against compaction leaking space: after deleting everything and
//! compacting, the store is as small as a new one; after random operations
//! and a compaction, the chunk files hold exactly the live records' stored
//! bytes (the per-chunk slack the placement rule leaves at a chunk's end is
//! not part of any file, since chunks are not pre-sized) and the loc files
//! exactly their entries.

mod common;
use common::workload::{apply, random_op, read_all, run};
use common::{Rng, bytes_of};
use zrecord_engine::{Codec, CreateOptions, Engine, ReadPath};

fn disk_bytes(dir: &std::path::Path) -> u64 {
    bytes_of(dir, "chunk") + bytes_of(dir, "loc") + bytes_of(dir, "zr")
}

#[test]
fn compaction_leaves_no_slack() {
    for codec in [Codec::Raw, Codec::Zstd] {
        let tmp = tempfile::tempdir().unwrap();
        let fresh = tmp.path().join("fresh");
        drop(
            Engine::create_with(
                &fresh,
                &CreateOptions::new(codec),
                common::tiny(ReadPath::Pread),
            )
            .unwrap(),
        );
        let dir = tmp.path().join("s");
        let mut e = Engine::create_with(
            &dir,
            &CreateOptions::new(codec),
            common::tiny(ReadPath::Pread),
        )
        .unwrap();
        let mut rng = Rng(9);
        let mut model = Vec::new();
        for round in 0..6 {
            for _ in 0..40 {
                let op = random_op(&mut rng, model.len(), 60);
                run(&mut e, &op).unwrap();
                apply(&mut model, &op);
            }
            e.compact().unwrap();
            let s = e.stats();
            assert_eq!(
                s.chunk_bytes, s.live_bytes,
                "{codec:?} round {round}: {s:?}"
            );
            assert_eq!(
                bytes_of(&dir, "chunk"),
                s.live_bytes,
                "{codec:?} round {round}"
            );
            assert_eq!(bytes_of(&dir, "loc"), 16 * model.len() as u64);
            assert_eq!(read_all(&e).unwrap(), model);
        }
        // Delete everything: as small as new.
        let all: Vec<u64> = (0..e.len()).collect();
        e.delete(&all).unwrap();
        e.compact().unwrap();
        drop(e);
        assert_eq!(disk_bytes(&dir), disk_bytes(&fresh), "{codec:?}");
    }
}
