//! Finite-difference gradient checks: for every differentiable op, and for
//! the whole small fixture graphs, the gradient the training graph computes
//! matches central differences of the loss.
//!
//! The training graph uses SGD with learning rate 1, so a step changes each
//! parameter by exactly its gradient: analytic = before − after. Numeric =
//! (loss(w + ε) − loss(w − ε)) / 2ε in f32, with ε = 1e-2 for single ops and
//! 1e-3 for whole graphs (whose curvature a coarser step misreads).
//! Tolerance: |analytic − numeric| ≤ 5e-2·max(|analytic|, |numeric|) + 2e-4.
//! Weights of single-op models are read through `w + d·0` with a data input
//! `d` (ModelBuilder::trained), so that training treats them as parameters,
//! and trained by name (`--trainable '*.w'`); the fixture graphs train their
//! default set. A last test walks the frontend's op registry: every op has a
//! gradient checked here, or the compiler says why it has none.

use lms_compiler::train::{Loss, Optimizer, TrainOptions};
use lms_proto::onnx::ModelProto;
use lms_runtime::{Buffer, HostTensor};
use lms_tests::onnx_builder::{ModelBuilder, A};
use lms_tests::training::{compile, session, updated_variables};
use std::collections::BTreeMap;

/// ε for single ops.
const EPS: f32 = 1e-2;

