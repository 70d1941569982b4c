//! Shape inference for ops that select or join parts of tensors: `Concat`,
//! `Split`, `Slice`, `Gather`, `GatherElements`, `Pad` and `Trilu`. Integer contents are folded
//! (except for `Pad`). Their cost, and that of their gradients.

use super::axes::{Acting, AxesMap};
use super::cost::{copy, CostFn, CostNode, Work};
use super::registry::GradientForm;
use super::split::{Dim, SplitExtension, SplitRule};
use super::util::{
    affine_gather, checked_numel, const_i64s, expect_inputs, fmt_shape, fold, input, input_of, int_data,
    normalize_axes, normalize_axis, optional_const_i64s, optional_input, same_dtype, strides, to_dim, too_large, typed,
    wide_to_dim, Accepts,
};
use super::{InferFn, Node, ShapeError, ShapeResult, Value};
use crate::types::{AttrError, DType, TensorType};

/// The selecting and joining ops.
pub(super) const OPS: &[(&str, InferFn)] = &[
    ("Concat", concat),
    ("Split", split),
    ("Slice", slice),
    ("Gather", gather),
    ("GatherElements", gather_elements),
    ("Pad", pad),
    ("Trilu", trilu),
];

/// The extension of `Concat`, which has no axes map (the e-graph's concatenation term is
/// its statement): along another axis it splits along the batch, each part joining its
/// inputs' slices; bit-identical.
pub(super) const SPLIT_EXTENSIONS: &[(&str, SplitExtension)] = &[("Concat", concat_batch)];

fn concat_batch(n: &CostNode<'_>) -> Vec<SplitRule> {
    let rank = n.in_shape(0).len();
    let own = n.attrs.int("axis", 0).ok().and_then(|a| normalize_axis(a, rank).ok());
    let same_batch =
        (0..n.inputs.len()).all(|i| n.in_shape(i).len() == rank && n.in_shape(i)[..1] == n.in_shape(0)[..1]);
    if rank == 0 || own.is_none_or(|a| a == 0) || !same_batch {
        return Vec::new();
    }
    let sliced: Vec<(usize, usize)> = (0..n.inputs.len()).map(|i| (i, 0)).collect();
    vec![super::split::concat(Dim::Batch, n.inputs.len(), &sliced, 0)]
}

/// Work of the selecting and joining ops: copies. `Slice` and `Gather` read
/// only what they keep (and the indices); `GatherGrad` and `SliceGrad`
/// write zeros over their whole output and add or copy dY into it (one FLOP
/// per element of dY for the scatter-add). `SplitPart` copies one part and
/// `SplitWindow` one window; `OverlapAdd` writes zeros over its output and
/// adds each part into it (one FLOP per element of the parts).
pub(super) const COSTS: &[(&str, CostFn)] = &[
    ("SplitPart", |n| n.partial_copy(n.bytes_out())),
    ("SplitWindow", |n| n.partial_copy(n.bytes_out())),
    ("OverlapAdd", |n| n.streaming((0..n.inputs.len()).map(|i| n.in_numel(i)).sum())),
    ("Concat", copy),
    ("Split", copy),
    ("Slice", |n| n.partial_copy(n.bytes_out())),
    ("Gather", |n| n.partial_copy(n.bytes_out() + n.input(1).map_or(0, |t| t.bytes()))),
    ("Pad", copy),
    ("ConcatGrad", copy),
    ("SliceGrad", copy),
    ("GatherGrad", gather_grad_cost),
    ("GatherElements", |n| n.partial_copy(n.bytes_out() + n.input(1).map_or(0, |t| t.bytes()))),
    ("GatherElementsGrad", gather_elements_grad_cost),
    ("Trilu", copy),
];

/// The ops of this family lms cannot differentiate, and why (every other op a model may
/// hold has a gradient rule in the compiler).
pub(super) const NO_GRADIENT: &[(&str, &str)] = &[("Pad", "the gradient of Pad is not implemented")];

/// The ops of this family whose definition states their gradient.
pub(super) const GRADIENTS: &[(&str, GradientForm)] = &[("Trilu", GradientForm::SelfAdjoint)];

