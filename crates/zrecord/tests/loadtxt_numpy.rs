//! Guards loadtxt against drifting from `numpy.loadtxt`: on generated files
//! (whitespace, CSV, tabs, comments, blank lines, CRLF, nan/inf spellings,
//! leading `+`) and for each option (skip_rows, usecols (negative and
//! repeated columns too), max_rows, comment
//! byte, f32), our array must equal numpy's value for value, whatever the
//! thread count and chunk size. Also guards parse(format(x)) == x for every
//! f64, subnormals included, and correct rounding of short decimals (the
//! parser's fast paths) for f64 and f32. numpy runs live via scripts/ref-venv.sh.
//! (With an explicit delimiter numpy rejects whitespace-only lines while we
//! skip them as blank, so the delimited files here have none.)

mod common;

use std::path::Path;

use ndarray::{Array2, ArrayD};
use proptest::prelude::*;
use zrecord::npy;
use zrecord::text::{LoadTxtOptions, loadtxt, loadtxt_bytes};

struct Case {
    name: &'static str,
    kind: &'static str,
    numpy_kwargs: &'static str,
    opts: LoadTxtOptions,
    f32: bool,
}

fn cases() -> Vec<Case> {
    let d = LoadTxtOptions::default;
    vec![
        Case {
            name: "ws",
            kind: "ws",
            numpy_kwargs: "{}",
            opts: d(),
            f32: false,
        },
        Case {
            name: "ws_f32",
            kind: "ws",
            numpy_kwargs: "{'dtype': np.float32}",
            opts: d(),
            f32: true,
        },
        Case {
            name: "csv",
            kind: "csv",
            numpy_kwargs: "{'delimiter': ','}",
            opts: LoadTxtOptions {
                delimiter: Some(b','),
                ..d()
            },
            f32: false,
        },
        Case {
            name: "tab",
            kind: "tab",
            numpy_kwargs: "{'delimiter': '\\t'}",
            opts: LoadTxtOptions {
                delimiter: Some(b'\t'),
                ..d()
            },
            f32: false,
        },
        Case {
            name: "header",
            kind: "header",
            numpy_kwargs: "{'skiprows': 2}",
            opts: LoadTxtOptions {
                skip_rows: 2,
                ..d()
            },
            f32: false,
        },
        Case {
            name: "usecols",
            kind: "ws",
            numpy_kwargs: "{'usecols': [3, 0, 5]}",
            opts: LoadTxtOptions {
                usecols: Some(vec![3, 0, 5]),
                ..d()
            },
            f32: false,
        },
        Case {
            name: "usecols_negative_repeated",
            kind: "csv",
            numpy_kwargs: "{'delimiter': ',', 'usecols': [-1, 0, 0, -7]}",
            opts: LoadTxtOptions {
                delimiter: Some(b','),
                usecols: Some(vec![-1, 0, 0, -7]),
                ..d()
            },
            f32: false,
        },
        Case {
            name: "max_rows",
            kind: "ws",
            numpy_kwargs: "{'max_rows': 101}",
            opts: LoadTxtOptions {
                max_rows: Some(101),
                ..d()
            },
            f32: false,
        },
        Case {
            name: "pct",
            kind: "pct",
            numpy_kwargs: "{'comments': '%'}",
            opts: LoadTxtOptions {
                comments: Some(b'%'),
                ..d()
            },
            f32: false,
        },
        Case {
            name: "csv_usecols_f32",
            kind: "csv",
            numpy_kwargs: "{'delimiter': ',', 'usecols': [6, 1], 'dtype': np.float32, 'max_rows': 500}",
            opts: LoadTxtOptions {
                delimiter: Some(b','),
                usecols: Some(vec![6, 1]),
                max_rows: Some(500),
                ..d()
            },
            f32: true,
        },
    ]
}

const GEN: &str = r#"
import sys, numpy as np
root = sys.argv[1]
cases = eval(sys.argv[2])
rng = np.random.default_rng(11)
def values(n, m):
    v = rng.standard_normal((n, m)) * 10.0 ** rng.integers(-30, 30, (n, m))
    v[rng.random((n, m)) < 0.05] = 0.0
    v[rng.random((n, m)) < 0.02] = 5e-324 * rng.integers(1, 1000)
    return v