/// Attributes of a node in a test model.
type Attrs = Vec<(&'static str, A)>;
/// ε for whole graphs.
const GRAPH_EPS: f32 = 1e-3;
/// ε for Clip.
const CLIP_EPS: f32 = 1e-3;

/// SGD with learning rate 1, training the weights named by `trainable` (default set when empty).
fn options(loss: Loss, trainable: &[&str]) -> TrainOptions {
    TrainOptions {
        loss,
        optimizer: Optimizer::Sgd { lr: 1.0 },
        trainable: trainable.iter().map(|s| s.to_string()).collect(),
        frozen: vec![],
        running_variance: None,
    }
}

fn f32s(t: &HostTensor) -> Vec<f32> {
    t.as_f32("value").unwrap().to_vec()
}

fn with(t: &HostTensor, i: usize, delta: f32) -> HostTensor {
    let mut v = f32s(t);
    v[i] += delta;
    HostTensor { shape: t.shape.clone(), data: Buffer::F32(v) }
}

/// Checks the gradient of every trained parameter of `model` at the indices
/// with the largest gradients and a few others.
fn check(name: &str, model: &ModelProto, batch: Option<usize>, loss: Loss, eps: f32) {
    check_with(name, model, batch, &options(loss, &["*.w"]), eps);
}

/// [`check`] with given training options.
fn check_with(name: &str, model: &ModelProto, batch: Option<usize>, options: &TrainOptions, eps: f32) {
    let graph = compile(model, batch, options);
    let trained: Vec<String> = updated_variables(&graph, "SgdUpdate");
    assert!(!trained.is_empty(), "{name}: nothing is trained");
    let mut s = session(&graph, 7, &BTreeMap::new());
    let before: BTreeMap<String, HostTensor> = s.variables().unwrap().into_iter().collect();
    s.step().unwrap();
    let after: BTreeMap<String, HostTensor> = s.variables().unwrap().into_iter().collect();
    let loss_at = |values: &BTreeMap<String, HostTensor>| session(&graph, 7, values).step().unwrap().loss.unwrap();
    let mut checked = 0;
    for param in &trained {
        let (w0, w1) = (&before[param], &after[param]);
        if w0.dtype() != lms_proto::lms::DType::DtypeF32 {
            continue;
        }
        let analytic: Vec<f32> = f32s(w0).iter().zip(f32s(w1)).map(|(a, b)| a - b).collect();
        let mut order: Vec<usize> = (0..analytic.len()).collect();
        order.sort_by(|&a, &b| analytic[b].abs().total_cmp(&analytic[a].abs()).then(a.cmp(&b)));
        let mut picks: Vec<usize> = order.iter().take(4).copied().collect();
        picks.extend((0..analytic.len()).step_by((analytic.len() / 3).max(1)).take(3));
        picks.sort();
        picks.dedup();
        for i in picks {
            let mut plus = before.clone();
            plus.insert(param.clone(), with(w0, i, eps));
            let mut minus = before.clone();
            minus.insert(param.clone(), with(w0, i, -eps));
            let numeric = (loss_at(&plus) - loss_at(&minus)) / (2.0 * eps);
            let a = analytic[i];
            let tol = 5e-2 * a.abs().max(numeric.abs()) + 2e-4;
            assert!((a - numeric).abs() <= tol, "{name}: d loss / d {param}[{i}]: analytic {a}, numeric {numeric}");
            checked += 1;
        }
    }
    assert!(checked > 0, "{name}: no gradient checked");
}

/// `y = op(x, extra initializers)` with x a trainable [2,3,4,5] tensor, under MSE.
fn unary(op: &str, lo: f32, hi: f32, attrs: Vec<(&str, A)>) -> ModelProto {
    let mut m = ModelBuilder::new(op, 17);
    m.trained("x", &[2, 3, 4, 5], lo, hi).node(op, &["x"], &["y"], attrs).output("y");
    m.build()
}

#[test]
fn unary_ops() {
    let cases: Vec<(&str, f32, f32, Attrs)> = vec![
        ("Relu", -1.0, 1.0, vec![]),
        ("LeakyRelu", -1.0, 1.0, vec![("alpha", A::F(0.2))]),
        ("Sigmoid", -2.0, 2.0, vec![]),
        ("Tanh", -2.0, 2.0, vec![]),
        ("Elu", -1.0, 1.0, vec![("alpha", A::F(0.7))]),
        ("Selu", -1.0, 1.0, vec![]),
        ("Softplus", -2.0, 2.0, vec![]),
        ("Softsign", -2.0, 2.0, vec![]),
        ("Exp", -1.0, 1.0, vec![]),
        ("Log", 0.5, 2.0, vec![]),
        ("Sqrt", 0.5, 2.0, vec![]),
        ("Erf", -1.5, 1.5, vec![]),
        ("Cos", -3.0, 3.0, vec![]),
        ("Sin", -3.0, 3.0, vec![]),
        ("HardSigmoid", -3.0, 3.0, vec![("alpha", A::F(0.25)), ("beta", A::F(0.4))]),
        ("HardSwish", -4.0, 4.0, vec![]),
        ("Abs", -1.0, 1.0, vec![]),
        ("Neg", -1.0, 1.0, vec![]),
        ("Reciprocal", 0.5, 2.0, vec![]),
        ("Identity", -1.0, 1.0, vec![]),
        ("Cast", -1.0, 1.0, vec![("to", A::I(1))]),
        ("Softmax", -2.0, 2.0, vec![("axis", A::I(1))]),
        ("LogSoftmax", -2.0, 2.0, vec![("axis", A::I(-1))]),
        ("Flatten", -1.0, 1.0, vec![("axis", A::I(2))]),
        ("Transpose", -1.0, 1.0, vec![("perm", A::Is(vec![2, 0, 3, 1]))]),
        ("GlobalAveragePool", -1.0, 1.0, vec![]),
        (
            "MaxPool",
            -1.0,
            1.0,
            vec![
                ("kernel_shape", A::Is(vec![2, 2])),
                ("strides", A::Is(vec![1, 2])),
                ("pads", A::Is(vec![1, 0, 0, 1])),
            ],
        ),
        (
            "AveragePool",
            -1.0,
            1.0,
            vec![
                ("kernel_shape", A::Is(vec![3, 2])),
                ("pads", A::Is(vec![1, 1, 1, 0])),
                ("count_include_pad", A::I(0)),
            ],
        ),
        ("LRN", -1.0, 1.0, vec![("size", A::I(3)), ("alpha", A::F(0.1)), ("beta", A::F(0.75)), ("bias", A::F(1.0))]),
    ];
    for (op, lo, hi, attrs) in cases {
        check(op, &unary(op, lo, hi, attrs), None, Loss::MeanSquaredError, EPS);
    }
}

/// Mish (opset 18): x · tanh(softplus(x)), through its stated unary gradient.
#[test]
fn mish() {
    let mut m = ModelBuilder::new("Mish", 18);
    m.trained("x", &[2, 3, 4, 5], -3.0, 3.0).node("Mish", &["x"], &["y"], vec![]).output("y");
    check("Mish", &m.build(), None, Loss::MeanSquaredError, EPS);
}

#[test]
fn binary_and_variadic_ops_with_broadcasting() {
    for op in ["Add", "Sub", "Mul", "Div"] {
        let mut m = ModelBuilder::new(op, 17);
        m.trained("a", &[2, 3, 4], -1.0, 1.0)
            .trained("b", &[3, 1], 0.5, 1.5)
            .node(op, &["a", "b"], &["y"], vec![])
            .output("y");
        check(op, &m.build(), None, Loss::MeanSquaredError, EPS);
    }
    let mut m = ModelBuilder::new("Sum", 17);
    m.trained("a", &[2, 3], -1.0, 1.0)
        .trained("b", &[3], -1.0, 1.0)
        .trained("c", &[2, 3], -1.0, 1.0)
        .node("Sum", &["a", "b", "c"], &["y"], vec![])
        .output("y");
    check("Sum", &m.build(), None, Loss::MeanSquaredError, EPS);
    let mut m = ModelBuilder::new("Pow", 17);
    m.trained("a", &[2, 3], 0.5, 1.5)
        .node("Constant", &[], &["p"], vec![("value_float", A::F(3.0))])
        .node("Pow", &["a", "p"], &["y"], vec![])
        .output("y");
    check("Pow", &m.build(), None, Loss::MeanSquaredError, EPS);
    let mut m = ModelBuilder::new("Expand", 17);
    m.trained("a", &[3, 1], -1.0, 1.0)
        .ints("shape", &[3], &[2, 3, 4])
        .node("Expand", &["a", "shape"], &["y"], vec![])
        .output("y");
    check("Expand", &m.build(), None, Loss::MeanSquaredError, EPS);
}

#[test]
fn linear_algebra() {
    let mut m = ModelBuilder::new("MatMul", 17);
    m.trained("a", &[2, 3, 4], -1.0, 1.0)
        .trained("b", &[4, 5], -1.0, 1.0)
        .node("MatMul", &["a", "b"], &["y"], vec![])
        .output("y");
    check("MatMul 3D x 2D", &m.build(), None, Loss::MeanSquaredError, EPS);
    let mut m = ModelBuilder::new("MatMul", 17);
    m.trained("a", &[2, 2, 3, 4], -1.0, 1.0)
        .trained("b", &[2, 2, 4, 3], -1.0, 1.0)
        .node("MatMul", &["a", "b"], &["y"], vec![])
        .output("y");
    check("MatMul batched", &m.build(), None, Loss::MeanSquaredError, EPS);
    for (ta, tb) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let mut m = ModelBuilder::new("Gemm", 17);
        let (a, b) = (
            [if ta == 1 { 4 } else { 3 }, if ta == 1 { 3 } else { 4 }],
            [if tb == 1 { 5 } else { 4 }, if tb == 1 { 4 } else { 5 }],
        );
        m.trained("a", &a, -1.0, 1.0)
            .trained("b", &b, -1.0, 1.0)
            .trained("c", &[5], -1.0, 1.0)
            .node(
                "Gemm",
                &["a", "b", "c"],
                &["y"],
                vec![("transA", A::I(ta)), ("transB", A::I(tb)), ("alpha", A::F(0.5)), ("beta", A::F(2.0))],
            )
            .output("y");
        check(&format!("Gemm transA={ta} transB={tb}"), &m.build(), None, Loss::MeanSquaredError, EPS);
    }
}