/// The ops of this family without an axes map (coupled along every axis), and why.
pub(super) const NO_AXES: &[(&str, &str)] = &[
    ("SplitPart", "an op of the split pass: cuts the parts"),
    ("SplitWindow", "an op of the split pass: cuts the halo windows"),
    ("OverlapAdd", "an op of the split pass: joins overlapping parts"),
    (
        "Concat",
        "the e-graph's concatenation term itself: its independence along the other axes is the rule that interchanges two concatenations, its batch split a split rule",
    ),
    ("GatherGrad", "scatter-adds at its indices over the whole data axis"),
    ("GatherElementsGrad", "scatter-adds at its indices"),
];

/// Axes maps: Split's chunks are independent along every axis but its own, Trilu along
/// its batch axes; Slice, Pad and their gradients along the axes they leave alone;
/// Gather along its data's other axes and its indices' axes.
pub(super) const AXES: &[(&str, AxesMap)] = &[
    ("Split", AxesMap::Chunks),
    ("Trilu", AxesMap::Leading { trailing: 2 }),
    ("Slice", AxesMap::Acting(Acting::Slice)),
    ("SliceGrad", AxesMap::Acting(Acting::SliceGrad)),
    ("Pad", AxesMap::Acting(Acting::Pad)),
    ("ConcatGrad", AxesMap::Acting(Acting::ConcatGrad)),
    ("Gather", AxesMap::Gathered { elements: false }),
    ("GatherElements", AxesMap::Gathered { elements: true }),
];

/// `GatherGrad`: zeros of data's shape, dY scatter-added at the indices.
fn gather_grad_cost(node: &CostNode<'_>) -> Work {
    node.per_input(1)
}

/// `GatherElementsGrad`: zeros of data's shape; each element sums the dY
/// positions along the axis whose index names it (one compare and one add per
/// index along the axis).
fn gather_elements_grad_cost(node: &CostNode<'_>) -> Work {
    let along = node
        .input(1)
        .zip(node.attrs.int("axis", 0).ok())
        .and_then(|(t, axis)| normalize_axis(axis, t.shape.len()).ok().map(|a| t.shape[a] as u64));
    node.streaming(2 * node.out_numel(0) * along.unwrap_or(1))
}

/// `Trilu` (opset 14): input 0's type. Each matrix of its last two axes keeps its upper
/// (`upper` 1, the default) or lower (`upper` 0) triangle from diagonal `k` (input 1, one
/// int64, default 0) and is zero elsewhere; `k` may be computed at run time.
fn trilu(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    if node.opset < 14 {
        return Err(ShapeError::Invalid(format!(
            "Trilu is an op of opset 14 and later, the model imports {}",
            node.opset
        )));
    }
    expect_inputs(node, 1, 2)?;
    let x = input(node, 0)?;
    if x.ty.rank() < 2 {
        return Err(ShapeError::Invalid(format!("input 0 has rank {}, below 2", x.ty.rank())));
    }
    if let Some(k) = optional_input(node, 1) {
        if k.ty.dtype != DType::I64 || checked_numel(&k.ty.shape)? != 1 {
            return Err(ShapeError::Invalid(format!("input 1 (k) must be one int64, got {}", k.ty)));
        }
    }
    match node.attrs.int("upper", 1)? {
        0 | 1 => Ok(vec![Value::of_type(x.ty.clone())]),
        other => Err(ShapeError::UnsupportedAttr { name: "upper".into(), value: other.to_string() }),
    }
}