specials = ['nan', 'NaN', 'inf', '-inf', 'Infinity', '+inf', '+1.5', '-0', '1e5', '.5', '3.']
def tok(x):
    r = rng.random()
    if r < 0.02: return specials[rng.integers(len(specials))]
    if r < 0.3: return f'{x:.6e}'
    if r < 0.4: return f'{x:g}'
    return repr(float(x))
def lines(sep, n=2000, m=7, comment='#'):
    v = values(n, m)
    out = []
    for i in range(n):
        row = sep.join(tok(x) for x in v[i])
        if i % 97 == 0: out.append(f'{comment} a comment line')
        if i % 89 == 0: out.append('')
        if i % 83 == 0 and sep == ' ': out.append('   \t ')
        if i % 13 == 0: row += f'  {comment} trailing note'
        if i % 7 == 0: row = '  ' + row
        out.append(row)
    return out
for name, gen, kwargs in cases:
    if gen == 'ws': ls = lines(' '); ls = [l.replace(' ', ' \t ', 1) if i % 5 == 0 else l for i, l in enumerate(ls)]
    elif gen == 'csv': ls = [l.replace(',', ', ', 2) if i % 3 == 0 else l for i, l in enumerate(lines(','))]
    elif gen == 'tab': ls = lines('\t')
    elif gen == 'header': ls = ['x y z a b c d', 'units: m s kg'] + lines(' ')
    elif gen == 'pct': ls = lines(' ', comment='%')
    text = '\r\n'.join(ls[:len(ls)//2]) + '\r\n' + '\n'.join(ls[len(ls)//2:]) + '\n'
    open(f'{root}/{name}.txt', 'w').write(text)
    a = np.loadtxt(f'{root}/{name}.txt', ndmin=2, **kwargs)
    np.save(f'{root}/{name}.expected.npy', a)
    print(name, a.shape)
"#;

fn same<T: Copy + Into<f64>>(a: &Array2<T>, b: &ArrayD<T>, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}");
    for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
        let (x, y): (f64, f64) = ((*x).into(), (*y).into());
        assert!(
            (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits(),
            "{what}: element {i}: ours {x:e}, numpy {y:e}"
        );
    }
}

fn check_case(dir: &Path, c: &Case) {
    let txt = dir.join(format!("{}.txt", c.name));
    let exp = dir.join(format!("{}.expected.npy", c.name));
    for (threads, chunk) in [(0, 0), (1, 0), (2, 100), (3, 4096)] {
        let opts = LoadTxtOptions {
            threads,
            chunk_bytes: chunk,
            ..c.opts.clone()
        };
        let what = format!("{} threads={threads} chunk={chunk}", c.name);
        if c.f32 {
            let ours = loadtxt::<f32>(&txt, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
            same(&ours, &npy::read::<f32>(&exp).unwrap(), &what);
        } else {
            let ours = loadtxt::<f64>(&txt, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
            same(&ours, &npy::read::<f64>(&exp).unwrap(), &what);
        }
    }
}

#[test]
fn loadtxt_equals_numpy_for_every_option() {
    let dir = tempfile::tempdir().unwrap();
    let cases = cases();
    let spec: Vec<String> = cases
        .iter()
        .map(|c| format!("('{}', '{}', {})", c.name, c.kind, c.numpy_kwargs))
        .collect();
    let out = common::run_ref_python(
        &format!("import numpy as np\n{GEN}"),
        &[
            dir.path().to_str().unwrap(),
            &format!("[{}]", spec.join(", ")),
        ],
    );
    assert_eq!(out.lines().count(), cases.len(), "{out}");
    for c in &cases {
        check_case(dir.path(), c);
    }
}

#[test]
fn empty_and_comment_only_files_give_a_zero_by_zero_array() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.txt");
    for content in ["", "\n\n", "# nothing\n  \r\n"] {
        std::fs::write(&p, content).unwrap();
        assert_eq!(
            loadtxt::<f64>(&p, &LoadTxtOptions::default())
                .unwrap()
                .shape(),
            &[0, 0]
        );
    }
}

#[test]
fn errors_report_the_physical_line_even_in_late_chunks() {
    let mut text = String::new();
    for i in 0..5000 {
        if i % 10 == 0 {
            text.push_str("# comment\n\n");
        }
        text.push_str(&format!("{i} {}.5\n", i * 2));
    }
    let lines_before = text.lines().count();
    text.push_str("1 2abc\n");
    let opts = LoadTxtOptions {
        threads: 2,
        chunk_bytes: 64,
        ..Default::default()
    };
    match loadtxt_bytes::<f64>(text.as_bytes(), &opts) {
        Err(zrecord::Error::TextParse {
            line,
            column,
            token,
            ..
        }) => {
            assert_eq!(
                (line, column, token.as_str()),
                (lines_before as u64 + 1, 2, "2abc")
            );
        }
        other => panic!("{other:?}"),
    }
}

proptest! {
    #[test]
    fn parse_of_format_is_identity(bits in any::<u64>(), sub in 1u64..(1 << 52)) {
        let mut text = String::new();
        let xs = [f64::from_bits(bits), f64::from_bits(sub), -f64::from_bits(sub)];
        let xs: Vec<f64> = xs.into_iter().filter(|x| x.is_finite()).collect();
        for x in &xs {
            text.push_str(&format!("{x:?} {x:e} {x}\n"));
        }
        let a = loadtxt_bytes::<f64>(text.as_bytes(), &LoadTxtOptions::default()).unwrap();
        for (r, x) in xs.iter().enumerate() {
            for c in 0..3 {
                prop_assert_eq!(a[[r, c]].to_bits(), x.to_bits());
            }
        }
    }

    #[test]
    fn short_decimals_are_correctly_rounded(
        xs in prop::collection::vec((any::<u64>(), 0usize..12, -24i32..24), 1..40),
        csv in any::<bool>(),
    ) {
        // Fixed-point and short scientific spellings (the parser's fast
        // paths), as f64 and f32: each value must be the correctly rounded
        // one Rust's own parser gives.
        let mut text = String::new();
        let mut toks = Vec::new();
        for (i, &(bits, prec, e)) in xs.iter().enumerate() {
            let x = (bits % 1_000_000_000_000) as f64 / 10f64.powi(e.rem_euclid(9)) - 5e5;
            let tok = match i % 3 {
                0 => format!("{x:.prec$}"),
                1 => format!("{:.prec$}e{e}", x / 1e5),
                _ => format!("{}", (bits % 100_000_000) as i64 - 50_000_000),
            };
            text.push_str(&tok);
            text.push_str(if i % 4 == 3 { "\n" } else if csv { "," } else { " " });
            toks.push(tok);
        }
        let ncols = xs.len().min(4);
        let rows = xs.len() / 4;
        if rows > 0 {
            let text = text.split_inclusive('\n').take(rows).collect::<String>();
            let opts = LoadTxtOptions { delimiter: csv.then_some(b','), ..Default::default() };
            let a = loadtxt_bytes::<f64>(text.as_bytes(), &opts).unwrap();
            let b = loadtxt_bytes::<f32>(text.as_bytes(), &opts).unwrap();
            for r in 0..rows {
                for c in 0..ncols {
                    let tok = &toks[r * 4 + c];
                    prop_assert_eq!(a[[r, c]].to_bits(), tok.parse::<f64>().unwrap().to_bits(), "{}", tok);
                    prop_assert_eq!(b[[r, c]].to_bits(), tok.parse::<f32>().unwrap().to_bits(), "{}", tok);
                }
            }
        }
    }

    #[test]
    fn arbitrary_text_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..400), delim in prop::option::of(any::<u8>())) {
        let opts = LoadTxtOptions { delimiter: delim, chunk_bytes: 16, ..Default::default() };
        let _ = loadtxt_bytes::<f64>(&bytes, &opts);
        let _ = loadtxt_bytes::<f32>(&bytes, &LoadTxtOptions { usecols: Some(vec![1]), max_rows: Some(3), skip_rows: 1, ..opts });
    }
}
