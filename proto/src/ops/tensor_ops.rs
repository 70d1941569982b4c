//! Shape inference for ops that change a tensor's shape but not the order
//! of its elements (or only replicate them): `Reshape`, `Flatten`,
//! `Transpose`, `Unsqueeze`, `Squeeze`, `Expand` and `Tile`. Integer
//! contents are folded. Their cost, and that of `ReshapeTo`.

use super::axes::AxesMap;
use super::cost::{copy, view, CostFn};
use super::util::{
    affine_gather, broadcast, broadcast_data, checked_numel, const_i64s, expect_inputs, fmt_shape, fold, input,
    int_data, normalize_axes, normalize_axis, optional_const_i64s, strides, to_dim, too_large, typed,
};
use super::window::length_error;
use super::{InferFn, Node, ShapeError, ShapeResult, Value};
use crate::types::{AttrError, Shape, TensorType};

/// The reshaping ops.
pub(super) const OPS: &[(&str, InferFn)] = &[
    ("Reshape", reshape),
    ("Flatten", flatten),
    ("Transpose", transpose),
    ("Unsqueeze", unsqueeze),
    ("Squeeze", squeeze),
    ("Expand", expand),
    ("Tile", tile),
];

/// Work of the reshaping ops: `Reshape`, `Flatten`, `Unsqueeze`, `Squeeze`
/// and `ReshapeTo` are views of their input's memory (no kernel); the others
/// copy their input into their output.
pub(super) const COSTS: &[(&str, CostFn)] = &[
    ("Reshape", view),
    ("Flatten", view),
    ("Transpose", copy),
    ("Unsqueeze", view),
    ("Squeeze", view),
    ("Expand", copy),
    ("Tile", copy),
    ("ReshapeTo", view),
];

/// The ops of this family lms cannot differentiate, and why (every other op a model may
/// hold has a gradient rule in the compiler).
pub(super) const NO_GRADIENT: &[(&str, &str)] = &[("Tile", "the gradient of Tile is not implemented (Expand has one)")];

/// The ops of this family without an axes map (coupled along every axis), and why.
pub(super) const NO_AXES: &[(&str, &str)] = &[
    ("Reshape", "its shape is a value input; its parts run as ReshapeTo (`split::part_op`), whose map they take"),
    ("Tile", "repeats its input: a part of the output is no part's tiling"),
];

/// Axes maps: Transpose moves its axes; Flatten at axis 1 and ReshapeTo keep the samples;
/// Unsqueeze and Squeeze insert or remove axes of length 1; Expand broadcasts.
pub(super) const AXES: &[(&str, AxesMap)] = &[
    ("Transpose", AxesMap::Transpose),
    ("Unsqueeze", AxesMap::UnitAxes),
    ("Squeeze", AxesMap::UnitAxes),
    ("Expand", AxesMap::Expand),
    ("Flatten", AxesMap::Samples { flatten: true }),
    ("ReshapeTo", AxesMap::Samples { flatten: false }),
];

/// The output of an op that keeps the elements in order and changes only
/// the shape; integer contents pass through.
fn same_elements(x: &Value, shape: Shape) -> ShapeResult<Vec<Value>> {
    Ok(vec![fold(TensorType::new(x.ty.dtype, shape), || Ok(int_data(x)))?])
}

/// Formats a list of integers as `[4,-1]`.
fn fmt_ints(values: &[i64]) -> String {
    let items: Vec<String> = values.iter().map(i64::to_string).collect();
    format!("[{}]", items.join(","))
}

/// `Reshape`: the target shape is a constant input; 0 copies the input's
/// dimension (unless `allowzero`), and one -1 is inferred.
fn reshape(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 2, 2)?;
    let x = input(node, 0)?;
    let target = const_i64s(node, 1, "the target shape")?;
    let allowzero = node.attrs.int("allowzero", 0)? != 0;
    let shape = reshaped(&x.ty.shape, &target, allowzero)?;
    same_elements(x, shape)
}