/// `Concat`: inputs of one dtype and rank, equal except along `axis`.
fn concat(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, usize::MAX)?;
    let first = input(node, 0)?;
    let axis = normalize_axis(node.attrs.req_int("axis")?, first.ty.rank())?;
    let parts = (0..node.inputs.len()).map(|i| input(node, i)).collect::<ShapeResult<Vec<_>>>()?;
    let mut shape = first.ty.shape.clone();
    shape[axis] = 0;
    for (index, part) in parts.iter().enumerate() {
        same_dtype(first, part)?;
        let other = &part.ty.shape;
        let matches = other.len() == shape.len() && (0..shape.len()).all(|i| i == axis || other[i] == shape[i]);
        if !matches {
            return Err(ShapeError::Invalid(format!(
                "input {index} has shape {}, which does not concatenate with {} on axis {axis}",
                fmt_shape(other),
                fmt_shape(&first.ty.shape)
            )));
        }
        shape[axis] = shape[axis].checked_add(other[axis]).ok_or_else(too_large)?;
    }
    let outer = checked_numel(&shape[..axis])?;
    let inner = checked_numel(&shape[axis + 1..])?;
    let ty = TensorType::new(first.ty.dtype, shape);
    let out = fold(ty, || {
        let Some(data) = parts.iter().map(|p| int_data(p)).collect::<Option<Vec<_>>>() else {
            return Ok(None);
        };
        let chunks: Vec<usize> = parts.iter().map(|p| p.ty.shape[axis].saturating_mul(inner)).collect();
        let mut values = Vec::new();
        for o in 0..outer {
            for (d, &chunk) in data.iter().zip(&chunks) {
                values.extend_from_slice(d.get(o * chunk..(o + 1) * chunk).unwrap_or_default());
            }
        }
        Ok(Some(values))
    })?;
    Ok(vec![out])
}

/// `Split`: one output per declared output along `axis`; sizes from the
/// `split` attribute (before opset 13) or input (from 13), else equal parts
/// (from opset 18 with `num_outputs`, the last part may be smaller).
fn split(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    let sizes = if node.opset >= 13 {
        expect_inputs(node, 1, 2)?;
        optional_const_i64s(node, 1, "the split sizes")?
    } else {
        expect_inputs(node, 1, 1)?;
        node.attrs.ints_opt("split")?
    };
    let x = input(node, 0)?;
    let axis = normalize_axis(node.attrs.int("axis", 0)?, x.ty.rank())?;
    let dim = x.ty.shape[axis];
    let n = node.num_outputs;
    if n == 0 {
        return Err(ShapeError::OutputCount { expected: "at least 1".into(), got: 0 });
    }
    let parts = match sizes {
        Some(sizes) => {
            if sizes.len() != n {
                return Err(ShapeError::Invalid(format!("{} split sizes for {n} outputs", sizes.len())));
            }
            let sizes = sizes.iter().map(|&s| to_dim(s, "a split size")).collect::<ShapeResult<Vec<_>>>()?;
            if sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s)) != Some(dim) {
                return Err(ShapeError::Invalid(format!(
                    "split sizes {} do not add up to {dim} on axis {axis}",
                    fmt_shape(&sizes)
                )));
            }
            sizes
        }
        None => equal_parts(node, dim, n)?,
    };
    let in_strides = strides(&x.ty.shape);
    let coefs: Vec<i64> = in_strides.iter().map(|&s| s as i64).collect();
    let data = int_data(x);
    let mut offset = 0;
    let mut outputs = Vec::with_capacity(n);
    for size in parts {
        let mut shape = x.ty.shape.clone();
        shape[axis] = size;
        let ty = TensorType::new(x.ty.dtype, shape);
        // Known contents imply a small input, so the offset cannot overflow.
        let part = |d: &Vec<i64>| affine_gather(d, &ty.shape, (offset * in_strides[axis]) as i64, &coefs);
        outputs.push(fold(ty.clone(), || Ok(data.as_ref().and_then(part)))?);
        offset += size;
    }
    Ok(outputs)
}

/// Sizes of `n` parts of `dim` without explicit sizes.
fn equal_parts(node: &Node<'_>, dim: usize, n: usize) -> ShapeResult<Vec<usize>> {
    if node.opset >= 18 {
        if let Some(k) = node.attrs.int_opt("num_outputs")? {
            if usize::try_from(k).ok() != Some(n) {
                return Err(ShapeError::Invalid(format!(
                    "attribute 'num_outputs' is {k}, but the node has {n} outputs"
                )));
            }
            let chunk = dim.div_ceil(n);
            let full = chunk.checked_mul(n - 1).filter(|&full| full <= dim);
            let last = full
                .map(|full| dim - full)
                .ok_or_else(|| ShapeError::Invalid(format!("cannot split size {dim} into {n} parts")))?;
            return Ok((0..n).map(|i| if i + 1 == n { last } else { chunk }).collect());
        }
    }
    if dim % n != 0 {
        return Err(ShapeError::Invalid(format!("cannot split size {dim} into {n} equal parts")));
    }
    Ok(vec![dim / n; n])
}