#[test]
fn convolution() {
    let cases: Vec<(&str, [i64; 4], Attrs)> = vec![
        ("plain", [4, 3, 3, 3], vec![]),
        ("strided padded", [4, 3, 3, 2], vec![("strides", A::Is(vec![2, 1])), ("pads", A::Is(vec![1, 0, 1, 1]))]),
        ("grouped dilated", [6, 1, 2, 2], vec![("group", A::I(3)), ("dilations", A::Is(vec![2, 1]))]),
        ("same upper", [2, 3, 3, 3], vec![("auto_pad", A::S("SAME_UPPER")), ("strides", A::Is(vec![2, 2]))]),
    ];
    for (name, w, attrs) in cases {
        let mut m = ModelBuilder::new("Conv", 17);
        m.trained("x", &[2, 3, 6, 5], -1.0, 1.0)
            .trained("w", &w, -1.0, 1.0)
            .trained("b", &[w[0]], -1.0, 1.0)
            .node("Conv", &["x", "w", "b"], &["y"], attrs)
            .output("y");
        check(&format!("Conv {name}"), &m.build(), None, Loss::MeanSquaredError, EPS);
    }
}

#[test]
fn transposed_convolution() {
    let cases: Vec<(&str, [i64; 4], Attrs)> = vec![
        ("plain", [3, 2, 3, 3], vec![]),
        (
            "strided padded output padding",
            [3, 2, 3, 2],
            vec![
                ("strides", A::Is(vec![2, 1])),
                ("pads", A::Is(vec![1, 0, 0, 1])),
                ("output_padding", A::Is(vec![1, 0])),
            ],
        ),
        ("grouped dilated", [3, 2, 2, 2], vec![("group", A::I(3)), ("dilations", A::Is(vec![2, 1]))]),
        ("same upper", [3, 2, 3, 3], vec![("auto_pad", A::S("SAME_UPPER")), ("strides", A::Is(vec![2, 2]))]),
        ("same lower", [3, 1, 3, 3], vec![("auto_pad", A::S("SAME_LOWER")), ("strides", A::Is(vec![2, 1]))]),
        ("output shape", [3, 2, 3, 3], vec![("strides", A::Is(vec![2, 2])), ("output_shape", A::Is(vec![12, 10]))]),
    ];
    for (name, w, attrs) in cases {
        let group = attrs.iter().find(|(k, _)| *k == "group").map_or(1, |(_, v)| if let A::I(g) = v { *g } else { 1 });
        let mut m = ModelBuilder::new("ConvTranspose", 17);
        m.trained("x", &[2, 3, 6, 5], -1.0, 1.0)
            .trained("w", &w, -1.0, 1.0)
            .trained("b", &[w[1] * group], -1.0, 1.0)
            .node("ConvTranspose", &["x", "w", "b"], &["y"], attrs)
            .output("y");
        check(&format!("ConvTranspose {name}"), &m.build(), None, Loss::MeanSquaredError, EPS);
    }
}