/// The shape `Reshape` gives to `input` for `target`.
fn reshaped(input: &[usize], target: &[i64], allowzero: bool) -> ShapeResult<Shape> {
    let total = checked_numel(input)?;
    let mut inferred = None;
    let mut dims = Vec::with_capacity(target.len());
    for (i, &d) in target.iter().enumerate() {
        dims.push(match d {
            -1 if inferred.is_some() => {
                return Err(ShapeError::Invalid(format!("target shape {} has more than one -1", fmt_ints(target))))
            }
            -1 => {
                inferred = Some(i);
                1
            }
            0 if !allowzero => *input.get(i).ok_or_else(|| {
                ShapeError::Invalid(format!(
                    "target shape copies dimension {i}, but the input has rank {}",
                    input.len()
                ))
            })?,
            d => to_dim(d, "a target shape dimension")?,
        });
    }
    let known = checked_numel(&dims)?;
    match inferred {
        Some(i) if known != 0 && total % known == 0 => dims[i] = total / known,
        Some(_) => {
            return Err(ShapeError::Invalid(format!(
                "cannot reshape {} ({total} elements) to {}",
                fmt_shape(input),
                fmt_ints(target)
            )))
        }
        None if known != total => {
            return Err(ShapeError::Invalid(format!(
                "cannot reshape {} ({total} elements) to {} ({known} elements)",
                fmt_shape(input),
                fmt_shape(&dims)
            )))
        }
        None => {}
    }
    Ok(dims)
}

/// `Flatten`: [d0 · … · d(axis−1), d(axis) · … ]; `axis` in [−rank, rank].
fn flatten(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, 1)?;
    let x = input(node, 0)?;
    let rank = x.ty.rank();
    let axis = node.attrs.int("axis", 1)?;
    // The axis may equal the rank, so normalise against rank + 1.
    let split = if axis < 0 { normalize_axis(axis, rank)? } else { normalize_axis(axis, rank + 1)? };
    let shape = vec![checked_numel(&x.ty.shape[..split])?, checked_numel(&x.ty.shape[split..])?];
    same_elements(x, shape)
}

/// `Transpose`: `perm` defaults to reversing the axes.
fn transpose(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, 1)?;
    let x = input(node, 0)?;
    let rank = x.ty.rank();
    let perm = match node.attrs.ints_opt("perm")? {
        Some(p) if p.len() == rank => normalize_axes(&p, rank)?,
        Some(p) => return Err(length_error("perm", p.len(), rank)),
        None => (0..rank).rev().collect(),
    };
    let shape: Shape = perm.iter().map(|&p| x.ty.shape[p]).collect();
    let in_strides = strides(&x.ty.shape);
    let coefs: Vec<i64> = perm.iter().map(|&p| in_strides[p] as i64).collect();
    let ty = TensorType::new(x.ty.dtype, shape);
    Ok(vec![fold(ty.clone(), || Ok(int_data(x).and_then(|d| affine_gather(&d, &ty.shape, 0, &coefs))))?])
}

/// The axes of `Unsqueeze`/`Squeeze`: an attribute before opset 13, an input
/// from it. `None` when absent.
fn squeeze_axes(node: &Node<'_>) -> ShapeResult<Option<Vec<i64>>> {
    if node.opset >= 13 {
        expect_inputs(node, 1, 2)?;
        optional_const_i64s(node, 1, "the axes")
    } else {
        expect_inputs(node, 1, 1)?;
        Ok(node.attrs.ints_opt("axes")?)
    }
}

/// `Unsqueeze`: inserts 1-dims at `axes` (positions in the output).
fn unsqueeze(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    let axes = squeeze_axes(node)?.ok_or_else(|| match node.opset {
        13.. => ShapeError::MissingInput { index: 1 },
        _ => AttrError::Missing("axes".into()).into(),
    })?;
    let x = input(node, 0)?;
    let rank = x.ty.rank() + axes.len();
    let mut axes = normalize_axes(&axes, rank)?;
    axes.sort_unstable();
    let mut shape = x.ty.shape.clone();
    for axis in axes {
        shape.insert(axis, 1);
    }
    same_elements(x, shape)
}

