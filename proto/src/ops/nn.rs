//! Shape inference for neural-network layers: normalisations, `Softmax`,
//! `LogSoftmax`, `Dropout`, `Gemm` and `MatMul`; their cost, and that of the
//! training-mode forms, losses and gradients of these layers.

use super::axes::{AxesMap, Normalized};
use super::cost::{copy, CostFn, CostNode, Work};
use super::split::{self, Dim, SplitExtension, SplitRule};
use super::util::{
    broadcast, broadcast_to, check_dtype, check_rank, expect_inputs, fmt_shape, input, input_of, normalize_axis,
    optional_input, same_dtype, typed, Accepts,
};
use super::{InferFn, Node, ShapeError, ShapeResult, Value};
use crate::types::DType;

/// The layer ops.
pub(super) const OPS: &[(&str, InferFn)] = &[
    ("BatchNormalization", batch_norm),
    ("InstanceNormalization", instance_norm),
    ("LayerNormalization", layer_norm),
    ("Softmax", softmax),
    ("LogSoftmax", softmax),
    ("Dropout", dropout),
    ("Gemm", gemm),
    ("MatMul", matmul),
];

/// The layers' extensions of their axes maps. MatMul `[..., M, K] @ [..., K, N]`: its
/// reduction K as partial sums (channel). BatchNormTrain and BatchNormGrad: the batch of X
/// (and dY), by their statistics. SoftmaxCrossEntropy: the batch of the logits and labels,
/// each part dividing by the whole op's positions ([`split::whole_count_attrs`]), its
/// partial losses summed (within `split::SUM_TOLERANCE`: every term is ≥ 0); its
/// gradient's parts are its slices, by its map.
pub(super) const SPLIT_EXTENSIONS: &[(&str, SplitExtension)] = &[
    ("MatMul", matmul_reduction),
    ("BatchNormTrain", |_| vec![split::statistics(5, &[0])]),
    ("BatchNormGrad", |_| vec![split::statistics(5, &[0, 1])]),
    ("SoftmaxCrossEntropy", |n| {
        if n.in_shape(0).len() < 2 {
            return Vec::new();
        }
        vec![split::sum(Dim::Batch, 2, &[(0, 0), (1, 0)])]
    }),
];

/// MatMul's partial sums over its reduction axis K (A's last, B's second to last).
fn matmul_reduction(n: &CostNode<'_>) -> Vec<SplitRule> {
    let (a, b) = (n.in_shape(0), n.in_shape(1));
    if a.len() < 2 || b.len() < 2 {
        return Vec::new();
    }
    vec![split::sum(Dim::Channel, 2, &[(0, a.len() - 1), (1, b.len() - 2)])]
}

/// The function evaluations per element the CPU kernels of these ops make: a softmax
/// evaluates the exponential once for the row's sum and again for the output, the
/// cross-entropy gradient likewise; `SoftmaxGrad` sums and multiplies along the row, without one.
pub(super) const EVALUATIONS: &[(&str, u64)] = &[
    ("LogSoftmax", 1),
    ("LogSoftmaxGrad", 1),
    ("Softmax", 2),
    ("SoftmaxCrossEntropy", 1),
    ("SoftmaxCrossEntropyGrad", 2),
];