#[test]
fn instance_normalization_in_every_rank_and_opset() {
    for x in [&[2, 3, 4, 5][..], &[3, 2, 7], &[2, 3, 2, 3, 2]] {
        let mut m = ModelBuilder::new("InstanceNormalization", 17);
        m.trained("x", x, -1.0, 1.0)
            .trained("scale", &[x[1]], 0.5, 1.5)
            .trained("bias", &[x[1]], -1.0, 1.0)
            .node("InstanceNormalization", &["x", "scale", "bias"], &["y"], vec![("epsilon", A::F(1e-3))])
            .output("y");
        check(&format!("InstanceNormalization {x:?}"), &m.build(), None, Loss::MeanSquaredError, EPS);
    }
    // Opset 6 (no numpy broadcasting): the second normalization's dX trains the first's
    // scale and bias (through a Tanh: a normalization ignores an affine map before it).
    let mut m = ModelBuilder::new("InstanceNormalization", 6);
    m.input("x", 1, &[2, 3, 4])
        .weight("s1.w", &[3], 0.5, 1.5)
        .weight("b1.w", &[3], -1.0, 1.0)
        .weight("s2.w", &[3], 0.5, 1.5)
        .weight("b2.w", &[3], -1.0, 1.0)
        .node("InstanceNormalization", &["x", "s1.w", "b1.w"], &["h"], vec![])
        .node("Tanh", &["h"], &["t"], vec![])
        .node("InstanceNormalization", &["t", "s2.w", "b2.w"], &["y"], vec![])
        .output("y");
    check("InstanceNormalization (opset 6)", &m.build(), None, Loss::MeanSquaredError, EPS);
}

