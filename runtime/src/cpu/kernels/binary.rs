//! Elementwise binary and variadic ops with numpy broadcasting: arithmetic, Pow, PRelu,
//! comparisons, logic, Where, and Sum/Max/Min/Mean.

use super::layout::for_each_row;
use super::num::Num;
use super::{dispatch_float, dispatch_num, Ctx, Kernel};
use crate::error::{KernelError, Result};
use crate::geometry::layout::{broadcast_shapes, broadcast_strides};
use crate::tensor::{dispatch, numel, Elem, HostTensor};

/// The binary and variadic kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[
    ("Add", |c| arith(c, Arith::Add)),
    ("And", |c| logic(c, |p, q| p & q)),
    ("Div", |c| arith(c, Arith::Div)),
    ("Equal", equal),
    ("Greater", |c| compare(c, Cmp::Greater)),
    ("GreaterOrEqual", |c| compare(c, Cmp::GreaterOrEqual)),
    ("Less", |c| compare(c, Cmp::Less)),
    ("LessOrEqual", |c| compare(c, Cmp::LessOrEqual)),
    ("Max", |c| variadic(c, Fold::Max)),
    ("Mean", mean),
    ("Min", |c| variadic(c, Fold::Min)),
    ("Mul", |c| arith(c, Arith::Mul)),
    ("Or", |c| logic(c, |p, q| p | q)),
    ("Pow", pow),
    ("PRelu", prelu),
    ("Sub", |c| arith(c, Arith::Sub)),
    ("Sum", |c| variadic(c, Fold::Sum)),
    ("Where", where_),
    ("Xor", |c| logic(c, |p, q| p ^ q)),
];

/// `f` applied over the numpy broadcast of two operands (elements, shape); returns the
/// result's shape and elements. `what` names the operands in errors.
pub(super) fn zip_broadcast<A: Copy, B: Copy, O>(
    (a, sa): (&[A], &[usize]),
    (b, sb): (&[B], &[usize]),
    what: &str,
    f: impl Fn(A, B) -> O,
) -> Result<(Vec<usize>, Vec<O>)> {
    let shape = broadcast_shapes(sa, sb, what)?;
    if sa == sb {
        return Ok((shape, a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()));
    }
    let (ta, tb) = (broadcast_strides(sa, &shape, what)?, broadcast_strides(sb, &shape, what)?);
    let mut out = Vec::with_capacity(numel(&shape));
    for_each_row(&shape, [&ta, &tb], |[oa, ob], len, [ia, ib]| {
        out.extend((0..len as isize).map(|j| f(a[(oa + j * ia) as usize], b[(ob + j * ib) as usize])));
    });
    Ok((shape, out))
}

#[derive(Clone, Copy)]
enum Arith {
    Add,
    Sub,
    Mul,
    Div,
}

/// Add, Sub, Mul, Div on equal numeric dtypes; integer division by zero is an error.
fn arith(ctx: &Ctx<'_>, op: Arith) -> Result<Vec<HostTensor>> {
    let (a, b) = (ctx.input(0, "A")?, ctx.input(1, "B")?);
    let out = dispatch_num!(a.dtype(), "input A", T => {
        let (x, y) = ((a.view::<T>("input A")?, &a.shape[..]), (b.view::<T>("input B")?, &b.shape[..]));
        let (shape, v) = match op {
            Arith::Add => zip_broadcast(x, y, "inputs A, B", T::add),
            Arith::Sub => zip_broadcast(x, y, "inputs A, B", T::sub),
            Arith::Mul => zip_broadcast(x, y, "inputs A, B", T::mul),
            Arith::Div => {
                if !T::IS_FLOAT && y.0.contains(&T::ZERO) {
                    return Err(KernelError::invalid("integer division by zero"));
                }
                zip_broadcast(x, y, "inputs A, B", T::div)
            }
        }?;
        HostTensor::from_vec(shape, v)
    })?;
    Ok(vec![out])
}

