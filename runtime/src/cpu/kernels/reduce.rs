//! Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, over axes given as an
//! attribute or an input, with keepdims and noop_with_empty_axes.

use super::layout::for_each_row;
use super::num::Num;
use super::{dispatch_num, Ctx, Kernel};
use crate::error::Result;
use crate::geometry::layout::{broadcast_strides, norm_axes, strides};
use crate::tensor::{numel, Elem, HostTensor};

/// The reduction kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[
    ("ReduceMax", |c| reduce(c, Reduce::Max)),
    ("ReduceMean", |c| reduce(c, Reduce::Mean)),
    ("ReduceMin", |c| reduce(c, Reduce::Min)),
    ("ReduceSum", |c| reduce(c, Reduce::Sum)),
];

#[derive(Clone, Copy, PartialEq)]
enum Reduce {
    Sum,
    Mean,
    Max,
    Min,
}

fn reduce(ctx: &Ctx<'_>, op: Reduce) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "data")?;
    let axes = ctx.ints_attr_or_input("axes", 1, "axes")?.unwrap_or_default();
    if axes.is_empty() && ctx.attrs.int("noop_with_empty_axes", 0)? != 0 {
        return Ok(vec![x.clone()]);
    }
    let axes = if axes.is_empty() { (0..x.rank()).collect() } else { norm_axes(&axes, x.rank(), "axis")? };
    let mut kept = x.shape.clone();
    axes.iter().for_each(|&a| kept[a] = 1);
    let shape: Vec<usize> = if ctx.attrs.int("keepdims", 1)? != 0 {
        kept.clone()
    } else {
        x.shape.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &n)| n).collect()
    };
    // Walking X in row-major order, each element adds into the output at these strides.
    let out_strides = broadcast_strides(&kept, &x.shape, "data")?;
    let count = (x.numel() / numel(&kept).max(1)) as f64;
    let out = dispatch_num!(x.dtype(), "input data", T => {
        let xs = x.view::<T>("input data")?;
        let y: Vec<T> = match op {
            Reduce::Max => fold(xs, &x.shape, &out_strides, numel(&kept), T::LOWEST, T::max_nan),
            Reduce::Min => fold(xs, &x.shape, &out_strides, numel(&kept), T::HIGHEST, T::min_nan),
            Reduce::Sum if !T::IS_FLOAT => fold(xs, &x.shape, &out_strides, numel(&kept), T::ZERO, T::add),
            Reduce::Sum | Reduce::Mean => {
                let div = if op == Reduce::Mean { count } else { 1.0 };
                fold(xs, &x.shape, &out_strides, numel(&kept), 0.0f64, |a, v: T| a + v.to_f64())
                    .into_iter()
                    .map(|s| T::from_f64(s / div))
                    .collect()
            }
        };
        HostTensor::from_vec(shape.clone(), y)
    })?;
    Ok(vec![out])
}

/// Folds the elements of `xs` (of `shape`) into `len` accumulators, element i going to
/// the accumulator at its offset under `out_strides`; row-major order, so deterministic.
pub(super) fn fold<T: Elem, A: Copy>(
    xs: &[T],
    shape: &[usize],
    out_strides: &[isize],
    len: usize,
    init: A,
    f: impl Fn(A, T) -> A,
) -> Vec<A> {
    let mut acc = vec![init; len];
    for_each_row(shape, [&strides(shape), out_strides], |[i, o], n, [si, so]| {
        for j in 0..n as isize {
            let slot = &mut acc[(o + j * so) as usize];
            *slot = f(*slot, xs[(i + j * si) as usize]);
        }
    });
    acc
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use lms_proto::lms::DType::*;

    fn x() -> crate::tensor::HostTensor {
        tensor(&[2, 3, 2], (0..12).map(|v| v as f32).collect())
    }

    #[test]
    fn reduce_axes_attribute_and_keepdims() {
        let y = run1("ReduceSum", &[ints("axes", &[1])], &[&x()], DtypeF32, &[2, 1, 2]);
        assert_eq!(f32s(&y), vec![6.0, 9.0, 24.0, 27.0]);
        let y = run("ReduceMean", 13, &[ints("axes", &[0, -1]), int("keepdims", 0)], &[&x()], &[(DtypeF32, vec![3])])
            .unwrap();
        assert_eq!(f32s(&y[0]), vec![3.5, 5.5, 7.5]);
        let y = run1("ReduceMax", &[ints("axes", &[2])], &[&x()], DtypeF32, &[2, 3, 1]);
        assert_eq!(f32s(&y), vec![1.0, 3.0, 5.0, 7.0, 9.0, 11.0]);
        let y = run1("ReduceMin", &[int("keepdims", 0)], &[&x()], DtypeF32, &[]);
        assert_eq!(f32s(&y), vec![0.0]);
    }

    #[test]
    fn reduce_axes_input_and_noop() {
        let axes = tensor(&[1], vec![-2i64]);
        let y = run("ReduceSum", 13, &[int("keepdims", 0)], &[&x(), &axes], &[(DtypeF32, vec![2, 2])]).unwrap();
        assert_eq!(f32s(&y[0]), vec![6.0, 9.0, 24.0, 27.0]);
        let empty = tensor::<i64>(&[0], vec![]);
        let y = run("ReduceSum", 13, &[int("noop_with_empty_axes", 1)], &[&x(), &empty], &[(DtypeF32, vec![2, 3, 2])])
            .unwrap();
        assert_eq!(y[0], x());
        let y = run("ReduceSum", 13, &[], &[&x(), &empty], &[(DtypeF32, vec![1, 1, 1])]).unwrap();
        assert_eq!(f32s(&y[0]), vec![66.0]);
        let xi = tensor(&[2, 2], vec![1i64 << 60, 1, 2, 3]);
        let y = run1("ReduceSum", &[ints("axes", &[1]), int("keepdims", 0)], &[&xi], DtypeI64, &[2]);
        assert_eq!(y.as_i64("y").unwrap(), &[(1i64 << 60) + 1, 5]);
    }
}