/// Einsum has no op of its own: the frontend lowers it, and its gradient is the lowered
/// ops' (Transpose, Reshape, ReduceSum, MatMul).
#[test]
fn einsum_through_its_lowering() {
    let cases: &[(&str, &[i64], &[i64])] = &[
        ("bhqd,bhkd->bhqk", &[2, 2, 3, 4], &[2, 2, 5, 4]),
        ("bhqk,bhkd->bhqd", &[2, 2, 3, 5], &[2, 2, 5, 4]),
        ("bqhd,bkhd->bhqk", &[2, 3, 2, 4], &[2, 5, 2, 4]),
        ("bsd,de->bse", &[2, 3, 4], &[4, 5]),
        ("bhsd,hde->bse", &[2, 2, 3, 4], &[2, 4, 5]),
        ("ab,cd->abcd", &[2, 3], &[4, 2]),
        ("bij,bjk->bi", &[2, 3, 4], &[2, 4, 5]),
        ("...qd,...kd->...qk", &[2, 3, 4], &[2, 5, 4]),
    ];
    for &(equation, a, b) in cases {
        let mut m = ModelBuilder::new("Einsum", 17);
        m.trained("a", a, -1.0, 1.0)
            .trained("b", b, -1.0, 1.0)
            .node("Einsum", &["a", "b"], &["y"], vec![("equation", A::S(equation))])
            .output("y");
        check(&format!("Einsum {equation}"), &m.build(), None, Loss::MeanSquaredError, EPS);
    }
    let mut m = ModelBuilder::new("Einsum", 12);
    m.trained("a", &[3, 4], -1.0, 1.0)
        .node("Einsum", &["a"], &["t"], vec![("equation", A::S("ij->ji"))])
        .node("Einsum", &["t"], &["y"], vec![("equation", A::S("ji->j"))])
        .output("y");
    check("Einsum ij->ji, ji->j (opset 12)", &m.build(), None, Loss::MeanSquaredError, EPS);
}

#[test]
fn normalisation_and_dropout() {
    let mut m = ModelBuilder::new("BatchNormalization", 15);
    m.trained("x", &[4, 3, 2, 2], -1.0, 1.0)
        .trained("scale", &[3], 0.5, 1.5)
        .trained("bias", &[3], -1.0, 1.0)
        .weight("mean", &[3], 0.0, 0.0)
        .weight("var", &[3], 1.0, 1.0)
        .node("BatchNormalization", &["x", "scale", "bias", "mean", "var"], &["y"], vec![])
        .output("y");
    check("BatchNormalization", &m.build(), None, Loss::MeanSquaredError, EPS);
    let mut m = ModelBuilder::new("LayerNormalization", 17);
    m.trained("x", &[2, 3, 8], -1.0, 1.0)
        .trained("scale", &[8], 0.5, 1.5)
        .trained("bias", &[8], -1.0, 1.0)
        .node("LayerNormalization", &["x", "scale", "bias"], &["y"], vec![])
        .output("y");
    check("LayerNormalization", &m.build(), None, Loss::MeanSquaredError, EPS);
    let mut m = ModelBuilder::new("Dropout", 11);
    m.trained("x", &[4, 16], -1.0, 1.0).node("Dropout", &["x"], &["y"], vec![("ratio", A::F(0.3))]).output("y");
    check("Dropout", &m.build(), None, Loss::MeanSquaredError, EPS);
}