/// `Slice`: `starts`, `ends`, `axes` are attributes before opset 10; from
/// 10 they are constant inputs, with optional `axes` and `steps`.
fn slice(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    let (starts, ends, axes, steps) = if node.opset < 10 {
        expect_inputs(node, 1, 1)?;
        let attrs = node.attrs;
        let required = |name: &str| attrs.ints_opt(name)?.ok_or_else(|| AttrError::Missing(name.into()));
        (required("starts")?, required("ends")?, attrs.ints_opt("axes")?, None)
    } else {
        expect_inputs(node, 3, 5)?;
        (
            const_i64s(node, 1, "the slice starts")?,
            const_i64s(node, 2, "the slice ends")?,
            optional_const_i64s(node, 3, "the slice axes")?,
            optional_const_i64s(node, 4, "the slice steps")?,
        )
    };
    let x = input(node, 0)?;
    let rank = x.ty.rank();
    let n = starts.len();
    let axes = axes.unwrap_or_else(|| (0..n as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; n]);
    if ends.len() != n || axes.len() != n || steps.len() != n {
        return Err(ShapeError::Invalid(format!(
            "slice has {n} starts, {} ends, {} axes and {} steps",
            ends.len(),
            axes.len(),
            steps.len()
        )));
    }
    let axes = normalize_axes(&axes, rank)?;
    let mut shape = x.ty.shape.clone();
    let mut first = vec![0usize; rank];
    let mut step_of = vec![1i64; rank];
    for (i, &axis) in axes.iter().enumerate() {
        let (start, len) = slice_range(shape[axis], starts[i], ends[i], steps[i])?;
        shape[axis] = len;
        first[axis] = start;
        step_of[axis] = steps[i];
    }
    let in_strides = strides(&x.ty.shape);
    let ty = TensorType::new(x.ty.dtype, shape);
    let out = fold(ty.clone(), || {
        let base = (0..rank).fold(0i64, |b, i| b.wrapping_add((first[i] as i64).wrapping_mul(in_strides[i] as i64)));
        let coefs: Vec<i64> = (0..rank).map(|i| step_of[i].wrapping_mul(in_strides[i] as i64)).collect();
        Ok(int_data(x).and_then(|d| affine_gather(&d, &ty.shape, base, &coefs)))
    })?;
    Ok(vec![out])
}

/// The first index and length of a slice of an axis of size `dim`, with
/// ONNX's rules: negative indices count from the end, then clamping.
fn slice_range(dim: usize, start: i64, end: i64, step: i64) -> ShapeResult<(usize, usize)> {
    if step == 0 {
        return Err(ShapeError::Invalid("slice step cannot be 0".into()));
    }
    if dim == 0 {
        return Ok((0, 0));
    }
    let d = dim as i128;
    let (mut s, mut e, step) = (start as i128, end as i128, step as i128);
    if s < 0 {
        s += d;
    }
    if e < 0 {
        e += d;
    }
    let len = if step > 0 {
        (s, e) = (s.clamp(0, d), e.clamp(0, d));
        (e - s + step - 1) / step
    } else {
        (s, e) = (s.clamp(0, d - 1), e.clamp(-1, d - 1));
        (s - e - step - 1) / -step
    };
    Ok((wide_to_dim(s)?, wide_to_dim(len.max(0))?))
}

