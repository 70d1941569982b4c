//! Shape inference for ops that create or convert values: `Constant`,
//! `ConstantOfShape`, `Shape`, `Range`, `Cast` and `Identity`. Their
//! results are known at compile time whenever their inputs are. Their cost,
//! and that of the parameterized vertices and `Zeros`.

use super::axes::AxesMap;
use super::cost::{copy, fill, view, CostFn};
use super::util::{
    checked_numel, const_i64s, const_scalar, expect_inputs, fold, foldable, input, input_of, int_data, same_dtype,
    to_dim, too_large, wide_to_dim, Accepts,
};
use super::{InferFn, Node, ShapeError, ShapeResult, Value};
use crate::types::{DType, TensorData, TensorType};

/// The value-creating ops.
pub(super) const OPS: &[(&str, InferFn)] = &[
    ("Constant", constant),
    ("ConstantOfShape", constant_of_shape),
    ("Shape", shape),
    ("Size", size),
    ("Range", range),
    ("Cast", cast),
    ("Identity", identity),
];

/// Work of the value-creating ops: they write their output (`Cast` also
/// reads its input); `Identity` is a view; variables and inputs are
/// resident and run nothing.
pub(super) const COSTS: &[(&str, CostFn)] = &[
    ("Constant", fill),
    ("ConstantOfShape", fill),
    ("Shape", fill),
    ("Size", fill),
    ("Range", fill),
    ("Cast", copy),
    ("Identity", view),
    ("Zeros", fill),
    ("Variable", view),
    ("Input", view),
];

/// The ops of this family lms cannot differentiate, and why (every other op a model may
/// hold has a gradient rule in the compiler).
pub(super) const NO_GRADIENT: &[(&str, &str)] = &[
    ("Constant", "its output is a constant"),
    ("ConstantOfShape", "its output is a constant"),
    ("Shape", "its output is a shape (integers)"),
    ("Size", "its output is a count of elements (an integer)"),
    ("Range", "its output is a sequence of numbers fixed by its bounds"),
];

/// The ops of this family without an axes map (coupled along every axis), and why.
pub(super) const NO_AXES: &[(&str, &str)] = &[
    ("Constant", "makes a value from its attributes or input shapes"),
    ("ConstantOfShape", "makes a value from its attributes or input shapes"),
    ("Shape", "makes a value from its attributes or input shapes"),
    ("Size", "makes a value from its attributes or input shapes"),
    ("Range", "makes a value from its attributes or input shapes"),
    ("Zeros", "makes a value from its attributes or input shapes"),
    ("Variable", "a graph input, no kernel"),
    ("Input", "a graph input, no kernel"),
];

/// Axes maps: `Cast` and `Identity` are elementwise.
pub(super) const AXES: &[(&str, AxesMap)] = &[("Cast", AxesMap::Elementwise), ("Identity", AxesMap::Elementwise)];

/// Checks that a constant tensor holds as many bytes as its type needs.
fn check_bytes(data: &TensorData, name: &str) -> ShapeResult<()> {
    let expected = checked_numel(&data.ty.shape)?.checked_mul(data.ty.dtype.size()).ok_or_else(too_large)?;
    if data.bytes.len() == expected {
        Ok(())
    } else {
        Err(ShapeError::Invalid(format!("attribute '{name}' has {} bytes, expected {expected}", data.bytes.len())))
    }
}

/// `Constant`: exactly one of `value` (a tensor), `value_float`,
/// `value_floats`, `value_int`, `value_ints`.
fn constant(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 0, 0)?;
    let attrs = node.attrs;
    let mut names =
        attrs.iter().map(|(name, _)| name.as_str()).filter(|n| n.starts_with("value") || *n == "sparse_value");
    let (Some(name), None) = (names.next(), names.next()) else {
        return Err(ShapeError::Invalid("a constant needs exactly one value attribute".into()));
    };
    let data = match name {
        "value" => {
            let data = attrs.tensor(name)?;
            check_bytes(data, name)?;
            data.clone()
        }
        "value_float" => TensorData::from_f32(vec![], &[attrs.float(name, 0.0)?]),
        "value_floats" => {
            let values = attrs.floats(name, Vec::new())?;
            TensorData::from_f32(vec![values.len()], &values)
        }
        "value_int" => TensorData::from_i64(vec![], &[attrs.int(name, 0)?]),
        "value_ints" => {
            let values = attrs.ints(name, Vec::new())?;
            TensorData::from_i64(vec![values.len()], &values)
        }
        other => return Err(ShapeError::Invalid(format!("constant attribute '{other}' is not supported"))),
    };
    Ok(vec![Value::constant(data)])
}