#[test]
fn data_movement() {
    let mut m = ModelBuilder::new("Gather", 17);
    m.trained("table", &[10, 4], -1.0, 1.0)
        .input("ids", 7, &[2, 3])
        .node("Gather", &["table", "ids"], &["y"], vec![])
        .output("y");
    check("Gather", &m.build(), None, Loss::MeanSquaredError, EPS);
    let mut m = ModelBuilder::new("GatherElements", 17);
    m.trained("x", &[2, 4, 3], -1.0, 1.0)
        .input("ids", 7, &[2, 6, 2])
        .node("GatherElements", &["x", "ids"], &["y"], vec![("axis", A::I(1))])
        .output("y");
    check("GatherElements", &m.build(), None, Loss::MeanSquaredError, EPS);
    let mut m = ModelBuilder::new("Trilu", 17);
    m.trained("x", &[2, 3, 4], -1.0, 1.0)
        .ints("k", &[], &[1])
        .node("Trilu", &["x", "k"], &["y"], vec![("upper", A::I(0))])
        .output("y");
    check("Trilu", &m.build(), None, Loss::MeanSquaredError, EPS);
    // A causal mask as exporters write it: the strict upper triangle of a table of ones,
    // scaled to a large negative bias on the attention scores before Softmax.
    let mut m = ModelBuilder::new("Trilu causal mask", 17);
    m.trained("scores", &[2, 4, 4], -1.0, 1.0)
        .weight("ones", &[4, 4], 1.0, 1.0)
        .weight("minus", &[], -1e4, -1e4)
        .ints("one", &[], &[1])
        .node("Trilu", &["ones", "one"], &["future"], vec![])
        .node("Mul", &["future", "minus"], &["bias"], vec![])
        .node("Add", &["scores", "bias"], &["masked"], vec![])
        .node("Softmax", &["masked"], &["y"], vec![("axis", A::I(-1))])
        .output("y");
    check("Trilu causal mask", &m.build(), None, Loss::MeanSquaredError, EPS);
    let mut m = ModelBuilder::new("Reshape", 17);
    m.trained("x", &[2, 3, 4], -1.0, 1.0)
        .ints("shape", &[2], &[4, -1])
        .node("Reshape", &["x", "shape"], &["y"], vec![])
        .output("y");
    check("Reshape", &m.build(), None, Loss::MeanSquaredError, EPS);
    let mut m = ModelBuilder::new("Concat", 17);
    m.trained("a", &[2, 3], -1.0, 1.0)
        .trained("b", &[2, 5], -1.0, 1.0)
        .node("Concat", &["a", "b"], &["y"], vec![("axis", A::I(-1))])
        .output("y");
    check("Concat", &m.build(), None, Loss::MeanSquaredError, EPS);
    let mut m = ModelBuilder::new("Split", 17);
    m.trained("x", &[2, 6], -1.0, 1.0)
        .ints("sizes", &[2], &[2, 4])
        .node("Split", &["x", "sizes"], &["p", "q"], vec![("axis", A::I(1))])
        .node("Mul", &["p", "p"], &["y"], vec![])
        .output("y");
    check("Split (one part unused)", &m.build(), None, Loss::MeanSquaredError, EPS);
    let mut m = ModelBuilder::new("Slice", 17);
    m.trained("x", &[4, 6], -1.0, 1.0)
        .ints("starts", &[2], &[1, 5])
        .ints("ends", &[2], &[3, 0])
        .ints("axes", &[2], &[0, 1])
        .ints("steps", &[2], &[1, -2])
        .node("Slice", &["x", "starts", "ends", "axes", "steps"], &["y"], vec![])
        .output("y");
    check("Slice", &m.build(), None, Loss::MeanSquaredError, EPS);
    let mut m = ModelBuilder::new("Unsqueeze", 17);
    m.trained("x", &[3, 4], -1.0, 1.0)
        .ints("axes", &[1], &[1])
        .node("Unsqueeze", &["x", "axes"], &["u"], vec![])
        .node("Squeeze", &["u", "axes"], &["y"], vec![])
        .output("y");
    check("Unsqueeze/Squeeze", &m.build(), None, Loss::MeanSquaredError, EPS);
    for op in ["ReduceMean", "ReduceSum"] {
        let mut m = ModelBuilder::new(op, 18);
        m.trained("x", &[2, 3, 4], -1.0, 1.0)
            .ints("axes", &[2], &[0, -1])
            .node(op, &["x", "axes"], &["y"], vec![("keepdims", A::I(0))])
            .output("y");
        check(op, &m.build(), None, Loss::MeanSquaredError, EPS);
    }
}