/// `Gather`: data[:axis] + indices.shape + data[axis+1:]; known indices are
/// checked (negative ones count from the end) and integer data folded.
fn gather(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 2, 2)?;
    let data = input(node, 0)?;
    let indices = input_of(node, 1, Accepts::Index)?;
    let axis = normalize_axis(node.attrs.int("axis", 0)?, data.ty.rank())?;
    let dim = data.ty.shape[axis];
    let mut shape = data.ty.shape[..axis].to_vec();
    shape.extend_from_slice(&indices.ty.shape);
    shape.extend_from_slice(&data.ty.shape[axis + 1..]);
    let picked = match int_data(indices) {
        Some(raw) => Some(
            raw.iter()
                .map(|&i| {
                    let j = if i < 0 { i as i128 + dim as i128 } else { i as i128 };
                    usize::try_from(j).ok().filter(|&j| j < dim).ok_or_else(|| {
                        ShapeError::Invalid(format!("index {i} is out of range for axis {axis} of size {dim}"))
                    })
                })
                .collect::<ShapeResult<Vec<_>>>()?,
        ),
        None => None,
    };
    let outer = checked_numel(&data.ty.shape[..axis])?;
    let inner = checked_numel(&data.ty.shape[axis + 1..])?;
    let out = fold(TensorType::new(data.ty.dtype, shape), || {
        let (Some(values), Some(picked)) = (int_data(data), picked) else {
            return Ok(None);
        };
        let mut out = Vec::new();
        for o in 0..outer {
            for &j in &picked {
                let at = (o * dim + j) * inner;
                out.extend_from_slice(values.get(at..at + inner).unwrap_or_default());
            }
        }
        Ok(Some(out))
    })?;
    Ok(vec![out])
}

/// `GatherElements`: indices of data's rank, no longer than data on every
/// axis but `axis`; the output has the indices' shape: out[i] = data[i with
/// its `axis` coordinate replaced by indices[i]] (negative indices wrap).
fn gather_elements(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 2, 2)?;
    let data = input(node, 0)?;
    let indices = input_of(node, 1, Accepts::Index)?;
    let (shape, index_shape) = (&data.ty.shape, &indices.ty.shape);
    let axis = normalize_axis(node.attrs.int("axis", 0)?, shape.len())?;
    if index_shape.len() != shape.len()
        || index_shape.iter().zip(shape).enumerate().any(|(d, (&i, &n))| d != axis && i > n)
    {
        return Err(ShapeError::Invalid(format!(
            "indices {} must have the rank of data {} and be no longer on every axis but {axis}",
            fmt_shape(index_shape),
            fmt_shape(shape)
        )));
    }
    let out = fold(TensorType::new(data.ty.dtype, index_shape.clone()), || {
        let (Some(values), Some(picks)) = (int_data(data), int_data(indices)) else {
            return Ok(None);
        };
        let (data_strides, index_strides) = (strides(shape), strides(index_shape));
        let dim = shape[axis] as i64;
        let mut out = Vec::with_capacity(picks.len());
        for (flat, &pick) in picks.iter().enumerate() {
            let j = if pick < 0 { pick + dim } else { pick };
            if !(0..dim).contains(&j) {
                return Err(ShapeError::Invalid(format!("index {pick} is out of range for axis {axis} of size {dim}")));
            }
            let mut at = 0;
            for d in 0..shape.len() {
                let coord = if d == axis { j as usize } else { flat / index_strides[d] % index_shape[d] };
                at += coord * data_strides[d];
            }
            out.push(values[at]);
        }
        Ok(Some(out))
    })?;
    Ok(vec![out])
}

