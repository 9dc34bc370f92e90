//! Guards loadtxt against drifting from `numpy.loadtxt`: on generated files
//! (whitespace, CSV, tabs, comments, blank lines, CRLF, nan/inf spellings,
//! leading `+`) and for each option (skip_rows, usecols (negative and
//! repeated columns too), max_rows, comment
//! byte, f32), our array must equal numpy's value for value, whatever the
//! thread count and chunk size. Also guards parse(format(x)) == x for every
//! f64, subnormals included, and correct rounding of short decimals (the
//! parser's fast paths) for f64 and f32. numpy runs live via scripts/ref-venv.sh.
//! The generated files hold Unicode whitespace too (NBSP, U+3000, ...), which
//! numpy splits and strips fields at; with an explicit delimiter a
//! whitespace-only line is a row (an error for numbers) in both, so the
//! delimited files have none: the small edge texts check those.

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
    if gen == 'ws':
        ls = lines(' ')
        ls = [l.replace(' ', ' \t ', 1) if i % 5 == 0 else l for i, l in enumerate(ls)]
        ls = [l.replace(' ', '\u00a0', 2) if i % 11 == 0 else l for i, l in enumerate(ls)]
        ls = [l + '\u3000' if i % 17 == 0 else l for i, l in enumerate(ls)]
        ls = [('\u2009\x1c' + l) if i % 19 == 0 else l for i, l in enumerate(ls)]
    elif gen == 'csv':
        ls = [l.replace(',', ', ', 2) if i % 3 == 0 else l for i, l in enumerate(lines(','))]
        ls = [l.replace(',', '\u00a0,\u2003', 1) if i % 10 == 0 else l for i, l in enumerate(ls)]
    elif gen == 'tab': ls = lines('\t')
    elif gen == 'header': ls = ['x y z a b c d', 'units: m s kg'] + lines(' ')
    elif gen == 'pct': ls = lines(' ', comment='%')
    text = '\r\n'.join(ls[:len(ls)//2]) + '\r\n' + '\n'.join(ls[len(ls)//2:]) + '\n'
    open(f'{root}/{name}.txt', 'w', encoding='utf-8').write(text)
    a = np.loadtxt(f'{root}/{name}.txt', ndmin=2, encoding='utf-8', **kwargs)
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

/// Small texts on the edges NumPy decides (whitespace-only lines with and
/// without a delimiter, Unicode whitespace, files without data rows, with
/// `usecols` and `max_rows`): ours must load exactly when `numpy.loadtxt`
/// (`ndmin=2`) does, to the same shape and values, whatever the chunking.
#[test]
fn edge_texts_load_exactly_when_numpy_loads_them() {
    // (text, delimiter, usecols, max_rows)
    type Edge = (&'static str, Option<u8>, Option<Vec<isize>>, Option<usize>);
    let mut cases: Vec<Edge> = vec![
        // A line of blanks with a delimiter is a row (of one blank field).
        ("1,2\n   \n3,4\n", Some(b','), None, None),
        ("1,2\n\t\n3,4\n", Some(b','), None, None),
        ("1,2\n  # c\n3,4\n", Some(b','), None, None),
        ("1\n  \n3\n", Some(b','), None, None),
        ("1,2\n \n3,4\n", Some(b','), Some(vec![0]), None),
        ("1,2\n3,4\n  ", Some(b','), None, None),
        ("  \n1,2\n", Some(b','), None, None),
        ("1\t2\n \t \n3\t4\n", Some(b'\t'), None, None),
        ("1 2\n \n3 4\n", Some(b' '), None, None),
        // ... but an empty line, a CRLF one and a comment line are skipped.
        ("1,2\n\n3,4\n\r\n# c\n5,6\n", Some(b','), None, None),
        ("1 2\n   \n3 4\n \t # c\n", None, None, None),
        // Unicode whitespace splits fields and is stripped around them.
        ("1\u{a0}2\n3 4\n", None, None, None),
        (
            "\u{3000}1\u{2009}2\u{202f}\n3\u{85}4\u{1680}\n",
            None,
            None,
            None,
        ),
        (
            "1\u{2000}2\u{200a}3\n4\u{2028}5\u{2029}6\n",
            None,
            None,
            None,
        ),
        ("1\u{205f}2\n\u{3000}\n3 4\n\u{a0}# c\n", None, None, None),
        ("1\u{1c}2\u{1d}3\n4\u{1e}5\u{1f}6\n", None, None, None),
        ("1,\u{a0}2\u{3000}\n3\u{2003},4\n", Some(b','), None, None),
        ("1,2\n\u{a0}\n3,4\n", Some(b','), None, None),
        ("1\u{1c},2\n3,\u{1f}4\n", Some(b','), None, None),
        ("1\u{a0}2\u{a0}5\n3 4 6\n", None, Some(vec![2, 0]), None),
        ("1 2\n\u{3000}\n3 4\n5 6\n", None, None, Some(2)),
        // Not whitespace: NumPy refuses these as part of a number.
        ("1\u{200b}2\n", None, None, None),
        ("1\u{feff} 2\n", None, None, None),
        ("1\u{7f}2\n", None, None, None),
        ("1\u{a0}2,3\n", Some(b','), None, None),
        // No data rows: as many columns as usecols names.
        ("", None, Some(vec![0, 1]), None),
        ("# c\n\n", Some(b','), Some(vec![-1, 0, 0]), None),
        ("", None, Some(vec![]), None),
    ];
    // The same Unicode texts with the rows long enough for the fast paths.
    let long: String = (0..300)
        .map(|i| format!("{i}.25 {}\u{a0}{}\u{3000}\n", i * 7, -i))
        .collect();
    let long: &'static str = Box::leak(long.into_boxed_str());
    cases.push((long, None, None, None));
    cases.push((long, None, None, Some(123)));

    let dir = tempfile::tempdir().unwrap();
    for (i, (text, ..)) in cases.iter().enumerate() {
        std::fs::write(dir.path().join(format!("{i}.txt")), text).unwrap();
    }
    let spec: Vec<String> = cases
        .iter()
        .map(|(_, d, u, m)| {
            let d = d.map_or("None".into(), |d| format!("{:?}", d as char));
            let u = u.as_ref().map_or("None".into(), |u| format!("{u:?}"));
            let m = m.map_or("None".into(), |m| m.to_string());
            format!("({d}, {u}, {m})")
        })
        .collect();
    let out = common::run_ref_python(
        r#"
import sys, warnings, numpy as np
warnings.simplefilter("ignore")
root = sys.argv[1]
for i, (d, u, m) in enumerate(eval(sys.argv[2])):
    try:
        a = np.loadtxt(f"{root}/{i}.txt", delimiter=d, usecols=u, max_rows=m,
                       ndmin=2, encoding="utf-8")
    except ValueError as e:
        print(i, "error", str(e).replace("\n", " "))
        continue
    np.save(f"{root}/{i}.npy", a)
    print(i, "ok")
"#,
        &[
            dir.path().to_str().unwrap(),
            &format!("[{}]", spec.join(", ")),
        ],
    );
    let verdicts: Vec<&str> = out.lines().collect();
    assert_eq!(verdicts.len(), cases.len(), "{out}");
    for (i, ((text, d, u, m), verdict)) in cases.iter().zip(&verdicts).enumerate() {
        for (threads, chunk_bytes) in [(1, 0), (2, 7)] {
            let opts = LoadTxtOptions {
                delimiter: *d,
                usecols: u.clone(),
                max_rows: *m,
                threads,
                chunk_bytes,
                ..Default::default()
            };
            let ours = loadtxt::<f64>(dir.path().join(format!("{i}.txt")), &opts);
            let what = format!("{text:?} {opts:?}: numpy: {verdict}");
            match ours {
                Ok(a) if verdict.ends_with(" ok") => {
                    // numpy's (0, 1) for no data without usecols is kept as
                    // (0, 0) (documented); none of these cases has that.
                    same(
                        &a,
                        &npy::read::<f64>(dir.path().join(format!("{i}.npy"))).unwrap(),
                        &what,
                    )
                }
                Err(_) if verdict.contains(" error ") => {}
                other => panic!("{what}: ours: {other:?}"),
            }
        }
    }
}
