//! The quickstart: synthesize a small labeled image dataset, write it into
//! three zstd stores (images, labels, and ragged token captions), stream a
//! few hundred batches through the DataLoader, and report throughput and
//! compression. Everything lives in a temporary directory removed at exit.
//!
//! ```sh
//! cargo run --release -p examples --bin quickstart
//! ```

use std::time::Instant;

use loaderx::{DataLoader, LoaderOptions, Mode, Stream};
use ndarray::{Array1, Array4, ArrayD, IxDyn};
use zrecord::{Codec, CreateOptions, DenseStore, RaggedStore};

const IMAGES: usize = 4096;
const SIDE: usize = 64;
const CLASSES: i64 = 10;
const BATCH: usize = 128;
const STEPS: usize = 300;

/// A cheap deterministic hash, so the demo needs no RNG crate.
fn hash(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::Builder::new()
        .prefix("zrecord-quickstart")
        .tempdir()?;
    println!("zrecord quickstart in {}", dir.path().display());

    // 1. Synthesize: each image is a smooth gradient whose direction depends
    //    on its class, plus a little noise; its caption is a token sequence
    //    of class-dependent length.
    let t = Instant::now();
    let labels = Array1::from_shape_fn(IMAGES, |i| (hash(i as u64) % CLASSES as u64) as i64);
    let images = Array4::from_shape_fn((IMAGES, SIDE, SIDE, 3), |(i, y, x, c)| {
        let class = labels[i] as usize;
        let v = (x * (class + 1) + y * (CLASSES as usize - class) + c * 40) % 256;
        (v as u64 + hash((i * 7919 + y * SIDE + x) as u64) % 8) as u8
    });
    let captions: Vec<ArrayD<i32>> = (0..IMAGES)
        .map(|i| {
            let len = 4 + (hash(i as u64 ^ 0xabc) % 28) as usize;
            ArrayD::from_shape_fn(IxDyn(&[len]), |d| (labels[i] as i32) * 100 + d[0] as i32)
        })
        .collect();

    // 2. Write three stores, all zstd.
    let zstd = CreateOptions::new(Codec::Zstd);
    let img = DenseStore::<u8>::create(
        dir.path().join("image"),
        &[SIDE as u64, SIDE as u64, 3],
        &zstd,
    )?;
    img.append(images.view())?;
    let lab = DenseStore::<i64>::create(dir.path().join("label"), &[], &zstd)?;
    lab.append(labels.view())?;
    let tok = RaggedStore::<i32>::create(dir.path().join("caption"), &zstd)?;
    tok.append(captions.iter().map(|a| a.view()))?;
    for s in [img.sync(), lab.sync(), tok.sync()] {
        s?;
    }
    let raw_bytes = images.len() as f64;
    let stats = img.stats();
    println!(
        "wrote {IMAGES} images ({:.1} MiB raw) + labels + captions in {:.2} s; image store compression {:.2}x",
        raw_bytes / (1 << 20) as f64,
        t.elapsed().as_secs_f64(),
        raw_bytes / stats.live_bytes as f64,
    );

    // 3. Stream batches: cyclic sampling (every image once per cycle), two
    //    transform workers, four batches prefetched.
    let opts = LoaderOptions {
        batch_size: BATCH,
        mode: Mode::Cyclic,
        seed: 42,
        workers: 2,
        prefetch: 4,
        ..LoaderOptions::default()
    };
    let streams = [
        ("image", Stream::from(img)),
        ("label", Stream::from(lab)),
        ("caption", Stream::from(tok)),
    ];
    // The transform is the collate step: here it checks each batch and
    // computes a per-class histogram, as a model's input code would read it.
    let loader = DataLoader::with_transform(streams, opts, |batch: loaderx::Batch| {
        let image = batch.dense::<u8>("image")?;
        let label = batch.dense::<i64>("label")?;
        let caption = batch.ragged::<i32>("caption")?;
        let mut hist = [0u32; CLASSES as usize];
        for (k, l) in label.iter().enumerate() {
            hist[*l as usize] += 1;
            // Every stream was gathered at the same indices.
            assert_eq!(caption[k][[0]], *l as i32 * 100);
        }
        Ok::<_, loaderx::Error>((image.len() + label.len() * 8, hist))
    })?;

    let t = Instant::now();
    let mut bytes = 0usize;
    let mut seen = [0u64; CLASSES as usize];
    for item in loader.take(STEPS) {
        let (b, hist) = item?.value;
        bytes += b;
        for (s, h) in seen.iter_mut().zip(hist) {
            *s += u64::from(h);
        }
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "streamed {STEPS} batches of {BATCH} in {secs:.2} s: {:.0} batches/s, {:.2} GiB/s decoded",
        STEPS as f64 / secs,
        bytes as f64 / secs / (1u64 << 30) as f64,
    );
    println!("samples seen per class: {seen:?}");
    Ok(())
}
