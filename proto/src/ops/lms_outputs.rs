//! The output rules of the lms ops (`proto/OPS.md`): the output types each op makes from
//! its inputs' types and attributes, which the contract holds a node's declared outputs to
//! before any kernel runs. Where OPS.md gives an output's shape by the graph alone (a
//! gradient the size of a forward input the op does not read: `SumTo`, `SliceGrad`,
//! `ConvGradData`), the rule takes the declared shape and checks what the inputs do fix:
//! the dtype, and for `ReshapeTo` the element count. `Zeros` reads nothing and has no rule;
//! the swaps are held to their input's type by the contract's node checks.

use super::split::part_len;
use super::util::{checked_numel, fmt_shape, normalize_axis};
use super::{ShapeError, ShapeResult};
use crate::types::{Attrs, DType, TensorType};

/// What an lms op's output rule reads of a node.
pub struct LmsNode<'a> {
    /// The node's attributes.
    pub attrs: &'a Attrs,
    /// One type per input slot; `None` for an omitted optional input.
    pub inputs: &'a [Option<&'a TensorType>],
    /// The output types the node declares (the rule reads them only where OPS.md says the
    /// graph gives the shape).
    pub declared: &'a [&'a TensorType],
}

impl LmsNode<'_> {
    /// Input `i`, which must be present.
    fn input(&self, i: usize) -> ShapeResult<TensorType> {
        self.inputs.get(i).copied().flatten().cloned().ok_or(ShapeError::MissingInput { index: i })
    }

    /// The channel count of input `i`: its axis `axis`.
    fn dim(&self, i: usize, axis: usize) -> ShapeResult<usize> {
        let t = self.input(i)?;
        t.shape.get(axis).copied().ok_or_else(|| {
            ShapeError::Invalid(format!("input {i} of shape {} has no axis {axis}", fmt_shape(&t.shape)))
        })
    }

    /// Every declared output with its shape as declared and the dtype of input `i`: outputs
    /// whose shape the graph gives.
    fn declared_shapes(&self, i: usize) -> ShapeResult<Vec<TensorType>> {
        let dtype = self.input(i)?.dtype;
        Ok(self.declared.iter().map(|d| TensorType::new(dtype, d.shape.clone())).collect())
    }
}