#[test]
fn softmax_cross_entropy_loss() {
    let mut m = ModelBuilder::new("classifier", 13);
    m.input("x", 1, &[4, 6])
        .trained("w", &[6, 5], -1.0, 1.0)
        .node("MatMul", &["x", "w"], &["logits"], vec![])
        .node("Softmax", &["logits"], &["probs"], vec![])
        .output("probs");
    check("softmax cross-entropy (folded Softmax)", &m.build(), None, Loss::SoftmaxCrossEntropy, EPS);
}

#[test]
fn whole_fixture_graphs() {
    for name in ["mlp", "cnn_residual", "tiny_gpt"] {
        let model = lms_compiler::frontend::read_model(&lms_tests::fixture(&format!("models/{name}.onnx"))).unwrap();
        check_with(name, &model, Some(2), &options(Loss::SoftmaxCrossEntropy, &[]), GRAPH_EPS);
    }
}

#[test]
fn clip_in_every_form() {
    // A finer ε than for other ops: an element within ε of a bound has a one-sided difference.
    // Bounds as attributes (opset 10), as constant inputs (opset 13), and ReLU6 with only a lower input bound.
    let mut m = ModelBuilder::new("Clip", 10);
    m.trained("x", &[2, 3, 4, 5], -1.0, 1.0)
        .node("Clip", &["x"], &["y"], vec![("min", A::F(-0.5)), ("max", A::F(0.5))])
        .output("y");
    check("Clip (attributes)", &m.build(), None, Loss::MeanSquaredError, CLIP_EPS);
    let mut m = ModelBuilder::new("Clip", 13);
    m.trained("x", &[2, 3, 4, 5], -1.0, 1.0)
        .node("Constant", &[], &["lo"], vec![("value_float", A::F(-0.5))])
        .node("Constant", &[], &["hi"], vec![("value_float", A::F(0.25))])
        .node("Clip", &["x", "lo", "hi"], &["y"], vec![])
        .output("y");
    check("Clip (inputs)", &m.build(), None, Loss::MeanSquaredError, CLIP_EPS);
    let mut m = ModelBuilder::new("ReLU6", 13);
    m.trained("x", &[4, 16], -8.0, 8.0)
        .node("Constant", &[], &["zero"], vec![("value_float", A::F(0.0))])
        .node("Constant", &[], &["six"], vec![("value_float", A::F(6.0))])
        .node("Clip", &["x", "zero", "six"], &["y"], vec![])
        .output("y");
    check("ReLU6", &m.build(), None, Loss::MeanSquaredError, CLIP_EPS);
    // torch.clamp's bounds: constants cast (through double here) before Clip reads them.
    let mut m = ModelBuilder::new("clamp", 17);
    m.trained("x", &[2, 3, 4, 5], -1.0, 1.0)
        .node("Constant", &[], &["lo"], vec![("value_float", A::F(-0.5))])
        .node("Cast", &["lo"], &["lo64"], vec![("to", A::I(11))])
        .node("Cast", &["lo64"], &["lo32"], vec![("to", A::I(1))])
        .node("Constant", &[], &["hi"], vec![("value_float", A::F(0.25))])
        .node("Identity", &["hi"], &["hi1"], vec![])
        .node("Clip", &["x", "lo32", "hi1"], &["y"], vec![])
        .output("y");
    check("Clip (cast bounds)", &m.build(), None, Loss::MeanSquaredError, CLIP_EPS);
}

