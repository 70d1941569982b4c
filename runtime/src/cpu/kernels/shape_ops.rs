//! Ops that copy data under a new shape (Identity, Reshape, Flatten, Squeeze, Unsqueeze,
//! Dropout in inference form), Cast, and ops that make tensors from shapes or
//! attributes (Shape, Size, ConstantOfShape, Constant, Range).

use super::num::Num;
use super::{dispatch_num, Ctx, Kernel};
use crate::error::{KernelError, Result};
use crate::geometry::layout::{checked_numel, norm_axes, to_dim};
use crate::tensor::{dispatch, numel, Elem, HostTensor};
use lms_proto::lms::DType;

/// The shape and constant kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[
    ("Cast", cast),
    ("Constant", constant),
    ("ConstantOfShape", constant_of_shape),
    ("Dropout", dropout),
    ("Flatten", flatten),
    ("Identity", identity),
    ("Range", range),
    ("Reshape", reshape),
    ("Shape", shape),
    ("Size", size),
    ("Squeeze", squeeze),
    ("Unsqueeze", unsqueeze),
];

/// A copy of `x` with a new shape of the same element count.
fn with_shape(x: &HostTensor, shape: Vec<usize>) -> Result<Vec<HostTensor>> {
    if checked_numel(&shape) != Some(x.numel()) {
        return Err(KernelError::shape("input data", format!("{:?} cannot be viewed as {shape:?}", x.shape)));
    }
    Ok(vec![HostTensor::new(shape, x.data.clone())?])
}

fn identity(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    Ok(vec![ctx.input(0, "input")?.clone()])
}

/// Dropout at inference: the input unchanged, and a mask of ones (true) when declared,
/// in the declared dtype (bool from opset 10, the data's type before).
fn dropout(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "data")?;
    if let Some(t) = ctx.opt_input(2) {
        if t.as_bool("input training_mode")?.iter().any(|&b| b) {
            return Err(KernelError::unsupported("Dropout in training mode (inference form only)"));
        }
    }
    let mut outs = vec![x.clone()];
    if ctx.outputs.len() > 1 {
        let n = x.numel();
        let mask = dispatch!(ctx.out_dtype(1)?, T => Ok(T::wrap(vec![T::from_i64(1); n])))?;
        outs.push(HostTensor::new(x.shape.clone(), mask)?);
    }
    Ok(outs)
}

/// Reshape: `shape` from the input (opset >= 5) or the attribute; 0 copies the input's
/// dimension (unless `allowzero`), -1 is inferred.
fn reshape(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "data")?;
    let spec = ctx.ints_attr_or_input("shape", 1, "shape")?.ok_or_else(|| KernelError::MissingInput("shape".into()))?;
    let allow_zero = ctx.attrs.int("allowzero", 0)? != 0;
    let mut shape = Vec::with_capacity(spec.len());
    let mut inferred = None;
    for (i, &d) in spec.iter().enumerate() {
        shape.push(match d {
            -1 if inferred.is_none() => {
                inferred = Some(i);
                1
            }
            0 if !allow_zero => *x
                .shape
                .get(i)
                .ok_or_else(|| KernelError::invalid(format!("shape {spec:?} copies a missing dimension {i}")))?,
            d => to_dim(d, "shape dimension")?,
        });
    }
    if let Some(i) = inferred {
        let known = checked_numel(&shape)
            .filter(|&k| k != 0 && x.numel() % k == 0)
            .ok_or_else(|| KernelError::shape("input data", format!("{:?} cannot be viewed as {spec:?}", x.shape)))?;
        shape[i] = x.numel() / known;
    }
    with_shape(x, shape)
}

/// Flatten to 2-D at `axis` (default 1; `axis` may equal the rank).
fn flatten(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "input")?;
    let (a, r) = (ctx.attrs.int("axis", 1)?, x.rank() as i64);
    if a < -r || a > r {
        return Err(KernelError::attr("axis", format!("{a} is out of range for rank {r}")));
    }
    let axis = if a < 0 { a + r } else { a } as usize;
    with_shape(x, vec![numel(&x.shape[..axis]), numel(&x.shape[axis..])])
}