/// An lms op's output rule: every output the op can make, optional ones included.
pub(super) type OutputsFn = fn(&LmsNode<'_>) -> ShapeResult<Vec<TensorType>>;

/// The output rule of every lms op that has one.
pub(super) const RULES: &[(&str, OutputsFn)] = &[
    ("BatchNormTrain", |n| {
        let x = n.input(0)?;
        let stat = TensorType::new(x.dtype, vec![n.dim(0, 1)?]);
        Ok(vec![x, stat.clone(), stat.clone(), stat.clone(), stat])
    }),
    ("DropoutTrain", |n| {
        let x = n.input(0)?;
        let mask = TensorType::new(DType::Bool, x.shape.clone());
        Ok(vec![x, mask])
    }),
    ("SoftmaxCrossEntropy", loss),
    ("MeanSquaredError", loss),
    ("DropoutGrad", |n| Ok(vec![n.input(0)?])),
    ("SoftmaxCrossEntropyGrad", |n| Ok(vec![n.input(0)?])),
    ("MeanSquaredErrorGrad", |n| Ok(vec![n.input(0)?])),
    ("UnaryGrad", |n| Ok(vec![n.input(1)?])),
    ("PReluGrad", |n| Ok(vec![n.input(1)?, n.input(2)?])),
    ("PowGrad", |n| Ok(vec![n.input(1)?])),
    ("SumTo", |n| n.declared_shapes(0)),
    ("ReshapeTo", |n| {
        let (x, expected) = (n.input(0)?, n.declared_shapes(0)?);
        if let Some(y) = expected.first() {
            if checked_numel(&x.shape)? != checked_numel(&y.shape)? {
                return Err(ShapeError::Invalid(format!(
                    "cannot reshape {} to {}",
                    fmt_shape(&x.shape),
                    fmt_shape(&y.shape)
                )));
            }
        }
        Ok(expected)
    }),
    ("ConvGradData", |n| n.declared_shapes(0)),
    ("ConvGradWeight", |n| n.declared_shapes(0)),
    ("ConvGradBias", |n| Ok(vec![TensorType::new(n.input(0)?.dtype, vec![n.dim(0, 1)?])])),
    ("MaxPoolGrad", |n| Ok(vec![n.input(1)?])),
    ("AveragePoolGrad", |n| n.declared_shapes(0)),
    ("GlobalAveragePoolGrad", |n| n.declared_shapes(0)),
    ("LRNGrad", |n| Ok(vec![n.input(1)?])),
    ("SoftmaxGrad", |n| Ok(vec![n.input(1)?])),
    ("LogSoftmaxGrad", |n| Ok(vec![n.input(1)?])),
    ("BatchNormGrad", |n| Ok(vec![n.input(1)?, n.input(2)?, n.input(2)?])),
    ("LayerNormGrad", |n| Ok(vec![n.input(1)?, n.input(2)?, n.input(2)?])),
    ("GatherGrad", |n| n.declared_shapes(0)),
    ("GatherElementsGrad", |n| n.declared_shapes(0)),
    ("SliceGrad", |n| n.declared_shapes(0)),
    ("ConcatGrad", |n| n.declared_shapes(0)),
    ("ReduceGrad", |n| n.declared_shapes(0)),
    ("SgdUpdate", |n| Ok(vec![n.input(0)?])),
    ("MomentumUpdate", |n| Ok(vec![n.input(0)?, n.input(1)?])),
    ("AdamStep", |n| Ok(vec![n.input(0)?])),
    ("AdamUpdate", |n| Ok(vec![n.input(0)?, n.input(1)?, n.input(2)?])),
    ("SplitPart", split_part),
    ("SplitWindow", split_window),
    ("OverlapAdd", |n| n.declared_shapes(0)),
    ("BatchNormStatistics", |n| Ok(vec![TensorType::new(DType::F64, vec![3, n.dim(0, 1)?])])),
    ("BatchNormMerge", |n| {
        let running = n.input(0)?;
        let batch = TensorType::new(DType::F64, vec![2, n.dim(0, 0)?]);
        Ok(vec![running.clone(), running.clone(), running.clone(), running, batch])
    }),
    ("BatchNormApply", |n| Ok(vec![n.input(0)?])),
    ("BatchNormGradSums", |n| Ok(vec![TensorType::new(DType::F64, vec![3, n.dim(1, 1)?])])),
    ("BatchNormGradMerge", |n| {
        let c = n.dim(0, 1)?;
        // dscale and dbias take the dtype the graph declares (the sums are f64).
        let param = |i: usize| n.declared.get(i).map_or(DType::F32, |d| d.dtype);
        Ok(vec![
            TensorType::new(param(0), vec![c]),
            TensorType::new(param(1), vec![c]),
            TensorType::new(DType::F64, vec![3, c]),
        ])
    }),
    ("BatchNormGradData", |n| Ok(vec![n.input(1)?])),
];

/// A loss: a scalar of its first input's dtype.
fn loss(n: &LmsNode<'_>) -> ShapeResult<Vec<TensorType>> {
    Ok(vec![TensorType::new(n.input(0)?.dtype, vec![])])
}

/// `SplitPart`: X with its `axis` cut to part `index` of `parts` (`array_split` lengths).
fn split_part(n: &LmsNode<'_>) -> ShapeResult<Vec<TensorType>> {
    let mut x = n.input(0)?;
    let axis = normalize_axis(n.attrs.req_int("axis")?, x.shape.len())?;
    let (index, parts, len) = (n.attrs.req_int("index")?, n.attrs.req_int("parts")?, x.shape[axis]);
    if parts < 1 || parts as u64 > len as u64 || index < 0 || index >= parts {
        return Err(ShapeError::Invalid(format!("part {index} of {parts} of an axis of {len}")));
    }
    x.shape[axis] = part_len(len, index as usize, parts as usize);
    Ok(vec![x])
}

/// `SplitWindow`: X with its `axis` cut to `begin..end`.
fn split_window(n: &LmsNode<'_>) -> ShapeResult<Vec<TensorType>> {
    let mut x = n.input(0)?;
    let axis = normalize_axis(n.attrs.req_int("axis")?, x.shape.len())?;
    let (begin, end, len) = (n.attrs.req_int("begin")?, n.attrs.req_int("end")?, x.shape[axis]);
    if begin < 0 || begin > end || end as u64 > len as u64 {
        return Err(ShapeError::Invalid(format!("window {begin}..{end} of an axis of {len}")));
    }
    x.shape[axis] = (end - begin) as usize;
    Ok(vec![x])
}

/// The output types node `n` of lms op `rule` must declare: the rule's outputs, one per
/// declared output (the others are optional).
pub(super) fn expected(rule: OutputsFn, n: &LmsNode<'_>) -> ShapeResult<Vec<TensorType>> {
    let mut outputs = rule(n)?;
    if n.declared.is_empty() || n.declared.len() > outputs.len() {
        let expected = if outputs.len() == 1 { "1".to_string() } else { format!("1 to {}", outputs.len()) };
        return Err(ShapeError::OutputCount { expected, got: n.declared.len() });
    }
    outputs.truncate(n.declared.len());
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{expected_lms_outputs, registry};
    use crate::types::Attr;

    fn f32s(shape: &[usize]) -> TensorType {
        TensorType::new(DType::F32, shape.to_vec())
    }

    /// The output types `op` gives for `inputs`, `declared` and `attrs`.
    fn outputs(
        op: &str,
        attrs: &Attrs,
        inputs: &[&TensorType],
        declared: &[&TensorType],
    ) -> ShapeResult<Vec<TensorType>> {
        let inputs: Vec<Option<&TensorType>> = inputs.iter().copied().map(Some).collect();
        let op = registry::by_name(op).expect("an op");
        expected_lms_outputs(op, &LmsNode { attrs, inputs: &inputs, declared }).expect("the op has an output rule")
    }

    #[test]
    fn outputs_follow_the_inputs_and_optional_outputs_may_be_left_out() {
        let (x, none) = (f32s(&[8, 3, 5]), Attrs::new());
        let stat = f32s(&[3]);
        let declared = [&x, &stat, &stat];
        assert_eq!(
            outputs("BatchNormTrain", &none, &[&x, &stat, &stat, &stat, &stat], &declared),
            Ok(vec![x.clone(), stat.clone(), stat.clone()])
        );
        let mask = TensorType::new(DType::Bool, vec![8, 3, 5]);
        assert_eq!(outputs("DropoutTrain", &none, &[&x], &[&x, &mask]), Ok(vec![x.clone(), mask]));
        let err = outputs("SgdUpdate", &none, &[&x, &x], &[&x, &x]);
        assert_eq!(err, Err(ShapeError::OutputCount { expected: "1".into(), got: 2 }));
        assert_eq!(outputs("SoftmaxCrossEntropy", &none, &[&x], &[&x]), Ok(vec![f32s(&[])]));
    }

    #[test]
    fn shapes_the_graph_gives_are_checked_for_what_the_inputs_fix() {
        let (dy, none) = (f32s(&[2, 6]), Attrs::new());
        let wide = TensorType::new(DType::I32, vec![4, 6]);
        assert_eq!(outputs("SliceGrad", &none, &[&dy], &[&wide]), Ok(vec![f32s(&[4, 6])]));
        assert_eq!(outputs("ReshapeTo", &none, &[&dy], &[&f32s(&[3, 4])]), Ok(vec![f32s(&[3, 4])]));
        assert!(outputs("ReshapeTo", &none, &[&dy], &[&f32s(&[3, 5])]).is_err());
    }

    #[test]
    fn split_parts_and_windows_cut_their_axis() {
        let x = f32s(&[7, 4]);
        let part =
            |index| Attrs::new().with("axis", Attr::Int(0)).with("index", Attr::Int(index)).with("parts", Attr::Int(3));
        assert_eq!(outputs("SplitPart", &part(0), &[&x], &[&x]), Ok(vec![f32s(&[3, 4])]));
        assert_eq!(outputs("SplitPart", &part(2), &[&x], &[&x]), Ok(vec![f32s(&[2, 4])]));
        assert!(outputs("SplitPart", &part(3), &[&x], &[&x]).is_err());
        let window = |begin, end| {
            Attrs::new().with("axis", Attr::Int(-1)).with("begin", Attr::Int(begin)).with("end", Attr::Int(end))
        };
        assert_eq!(outputs("SplitWindow", &window(1, 3), &[&x], &[&x]), Ok(vec![f32s(&[7, 2])]));
        assert!(outputs("SplitWindow", &window(3, 5), &[&x], &[&x]).is_err());
    }
}
