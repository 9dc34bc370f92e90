//! Importers benchmark: `zrecord::text::loadtxt` and `zrecord::npy::read`
//! beside numpy.loadtxt, fast_loadtxt 0.1.0, pandas.read_csv (engine c) and
//! numpy.load, in the same run, on the same (page-cached) files.
//!
//! ```text
//! cargo run --release -p benches --bin importers [-- --quick] [--threads N]
//!     [--rounds N] [--text-only] [--no-peers]
//! cargo run --release -p benches --bin importers -- --parse FILE [--delimiter C] [--threads N] [--save OUT.npy]
//! ```
//!
//! Our readers and the peers alternate for `--rounds` rounds (default 3, 1
//! with `--quick`): the best time of each is kept, and the ratio to
//! fast_loadtxt is also given per round with its median.
//!
//! Files are generated once under target/bench-data/importers. The peers run
//! from target/bench-venv (numpy, pandas, fast-loadtxt==0.1.0; create it with
//! `python3 -m venv target/bench-venv && target/bench-venv/bin/pip install
//! numpy pandas fast-loadtxt==0.1.0`), falling back to the reference venv's
//! python (numpy only) when it is missing.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use benches::Rng;
use ndarray::{Array2, ArrayD, IxDyn};
use zrecord::text::{LoadTxtOptions, loadtxt};

/// Roughly normal (sum of uniforms), scaled.
fn value(r: &mut Rng) -> f64 {
    let s: f64 = (0..4)
        .map(|_| (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
        .sum();
    (s - 2.0) * 150.0
}

fn write_text(path: &Path, rows: usize, cols: usize, sep: &str) {
    if path.exists() {
        return;
    }
    let tmp = path.with_extension("tmp");
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp).unwrap());
    let mut rng = Rng(rows as u64 * 31 + cols as u64);
    for _ in 0..rows {
        for c in 0..cols {
            if c > 0 {
                w.write_all(sep.as_bytes()).unwrap();
            }
            write!(w, "{:.6}", value(&mut rng)).unwrap();
        }
        w.write_all(b"\n").unwrap();
    }
    w.flush().unwrap();
    drop(w);
    std::fs::rename(tmp, path).unwrap();
}

fn write_npy(path: &Path, elems: usize) {
    if path.exists() {
        return;
    }
    let mut rng = Rng(elems as u64);
    let a = ArrayD::from_shape_simple_fn(IxDyn(&[elems / 1024, 1024]), || value(&mut rng) as f32);
    let tmp = path.with_extension("tmp");
    zrecord::npy::write(&tmp, &a).unwrap();
    std::fs::rename(tmp, path).unwrap();
}

fn best<T>(repeats: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut t = f64::INFINITY;
    let mut out = None;
    for _ in 0..repeats {
        let s = Instant::now();
        let v = f();
        t = t.min(s.elapsed().as_secs_f64());
        out = Some(v);
    }
    (t, out.unwrap())
}

fn checksum(a: &Array2<f64>) -> f64 {
    a.iter().filter(|x| !x.is_nan()).sum()
}