/// Pow: float base, exponent of any numeric dtype (converted to the base's type).
fn pow(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let (x, e) = (ctx.input(0, "X")?, ctx.input(1, "Y")?);
    let out = dispatch_float!(x.dtype(), "input X", T => {
        let exps: Vec<T> = dispatch_num!(e.dtype(), "input Y", U => {
            Ok(e.view::<U>("input Y")?.iter().map(|&v| T::from_f64(v.to_f64())).collect())
        })?;
        let (shape, v) = zip_broadcast((x.view::<T>("input X")?, &x.shape), (&exps, &e.shape), "inputs X, Y", T::powf)?;
        HostTensor::from_vec(shape, v)
    })?;
    Ok(vec![out])
}

/// PRelu: x < 0 ? slope·x : x, slope broadcast to X's shape (before opset 7,
/// a slope with fewer axes is aligned with the channel axis 1).
fn prelu(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let (x, slope) = (ctx.input(0, "X")?, ctx.input(1, "slope")?);
    let mut slope_shape = slope.shape.clone();
    if ctx.opset < 7 && slope.rank() < x.rank() && x.shape.get(1..1 + slope.rank()) == Some(&slope.shape[..]) {
        slope_shape.resize(x.rank() - 1, 1);
    }
    let out = dispatch_float!(x.dtype(), "input X", T => {
        let xs = (x.view::<T>("input X")?, &x.shape[..]);
        let ss = (slope.view::<T>("input slope")?, &slope_shape[..]);
        let (shape, v) = zip_broadcast(xs, ss, "input slope", |p, s| if p < T::ZERO { s * p } else { p })?;
        if shape != x.shape {
            return Err(KernelError::shape("input slope", format!("shape {:?} does not broadcast to X's {:?}", slope.shape, x.shape)));
        }
        HostTensor::from_vec(shape, v)
    })?;
    Ok(vec![out])
}