/// `ConstantOfShape`: the shape is a constant input; the fill `value` is a
/// one-element tensor attribute (f32 zero by default). Folded when small.
fn constant_of_shape(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, 1)?;
    let shape = const_i64s(node, 0, "the output shape")?
        .iter()
        .map(|&d| to_dim(d, "a dimension"))
        .collect::<ShapeResult<Vec<_>>>()?;
    let zero = TensorData::from_f32(vec![1], &[0.0]);
    let fill = if node.attrs.has("value") { node.attrs.tensor("value")? } else { &zero };
    check_bytes(fill, "value")?;
    if fill.bytes.len() != fill.ty.dtype.size() {
        return Err(ShapeError::Invalid("attribute 'value' must hold one element".into()));
    }
    let ty = TensorType::new(fill.ty.dtype, shape);
    let data = if foldable(&ty.shape) {
        TensorData::from_bytes(ty.clone(), fill.bytes.repeat(checked_numel(&ty.shape)?))
    } else {
        None
    };
    Ok(vec![Value { ty, data }])
}

/// `Shape`: the input's dimensions as i64, always known; opset 15 adds
/// `start`/`end`, clamped to the rank.
fn shape(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, 1)?;
    let dims = &input(node, 0)?.ty.shape;
    let rank = dims.len() as i128;
    let clamp = |i: i64| wide_to_dim((if i < 0 { i as i128 + rank } else { i as i128 }).clamp(0, rank));
    let start = clamp(node.attrs.int("start", 0)?)?;
    let end = clamp(node.attrs.int("end", i64::MAX)?)?.max(start);
    let values =
        dims[start..end].iter().map(|&d| i64::try_from(d).map_err(|_| too_large())).collect::<ShapeResult<Vec<_>>>()?;
    Ok(vec![Value::constant(TensorData::from_i64(vec![values.len()], &values))])
}

/// `Size`: the number of elements of the input, an i64 scalar.
fn size(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, 1)?;
    let n = checked_numel(&input(node, 0)?.ty.shape)?;
    let n = i64::try_from(n).map_err(|_| too_large())?;
    Ok(vec![Value::constant(TensorData::from_i64(vec![], &[n]))])
}

/// Names of `Range`'s inputs, for errors.
const RANGE_INPUTS: [&str; 3] = ["the range start", "the range limit", "the range delta"];

/// The scalar input of `Range` at `index`, as f64.
fn range_bound(node: &Node<'_>, index: usize) -> ShapeResult<f64> {
    let value = input(node, index)?;
    let data = value.data.as_ref().ok_or(ShapeError::NotConstant { index, what: RANGE_INPUTS[index] })?;
    match data.to_f64()[..] {
        [v] => Ok(v),
        _ => Err(ShapeError::Invalid(format!("input {index} must hold a single value"))),
    }
}