/// `Squeeze`: removes the 1-dims at `axes`, or all 1-dims without axes.
fn squeeze(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    let axes = squeeze_axes(node)?;
    let x = input(node, 0)?;
    let shape = &x.ty.shape;
    let removed = match axes {
        Some(axes) => {
            let axes = normalize_axes(&axes, shape.len())?;
            if let Some(&a) = axes.iter().find(|&&a| shape[a] != 1) {
                return Err(ShapeError::Invalid(format!("cannot squeeze axis {a} of size {}", shape[a])));
            }
            axes
        }
        None => (0..shape.len()).filter(|&i| shape[i] == 1).collect(),
    };
    let kept = (0..shape.len()).filter(|i| !removed.contains(i)).map(|i| shape[i]).collect();
    same_elements(x, kept)
}

/// The dimensions in the constant input at `index`.
fn const_dims(node: &Node<'_>, index: usize, what: &'static str) -> ShapeResult<Shape> {
    const_i64s(node, index, what)?.iter().map(|&d| to_dim(d, "a dimension")).collect()
}

/// `Expand`: the input broadcast with a constant shape (both ways).
fn expand(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 2, 2)?;
    let x = input(node, 0)?;
    let shape = broadcast(&x.ty.shape, &const_dims(node, 1, "the target shape")?)?;
    let ty = TensorType::new(x.ty.dtype, shape);
    Ok(vec![fold(ty.clone(), || Ok(broadcast_data(x, &ty.shape)))?])
}

/// `Tile`: each dimension times its constant repeat count.
fn tile(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 2, 2)?;
    let x = input(node, 0)?;
    let repeats = const_dims(node, 1, "the repeats")?;
    if repeats.len() != x.ty.rank() {
        return Err(ShapeError::Invalid(format!("{} repeats for rank {}", repeats.len(), x.ty.rank())));
    }
    let shape: ShapeResult<Shape> =
        x.ty.shape.iter().zip(&repeats).map(|(&d, &r)| d.checked_mul(r).ok_or_else(too_large)).collect();
    Ok(vec![typed(x.ty.dtype, shape?)])
}

#[cfg(test)]
mod tests {
    use super::super::util::testing::{data, error, f, ints, run, scalar, shape, t};
    use super::super::Value;
    use crate::types::{Attr, Attrs, DType, TensorData};

    fn axes(v: &[i64]) -> Attrs {
        Attrs::new().with("axes", Attr::Ints(v.to_vec()))
    }

    #[test]
    fn reshape_zero_and_minus_one() {
        assert_eq!(shape("Reshape", 13, Attrs::new(), &[f(&[2, 3, 4]), ints(&[0, -1])]), vec![2, 12]);
        assert_eq!(shape("Reshape", 13, Attrs::new(), &[f(&[2, 3, 4]), ints(&[-1, 0, 2])]), vec![4, 3, 2]);
        let allowzero = Attrs::new().with("allowzero", Attr::Int(1));
        assert_eq!(shape("Reshape", 14, allowzero, &[f(&[0, 3]), ints(&[3, 0])]), vec![3, 0]);
        assert_eq!(
            error("Reshape", 13, Attrs::new(), &[f(&[2, 3]), ints(&[4, 2])]),
            "cannot reshape [2,3] (6 elements) to [4,2] (8 elements)"
        );
        assert_eq!(
            error("Reshape", 13, Attrs::new(), &[f(&[2, 3]), ints(&[4, -1])]),
            "cannot reshape [2,3] (6 elements) to [4,-1]"
        );
        assert_eq!(
            error("Reshape", 13, Attrs::new(), &[f(&[6]), ints(&[-1, -1])]),
            "target shape [-1,-1] has more than one -1"
        );
        assert_eq!(
            error("Reshape", 13, Attrs::new(), &[f(&[6]), t(DType::I64, &[2])]),
            "input 1 must be known at compile time (it gives the target shape)"
        );
        let folded = run("Reshape", 13, Attrs::new(), &[ints(&[1, 2, 3, 4]), ints(&[2, 2])], 1).unwrap();
        assert_eq!((folded[0].ty.shape.clone(), data(&folded[0])), (vec![2, 2], vec![1, 2, 3, 4]));
    }

