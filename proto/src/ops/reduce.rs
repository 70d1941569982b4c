//! Shape inference for reductions: `ReduceMean`, `ReduceSum`, `ReduceMax`,
//! `ReduceMin`; their cost and that of the reducing and broadcasting lms ops.

use super::axes::AxesMap;
use super::cost::{CostFn, CostNode};
use super::split::{self, Dim, SplitExtension, SplitRule};
use super::util::{check_dtype, expect_inputs, input, normalize_axes, optional_const_i64s, typed, Accepts};
use super::{InferFn, Node, ShapeResult, Value};

/// The reductions, each with the opset from which `axes` is an input.
pub(super) const OPS: &[(&str, InferFn)] = &[
    ("ReduceMean", |n| reduce(n, 18, true)),
    ("ReduceSum", |n| reduce(n, 13, true)),
    ("ReduceMax", |n| reduce(n, 18, false)),
    ("ReduceMin", |n| reduce(n, 18, false)),
];

/// Work of the reductions: one FLOP per input element (`SumTo` too);
/// `ReduceGrad` broadcasts dY back, one FLOP per output element.
pub(super) const COSTS: &[(&str, CostFn)] = &[
    ("ReduceMean", |n| n.per_input(1)),
    ("ReduceSum", |n| n.per_input(1)),
    ("ReduceMax", |n| n.per_input(1)),
    ("ReduceMin", |n| n.per_input(1)),
    ("SumTo", |n| n.per_input(1)),
    ("ReduceGrad", |n| n.per_output(1)),
];

/// The ops of this family lms cannot differentiate, and why (every other op a model may
/// hold has a gradient rule in the compiler).
pub(super) const NO_GRADIENT: &[(&str, &str)] = &[
    ("ReduceMax", "the gradient of a maximum reduction is not implemented"),
    ("ReduceMin", "the gradient of a minimum reduction is not implemented"),
];

/// The ops of this family without an axes map (coupled along every axis), and why.
pub(super) const NO_AXES: &[(&str, &str)] = &[("SumTo", "sums the broadcast axes back")];

/// Axes maps: the reductions and their gradient are independent along the kept axes.
pub(super) const AXES: &[(&str, AxesMap)] = &[
    ("ReduceMean", AxesMap::Reduced { grad: false }),
    ("ReduceSum", AxesMap::Reduced { grad: false }),
    ("ReduceMax", AxesMap::Reduced { grad: false }),
    ("ReduceMin", AxesMap::Reduced { grad: false }),
    ("ReduceGrad", AxesMap::Reduced { grad: true }),
];

/// The extension of `SumTo`, which has no axes map: one that sums away the leading
/// (batch) axis adds up its parts' partial sums (weight gradients of batched matrix
/// products).
pub(super) const SPLIT_EXTENSIONS: &[(&str, SplitExtension)] = &[("SumTo", sum_to_batch)];

fn sum_to_batch(node: &CostNode<'_>) -> Vec<SplitRule> {
    let (Some(x), Some(y)) = (node.inputs.first().copied().flatten(), node.outputs.first()) else { return Vec::new() };
    let lead = x.rank() - y.rank().min(x.rank());
    match (lead, y.shape.first(), x.shape.first()) {
        (1.., _, _) => vec![split::sum(Dim::Batch, 1, &[(0, 0)])],
        (0, Some(&1), Some(&n)) if n > 1 => vec![split::sum(Dim::Batch, 1, &[(0, 0)])],
        _ => Vec::new(),
    }
}

/// A reduction over `axes` (an attribute before `axes_input_opset`, an
/// optional constant input from it). No axes reduces all, unless
/// `noop_with_empty_axes`; `keepdims` (default 1) keeps reduced axes as 1.
/// `numeric_only` excludes bool (which `ReduceMax`/`ReduceMin` accept from opset 20).
fn reduce(node: &Node<'_>, axes_input_opset: i64, numeric_only: bool) -> ShapeResult<Vec<Value>> {
    let axes_from_input = node.opset >= axes_input_opset;
    expect_inputs(node, 1, if axes_from_input { 2 } else { 1 })?;
    let x = input(node, 0)?;
    if numeric_only || node.opset < 20 {
        check_dtype(x, 0, Accepts::Numeric)?;
    }
    let axes = if axes_from_input {
        optional_const_i64s(node, 1, "the reduction axes")?.unwrap_or_default()
    } else {
        node.attrs.ints("axes", Vec::new())?
    };
    if axes.is_empty() && node.attrs.int("noop_with_empty_axes", 0)? != 0 {
        return Ok(vec![Value::of_type(x.ty.clone())]);
    }
    let rank = x.ty.rank();
    let reduced = if axes.is_empty() { (0..rank).collect() } else { normalize_axes(&axes, rank)? };
    let keepdims = node.attrs.int("keepdims", 1)? != 0;
    let shape = (0..rank)
        .filter_map(|i| match (reduced.contains(&i), keepdims) {
            (false, _) => Some(x.ty.shape[i]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    Ok(vec![typed(x.ty.dtype, shape)])
}

#[cfg(test)]
mod tests {
    use super::super::util::testing::{error, f, ints, run_opt, shape, t};
    use crate::types::{Attr, Attrs, DType};

    #[test]
    fn axes_as_attribute_and_input() {
        let attrs = Attrs::new().with("axes", Attr::Ints(vec![-1, 1]));
        assert_eq!(shape("ReduceMean", 13, attrs.clone(), &[f(&[2, 3, 4])]), vec![2, 1, 1]);
        let flat = attrs.with("keepdims", Attr::Int(0));
        assert_eq!(shape("ReduceMax", 13, flat, &[f(&[2, 3, 4])]), vec![2]);
        assert_eq!(shape("ReduceSum", 13, Attrs::new(), &[f(&[2, 3, 4]), ints(&[0])]), vec![1, 3, 4]);
        assert_eq!(
            shape("ReduceMean", 18, Attrs::new().with("keepdims", Attr::Int(0)), &[f(&[2, 3]), ints(&[1])]),
            vec![2]
        );
        assert_eq!(shape("ReduceMin", 13, Attrs::new(), &[f(&[2, 3])]), vec![1, 1]);
    }

    #[test]
    fn empty_axes() {
        let x = f(&[2, 3]);
        let noop = Attrs::new().with("noop_with_empty_axes", Attr::Int(1));
        assert_eq!(run_opt("ReduceSum", 13, noop, &[Some(&x), None], 1).unwrap()[0].ty.shape, vec![2, 3]);
        let all = Attrs::new().with("keepdims", Attr::Int(0));
        assert_eq!(run_opt("ReduceSum", 13, all, &[Some(&x)], 1).unwrap()[0].ty.shape, Vec::<usize>::new());
    }

    #[test]
    fn reduce_errors() {
        assert_eq!(
            error("ReduceSum", 13, Attrs::new(), &[f(&[2, 3]), t(DType::I64, &[1])]),
            "input 1 must be known at compile time (it gives the reduction axes)"
        );
        assert_eq!(
            error("ReduceMean", 13, Attrs::new().with("axes", Attr::Ints(vec![2])), &[f(&[2, 3])]),
            "axis 2 is out of range for rank 2"
        );
        assert_eq!(
            error("ReduceMean", 13, Attrs::new().with("axes", Attr::Ints(vec![1, -1])), &[f(&[2, 3])]),
            "axis -1 is repeated"
        );
        assert_eq!(error("ReduceMean", 13, Attrs::new(), &[f(&[2, 3]), ints(&[0])]), "expected 1 inputs, got 2");
    }
}