/// Squeeze the given axes (attribute or input), or every size-1 axis.
fn squeeze(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "data")?;
    let axes = match ctx.ints_attr_or_input("axes", 1, "axes")? {
        Some(a) => norm_axes(&a, x.rank(), "axis")?,
        None => (0..x.rank()).filter(|&d| x.shape[d] == 1).collect(),
    };
    if let Some(&a) = axes.iter().find(|&&a| x.shape[a] != 1) {
        return Err(KernelError::invalid(format!("cannot squeeze axis {a} of size {}", x.shape[a])));
    }
    let shape = x.shape.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &n)| n).collect();
    with_shape(x, shape)
}

/// Insert size-1 axes at the given positions of the output (attribute or input).
fn unsqueeze(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "data")?;
    let axes = ctx.ints_attr_or_input("axes", 1, "axes")?.ok_or_else(|| KernelError::MissingInput("axes".into()))?;
    let rank = x.rank() + axes.len();
    let axes = norm_axes(&axes, rank, "axis")?;
    let mut dims = x.shape.iter();
    let shape = (0..rank).map(|d| if axes.contains(&d) { 1 } else { dims.next().copied().unwrap_or(1) }).collect();
    with_shape(x, shape)
}

/// The input's shape as i64, optionally sliced by `start`/`end` (clamped).
fn shape(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "data")?;
    let r = x.rank() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).max(0).min(r) as usize;
    let (start, end) = (clamp(ctx.attrs.int("start", 0)?), clamp(ctx.attrs.int("end", r)?));
    let dims: Vec<i64> = x.shape[start..end.max(start)].iter().map(|&d| d as i64).collect();
    Ok(vec![HostTensor::from_vec(vec![dims.len()], dims)?])
}

fn size(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    Ok(vec![HostTensor::scalar(ctx.input(0, "data")?.numel() as i64)])
}

/// A tensor of the shape given by the input, filled with attribute `value` (f32 0 by default).
fn constant_of_shape(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let dims = ctx.input(0, "input")?.to_i64s("input input")?;
    let shape = dims.iter().map(|&d| to_dim(d, "dimension")).collect::<Result<Vec<_>>>()?;
    let value = ctx.attrs.tensor_opt("value")?.unwrap_or_else(|| HostTensor::scalar(0.0f32));
    if value.numel() != 1 {
        return Err(KernelError::attr("value", format!("expected one element, found {}", value.numel())));
    }
    ctx.check_declared(0, &shape)?;
    let n = numel(&shape);
    let data = dispatch!(value.dtype(), T => {
        let v = value.view::<T>("value")?;
        Ok(T::wrap(vec![v[0]; n]))
    })?;
    Ok(vec![HostTensor::new(shape, data)?])
}

/// The constant held by one of the `value*` attributes.
fn constant(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let a = &ctx.attrs;
    let t = if let Some(t) = a.tensor_opt("value")? {
        t
    } else if let Some(v) = a.float_opt("value_float")? {
        HostTensor::scalar(v)
    } else if let Some(v) = a.floats_opt("value_floats")? {
        HostTensor::from_vec(vec![v.len()], v.to_vec())?
    } else if let Some(v) = a.int_opt("value_int")? {
        HostTensor::scalar(v)
    } else if let Some(v) = a.ints_opt("value_ints")? {
        HostTensor::from_vec(vec![v.len()], v.to_vec())?
    } else {
        return Err(KernelError::unsupported("Constant without a value, value_float(s) or value_int(s) attribute"));
    };
    Ok(vec![t])
}

/// Range(start, limit, delta): ceil((limit - start) / delta) values start + i·delta.
fn range(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let start = ctx.input(0, "start")?;
    let out = dispatch_num!(start.dtype(), "input start", T => {
        let scalar = |i: usize, name: &str| -> Result<T> {
            match ctx.input(i, name)?.view::<T>(&format!("input {name}"))? {
                [v] => Ok(*v),
                _ => Err(KernelError::shape(format!("input {name}"), "expected a scalar")),
            }
        };
        let (s, l, d) = (scalar(0, "start")?, scalar(1, "limit")?, scalar(2, "delta")?);
        if d == T::ZERO {
            return Err(KernelError::invalid("Range with delta 0"));
        }
        let n = ((l.to_f64() - s.to_f64()) / d.to_f64()).ceil().max(0.0) as usize;
        ctx.check_declared(0, &[n])?;
        let values: Vec<T> = if T::IS_FLOAT {
            (0..n).map(|i| T::from_f64(s.to_f64() + i as f64 * d.to_f64())).collect()
        } else {
            (0..n).map(|i| s.add(T::from_i64(i as i64).mul(d))).collect()
        };
        HostTensor::from_vec(vec![n], values)
    })?;
    Ok(vec![out])
}