#[derive(Clone, Copy)]
enum Cmp {
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

/// Ordered comparisons of numeric operands, giving bool.
fn compare(ctx: &Ctx<'_>, op: Cmp) -> Result<Vec<HostTensor>> {
    let (a, b) = (ctx.input(0, "A")?, ctx.input(1, "B")?);
    let out = dispatch_num!(a.dtype(), "input A", T => {
        let (x, y) = ((a.view::<T>("input A")?, &a.shape[..]), (b.view::<T>("input B")?, &b.shape[..]));
        let (shape, v) = match op {
            Cmp::Less => zip_broadcast(x, y, "inputs A, B", |p: T, q: T| p < q),
            Cmp::LessOrEqual => zip_broadcast(x, y, "inputs A, B", |p: T, q: T| p <= q),
            Cmp::Greater => zip_broadcast(x, y, "inputs A, B", |p: T, q: T| p > q),
            Cmp::GreaterOrEqual => zip_broadcast(x, y, "inputs A, B", |p: T, q: T| p >= q),
        }?;
        HostTensor::from_vec(shape, v)
    })?;
    Ok(vec![out])
}

/// Equal on any dtype, bool included.
fn equal(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let (a, b) = (ctx.input(0, "A")?, ctx.input(1, "B")?);
    let out = dispatch!(a.dtype(), T => {
        let (x, y) = ((a.view::<T>("input A")?, &a.shape[..]), (b.view::<T>("input B")?, &b.shape[..]));
        let (shape, v) = zip_broadcast(x, y, "inputs A, B", |p: T, q: T| p == q)?;
        HostTensor::from_vec(shape, v)
    })?;
    Ok(vec![out])
}

/// And, Or, Xor on bool operands.
fn logic(ctx: &Ctx<'_>, f: fn(bool, bool) -> bool) -> Result<Vec<HostTensor>> {
    let (a, b) = (ctx.input(0, "A")?, ctx.input(1, "B")?);
    let x = (a.as_bool("input A")?, &a.shape[..]);
    let y = (b.as_bool("input B")?, &b.shape[..]);
    let (shape, v) = zip_broadcast(x, y, "inputs A, B", f)?;
    Ok(vec![HostTensor::from_vec(shape, v)?])
}

/// Where(condition, X, Y) with three-way broadcasting.
fn where_(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let (c, x, y) = (ctx.input(0, "condition")?, ctx.input(1, "X")?, ctx.input(2, "Y")?);
    let cond = c.as_bool("input condition")?;
    let what = "inputs condition, X, Y";
    let shape = broadcast_shapes(&broadcast_shapes(&c.shape, &x.shape, what)?, &y.shape, what)?;
    let strides = [
        broadcast_strides(&c.shape, &shape, what)?,
        broadcast_strides(&x.shape, &shape, what)?,
        broadcast_strides(&y.shape, &shape, what)?,
    ];
    let out = dispatch!(x.dtype(), T => {
        let (xs, ys) = (x.view::<T>("input X")?, y.view::<T>("input Y")?);
        let mut out = Vec::with_capacity(numel(&shape));
        for_each_row(&shape, [&strides[0], &strides[1], &strides[2]], |[oc, ox, oy], len, [ic, ix, iy]| {
            out.extend((0..len as isize).map(|j| {
                if cond[(oc + j * ic) as usize] { xs[(ox + j * ix) as usize] } else { ys[(oy + j * iy) as usize] }
            }));
        });
        HostTensor::from_vec(shape.clone(), out)
    })?;
    Ok(vec![out])
}

#[derive(Clone, Copy)]
enum Fold {
    Sum,
    Max,
    Min,
}

/// Folds the inputs left to right with broadcasting: the fixed order keeps results
/// deterministic.
fn fold_inputs<T: Num>(ctx: &Ctx<'_>, f: impl Fn(T, T) -> T + Copy) -> Result<(Vec<usize>, Vec<T>)> {
    let first = ctx.input(0, "data_0")?;
    let (mut shape, mut acc) = (first.shape.clone(), first.view::<T>("input data_0")?.to_vec());
    for i in 1..ctx.inputs.len() {
        let name = format!("data_{i}");
        let t = ctx.input(i, &name)?;
        (shape, acc) = zip_broadcast(
            (&acc, &shape),
            (t.view::<T>(&format!("input {name}"))?, &t.shape),
            &format!("input {name}"),
            f,
        )?;
    }
    Ok((shape, acc))
}

/// Sum, Max, Min over any number of numeric inputs.
fn variadic(ctx: &Ctx<'_>, op: Fold) -> Result<Vec<HostTensor>> {
    let first = ctx.input(0, "data_0")?;
    let out = dispatch_num!(first.dtype(), "input data_0", T => {
        let (shape, v) = match op {
            Fold::Sum => fold_inputs::<T>(ctx, T::add),
            Fold::Max => fold_inputs::<T>(ctx, T::max_nan),
            Fold::Min => fold_inputs::<T>(ctx, T::min_nan),
        }?;
        HostTensor::from_vec(shape, v)
    })?;
    Ok(vec![out])
}

/// Mean of float inputs: their left-to-right sum divided by their count.
fn mean(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let first = ctx.input(0, "data_0")?;
    let out = dispatch_float!(first.dtype(), "input data_0", T => {
        let (shape, sum) = fold_inputs::<T>(ctx, T::add)?;
        let n = T::from_f64(ctx.inputs.len() as f64);
        HostTensor::from_vec(shape, sum.into_iter().map(|s| s / n).collect())
    })?;
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use lms_proto::lms::DType::*;

    #[test]
    fn add_broadcasts_like_numpy() {
        let a = tensor(&[2, 1, 3], (0..6).map(|v| v as f32).collect());
        let b = tensor(&[4, 1], vec![0.0f32, 10.0, 20.0, 30.0]);
        let y = f32s(&run1("Add", &[], &[&a, &b], DtypeF32, &[2, 4, 3]));
        let mut want = Vec::new();
        for i in 0..2 {
            for j in 0..4 {
                for k in 0..3 {
                    want.push((i * 3 + k) as f32 + 10.0 * j as f32);
                }
            }
        }
        assert_eq!(y, want);
        let s = tensor::<f32>(&[], vec![2.0]);
        let y = f32s(&run1("Mul", &[], &[&a, &s], DtypeF32, &[2, 1, 3]));
        assert_eq!(y, vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let bad = tensor(&[2], vec![1.0f32, 2.0]);
        let err = run("Sub", 17, &[], &[&a, &bad], &[(DtypeF32, vec![2, 1, 3])]).unwrap_err();
        assert_eq!(err.to_string(), "Sub: inputs A, B: shapes [2, 1, 3] and [2] do not broadcast");
    }

    #[test]
    fn integer_division() {
        let a = tensor(&[3], vec![7i64, -7, 9]);
        let b = tensor(&[3], vec![2i64, 2, 3]);
        let y = run1("Div", &[], &[&a, &b], DtypeI64, &[3]);
        assert_eq!(y.as_i64("y").unwrap(), &[3, -3, 3]);
        let z = tensor(&[1], vec![0i64]);
        assert!(run("Div", 17, &[], &[&a, &z], &[(DtypeI64, vec![3])]).is_err());
    }

    #[test]
    fn pow_prelu_and_mixed_dtypes() {
        let x = tensor(&[3], vec![-2.0f32, 3.0, 0.5]);
        let e = tensor::<i64>(&[], vec![3]);
        assert_close(&f32s(&run1("Pow", &[], &[&x, &e], DtypeF32, &[3])), &[-8.0, 27.0, 0.125]);
        let slope = tensor(&[1], vec![0.25f32]);
        assert_eq!(f32s(&run1("PRelu", &[], &[&x, &slope], DtypeF32, &[3])), vec![-0.5, 3.0, 0.5]);
        let e = tensor(&[3], vec![1i64, 2, 3]);
        assert!(run("Add", 17, &[], &[&x, &e], &[(DtypeF32, vec![3])]).is_err());
    }

    #[test]
    fn comparisons_logic_and_where() {
        let a = tensor(&[3], vec![1.0f32, 2.0, 3.0]);
        let b = tensor::<f32>(&[], vec![2.0]);
        assert_eq!(run1("Less", &[], &[&a, &b], DtypeBool, &[3]).as_bool("y").unwrap(), &[true, false, false]);
        assert_eq!(run1("Greater", &[], &[&a, &b], DtypeBool, &[3]).as_bool("y").unwrap(), &[false, false, true]);
        assert_eq!(run1("Equal", &[], &[&a, &b], DtypeBool, &[3]).as_bool("y").unwrap(), &[false, true, false]);
        let p = tensor(&[2], vec![true, false]);
        let q = tensor(&[2, 1], vec![true, false]);
        assert_eq!(run1("And", &[], &[&p, &q], DtypeBool, &[2, 2]).as_bool("y").unwrap(), &[true, false, false, false]);
        let c = tensor(&[2, 1], vec![true, false]);
        let x = tensor(&[3], vec![1i64, 2, 3]);
        let y = tensor::<i64>(&[], vec![0]);
        let w = run1("Where", &[], &[&c, &x, &y], DtypeI64, &[2, 3]);
        assert_eq!(w.as_i64("w").unwrap(), &[1, 2, 3, 0, 0, 0]);
    }

    #[test]
    fn variadic_ops_fold_with_broadcasting() {
        let a = tensor(&[2, 2], vec![1.0f32, 5.0, 3.0, 4.0]);
        let b = tensor(&[2], vec![2.0f32, 2.0]);
        let c = tensor::<f32>(&[], vec![3.0]);
        let sum = f32s(&run1("Sum", &[], &[&a, &b, &c], DtypeF32, &[2, 2]));
        assert_eq!(sum, vec![6.0, 10.0, 8.0, 9.0]);
        assert_eq!(f32s(&run1("Max", &[], &[&a, &b, &c], DtypeF32, &[2, 2])), vec![3.0, 5.0, 3.0, 4.0]);
        assert_eq!(f32s(&run1("Min", &[], &[&a, &b], DtypeF32, &[2, 2])), vec![1.0, 2.0, 2.0, 2.0]);
        assert_close(&f32s(&run1("Mean", &[], &[&a, &b, &c], DtypeF32, &[2, 2])), &[2.0, 10.0 / 3.0, 8.0 / 3.0, 3.0]);
        assert_eq!(f32s(&run1("Sum", &[], &[&a], DtypeF32, &[2, 2])), vec![1.0, 5.0, 3.0, 4.0]);
    }
}