    #[test]
    fn flatten_and_transpose() {
        assert_eq!(shape("Flatten", 13, Attrs::new(), &[f(&[2, 3, 4, 5])]), vec![2, 60]);
        let axis = |a| Attrs::new().with("axis", Attr::Int(a));
        assert_eq!(shape("Flatten", 13, axis(0), &[f(&[2, 3, 4])]), vec![1, 24]);
        assert_eq!(shape("Flatten", 13, axis(3), &[f(&[2, 3, 4])]), vec![24, 1]);
        assert_eq!(shape("Flatten", 13, axis(-1), &[f(&[2, 3, 4])]), vec![6, 4]);
        assert_eq!(error("Flatten", 13, axis(4), &[f(&[2, 3, 4])]), "axis 4 is out of range for rank 4");
        assert_eq!(shape("Transpose", 13, Attrs::new(), &[f(&[2, 3, 4])]), vec![4, 3, 2]);
        let perm = Attrs::new().with("perm", Attr::Ints(vec![0, 2, 1]));
        assert_eq!(shape("Transpose", 13, perm, &[f(&[2, 3, 4])]), vec![2, 4, 3]);
        let m = Value::constant(TensorData::from_i64(vec![2, 3], &[1, 2, 3, 4, 5, 6]));
        assert_eq!(data(&run("Transpose", 13, Attrs::new(), &[m], 1).unwrap()[0]), vec![1, 4, 2, 5, 3, 6]);
    }

    #[test]
    fn unsqueeze_both_forms() {
        assert_eq!(shape("Unsqueeze", 11, axes(&[0, -1]), &[f(&[3, 4])]), vec![1, 3, 4, 1]);
        assert_eq!(shape("Unsqueeze", 13, Attrs::new(), &[f(&[3, 4]), ints(&[1])]), vec![3, 1, 4]);
        let folded = run("Unsqueeze", 13, Attrs::new(), &[scalar(7), ints(&[0])], 1).unwrap();
        assert_eq!((folded[0].ty.shape.clone(), data(&folded[0])), (vec![1], vec![7]));
        assert_eq!(error("Unsqueeze", 11, Attrs::new(), &[f(&[3])]), "missing required attribute 'axes'");
        assert_eq!(error("Unsqueeze", 13, Attrs::new(), &[f(&[3])]), "input 1 is required");
        assert_eq!(error("Unsqueeze", 13, Attrs::new(), &[f(&[3]), ints(&[3])]), "axis 3 is out of range for rank 2");
    }

    #[test]
    fn squeeze_forms() {
        assert_eq!(shape("Squeeze", 11, Attrs::new(), &[f(&[1, 3, 1, 2])]), vec![3, 2]);
        assert_eq!(shape("Squeeze", 11, axes(&[-2]), &[f(&[1, 3, 1, 2])]), vec![1, 3, 2]);
        assert_eq!(shape("Squeeze", 13, Attrs::new(), &[f(&[1, 3, 1]), ints(&[0])]), vec![3, 1]);
        assert_eq!(error("Squeeze", 13, Attrs::new(), &[f(&[1, 3]), ints(&[1])]), "cannot squeeze axis 1 of size 3");
    }

    #[test]
    fn expand_tile_pad() {
        assert_eq!(shape("Expand", 13, Attrs::new(), &[f(&[3, 1]), ints(&[2, 1, 6])]), vec![2, 3, 6]);
        let folded = run("Expand", 13, Attrs::new(), &[ints(&[1, 2]), ints(&[2, 2])], 1).unwrap();
        assert_eq!(data(&folded[0]), vec![1, 2, 1, 2]);
        assert_eq!(error("Expand", 13, Attrs::new(), &[f(&[3]), ints(&[2])]), "cannot broadcast [3] with [2]");
        assert_eq!(shape("Tile", 13, Attrs::new(), &[f(&[2, 3]), ints(&[3, 1])]), vec![6, 3]);
        assert_eq!(
            error("Tile", 13, Attrs::new(), &[f(&[2, 3]), ints(&[1 << 30, 1 << 20])]),
            "shape too large: [2147483648,3145728] has more than 2^40 elements"
        );
    }
}