/// Work of the layers. Matrix products: 2 FLOPs per multiply-add, `Gemm`'s
/// C adds one per output. Per element of the (first) input: a normalisation
/// applies its statistics and affine map in 4 steps and computes them in 3
/// more (mean, squares, sum); its gradient takes 10. Softmax: max,
/// subtract-exp, sum, divide (5); its gradient 4. Dropout in training draws,
/// masks and scales (3), its gradient masks and scales (2). The losses: a
/// softmax and a pick per logit (5), the gradient a softmax and a subtract
/// (6); squared error 3 per element, its gradient 3. A batch-norm split's
/// parts take BatchNormTrain's 3 + 4 (statistics, apply) and BatchNormGrad's
/// 4 + 6 (sums, dX); its merges 8 and 1 per part and channel.
pub(super) const COSTS: &[(&str, CostFn)] = &[
    ("BatchNormalization", |n| n.per_input(4)),
    ("InstanceNormalization", |n| n.per_input(7)),
    ("LayerNormalization", |n| n.per_input(7)),
    ("Softmax", |n| n.per_input(5)),
    ("LogSoftmax", |n| n.per_input(5)),
    ("Dropout", copy),
    ("Gemm", gemm_cost),
    ("MatMul", |n| n.matrix(2 * n.out_numel(0) * n.in_shape(0).last().copied().unwrap_or(1) as u64)),
    ("BatchNormTrain", |n| n.per_input(7)),
    ("BatchNormGrad", |n| n.per_input(10)),
    ("BatchNormStatistics", |n| n.per_input(3)),
    ("BatchNormMerge", |n| n.streaming(8 * n.in_numel(0) * n.inputs.len() as u64)),
    ("BatchNormApply", |n| n.per_input(4)),
    ("BatchNormGradSums", |n| n.per_input(4)),
    ("BatchNormGradMerge", |n| n.streaming(n.in_numel(0) * n.inputs.len() as u64)),
    ("BatchNormGradData", |n| n.per_input(6)),
    ("LayerNormGrad", |n| n.per_input(10)),
    ("SoftmaxGrad", |n| n.per_input(4)),
    ("LogSoftmaxGrad", |n| n.per_input(4)),
    ("DropoutTrain", |n| n.per_input(3)),
    ("DropoutGrad", |n| n.per_input(2)),
    ("SoftmaxCrossEntropy", |n| n.per_input(5)),
    ("SoftmaxCrossEntropyGrad", |n| n.per_input(6)),
    ("MeanSquaredError", |n| n.per_input(3)),
    ("MeanSquaredErrorGrad", |n| n.per_input(3)),
];

/// The ops of this family lms cannot differentiate, and why (every other op a model may
/// hold has a gradient rule in the compiler).
pub(super) const NO_GRADIENT: &[(&str, &str)] = &[];

/// The ops of this family without an axes map (coupled along every axis), and why.
pub(super) const NO_AXES: &[(&str, &str)] = &[
    ("Dropout", "draws its mask by position"),
    ("BatchNormTrain", "its statistics couple the batch"),
    ("BatchNormGrad", "sums over the batch"),
    ("BatchNormStatistics", "a part of the split pass's batch normalization: per-channel sums of its part"),
    ("BatchNormMerge", "a part of the split pass's batch normalization: merges the parts' statistics"),
    ("BatchNormApply", "a part of the split pass's batch normalization, made per part by it"),
    ("BatchNormGradSums", "a part of the split pass's batch normalization: per-channel sums of its part"),
    ("BatchNormGradMerge", "a part of the split pass's batch normalization: merges the parts' sums"),
    ("BatchNormGradData", "a part of the split pass's batch normalization, made per part by it"),
    ("LayerNormGrad", "several outputs; dscale and dbias sum over the rows"),
    ("DropoutTrain", "draws its mask by position"),
    ("SoftmaxCrossEntropy", "a loss: one value over every position"),
    ("MeanSquaredError", "a loss: one value over every element"),
    ("MeanSquaredErrorGrad", "divides by the whole op's element count"),
];

/// Axes maps: `DropoutGrad` is elementwise (its mask has dY's shape); the softmaxes and
/// LayerNormalization normalize, the matrix products and the softmax cross-entropy
/// gradient are independent along their rows (and batch axes, columns); BatchNormalization
/// at inference and InstanceNormalization per sample and channel.
pub(super) const AXES: &[(&str, AxesMap)] = &[
    ("BatchNormalization", AxesMap::Channels { spatial_statistics: false }),
    ("InstanceNormalization", AxesMap::Channels { spatial_statistics: true }),
    ("DropoutGrad", AxesMap::Elementwise),
    ("Softmax", AxesMap::Normalized { along: Normalized::Softmax, sliced: 1 }),
    ("LogSoftmax", AxesMap::Normalized { along: Normalized::Softmax, sliced: 1 }),
    ("SoftmaxGrad", AxesMap::Normalized { along: Normalized::SoftmaxGrad, sliced: 2 }),
    ("LogSoftmaxGrad", AxesMap::Normalized { along: Normalized::SoftmaxGrad, sliced: 2 }),
    ("LayerNormalization", AxesMap::Normalized { along: Normalized::LayerNorm, sliced: 1 }),
    ("MatMul", AxesMap::MatMul),
    ("Gemm", AxesMap::Gemm),
    ("SoftmaxCrossEntropyGrad", AxesMap::Positions),
];