/// `Range`: `ceil((limit − start) / delta)` elements (at least 0) from
/// constant scalars of one dtype; integer ranges are folded.
fn range(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 3, 3)?;
    let first = input_of(node, 0, Accepts::Numeric)?;
    for index in 1..3 {
        same_dtype(first, input(node, index)?)?;
    }
    let dtype = first.ty.dtype;
    if dtype.is_int() {
        let bound = |index| const_scalar(node, index, RANGE_INPUTS[index]).map(i128::from);
        let [start, limit, delta] = [bound(0)?, bound(1)?, bound(2)?];
        check_delta(delta == 0)?;
        let len = wide_to_dim(((limit - start + delta - delta.signum()) / delta).max(0))?;
        let ty = TensorType::new(dtype, vec![len]);
        return Ok(vec![fold(ty, || Ok(Some((0..len as i128).map(|i| (start + i * delta) as i64).collect())))?]);
    }
    let [start, limit, delta] = [range_bound(node, 0)?, range_bound(node, 1)?, range_bound(node, 2)?];
    check_delta(delta == 0.0)?;
    let len = ((limit - start) / delta).ceil().max(0.0);
    if !len.is_finite() || len > (1u64 << 40) as f64 {
        return Err(ShapeError::Invalid(format!("range from {start} to {limit} by {delta} is too long")));
    }
    Ok(vec![Value::of_type(TensorType::new(dtype, vec![len as usize]))])
}

/// Rejects a zero `Range` delta.
fn check_delta(is_zero: bool) -> ShapeResult<()> {
    if is_zero {
        Err(ShapeError::Invalid("range delta cannot be 0".into()))
    } else {
        Ok(())
    }
}

/// `Cast`: to the dtype code `to`; integer and bool contents are folded
/// to any supported type, float contents to integers and bool.
fn cast(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, 1)?;
    let x = input(node, 0)?;
    let to = node.attrs.req_int("to")?;
    let dtype = i32::try_from(to)
        .ok()
        .and_then(DType::from_code)
        .ok_or_else(|| ShapeError::UnsupportedAttr { name: "to".into(), value: to.to_string() })?;
    let ty = TensorType::new(dtype, x.ty.shape.clone());
    let out = fold(ty, || {
        if !x.ty.dtype.is_float() {
            return Ok(int_data(x));
        }
        if dtype.is_float() {
            return Ok(None);
        }
        // Truncation toward zero (saturating; NaN becomes 0), or `!= 0` for bool.
        let convert = |v: f64| {
            if dtype == DType::Bool {
                i64::from(v != 0.0)
            } else {
                v as i64
            }
        };
        Ok(x.data.as_ref().map(|d| d.to_f64().into_iter().map(convert).collect()))
    })?;
    Ok(vec![out])
}

/// `Identity`: the input, contents included.
fn identity(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, 1)?;
    Ok(vec![input(node, 0)?.clone()])
}

#[cfg(test)]
mod tests {
    use super::super::util::testing::{data, error, f, ints, run, scalar, shape, t};
    use super::super::Value;
    use crate::types::{Attr, Attrs, DType, TensorData, TensorType};