fn python(root: &Path) -> PathBuf {
    let venv = root.join("target/bench-venv/bin/python");
    if venv.exists() {
        return venv;
    }
    let out = Command::new("bash")
        .arg(root.join("scripts/ref-venv.sh"))
        .output()
        .expect("scripts/ref-venv.sh");
    assert!(out.status.success(), "no python for the peers");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let text_only = args.iter().any(|a| a == "--text-only");
    let threads: usize = args
        .iter()
        .position(|a| a == "--threads")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.parse().expect("--threads N"))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    // `--parse FILE [--delimiter C]`: only time loadtxt on FILE (for
    // profilers: callgrind, perf).
    if let Some(file) = args
        .iter()
        .position(|a| a == "--parse")
        .map(|i| &args[i + 1])
    {
        let opts = LoadTxtOptions {
            delimiter: args
                .iter()
                .position(|a| a == "--delimiter")
                .map(|i| args[i + 1].as_bytes()[0]),
            threads,
            ..Default::default()
        };
        let (t, a) = best(if quick { 1 } else { 3 }, || {
            loadtxt::<f64>(file, &opts).unwrap()
        });
        println!(
            "{file}: {:?} in {t:.4} s (checksum {:.6e})",
            a.shape(),
            checksum(&a)
        );
        // `--save OUT.npy`: the parsed array, to compare with other readers.
        if let Some(out) = args
            .iter()
            .position(|a| a == "--save")
            .map(|i| &args[i + 1])
        {
            zrecord::npy::write(out, &a.into_dyn()).unwrap();
        }
        return;
    }
    // `--pool-cost`: what `threads: n` costs when n is not the current
    // pool's size (loadtxt then builds an n-thread pool for the call), on a
    // small text where it would show.
    if args.iter().any(|a| a == "--pool-cost") {
        let text = "1.5,2.25,-3.125\n".repeat(1000);
        let cur = rayon::current_num_threads();
        for n in [0, cur, cur + 1] {
            let opts = LoadTxtOptions {
                delimiter: Some(b','),
                threads: n,
                ..Default::default()
            };
            let (t, _) = best(5, || {
                let s = Instant::now();
                for _ in 0..200 {
                    zrecord::text::loadtxt_bytes::<f64>(text.as_bytes(), &opts).unwrap();
                }
                s.elapsed()
            });
            println!(
                "threads {n} (current pool {cur}): {:.1} us per call (16 kB text)",
                t / 200.0 * 1e6
            );
        }
        return;
    }
    let (ws_rows, csv_rows, npy_elems, repeats) = if quick {
        (200_000, 20_000, 32 << 20, 2)
    } else {
        (2_000_000, 200_000, 256 << 20, 3)
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = root.join("target/bench-data/importers");
    std::fs::create_dir_all(&dir).unwrap();
    let ws = dir.join(format!("ws_{ws_rows}x8.txt"));
    let csv = dir.join(format!("csv_{csv_rows}x100.csv"));
    let npy = dir.join(format!("f32_{npy_elems}.npy"));
    eprintln!("generating inputs (once) under {}", dir.display());
    write_text(&ws, ws_rows, 8, " ");
    write_text(&csv, csv_rows, 100, ",");
    if !text_only {
        write_npy(&npy, npy_elems);
    }
    let size = |p: &Path| std::fs::metadata(p).unwrap().len() as f64 / 1e6;
    let (ws_mb, csv_mb) = (size(&ws), size(&csv));
    let npy_mb = if text_only { 0.0 } else { size(&npy) };

    let rounds: usize = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.parse().expect("--rounds N"))
        .unwrap_or(if quick { 1 } else { 3 });
    let no_peers = args.iter().any(|a| a == "--no-peers");
    let py = (!no_peers).then(|| python(&root));
    let ws_opts = LoadTxtOptions {
        threads,
        ..Default::default()
    };
    let csv_opts = LoadTxtOptions {
        delimiter: Some(b','),
        threads,
        ..Default::default()
    };
    // Ours and the peers alternate, `rounds` times (the box is shared and
    // noisy): per (reader, file) the best time over all rounds is kept, and
    // per round the ratio to fast_loadtxt, whose median is reported too.
    let mut ours: HashMap<&str, (f64, f64)> = HashMap::new();
    let mut peers: HashMap<(String, String), (f64, String)> = HashMap::new();
    let mut round_ratios: HashMap<&str, Vec<f64>> = HashMap::new();
    let keep = |m: &mut HashMap<&'static str, (f64, f64)>, k: &'static str, t: f64, sum: f64| {
        let e = m.entry(k).or_insert((t, sum));
        e.0 = e.0.min(t);
    };
    for round in 0..rounds {
        let mut this: HashMap<&str, f64> = HashMap::new();
        let (t, a) = best(repeats, || loadtxt::<f64>(&ws, &ws_opts).unwrap());
        assert_eq!(a.shape(), &[ws_rows, 8]);
        keep(&mut ours, "ws", t, checksum(&a));
        this.insert("ws", t);
        drop(a);
        let (t, a) = best(repeats, || loadtxt::<f64>(&csv, &csv_opts).unwrap());
        assert_eq!(a.shape(), &[csv_rows, 100]);
        keep(&mut ours, "csv", t, checksum(&a));
        this.insert("csv", t);
        drop(a);
        if !text_only {
            let (t, a) = best(repeats, || zrecord::npy::read::<f32>(&npy).unwrap());
            let s: f64 = a.iter().map(|&x| x as f64).sum();
            keep(&mut ours, "npy", t, s);
            this.insert("npy", t);
            drop(a);
        }
        let Some(py) = &py else {
            continue;
        };
        // Peers, same files, same thread count. numpy.loadtxt and pandas
        // (slow, and only for context) run in the first round alone.
        let script = root.join("benches/py/importers_peers.py");
        let mut cmd = Command::new(py);
        cmd.arg(&script)
            .arg(threads.to_string())
            .arg(repeats.to_string())
            .args([&ws, &csv, &npy])
            .args(text_only.then_some("--text-only"))
            .env("OMP_NUM_THREADS", threads.to_string());
        if round > 0 {
            cmd.arg("--fast-loadtxt-only");
        }
        let out = cmd.output().expect("spawning the peer python");
        if !out.status.success() {
            panic!("peers failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != 4 {
                continue;
            }
            let key = (f[0].to_string(), f[1].to_string());
            if f[2] == "missing" {
                peers.insert(key, (f64::NAN, "-".into()));
                continue;
            }
            let pt: f64 = f[2].parse().unwrap();
            let e = peers.entry(key).or_insert((pt, f[3].to_string()));
            e.0 = e.0.min(pt);
            if (f[0] == "fast_loadtxt" || f[0] == "numpy.load")
                && let Some((tag, &t)) = this.get_key_value(f[1])
            {
                round_ratios.entry(tag).or_default().push(pt / t);
            }
        }
    }
    if no_peers {
        for (k, (t, _)) in &ours {
            println!("{k}: {t:.4} s");
        }
        return;
    }
    let py = py.unwrap();

    println!(
        "importers bench: {threads} threads, {rounds} interleaved rounds of best of {repeats}, files in page cache"
    );
    println!("python for peers: {}", py.display());
    println!();
    let mb = |tag: &str| match tag {
        "ws" => ws_mb,
        "csv" => csv_mb,
        _ => npy_mb,
    };
    let label = |tag: &str| match tag {
        "ws" => format!("loadtxt {ws_rows}x8 whitespace ({ws_mb:.0} MB)"),
        "csv" => format!("loadtxt {csv_rows}x100 CSV ({csv_mb:.0} MB)"),
        _ => format!(".npy read f32 ({npy_mb:.0} MB)"),
    };
    for tag in ["ws", "csv", "npy"] {
        let Some(&(t, sum)) = ours.get(tag) else {
            continue;
        };
        println!("{}", label(tag));
        println!(
            "  {:<18} {:>9.1} MB/s  {:>8.3} s  (checksum {sum:.6e})",
            "zrecord",
            mb(tag) / t,
            t
        );
        let mut rows: Vec<_> = peers.iter().filter(|((_, tg), _)| tg == tag).collect();
        rows.sort_by(|a, b| a.0.0.cmp(&b.0.0));
        for ((peer, _), (pt, sum)) in rows {
            if pt.is_nan() {
                println!("  {peer:<18} not installed");
                continue;
            }
            println!(
                "  {:<18} {:>9.1} MB/s  {:>8.3} s  zrecord is {:.2}x  (checksum {sum})",
                peer,
                mb(tag) / pt,
                pt,
                pt / t,
            );
        }
        if let Some(r) = round_ratios.get_mut(tag) {
            r.sort_by(f64::total_cmp);
            let fmt: Vec<String> = r.iter().map(|x| format!("{x:.2}")).collect();
            println!(
                "  vs {} per round: [{}], median {:.2}x",
                if tag == "npy" {
                    "numpy.load"
                } else {
                    "fast_loadtxt"
                },
                fmt.join(", "),
                r[r.len() / 2]
            );
        }
    }
}