/// `Gemm`: A [M, K] (or [K, M] with `transA`) by B gives [M, N]: 2·M·N·K,
/// plus M·N when C is added.
fn gemm_cost(node: &CostNode<'_>) -> Work {
    let a = node.in_shape(0);
    let trans_a = node.attrs.int("transA", 0).unwrap_or(0) != 0;
    let k = if trans_a { a.first() } else { a.get(1) }.copied().unwrap_or(1) as u64;
    let c = if node.input(2).is_some() { node.out_numel(0) } else { 0 };
    node.matrix(2 * node.out_numel(0) * k + c)
}

/// Checks that the per-channel input at `index` has shape [channels].
fn check_per_channel<'a>(node: &Node<'a>, index: usize, channels: usize) -> ShapeResult<&'a Value> {
    let value = input_of(node, index, Accepts::Float)?;
    if value.ty.shape == [channels] {
        Ok(value)
    } else {
        Err(ShapeError::Invalid(format!(
            "input {index} has shape {}, expected [{channels}]",
            fmt_shape(&value.ty.shape)
        )))
    }
}

/// `BatchNormalization`: Y like X; in training mode (or old opsets) also the
/// running mean and variance and the saved mean and variance, each [C].
fn batch_norm(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 5, 5)?;
    let x = input_of(node, 0, Accepts::Float)?;
    check_rank(x, 0, 2)?;
    let channels = x.ty.shape[1];
    // Before opset 9, `spatial = 0` normalises per element: the statistics
    // then have X's shape without the batch dimension.
    let stats_shape = if node.attrs.int("spatial", 1)? == 0 { x.ty.shape[1..].to_vec() } else { vec![channels] };
    for index in 1..5 {
        let value = input_of(node, index, Accepts::Float)?;
        if value.ty.shape != stats_shape {
            return Err(ShapeError::Invalid(format!(
                "input {index} has shape {}, expected {}",
                fmt_shape(&value.ty.shape),
                fmt_shape(&stats_shape)
            )));
        }
    }
    let stats_dtype = input(node, 3)?.ty.dtype;
    let mut outputs = vec![Value::of_type(x.ty.clone())];
    outputs.extend((0..4).map(|_| typed(stats_dtype, stats_shape.clone())));
    Ok(outputs)
}

/// `InstanceNormalization`: Y like X; scale and bias are [C].
fn instance_norm(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 3, 3)?;
    let x = input_of(node, 0, Accepts::Float)?;
    check_rank(x, 0, 3)?;
    for index in 1..3 {
        same_dtype(x, check_per_channel(node, index, x.ty.shape[1])?)?;
    }
    Ok(vec![Value::of_type(x.ty.clone())])
}

/// `LayerNormalization`: Y like X, and the optional `Mean` and `InvStdDev`
/// with the normalised axes kept as 1, of the `stash_type` dtype.
fn layer_norm(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 2, 3)?;
    let x = input_of(node, 0, Accepts::Float)?;
    let rank = x.ty.rank();
    let axis = normalize_axis(node.attrs.int("axis", -1)?, rank)?;
    let normalized = &x.ty.shape[axis..];
    input(node, 1)?;
    for (index, what) in [(1, "scale"), (2, "bias")] {
        if let Some(param) = optional_input(node, index) {
            same_dtype(x, param)?;
            broadcast_to(&param.ty.shape, normalized, what)?;
        }
    }
    let stash = node.attrs.int("stash_type", 1)?;
    let stash_dtype = i32::try_from(stash)
        .ok()
        .and_then(DType::from_code)
        .filter(|d| d.is_float())
        .ok_or_else(|| ShapeError::UnsupportedAttr { name: "stash_type".into(), value: stash.to_string() })?;
    let mut stats_shape = x.ty.shape.clone();
    stats_shape[axis..].fill(1);
    Ok(vec![Value::of_type(x.ty.clone()), typed(stash_dtype, stats_shape.clone()), typed(stash_dtype, stats_shape)])
}