/// `Pad`: `pads` (begins then ends; negative ones crop) is an attribute
/// before opset 11 and a constant input from it, with optional
/// `constant_value` and (opset 18) `axes` inputs.
fn pad(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    let (pads, axes) = if node.opset < 11 {
        expect_inputs(node, 1, 1)?;
        (node.attrs.ints_opt("pads")?.ok_or_else(|| AttrError::Missing("pads".into()))?, None)
    } else {
        expect_inputs(node, 2, 4)?;
        (const_i64s(node, 1, "the pads")?, optional_const_i64s(node, 3, "the pad axes")?)
    };
    let x = input(node, 0)?;
    if let Some(value) = optional_input(node, 2) {
        same_dtype(x, value)?;
    }
    match node.attrs.string("mode", "constant".into())?.as_str() {
        "constant" | "reflect" | "edge" | "wrap" => {}
        other => return Err(ShapeError::UnsupportedAttr { name: "mode".into(), value: other.into() }),
    }
    let rank = x.ty.rank();
    let axes = match axes {
        Some(axes) => normalize_axes(&axes, rank)?,
        None => (0..rank).collect(),
    };
    let n = axes.len();
    if pads.len() != 2 * n {
        return Err(ShapeError::Invalid(format!("{} pads for {n} axes, expected {}", pads.len(), 2 * n)));
    }
    let mut shape = x.ty.shape.clone();
    for (i, &axis) in axes.iter().enumerate() {
        let size = shape[axis] as i128 + pads[i] as i128 + pads[i + n] as i128;
        shape[axis] = usize::try_from(size)
            .map_err(|_| ShapeError::Invalid(format!("padding makes axis {axis} negative ({size})")))?;
    }
    Ok(vec![typed(x.ty.dtype, shape)])
}

#[cfg(test)]
mod tests {
    use super::super::util::testing::{data, error, f, ints, run, run_opt, scalar, shape, t};
    use super::super::Value;
    use crate::types::{Attr, Attrs, DType, TensorData};

    #[test]
    fn concat_and_gather_fold_a_shape() {
        // The PyTorch pattern: Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
        let x = f(&[8, 3, 32, 32]);
        let shape_of = run("Shape", 13, Attrs::new(), std::slice::from_ref(&x), 1).unwrap().remove(0);
        let batch = run("Gather", 13, Attrs::new(), &[shape_of.clone(), scalar(0)], 1).unwrap().remove(0);
        assert_eq!((batch.ty.shape.clone(), data(&batch)), (vec![], vec![8]));
        let last = run("Gather", 13, Attrs::new(), &[shape_of, ints(&[-1, -2])], 1).unwrap().remove(0);
        assert_eq!(data(&last), vec![32, 32]);
        let batch = run("Unsqueeze", 13, Attrs::new(), &[batch, ints(&[0])], 1).unwrap().remove(0);
        let target =
            run("Concat", 13, Attrs::new().with("axis", Attr::Int(0)), &[batch, ints(&[-1])], 1).unwrap().remove(0);
        assert_eq!(data(&target), vec![8, -1]);
        assert_eq!(shape("Reshape", 13, Attrs::new(), &[x, target]), vec![8, 3072]);
        assert_eq!(
            error("Gather", 13, Attrs::new(), &[ints(&[1, 2]), scalar(2)]),
            "index 2 is out of range for axis 0 of size 2"
        );
        assert_eq!(
            shape("Gather", 13, Attrs::new().with("axis", Attr::Int(1)), &[f(&[2, 5, 3]), t(DType::I32, &[4, 1])]),
            vec![2, 4, 1, 3]
        );
        assert_eq!(
            error("Gather", 13, Attrs::new(), &[f(&[3]), f(&[1])]),
            "input 1 must be an i32 or i64 tensor, got f32"
        );
    }

    #[test]
    fn gather_elements_takes_the_indices_shape_and_folds() {
        // BERT's token-type buffer: a constant table gathered at constant positions.
        let table = Value::constant(TensorData::from_i64(vec![2, 3], &[1, 2, 3, 4, 5, 6]));
        let picks = Value::constant(TensorData::from_i64(vec![2, 2], &[2, 0, -1, 1]));
        let axis = |a| Attrs::new().with("axis", Attr::Int(a));
        let out = run("GatherElements", 13, axis(1), &[table.clone(), picks], 1).unwrap().remove(0);
        assert_eq!((out.ty.shape.clone(), data(&out)), (vec![2, 2], vec![3, 1, 6, 5]));
        assert_eq!(shape("GatherElements", 13, axis(0), &[f(&[4, 5]), t(DType::I64, &[7, 2])]), vec![7, 2]);
        assert_eq!(
            error("GatherElements", 13, axis(0), &[f(&[4, 5]), t(DType::I64, &[7, 6])]),
            "indices [7,6] must have the rank of data [4,5] and be no longer on every axis but 0"
        );
        assert_eq!(
            error("GatherElements", 13, axis(1), &[table, ints(&[0, 3])]),
            "indices [2] must have the rank of data [2,3] and be no longer on every axis but 1"
        );
        let far = Value::constant(TensorData::from_i64(vec![1, 1], &[3]));
        let table = Value::constant(TensorData::from_i64(vec![1, 3], &[1, 2, 3]));
        assert_eq!(error("GatherElements", 13, axis(1), &[table, far]), "index 3 is out of range for axis 1 of size 3");
    }

