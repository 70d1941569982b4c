//! Einsum, lowered at import to Transpose / Reshape / ReduceSum / MatMul: the forward
//! values of the contractions attention exports use and of the ONNX Einsum test cases that
//! lms lowers (batch_matmul, transpose, sum, inner_prod, scalar) match a direct sum over
//! every label assignment; the equations lms does not lower (the ONNX batch_diagonal case,
//! three operands) are refused naming the equation; the gradients are checked in
//! `gradients.rs`.

use lms_compiler::frontend::{self, FrontendOptions};
use lms_runtime::{Buffer, HostTensor};
use lms_tests::onnx_builder::{ModelBuilder, A};
use lms_tests::training::serialized;
use std::collections::{BTreeMap, HashMap};

/// Deterministic values in [-1, 1) for an operand.
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 37 + seed * 101) % 97) as f32 / 48.5) - 1.0).collect()
}

/// The einsum of `operands` (shapes and values) by `equation` (letters only, explicit
/// output), summed in f64 over every assignment of the labels.
fn reference(equation: &str, operands: &[(&[usize], &[f32])]) -> (Vec<usize>, Vec<f64>) {
    let (lhs, out) = equation.split_once("->").unwrap();
    let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    let out: Vec<char> = out.chars().collect();
    let mut sizes: HashMap<char, usize> = HashMap::new();
    for (term, (shape, _)) in terms.iter().zip(operands) {
        for (&l, &s) in term.iter().zip(shape.iter()) {
            sizes.insert(l, s);
        }
    }
    let labels: Vec<char> = {
        let mut all: Vec<char> = sizes.keys().copied().collect();
        all.sort_unstable();
        all
    };
    let out_shape: Vec<usize> = out.iter().map(|l| sizes[l]).collect();
    let mut result = vec![0.0f64; out_shape.iter().product()];
    let total: usize = labels.iter().map(|l| sizes[l]).product();
    for flat in 0..total {
        let mut rest = flat;
        let mut at: HashMap<char, usize> = HashMap::new();
        for l in labels.iter().rev() {
            at.insert(*l, rest % sizes[l]);
            rest /= sizes[l];
        }
        let offset = |term: &[char], shape: &[usize]| term.iter().zip(shape).fold(0, |o, (l, &s)| o * s + at[l]);
        let product: f64 = terms.iter().zip(operands).map(|(t, (shape, v))| f64::from(v[offset(t, shape)])).product();
        result[offset(&out, &out_shape)] += product;
    }
    (out_shape, result)
}

/// Imports `equation` over inputs of `shapes` and runs it on the CPU backend.
fn run(equation: &'static str, shapes: &[&[usize]]) -> Result<HostTensor, String> {
    let mut m = ModelBuilder::new("Einsum", 17);
    let names: Vec<String> = (0..shapes.len()).map(|i| format!("x{i}")).collect();
    for (name, shape) in names.iter().zip(shapes) {
        m.input(name, 1, &shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
    }
    let inputs: Vec<&str> = names.iter().map(String::as_str).collect();
    m.node("Einsum", &inputs, &["y"], vec![("equation", A::S(equation))]).output("y");
    let model = frontend::import(&m.build(), None, &FrontendOptions::default()).map_err(|e| e.to_string())?;
    let values: BTreeMap<String, HostTensor> = names
        .iter()
        .zip(shapes)
        .enumerate()
        .map(|(i, (name, shape))| {
            let n = shape.iter().product();
            (name.clone(), HostTensor::from_vec(shape.to_vec(), values(n, i)).unwrap())
        })
        .collect();
    let program = lms_runtime::Program::new(serialized(&model.graph), "einsum").map_err(|e| e.to_string())?;
    let mut session = lms_runtime::Session::with_values(
        program,
        lms_runtime::CpuBackend::new(),
        lms_runtime::RunOptions::default(),
        &values,
    )
    .map_err(|e| e.to_string())?;
    let mut outputs = session.step().map_err(|e| e.to_string())?.outputs;
    Ok(outputs.remove(0))
}

#[test]
fn lowered_einsums_match_the_sum_over_every_label_assignment() {
    // (equation lms reads, the same with letters and an explicit output, shapes)
    let cases: &[(&str, &str, &[&[usize]])] = &[
        ("bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", &[&[2, 2, 3, 4], &[2, 2, 5, 4]]),
        ("bhqk,bhkd->bhqd", "bhqk,bhkd->bhqd", &[&[2, 2, 3, 5], &[2, 2, 5, 4]]),
        ("bqhd,bkhd->bhqk", "bqhd,bkhd->bhqk", &[&[2, 3, 2, 4], &[2, 5, 2, 4]]),
        ("bhqk,bkhd->bqhd", "bhqk,bkhd->bqhd", &[&[2, 2, 3, 5], &[2, 5, 2, 4]]),
        ("...qd,...kd->...qk", "bhqd,bhkd->bhqk", &[&[2, 2, 3, 4], &[2, 2, 5, 4]]),
        ("bsd,de->bse", "bsd,de->bse", &[&[2, 3, 4], &[4, 5]]),
        ("bhsd,hde->bse", "bhsd,hde->bse", &[&[2, 2, 3, 4], &[2, 4, 5]]),
        ("ab,cd->abcd", "ab,cd->abcd", &[&[2, 3], &[4, 2]]),
        ("bij,bjk->bi", "bij,bjk->bi", &[&[2, 3, 4], &[2, 4, 5]]),
        ("ij,jk", "ij,jk->ik", &[&[3, 4], &[4, 2]]),
        // The ONNX Einsum test cases lms lowers (float32 here, float64 there).
        ("bij, bjk -> bik", "bij,bjk->bik", &[&[5, 2, 3], &[5, 3, 4]]),
        ("ij->ji", "ij->ji", &[&[3, 4]]),
        ("ij->i", "ij->i", &[&[3, 4]]),
        ("i,i", "i,i->", &[&[5], &[5]]),
        ("->", "->", &[&[]]),
    ];
    for &(equation, letters, shapes) in cases {
        let got = run(equation, shapes).unwrap_or_else(|e| panic!("{equation}: {e}"));
        let operands: Vec<(&[usize], Vec<f32>)> =
            shapes.iter().enumerate().map(|(i, s)| (*s, values(s.iter().product(), i))).collect();
        let refs: Vec<(&[usize], &[f32])> = operands.iter().map(|(s, v)| (*s, v.as_slice())).collect();
        let (shape, want) = reference(letters, &refs);
        assert_eq!(got.shape, shape, "{equation}: shape");
        let Buffer::F32(got) = &got.data else { panic!("{equation}: not f32") };
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!((f64::from(g) - w).abs() <= 1e-5 * (1.0 + w.abs()), "{equation}: [{i}] {g}, expected {w}");
        }
    }
}

#[test]
fn equations_lms_does_not_lower_are_refused_by_name() {
    let err = run("...ii ->...i", &[&[3, 5, 5]]).unwrap_err();
    assert_eq!(
        err,
        "node 'y' (Einsum): equation '...ii ->...i' repeats 'i' within one operand (a diagonal), which lms does not lower"
    );
    let err = run("ij,jk,kl->il", &[&[2, 3], &[3, 4], &[4, 5]]).unwrap_err();
    assert!(err.contains("equation 'ij,jk,kl->il' has 3 operands; lms lowers one or two"), "{err}");
    let err = run("ij,j\u{1b}k", &[&[2, 3], &[3, 4]]).unwrap_err();
    assert!(err.starts_with("node 'y' (Einsum): equation 'ij,j") && !err.contains('\u{1b}'), "{err}");
}