/// How `Softmax` and `LogSoftmax` read their `axis`, the one statement of ONNX's rule that
/// the shape rule, the compiler's training forms, gradients and independence facts and both
/// backends' kernels follow: before opset 13 the op works on the input coerced to 2-D at
/// `axis` (default 1), from opset 13 along `axis` alone (default -1). The gradients
/// (`SoftmaxGrad`, `LogSoftmaxGrad`) carry the form in their `coerce` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoftmaxAxis {
    /// The axis when the node has no `axis` attribute.
    pub default: i64,
    /// Whether the input is coerced to 2-D at the axis (normalized over it and every later axis).
    pub coerced: bool,
}

impl SoftmaxAxis {
    /// The form of a softmax node at ONNX opset `opset`.
    pub fn at_opset(opset: i64) -> SoftmaxAxis {
        SoftmaxAxis::new(opset < 13)
    }

    /// The form coerced to 2-D or not (a gradient's `coerce` attribute).
    pub fn new(coerced: bool) -> SoftmaxAxis {
        SoftmaxAxis { default: if coerced { 1 } else { -1 }, coerced }
    }
}

/// `Softmax`, `LogSoftmax`: same shape, whatever its [`SoftmaxAxis`] form (coercing to
/// 2-D does not change the output shape).
fn softmax(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, 1)?;
    let x = input_of(node, 0, Accepts::Float)?;
    normalize_axis(node.attrs.int("axis", SoftmaxAxis::at_opset(node.opset).default)?, x.ty.rank())?;
    Ok(vec![Value::of_type(x.ty.clone())])
}

/// `Dropout`: output like the data, and the optional mask. The mask is bool
/// in every opset, as ONNX's reference evaluator computes it (opsets before
/// 10 declare it with the data's type, but its values are booleans either
/// way). The ratio is an attribute before opset 12 and an optional input
/// after, with `training_mode`.
fn dropout(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, if node.opset < 12 { 1 } else { 3 })?;
    let x = input_of(node, 0, Accepts::Float)?;
    if let Some(ratio) = optional_input(node, 1) {
        check_dtype(ratio, 1, Accepts::Float)?;
    }
    if let Some(training) = optional_input(node, 2) {
        check_dtype(training, 2, Accepts::Bool)?;
    }
    Ok(vec![Value::of_type(x.ty.clone()), typed(DType::Bool, x.ty.shape.clone())])
}

/// The rank-2 input at `index`, as (rows, cols) after the optional transpose.
fn matrix(node: &Node<'_>, index: usize, transposed: &str) -> ShapeResult<(usize, usize)> {
    let value = input_of(node, index, Accepts::Numeric)?;
    match value.ty.shape[..] {
        [r, c] if node.attrs.int(transposed, 0)? != 0 => Ok((c, r)),
        [r, c] => Ok((r, c)),
        _ => Err(ShapeError::Invalid(format!("input {index} has rank {}, expected 2", value.ty.rank()))),
    }
}

/// `Gemm`: op(A) [M, K] · op(B) [K, N] (+ C broadcast to [M, N]).
fn gemm(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 2, 3)?;
    let ((m, k), (k2, n)) = (matrix(node, 0, "transA")?, matrix(node, 1, "transB")?);
    let a = input(node, 0)?;
    same_dtype(a, input(node, 1)?)?;
    if k != k2 {
        return Err(ShapeError::Invalid(format!("inner dimensions differ: [{m},{k}] x [{k2},{n}]")));
    }
    if let Some(c) = optional_input(node, 2) {
        same_dtype(a, c)?;
        broadcast_to(&c.ty.shape, &[m, n], "C")?;
    } else if node.opset < 11 {
        return Err(ShapeError::MissingInput { index: 2 });
    }
    Ok(vec![typed(a.ty.dtype, vec![m, n])])
}