    #[test]
    fn trilu_keeps_its_input_type_and_checks_k_upper_and_opset() {
        let upper = |u| Attrs::new().with("upper", Attr::Int(u));
        assert_eq!(shape("Trilu", 14, Attrs::new(), &[f(&[2, 3, 4])]), vec![2, 3, 4]);
        assert_eq!(shape("Trilu", 17, upper(0), &[f(&[3, 5]), scalar(-1)]), vec![3, 5]);
        assert_eq!(shape("Trilu", 17, upper(0), &[f(&[3, 5]), t(DType::I64, &[1])]), vec![3, 5]);
        assert_eq!(error("Trilu", 14, Attrs::new(), &[f(&[4])]), "input 0 has rank 1, below 2");
        assert_eq!(error("Trilu", 14, upper(2), &[f(&[2, 2])]), "unsupported value 2 for attribute 'upper'");
        assert_eq!(
            error("Trilu", 14, Attrs::new(), &[f(&[2, 2]), ints(&[1, 2])]),
            "input 1 (k) must be one int64, got i64[2]"
        );
        assert_eq!(
            error("Trilu", 13, Attrs::new(), &[f(&[2, 2])]),
            "Trilu is an op of opset 14 and later, the model imports 13"
        );
    }

    #[test]
    fn concat_checks() {
        let axis = |a| Attrs::new().with("axis", Attr::Int(a));
        assert_eq!(shape("Concat", 13, axis(-1), &[f(&[2, 3]), f(&[2, 5])]), vec![2, 8]);
        let m = Value::constant(TensorData::from_i64(vec![2, 1], &[1, 2]));
        let n = Value::constant(TensorData::from_i64(vec![2, 2], &[3, 4, 5, 6]));
        assert_eq!(data(&run("Concat", 13, axis(1), &[m, n], 1).unwrap()[0]), vec![1, 3, 4, 2, 5, 6]);
        assert_eq!(
            error("Concat", 13, axis(1), &[f(&[2, 3]), f(&[3, 3])]),
            "input 1 has shape [3,3], which does not concatenate with [2,3] on axis 1"
        );
        assert_eq!(error("Concat", 13, Attrs::new(), &[f(&[2])]), "missing required attribute 'axis'");
    }

    #[test]
    fn split_forms() {
        let shapes = |outs: Vec<Value>| outs.into_iter().map(|v| v.ty.shape).collect::<Vec<_>>();
        let attr = Attrs::new().with("axis", Attr::Int(1)).with("split", Attr::Ints(vec![2, 4]));
        assert_eq!(shapes(run("Split", 11, attr, &[f(&[3, 6])], 2).unwrap()), vec![vec![3, 2], vec![3, 4]]);
        let folded = run("Split", 13, Attrs::new(), &[ints(&[1, 2, 3, 4, 5]), ints(&[3, 2])], 2).unwrap();
        assert_eq!((data(&folded[0]), data(&folded[1])), (vec![1, 2, 3], vec![4, 5]));
        assert_eq!(shapes(run("Split", 13, Attrs::new(), &[f(&[6, 2])], 3).unwrap()), vec![vec![2, 2]; 3]);
        let uneven = Attrs::new().with("num_outputs", Attr::Int(3));
        assert_eq!(shapes(run("Split", 18, uneven, &[f(&[7])], 3).unwrap()), vec![vec![3], vec![3], vec![1]]);
        assert_eq!(
            run("Split", 13, Attrs::new(), &[f(&[7])], 2).unwrap_err().to_string(),
            "cannot split size 7 into 2 equal parts"
        );
        assert_eq!(
            run("Split", 13, Attrs::new(), &[f(&[7]), ints(&[3, 3])], 2).unwrap_err().to_string(),
            "split sizes [3,3] do not add up to 7 on axis 0"
        );
        assert_eq!(
            run("Split", 13, Attrs::new(), &[f(&[7]), ints(&[7])], 2).unwrap_err().to_string(),
            "1 split sizes for 2 outputs"
        );
    }