#[test]
fn prelu_with_numpy_and_per_channel_slopes() {
    let mut m = ModelBuilder::new("PRelu", 17);
    m.trained("x", &[2, 3, 4, 5], -1.0, 1.0)
        .trained("slope", &[3, 1, 1], -0.5, 0.5)
        .node("PRelu", &["x", "slope"], &["y"], vec![])
        .output("y");
    check("PRelu", &m.build(), None, Loss::MeanSquaredError, EPS);
    // Before opset 7 a slope [C] holds one value per channel (axis 1).
    let mut m = ModelBuilder::new("PRelu", 6);
    m.input("x", 1, &[2, 3, 4])
        .weight("slope.w", &[3], -0.5, 0.5)
        .node("PRelu", &["x", "slope.w"], &["y"], vec![])
        .output("y");
    check("PRelu (opset 6)", &m.build(), None, Loss::MeanSquaredError, EPS);
}

#[test]
fn mean_and_where() {
    let mut m = ModelBuilder::new("Mean", 13);
    m.trained("a", &[2, 3], -1.0, 1.0)
        .trained("b", &[3], -1.0, 1.0)
        .node("Mean", &["a", "b"], &["y"], vec![])
        .output("y");
    check("Mean", &m.build(), None, Loss::MeanSquaredError, EPS);
    let mut m = ModelBuilder::new("Where", 13);
    m.trained("a", &[2, 3, 4], -1.0, 1.0)
        .trained("c", &[4], -1.0, 1.0)
        .weight("t", &[3, 4], -1.0, 1.0)
        .weight("z", &[1], 0.0, 0.0)
        .node("Greater", &["t", "z"], &["cond"], vec![])
        .node("Where", &["cond", "a", "c"], &["y"], vec![])
        .output("y");
    check("Where", &m.build(), None, Loss::MeanSquaredError, EPS);
}

/// Frontend ops whose gradients the tests above check (BatchNormalization and
/// Dropout train as BatchNormTrain and DropoutTrain).
const CHECKED: &[&str] = &[
    "Relu",
    "LeakyRelu",
    "Sigmoid",
    "Tanh",
    "Elu",
    "Selu",
    "Softplus",
    "Softsign",
    "Mish",
    "Exp",
    "Log",
    "Sqrt",
    "Erf",
    "Cos",
    "Sin",
    "HardSigmoid",
    "HardSwish",
    "Abs",
    "Neg",
    "Reciprocal",
    "Identity",
    "Softmax",
    "LogSoftmax",
    "Flatten",
    "Transpose",
    "GlobalAveragePool",
    "MaxPool",
    "AveragePool",
    "LRN",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Sum",
    "Pow",
    "Expand",
    "MatMul",
    "Gemm",
    "Conv",
    "ConvTranspose",
    "InstanceNormalization",
    "BatchNormalization",
    "LayerNormalization",
    "Dropout",
    "Gather",
    "GatherElements",
    "Trilu",
    "Reshape",
    "Concat",
    "Split",
    "Slice",
    "Unsqueeze",
    "Squeeze",
    "ReduceMean",
    "ReduceSum",
    "Clip",
    "PRelu",
    "Mean",
    "Where",
    "Cast",
];

#[test]
fn every_frontend_op_has_a_checked_gradient_or_a_reason() {
    for op in lms_compiler::shape::supported_ops() {
        match (CHECKED.contains(&op), lms_compiler::train::no_gradient(op)) {
            (true, None) | (false, Some(_)) => {}
            (true, Some(why)) => panic!("'{op}' is gradient-checked but the compiler says: {why}"),
            (false, None) => panic!("'{op}' has neither a checked gradient nor a reason why it has none"),
        }
    }
}

#[test]
fn an_op_without_gradient_is_named_with_its_reason() {
    let mut m = ModelBuilder::new("Tile", 13);
    m.trained("x", &[2, 3], -1.0, 1.0)
        .ints("reps", &[2], &[2, 1])
        .node("Tile", &["x", "reps"], &["y"], vec![])
        .output("y");
    let model = m.build();
    let forward = lms_compiler::frontend::import(&model, None, &Default::default()).unwrap();
    let err = lms_compiler::train::build(&forward.graph, &options(Loss::MeanSquaredError, &["*.w"])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "node 'y' (Tile): cannot train through 'Tile': the gradient of Tile is not implemented (Expand has one)"
    );
}