    #[test]
    fn constants() {
        let out = run("Constant", 13, Attrs::new().with("value_ints", Attr::Ints(vec![1, 2])), &[], 1).unwrap();
        assert_eq!((out[0].ty.shape.clone(), data(&out[0])), (vec![2], vec![1, 2]));
        let tensor = TensorData::from_f32(vec![2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let out = run("Constant", 13, Attrs::new().with("value", Attr::Tensor(tensor.clone())), &[], 1).unwrap();
        assert_eq!(out[0].data, Some(tensor));
        let out = run("Constant", 13, Attrs::new().with("value_float", Attr::Float(0.5)), &[], 1).unwrap();
        assert_eq!((out[0].ty.dtype, out[0].ty.shape.clone()), (DType::F32, vec![]));
        assert_eq!(error("Constant", 13, Attrs::new(), &[]), "a constant needs exactly one value attribute");
        assert_eq!(
            error("Constant", 13, Attrs::new().with("value", Attr::Int(3)), &[]),
            "attribute 'value' is int, expected tensor"
        );
    }

    #[test]
    fn constant_of_shape() {
        let out = run("ConstantOfShape", 13, Attrs::new(), &[ints(&[2, 3])], 1).unwrap();
        assert_eq!(out[0].ty, TensorType::new(DType::F32, vec![2, 3]));
        assert_eq!(out[0].data.as_ref().map(|d| d.to_f64()), Some(vec![0.0; 6]));
        let one = Attr::Tensor(TensorData::from_i64(vec![1], &[1]));
        let out = run("ConstantOfShape", 13, Attrs::new().with("value", one), &[ints(&[3])], 1).unwrap();
        assert_eq!(data(&out[0]), vec![1, 1, 1]);
        let big = run("ConstantOfShape", 13, Attrs::new(), &[ints(&[1024, 1024])], 1).unwrap();
        assert_eq!((big[0].ty.shape.clone(), big[0].data.is_none()), (vec![1024, 1024], true));
        assert_eq!(
            error("ConstantOfShape", 13, Attrs::new(), &[t(DType::I64, &[2])]),
            "input 0 must be known at compile time (it gives the output shape)"
        );
        assert_eq!(
            error("ConstantOfShape", 13, Attrs::new(), &[ints(&[2, -1])]),
            "a dimension must not be negative, got -1"
        );
    }

    #[test]
    fn shape_slices() {
        let x = f(&[2, 3, 4, 5]);
        assert_eq!(data(&run("Shape", 13, Attrs::new(), std::slice::from_ref(&x), 1).unwrap()[0]), vec![2, 3, 4, 5]);
        let attrs = Attrs::new().with("start", Attr::Int(-3)).with("end", Attr::Int(-1));
        assert_eq!(data(&run("Shape", 15, attrs, std::slice::from_ref(&x), 1).unwrap()[0]), vec![3, 4]);
        let attrs = Attrs::new().with("start", Attr::Int(10));
        assert_eq!(data(&run("Shape", 15, attrs, &[x], 1).unwrap()[0]), Vec::<i64>::new());
        let x = f(&[2, 3, 4]);
        assert_eq!(data(&run("Size", 13, Attrs::new(), &[x], 1).unwrap()[0]), vec![24]);
    }

    #[test]
    fn ranges() {
        let out = run("Range", 11, Attrs::new(), &[scalar(10), scalar(0), scalar(-3)], 1).unwrap();
        assert_eq!((out[0].ty.shape.clone(), data(&out[0])), (vec![4], vec![10, 7, 4, 1]));
        let fl = |v: f32| Value::constant(TensorData::from_f32(vec![], &[v]));
        assert_eq!(shape("Range", 11, Attrs::new(), &[fl(0.0), fl(1.0), fl(0.3)]), vec![4]);
        assert_eq!(error("Range", 11, Attrs::new(), &[scalar(0), scalar(5), scalar(0)]), "range delta cannot be 0");
        assert_eq!(
            error("Range", 11, Attrs::new(), &[scalar(0), scalar(i64::MAX), scalar(1)]),
            "shape too large: [9223372036854775807] has more than 2^40 elements"
        );
        assert_eq!(
            error("Range", 11, Attrs::new(), &[scalar(0), t(DType::I64, &[]), scalar(1)]),
            "input 1 must be known at compile time (it gives the range limit)"
        );
    }

    #[test]
    fn casts() {
        let to = |d: DType| Attrs::new().with("to", Attr::Int(d.code() as i64));
        let out = run("Cast", 13, to(DType::F32), &[ints(&[3, -1])], 1).unwrap();
        assert_eq!(out[0].data, Some(TensorData::from_f32(vec![2], &[3.0, -1.0])));
        let halves = Value::constant(TensorData::from_f32(vec![3], &[2.7, -2.7, 0.0]));
        assert_eq!(
            data(&run("Cast", 13, to(DType::I32), std::slice::from_ref(&halves), 1).unwrap()[0]),
            vec![2, -2, 0]
        );
        assert_eq!(data(&run("Cast", 13, to(DType::Bool), &[halves], 1).unwrap()[0]), vec![1, 1, 0]);
        let narrowed = run("Cast", 13, to(DType::I8), &[ints(&[300])], 1).unwrap();
        assert_eq!((narrowed[0].ty.dtype, data(&narrowed[0])), (DType::I8, vec![44]));
        assert_eq!(
            error("Cast", 13, Attrs::new().with("to", Attr::Int(8)), &[f(&[1])]),
            "unsupported value 8 for attribute 'to'"
        );
        let same = run("Identity", 13, Attrs::new(), &[ints(&[5])], 1).unwrap();
        assert_eq!(data(&same[0]), vec![5]);
    }
}