    #[test]
    fn slice_semantics() {
        let x = f(&[10, 20, 30]);
        // Inputs form, clamped ends and a negative step.
        let out = shape(
            "Slice",
            13,
            Attrs::new(),
            &[x.clone(), ints(&[1, -1]), ints(&[1000, -1000]), ints(&[0, 2]), ints(&[1, -2])],
        );
        assert_eq!(out, vec![9, 20, 15]);
        // Reversal with the usual INT64_MIN end.
        let out =
            shape("Slice", 13, Attrs::new(), &[x.clone(), ints(&[-1]), ints(&[i64::MIN]), ints(&[1]), ints(&[-1])]);
        assert_eq!(out, vec![10, 20, 30]);
        let empty = shape("Slice", 13, Attrs::new(), &[x.clone(), ints(&[5]), ints(&[2]), ints(&[0])]);
        assert_eq!(empty, vec![0, 20, 30]);
        // Attribute form (opset < 10), axes defaulting to 0..n.
        let attrs = Attrs::new().with("starts", Attr::Ints(vec![0, 2])).with("ends", Attr::Ints(vec![i64::MAX, -3]));
        assert_eq!(shape("Slice", 9, attrs, std::slice::from_ref(&x)), vec![10, 15, 30]);
        let folded = run(
            "Slice",
            13,
            Attrs::new(),
            &[ints(&[0, 1, 2, 3, 4, 5]), ints(&[-1]), ints(&[0]), ints(&[0]), ints(&[-2])],
            1,
        )
        .unwrap();
        assert_eq!(data(&folded[0]), vec![5, 3, 1]);
        assert_eq!(
            error("Slice", 13, Attrs::new(), &[x.clone(), ints(&[0]), ints(&[1]), ints(&[0]), ints(&[0])]),
            "slice step cannot be 0"
        );
        assert_eq!(
            error("Slice", 13, Attrs::new(), &[x, ints(&[0, 0]), ints(&[1]), ints(&[0])]),
            "slice has 2 starts, 1 ends, 1 axes and 2 steps"
        );
        assert_eq!(
            shape("Slice", 13, Attrs::new(), &[f(&[0]), ints(&[-1]), ints(&[i64::MIN]), ints(&[0]), ints(&[-1])]),
            vec![0]
        );
    }

    #[test]
    fn pad_forms() {
        assert_eq!(
            shape("Pad", 13, Attrs::new(), &[f(&[1, 3, 4, 4]), ints(&[0, 0, 1, 2, 0, 0, 1, -1])]),
            vec![1, 3, 6, 5]
        );
        let old = Attrs::new().with("pads", Attr::Ints(vec![1, 1, 1, 1])).with("mode", Attr::String("reflect".into()));
        assert_eq!(shape("Pad", 2, old, &[f(&[4, 4])]), vec![6, 6]);
        let x = f(&[4, 4]);
        let (pads, value, ax) = (ints(&[2, 3]), f(&[]), ints(&[-1]));
        let out = run_opt("Pad", 18, Attrs::new(), &[Some(&x), Some(&pads), Some(&value), Some(&ax)], 1).unwrap();
        assert_eq!(out[0].ty.shape, vec![4, 9]);
        assert_eq!(error("Pad", 13, Attrs::new(), &[f(&[4, 4]), ints(&[1, 1])]), "2 pads for 2 axes, expected 4");
        assert_eq!(error("Pad", 13, Attrs::new(), &[f(&[4]), ints(&[-3, -2])]), "padding makes axis 0 negative (-1)");
    }
}
