//! Helpers shared by the op families: input access, axis normalisation,
//! broadcasting, dtype checks, and reading and writing folded constants.

use super::{Node, ShapeError, ShapeResult, Value, MAX_FOLDED_ELEMENTS};
use crate::types::{DType, Shape, TensorData, TensorType};

/// Checks that the node has between `min` and `max` input slots.
pub(super) fn expect_inputs(node: &Node<'_>, min: usize, max: usize) -> ShapeResult<()> {
    let got = node.inputs.len();
    if (min..=max).contains(&got) {
        return Ok(());
    }
    let expected = match max {
        _ if min == max => min.to_string(),
        usize::MAX => format!("at least {min}"),
        _ => format!("{min} to {max}"),
    };
    Err(ShapeError::InputCount { expected, got })
}

/// The input at `index`, which must be present.
pub(super) fn input<'a>(node: &Node<'a>, index: usize) -> ShapeResult<&'a Value> {
    optional_input(node, index).ok_or(ShapeError::MissingInput { index })
}

/// The input at `index`, or `None` when it is omitted.
pub(super) fn optional_input<'a>(node: &Node<'a>, index: usize) -> Option<&'a Value> {
    node.inputs.get(index).copied().flatten()
}

/// A value of known type and unknown contents.
pub(super) fn typed(dtype: DType, shape: Shape) -> Value {
    Value::of_type(TensorType::new(dtype, shape))
}

/// Formats a shape as `[2,3]`.
pub(super) fn fmt_shape(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    format!("[{}]", dims.join(","))
}

/// Maps a possibly negative axis into `0..rank`.
pub(super) fn normalize_axis(axis: i64, rank: usize) -> ShapeResult<usize> {
    let r = i64::try_from(rank).map_err(|_| too_large())?;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(ShapeError::Invalid(format!("axis {axis} is out of range for rank {rank}")))
    }
}

/// Normalises a list of axes, rejecting repeats.
pub(super) fn normalize_axes(axes: &[i64], rank: usize) -> ShapeResult<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &axis in axes {
        let a = normalize_axis(axis, rank)?;
        if out.contains(&a) {
            return Err(ShapeError::Invalid(format!("axis {axis} is repeated")));
        }
        out.push(a);
    }
    Ok(out)
}

/// The error for shapes whose size does not fit.
pub(super) fn too_large() -> ShapeError {
    ShapeError::Invalid("shape too large".into())
}

/// Number of elements of a shape, failing on overflow.
pub(super) fn checked_numel(shape: &[usize]) -> ShapeResult<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or_else(too_large)
}

/// A dimension from a (possibly negative) integer read from a model.
pub(super) fn to_dim(value: i64, what: &str) -> ShapeResult<usize> {
    usize::try_from(value).map_err(|_| ShapeError::Invalid(format!("{what} must not be negative, got {value}")))
}

/// A positive integer attribute value, e.g. `group`.
pub(super) fn positive_attr(name: &str, value: i64) -> ShapeResult<usize> {
    match usize::try_from(value) {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(ShapeError::UnsupportedAttr { name: name.into(), value: value.to_string() }),
    }
}

/// A dimension from a wide intermediate result.
pub(super) fn wide_to_dim(value: i128) -> ShapeResult<usize> {
    usize::try_from(value).map_err(|_| too_large())
}

/// Numpy (multidirectional) broadcasting of two shapes.
pub(super) fn broadcast(a: &[usize], b: &[usize]) -> ShapeResult<Shape> {
    let rank = a.len().max(b.len());
    let dim_at = |s: &[usize], i: usize| {
        if i < rank - s.len() {
            1
        } else {
            s[i - (rank - s.len())]
        }
    };
    (0..rank)
        .map(|i| match (dim_at(a, i), dim_at(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            _ => Err(ShapeError::Invalid(format!("cannot broadcast {} with {}", fmt_shape(a), fmt_shape(b)))),
        })
        .collect()
}

/// Checks that `from` broadcasts to exactly `to` (unidirectional broadcasting).
pub(super) fn broadcast_to(from: &[usize], to: &[usize], what: &str) -> ShapeResult<()> {
    if broadcast(from, to).ok().as_deref() == Some(to) {
        Ok(())
    } else {
        Err(ShapeError::Invalid(format!("{what} {} does not broadcast to {}", fmt_shape(from), fmt_shape(to))))
    }
}

/// Checks that two inputs have the same dtype and returns it.
pub(super) fn same_dtype(a: &Value, b: &Value) -> ShapeResult<DType> {
    if a.ty.dtype == b.ty.dtype {
        Ok(a.ty.dtype)
    } else {
        Err(ShapeError::Invalid(format!("input dtypes differ: {} and {}", a.ty.dtype, b.ty.dtype)))
    }
}

/// Which element types an input accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Accepts {
    /// Floating point only.
    Float,
    /// Integers and floats, not bool.
    Numeric,
    /// Bool only.
    Bool,
    /// i32 or i64 (indices).
    Index,
}