/// `MatMul` with numpy semantics: a 1-D operand is promoted to a matrix and
/// its added dimension removed from the result; batch dimensions broadcast.
fn matmul(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 2, 2)?;
    let a = input_of(node, 0, Accepts::Numeric)?;
    let b = input(node, 1)?;
    let dtype = same_dtype(a, b)?;
    let (sa, sb) = (&a.ty.shape, &b.ty.shape);
    let mismatch = || ShapeError::Invalid(format!("cannot multiply {} by {}", fmt_shape(sa), fmt_shape(sb)));
    let (&k, &k2) = match (sa.last(), sb.len()) {
        (Some(k), 1) => (k, &sb[0]),
        (Some(k), r) if r >= 2 => (k, &sb[r - 2]),
        _ => return Err(mismatch()),
    };
    if k != k2 {
        return Err(mismatch());
    }
    let batch_a = &sa[..sa.len().saturating_sub(2)];
    let batch_b = &sb[..sb.len().saturating_sub(2)];
    let mut shape = broadcast(batch_a, batch_b).map_err(|_| mismatch())?;
    if sa.len() >= 2 {
        shape.push(sa[sa.len() - 2]);
    }
    if sb.len() >= 2 {
        shape.push(sb[sb.len() - 1]);
    }
    Ok(vec![typed(dtype, shape)])
}

#[cfg(test)]
mod tests {
    use super::super::cost::testing::{counts, work_of};
    use super::super::cost::Engine;
    use super::super::util::testing::{error, f, run, shape, t};
    use crate::types::{Attr, Attrs, DType};

    /// Hand-computed: ResNet's classifier, [256, 2048] x [1000, 2048]ᵀ + [1000]
    /// is 2·256·1000·2048 = 1,048,576,000 FLOPs plus 256,000 for the bias.
    #[test]
    fn costs() {
        let trans_b = Attrs::new().with("transB", Attr::Int(1));
        let gemm = work_of("Gemm", &trans_b, &[&[256, 2048], &[1000, 2048], &[1000]], &[&[256, 1000]]);
        assert_eq!(gemm.flops, 1_048_576_000 + 256_000);
        assert_eq!((gemm.bytes_read, gemm.bytes_written, gemm.engine), (10_293_152, 1_024_000, Engine::Matrix));
        let trans_a = Attrs::new().with("transA", Attr::Int(1));
        assert_eq!(work_of("Gemm", &trans_a, &[&[2048, 256], &[2048, 1000]], &[&[256, 1000]]).flops, 1_048_576_000);
        // Batched: 12 heads of [128, 64] x [64, 128].
        assert_eq!(counts("MatMul", &[&[12, 128, 64], &[12, 64, 128]], &[&[12, 128, 128]]).0, 2 * 12 * 128 * 128 * 64);
        let x: &[usize] = &[256, 64, 56, 56];
        let (n, b) = (51_380_224, 205_520_896);
        let bn = counts("BatchNormTrain", &[x, &[64], &[64], &[64], &[64]], &[x, &[64], &[64], &[64], &[64]]);
        assert_eq!(bn, (7 * n, b + 4 * 256, b + 4 * 256));
        assert_eq!(counts("BatchNormGrad", &[x, x, &[64], &[64], &[64]], &[x, &[64], &[64]]).0, 10 * n);
        assert_eq!(counts("SoftmaxCrossEntropy", &[&[256, 1000], &[256]], &[&[]]), (5 * 256_000, 1_025_024, 4));
    }

    #[test]
    fn gemm_transposes() {
        let attrs = Attrs::new().with("transA", Attr::Int(1)).with("transB", Attr::Int(1));
        assert_eq!(shape("Gemm", 13, attrs, &[f(&[4, 3]), f(&[5, 4]), f(&[5])]), vec![3, 5]);
        assert_eq!(shape("Gemm", 13, Attrs::new(), &[f(&[3, 4]), f(&[4, 5])]), vec![3, 5]);
        let trans_b = Attrs::new().with("transB", Attr::Int(1));
        assert_eq!(shape("Gemm", 9, trans_b.clone(), &[f(&[8, 512]), f(&[10, 512]), f(&[1, 10])]), vec![8, 10]);
        assert_eq!(
            error("Gemm", 13, trans_b.clone(), &[f(&[3, 4]), f(&[4, 5])]),
            "inner dimensions differ: [3,4] x [5,4]"
        );
        assert_eq!(
            error("Gemm", 13, trans_b.clone(), &[f(&[3, 4]), f(&[5, 4]), f(&[3])]),
            "C [3] does not broadcast to [3,5]"
        );
        assert_eq!(error("Gemm", 9, trans_b, &[f(&[3, 4]), f(&[5, 4])]), "input 2 is required");
    }

