//! Guards the on-disk type identity against drift from the reference: for a
//! table of dtypes (plain, big-endian, structured, nested, padded, titled)
//! and item shapes, the bytes we encode must equal the `store.zr` identity
//! bytes that loaderx 1.7.2 itself writes, and we must decode its bytes back to the same
//! dtype. The reference runs live (scripts/ref-venv.sh); if Python is missing
//! this test fails, it never skips.

mod common;

use zrecord::dtype::{decode_identity, encode_identity_dense, encode_identity_ragged};
use zrecord::{DType, Field};

fn s(t: &str) -> DType {
    DType::parse(t).unwrap()
}

fn field(name: &str, dtype: DType, shape: &[usize]) -> Field {
    Field {
        name: name.into(),
        title: None,
        dtype,
        shape: shape.to_vec(),
    }
}

fn titled(title: &str, name: &str, dtype: DType, shape: &[usize]) -> Field {
    Field {
        title: Some(title.into()),
        ..field(name, dtype, shape)
    }
}

/// (numpy expression, our dtype, item shape)
fn table() -> Vec<(&'static str, DType, Vec<u64>)> {
    let mut t = Vec::new();
    for (expr, ts) in [
        ("'?'", "|b1"),
        ("'i1'", "|i1"),
        ("'u1'", "|u1"),
        ("'<i2'", "<i2"),
        ("'>i2'", ">i2"),
        ("'<i4'", "<i4"),
        ("'<i8'", "<i8"),
        ("'>u8'", ">u8"),
        ("'<u2'", "<u2"),
        ("'<u4'", "<u4"),
        ("'<f2'", "<f2"),
        ("'=f4'", "<f4"),
        ("'>f4'", ">f4"),
        ("'<f8'", "<f8"),
        ("'<c8'", "<c8"),
        ("'>c16'", ">c16"),
    ] {
        t.push((expr, s(ts), vec![]));
        t.push((expr, s(ts), vec![3]));
    }
    t.push(("'<f4'", s("<f4"), vec![224, 224, 3]));
    t.push(("'<f4'", s("<f4"), vec![70000, 300]));
    t.push((
        "[('x','<f4'),('y','<i4',(2,))]",
        DType::Structured(vec![field("x", s("<f4"), &[]), field("y", s("<i4"), &[2])]),
        vec![],
    ));
    t.push((
        "[('a',[('b','>i2'),('c','?')]),('d','<c16',(2,3))]",
        DType::Structured(vec![
            field(
                "a",
                DType::Structured(vec![field("b", s(">i2"), &[]), field("c", s("|b1"), &[])]),
                &[],
            ),
            field("d", s("<c16"), &[2, 3]),
        ]),
        vec![5, 2],
    ));
    t.push((
        "{'names':['a','b'],'formats':['<i4','<i8'],'offsets':[0,8],'itemsize':24}",
        DType::Structured(vec![
            field("a", s("<i4"), &[]),
            field("", DType::Padding(4), &[]),
            field("b", s("<i8"), &[]),
            field("", DType::Padding(8), &[]),
        ]),
        vec![1],
    ));
    t.push((
        "np.dtype([('x','u1'),('y','<f8')], align=True)",
        DType::Structured(vec![
            field("x", s("|u1"), &[]),
            field("", DType::Padding(7), &[]),
            field("y", s("<f8"), &[]),
        ]),
        vec![],
    ));
    t.push((
        "[('a_fairly_long_field_name_over_32_chars', '<f2', (4, 4)), ('m', [('n', [('o', '>u4')], (2,))])]",
        DType::Structured(vec![
            field("a_fairly_long_field_name_over_32_chars", s("<f2"), &[4, 4]),
            field(
                "m",
                DType::Structured(vec![field(
                    "n",
                    DType::Structured(vec![field("o", s(">u4"), &[])]),
                    &[2],
                )]),
                &[],
            ),
        ]),
        vec![2],
    ));
    // Titled fields: the descr key is the tuple (title, name), packed as a
    // two-element array.
    t.push((
        "[(('title','x'),'<f4'),('y','u1')]",
        DType::Structured(vec![
            titled("title", "x", s("<f4"), &[]),
            field("y", s("|u1"), &[]),
        ]),
        vec![2],
    ));
    t.push((
        "[(('T','o'),[(('ti','i'),'<i2',(2,)),('j','?')]),(('S','s'),'>f8',(3,))]",
        DType::Structured(vec![
            titled(
                "T",
                "o",
                DType::Structured(vec![
                    titled("ti", "i", s("<i2"), &[2]),
                    field("j", s("|b1"), &[]),
                ]),
                &[],
            ),
            titled("S", "s", s(">f8"), &[3]),
        ]),
        vec![],
    ));
    t.push((
        "[(('Ünï \"q\" it\\'s','x'),'<f4'),(('','y'),'<i8')]",
        DType::Structured(vec![
            titled("Ünï \"q\" it's", "x", s("<f4"), &[]),
            titled("", "y", s("<i8"), &[]),
        ]),
        vec![1],
    ));
    t.push((
        "{'names':['x','y'],'formats':['<f4','u1'],'titles':['Tx',None],'offsets':[0,8],'itemsize':12}",
        DType::Structured(vec![
            titled("Tx", "x", s("<f4"), &[]),
            field("", DType::Padding(4), &[]),
            field("y", s("|u1"), &[]),
            field("", DType::Padding(3), &[]),
        ]),
        vec![],
    ));
    t
}

#[test]
fn identity_bytes_equal_the_reference_store_zr() {
    let cases = table();
    let dir = tempfile::tempdir().unwrap();
    let mut script = String::from(
        "import sys, numpy as np\nfrom loaderx.zrecord import DenseStore, RaggedStore\nroot = sys.argv[1]\ncases = [\n",
    );
    for (expr, _, shape) in &cases {
        script.push_str(&format!("  ({expr}, {shape:?}),\n"));
    }
    script.push_str(
        r#"]
def ident(p):
    b = open(p + '/store.zr', 'rb').read()
    return b[32:].hex()
for i, (d, shape) in enumerate(cases):
    d = np.dtype(d)
    p = f'{root}/d{i}'
    s = DenseStore(p, d, tuple(shape)); del s
    q = f'{root}/r{i}'
    r = RaggedStore(q, d); del r
    print(ident(p), ident(q))
"#,
    );
    let out = common::run_ref_python(&script, &[dir.path().to_str().unwrap()]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), cases.len(), "reference output: {out}");
    for ((expr, dtype, shape), line) in cases.iter().zip(lines) {
        let (dense_hex, ragged_hex) = line.split_once(' ').unwrap();
        let dense = common::unhex(dense_hex);
        let ragged = common::unhex(ragged_hex);
        assert_eq!(
            encode_identity_dense(dtype, shape),
            dense,
            "dense identity of {expr} {shape:?}"
        );
        assert_eq!(
            encode_identity_ragged(dtype),
            ragged,
            "ragged identity of {expr}"
        );
        let id = decode_identity(&dense).unwrap();
        assert_eq!(&id.dtype, dtype, "{expr}");
        assert_eq!(id.item_shape.as_ref(), Some(shape));
        let id = decode_identity(&ragged).unwrap();
        assert_eq!(&id.dtype, dtype, "{expr}");
        assert_eq!(id.item_shape, None);
    }
}