impl Accepts {
    fn allows(self, dtype: DType) -> bool {
        match self {
            Accepts::Float => dtype.is_float(),
            Accepts::Numeric => dtype.is_float() || dtype.is_int(),
            Accepts::Bool => dtype == DType::Bool,
            Accepts::Index => matches!(dtype, DType::I32 | DType::I64),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Accepts::Float => "a float",
            Accepts::Numeric => "a numeric",
            Accepts::Bool => "a bool",
            Accepts::Index => "an i32 or i64",
        }
    }
}

/// The required input at `index`, checked to have an accepted dtype.
pub(super) fn input_of<'a>(node: &Node<'a>, index: usize, accepts: Accepts) -> ShapeResult<&'a Value> {
    let value = input(node, index)?;
    check_dtype(value, index, accepts)?;
    Ok(value)
}

/// Checks that the input at `index` has an accepted dtype.
pub(super) fn check_dtype(value: &Value, index: usize, accepts: Accepts) -> ShapeResult<()> {
    if accepts.allows(value.ty.dtype) {
        Ok(())
    } else {
        Err(ShapeError::Invalid(format!("input {index} must be {} tensor, got {}", accepts.name(), value.ty.dtype)))
    }
}

/// Checks that the input at `index` has rank at least `min`.
pub(super) fn check_rank(value: &Value, index: usize, min: usize) -> ShapeResult<()> {
    if value.ty.rank() >= min {
        Ok(())
    } else {
        Err(ShapeError::Invalid(format!("input {index} has rank {}, expected at least {min}", value.ty.rank())))
    }
}

/// The contents of an integer or bool value, when known at compile time.
pub(super) fn int_data(value: &Value) -> Option<Vec<i64>> {
    let values = value.data.as_ref()?.to_i64()?;
    (Some(values.len()) == checked_numel(&value.ty.shape).ok()).then_some(values)
}

/// The integer contents of the required input at `index`, which must be
/// known at compile time because it gives `what`.
pub(super) fn const_i64s(node: &Node<'_>, index: usize, what: &'static str) -> ShapeResult<Vec<i64>> {
    optional_const_i64s(node, index, what)?.ok_or(ShapeError::MissingInput { index })
}

/// Like [`const_i64s`], for an optional input: `None` when it is omitted.
pub(super) fn optional_const_i64s(node: &Node<'_>, index: usize, what: &'static str) -> ShapeResult<Option<Vec<i64>>> {
    let Some(value) = optional_input(node, index) else {
        return Ok(None);
    };
    if value.ty.dtype.is_float() {
        return Err(ShapeError::Invalid(format!("input {index} must be an integer tensor, got {}", value.ty.dtype)));
    }
    int_data(value).map(Some).ok_or(ShapeError::NotConstant { index, what })
}

/// The single integer in a constant input (e.g. a scalar bound).
pub(super) fn const_scalar(node: &Node<'_>, index: usize, what: &'static str) -> ShapeResult<i64> {
    match const_i64s(node, index, what)?[..] {
        [v] => Ok(v),
        _ => Err(ShapeError::Invalid(format!("input {index} must hold a single value"))),
    }
}

/// Encodes integers as a tensor of type `ty` (integers wrap to the width of
/// the type, bool is `v != 0`); `None` for f16/bf16 or a length mismatch.
pub(super) fn ints_to_data(ty: TensorType, values: &[i64]) -> Option<TensorData> {
    let mut bytes = Vec::with_capacity(values.len() * ty.dtype.size());
    for &v in values {
        match ty.dtype {
            DType::I64 | DType::U64 => bytes.extend_from_slice(&v.to_le_bytes()),
            DType::I32 | DType::U32 => bytes.extend_from_slice(&(v as i32).to_le_bytes()),
            DType::I16 | DType::U16 => bytes.extend_from_slice(&(v as i16).to_le_bytes()),
            DType::I8 | DType::U8 => bytes.push(v as u8),
            DType::Bool => bytes.push(u8::from(v != 0)),
            DType::F32 => bytes.extend_from_slice(&(v as f32).to_le_bytes()),
            DType::F64 => bytes.extend_from_slice(&(v as f64).to_le_bytes()),
            DType::F16 | DType::BF16 => return None,
        }
    }
    TensorData::from_bytes(ty, bytes)
}

/// True when a tensor of this shape is small enough to compute at compile time.
pub(super) fn foldable(shape: &[usize]) -> bool {
    checked_numel(shape).is_ok_and(|n| n <= MAX_FOLDED_ELEMENTS)
}