    #[test]
    fn matmul_numpy() {
        assert_eq!(shape("MatMul", 13, Attrs::new(), &[f(&[2, 3]), f(&[3, 4])]), vec![2, 4]);
        assert_eq!(shape("MatMul", 13, Attrs::new(), &[f(&[3]), f(&[3])]), Vec::<usize>::new());
        assert_eq!(shape("MatMul", 13, Attrs::new(), &[f(&[3]), f(&[5, 3, 4])]), vec![5, 4]);
        assert_eq!(shape("MatMul", 13, Attrs::new(), &[f(&[5, 2, 3]), f(&[3])]), vec![5, 2]);
        assert_eq!(shape("MatMul", 13, Attrs::new(), &[f(&[7, 1, 2, 3]), f(&[6, 3, 4])]), vec![7, 6, 2, 4]);
        assert_eq!(shape("MatMul", 13, Attrs::new(), &[t(DType::I32, &[2, 3]), t(DType::I32, &[3, 1])]), vec![2, 1]);
        assert_eq!(error("MatMul", 13, Attrs::new(), &[f(&[2, 3]), f(&[4, 5])]), "cannot multiply [2,3] by [4,5]");
        assert_eq!(
            error("MatMul", 13, Attrs::new(), &[f(&[2, 2, 3]), f(&[3, 3, 4])]),
            "cannot multiply [2,2,3] by [3,3,4]"
        );
        assert_eq!(error("MatMul", 13, Attrs::new(), &[f(&[]), f(&[3])]), "cannot multiply [] by [3]");
    }

    #[test]
    fn batch_norm_outputs() {
        let inputs = [f(&[8, 16, 4, 4]), f(&[16]), f(&[16]), f(&[16]), f(&[16])];
        assert_eq!(run("BatchNormalization", 15, Attrs::new(), &inputs, 1).unwrap().len(), 1);
        let training = run("BatchNormalization", 15, Attrs::new(), &inputs, 3).unwrap();
        assert_eq!((training[0].ty.shape.clone(), training[2].ty.shape.clone()), (vec![8, 16, 4, 4], vec![16]));
        assert_eq!(run("BatchNormalization", 7, Attrs::new(), &inputs, 5).unwrap()[4].ty.shape, vec![16]);
        let wrong = [f(&[8, 16, 4, 4]), f(&[16]), f(&[8]), f(&[16]), f(&[16])];
        assert_eq!(error("BatchNormalization", 15, Attrs::new(), &wrong), "input 2 has shape [8], expected [16]");
    }

    #[test]
    fn norms_softmax_dropout() {
        let ln =
            run("LayerNormalization", 17, Attrs::new().with("axis", Attr::Int(-2)), &[f(&[2, 5, 8]), f(&[5, 8])], 3)
                .unwrap();
        assert_eq!(
            (ln[0].ty.shape.clone(), ln[1].ty.shape.clone(), ln[2].ty.dtype),
            (vec![2, 5, 8], vec![2, 1, 1], DType::F32)
        );
        assert_eq!(
            error("LayerNormalization", 17, Attrs::new(), &[f(&[2, 5, 8]), f(&[5])]),
            "scale [5] does not broadcast to [8]"
        );
        assert_eq!(
            shape("InstanceNormalization", 6, Attrs::new(), &[f(&[1, 3, 9, 9]), f(&[3]), f(&[3])]),
            vec![1, 3, 9, 9]
        );
        assert_eq!(shape("Softmax", 11, Attrs::new(), &[f(&[2, 10])]), vec![2, 10]);
        assert_eq!(
            error("Softmax", 13, Attrs::new().with("axis", Attr::Int(3)), &[f(&[2, 10])]),
            "axis 3 is out of range for rank 2"
        );
        let drop = run("Dropout", 13, Attrs::new(), &[f(&[4, 4]), f(&[]), t(DType::Bool, &[])], 2).unwrap();
        assert_eq!((drop[1].ty.dtype, drop[1].ty.shape.clone()), (DType::Bool, vec![4, 4]));
        let old = run("Dropout", 7, Attrs::new().with("ratio", Attr::Float(0.1)), &[f(&[4])], 2).unwrap();
        // Bool in every opset, as ONNX's reference evaluator computes it.
        assert_eq!(old[1].ty.dtype, DType::Bool);
    }
}