/// Converts one element between element types (through f64 when a float is involved,
/// through i64 otherwise; float to int truncates toward zero and saturates).
fn convert<S: Elem, D: Elem>(v: S) -> D {
    if S::IS_FLOAT || D::IS_FLOAT {
        D::from_f64(v.to_f64())
    } else {
        D::from_i64(v.to_i64())
    }
}

/// Cast to the dtype of attribute `to`.
fn cast(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "input")?;
    let to = ctx.attrs.int_opt("to")?.ok_or_else(|| KernelError::attr("to", "is required"))?;
    let to = i32::try_from(to)
        .ok()
        .and_then(|v| DType::try_from(v).ok())
        .ok_or_else(|| KernelError::attr("to", format!("unknown dtype {to}")))?;
    let data = dispatch!(x.dtype(), S => {
        let xs = x.view::<S>("input input")?;
        dispatch!(to, U => Ok(U::wrap(xs.iter().map(|&v| convert::<S, U>(v)).collect())))
    })?;
    Ok(vec![HostTensor::new(x.shape.clone(), data)?])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::tensor::HostTensor;
    use lms_proto::lms::DType::*;

    fn x() -> HostTensor {
        tensor(&[2, 3, 4], (0..24).map(|v| v as f32).collect())
    }

    #[test]
    fn reshape_handles_zero_and_minus_one() {
        let shape = tensor(&[3], vec![0i64, -1, 2]);
        let y = run1("Reshape", &[], &[&x(), &shape], DtypeF32, &[2, 6, 2]);
        assert_eq!(f32s(&y), f32s(&x()));
        let bad = tensor(&[2], vec![5i64, -1]);
        assert!(run("Reshape", 17, &[], &[&x(), &bad], &[(DtypeF32, vec![5, 5])]).is_err());
        let y = run("Reshape", 1, &[ints("shape", &[4, 6])], &[&x()], &[(DtypeF32, vec![4, 6])]).unwrap();
        assert_eq!(y[0].shape, vec![4, 6]);
    }

    #[test]
    fn flatten_squeeze_unsqueeze() {
        assert_eq!(run1("Flatten", &[], &[&x()], DtypeF32, &[2, 12]).shape, vec![2, 12]);
        assert_eq!(run1("Flatten", &[int("axis", 0)], &[&x()], DtypeF32, &[1, 24]).shape, vec![1, 24]);
        assert_eq!(run1("Flatten", &[int("axis", -1)], &[&x()], DtypeF32, &[6, 4]).shape, vec![6, 4]);
        assert_eq!(run1("Flatten", &[int("axis", 3)], &[&x()], DtypeF32, &[24, 1]).shape, vec![24, 1]);
        let u = tensor(&[1, 3, 1], vec![1.0f32, 2.0, 3.0]);
        assert_eq!(run1("Squeeze", &[], &[&u], DtypeF32, &[3]).shape, vec![3]);
        let axes = tensor(&[1], vec![-1i64]);
        assert_eq!(run1("Squeeze", &[], &[&u, &axes], DtypeF32, &[1, 3]).shape, vec![1, 3]);
        let y = run("Squeeze", 11, &[ints("axes", &[0])], &[&u], &[(DtypeF32, vec![3, 1])]).unwrap();
        assert_eq!(y[0].shape, vec![3, 1]);
        assert!(run("Squeeze", 11, &[ints("axes", &[1])], &[&u], &[(DtypeF32, vec![1, 1])]).is_err());
        let axes = tensor(&[2], vec![0i64, -1]);
        assert_eq!(run1("Unsqueeze", &[], &[&u, &axes], DtypeF32, &[1, 1, 3, 1, 1]).shape, vec![1, 1, 3, 1, 1]);
        let y = run("Unsqueeze", 11, &[ints("axes", &[1])], &[&u], &[(DtypeF32, vec![1, 1, 3, 1])]).unwrap();
        assert_eq!(y[0].shape, vec![1, 1, 3, 1]);
    }

    #[test]
    fn dropout_identity_and_mask() {
        let spec = [(DtypeF32, vec![2, 3, 4]), (DtypeBool, vec![2, 3, 4])];
        let y = run("Dropout", 13, &[], &[&x()], &spec).unwrap();
        assert_eq!(y[0], x());
        assert!(y[1].as_bool("mask").unwrap().iter().all(|&b| b));
        let ratio = tensor::<f32>(&[], vec![0.5]);
        let on = tensor(&[], vec![true]);
        assert!(run("Dropout", 13, &[], &[&x(), &ratio, &on], &spec[..1]).is_err());
        let old = [(DtypeF32, vec![2, 3, 4]), (DtypeF32, vec![2, 3, 4])];
        let y = run("Dropout", 7, &[float("ratio", 0.5)], &[&x()], &old).unwrap();
        assert!(f32s(&y[1]).iter().all(|&m| m == 1.0));
        assert_eq!(run1("Identity", &[], &[&x()], DtypeF32, &[2, 3, 4]), x());
    }

    #[test]
    fn shape_size_constants_and_range() {
        assert_eq!(run1("Shape", &[], &[&x()], DtypeI64, &[3]).as_i64("s").unwrap(), &[2, 3, 4]);
        assert_eq!(run1("Shape", &[int("start", -2)], &[&x()], DtypeI64, &[2]).as_i64("s").unwrap(), &[3, 4]);
        assert_eq!(run1("Size", &[], &[&x()], DtypeI64, &[]).as_i64("s").unwrap(), &[24]);
        let dims = tensor(&[2], vec![2i64, 2]);
        let y = run1("ConstantOfShape", &[], &[&dims], DtypeF32, &[2, 2]);
        assert_eq!(f32s(&y), vec![0.0; 4]);
        let y = run1("Constant", &[ints("value_ints", &[4, 5])], &[], DtypeI64, &[2]);
        assert_eq!(y.as_i64("c").unwrap(), &[4, 5]);
        let (s, l, d) = (tensor::<f32>(&[], vec![1.0]), tensor::<f32>(&[], vec![2.0]), tensor::<f32>(&[], vec![0.25]));
        assert_eq!(f32s(&run1("Range", &[], &[&s, &l, &d], DtypeF32, &[4])), vec![1.0, 1.25, 1.5, 1.75]);
        let (s, l, d) = (tensor::<i64>(&[], vec![10]), tensor::<i64>(&[], vec![3]), tensor::<i64>(&[], vec![-3]));
        assert_eq!(run1("Range", &[], &[&s, &l, &d], DtypeI64, &[3]).as_i64("r").unwrap(), &[10, 7, 4]);
    }

    #[test]
    fn cast_between_types() {
        let f = tensor(&[4], vec![-1.7f32, 0.0, 2.9, 300.0]);
        let y = run1("Cast", &[int("to", DtypeI64 as i64)], &[&f], DtypeI64, &[4]);
        assert_eq!(y.as_i64("y").unwrap(), &[-1, 0, 2, 300]);
        let y = run1("Cast", &[int("to", DtypeBool as i64)], &[&f], DtypeBool, &[4]);
        assert_eq!(y.as_bool("y").unwrap(), &[true, false, true, true]);
        let y = run1("Cast", &[int("to", DtypeU8 as i64)], &[&f], DtypeU8, &[4]);
        assert_eq!(y.view::<u8>("y").unwrap(), &[0, 0, 2, 255]);
        let i = tensor(&[2], vec![300i64, -1]);
        let y = run1("Cast", &[int("to", DtypeI8 as i64)], &[&i], DtypeI8, &[2]);
        assert_eq!(y.view::<i8>("y").unwrap(), &[44, -1]);
        let y = run1("Cast", &[int("to", DtypeF64 as i64)], &[&i], DtypeF64, &[2]);
        assert_eq!(y.view::<f64>("y").unwrap(), &[300.0, -1.0]);
        assert!(run("Cast", 17, &[int("to", DtypeF16 as i64)], &[&i], &[(DtypeF16, vec![2])]).is_err());
    }
}