/// The output value of type `ty`; when it is small enough, its contents are
/// computed by `compute`, which returns `None` when some input is unknown.
/// An empty tensor's contents are always known (and `compute` not called).
pub(super) fn fold(ty: TensorType, compute: impl FnOnce() -> ShapeResult<Option<Vec<i64>>>) -> ShapeResult<Value> {
    let values = match checked_numel(&ty.shape) {
        Ok(0) => Some(Vec::new()),
        Ok(n) if n <= MAX_FOLDED_ELEMENTS => compute()?,
        _ => None,
    };
    let data = values.and_then(|values| ints_to_data(ty.clone(), &values));
    Ok(Value { ty, data })
}

/// Row-major strides of a shape, in elements.
pub(super) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(shape[i + 1]);
    }
    strides
}

/// Reads an affine view of `values`: the output element with multi-index
/// `i` (row major over `out_shape`) is `values[base + Σ i_j·coefs_j]`.
/// `None` if an index falls outside `values`.
pub(super) fn affine_gather(values: &[i64], out_shape: &[usize], base: i64, coefs: &[i64]) -> Option<Vec<i64>> {
    let n = checked_numel(out_shape).ok()?;
    if coefs.len() != out_shape.len() {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    let mut index = vec![0usize; out_shape.len()];
    let mut offset = base;
    for _ in 0..n {
        out.push(*values.get(usize::try_from(offset).ok()?)?);
        // Advance the multi-index like an odometer, keeping `offset` in step.
        for axis in (0..out_shape.len()).rev() {
            index[axis] += 1;
            offset = offset.wrapping_add(coefs[axis]);
            if index[axis] < out_shape[axis] {
                break;
            }
            offset = offset.wrapping_sub(coefs[axis].wrapping_mul(out_shape[axis] as i64));
            index[axis] = 0;
        }
    }
    Some(out)
}

/// The coefficients that read a tensor of `shape` broadcast to `out_shape`
/// through [`affine_gather`].
pub(super) fn broadcast_coefs(shape: &[usize], out_shape: &[usize]) -> Vec<i64> {
    let lead = out_shape.len().saturating_sub(shape.len());
    let strides = strides(shape);
    (0..out_shape.len())
        .map(|i| match i.checked_sub(lead) {
            Some(j) if shape[j] != 1 => strides[j] as i64,
            _ => 0,
        })
        .collect()
}

/// The contents of `value` broadcast to `out_shape`, when known.
pub(super) fn broadcast_data(value: &Value, out_shape: &[usize]) -> Option<Vec<i64>> {
    let data = int_data(value)?;
    affine_gather(&data, out_shape, 0, &broadcast_coefs(&value.ty.shape, out_shape))
}

#[cfg(test)]
pub(super) mod testing {
    //! Builders for the family modules' tests.

    use super::super::{infer, Node, ShapeResult, Value};
    use crate::types::{Attrs, DType, Shape, TensorData, TensorType};

    /// A value of unknown contents.
    pub fn t(dtype: DType, shape: &[usize]) -> Value {
        Value::of_type(TensorType::new(dtype, shape.to_vec()))
    }

    /// An f32 value of unknown contents.
    pub fn f(shape: &[usize]) -> Value {
        t(DType::F32, shape)
    }

    /// A constant 1-D i64 tensor.
    pub fn ints(values: &[i64]) -> Value {
        Value::constant(TensorData::from_i64(vec![values.len()], values))
    }

    /// A constant i64 scalar.
    pub fn scalar(v: i64) -> Value {
        Value::constant(TensorData::from_i64(vec![], &[v]))
    }

    /// Runs inference on a node with all inputs present.
    pub fn run(op: &str, opset: i64, attrs: Attrs, inputs: &[Value], num_outputs: usize) -> ShapeResult<Vec<Value>> {
        let slots: Vec<Option<&Value>> = inputs.iter().map(Some).collect();
        run_opt(op, opset, attrs, &slots, num_outputs)
    }

    /// Runs inference on a node whose input slots may be empty.
    pub fn run_opt(
        op: &str,
        opset: i64,
        attrs: Attrs,
        inputs: &[Option<&Value>],
        num_outputs: usize,
    ) -> ShapeResult<Vec<Value>> {
        infer(&Node { op, opset, attrs: &attrs, inputs, num_outputs })
    }

    /// The shape of the single output of a node.
    pub fn shape(op: &str, opset: i64, attrs: Attrs, inputs: &[Value]) -> Shape {
        let out = run(op, opset, attrs, inputs, 1).expect("inference failed");
        out[0].ty.shape.clone()
    }

    /// The error message of a node that must fail.
    pub fn error(op: &str, opset: i64, attrs: Attrs, inputs: &[Value]) -> String {
        run(op, opset, attrs, inputs, 1).expect_err("inference succeeded").to_string()
    }

    /// The folded integer contents of a value.
    pub fn data(value: &Value) -> Vec<i64> {
        value.data.as_ref().expect("not folded").to_i64().expect("not integer")
    }
}
