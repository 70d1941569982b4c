//! Gradients of ops that move or select elements: SumTo (unbroadcast), ReshapeTo, Zeros,
//! SliceGrad, ConcatGrad, ReduceGrad, GatherGrad and GatherElementsGrad; and SplitPart, one part of a split
//! tensor. Output shapes come from the graph.

use super::super::layout::{strided_copy, strided_scatter};
use super::super::movement::{element_offsets, view_copy};
use super::super::{dispatch_float, Ctx, Kernel};
use super::{from_f64s, same_shape, sum_to};
use crate::error::{KernelError, Result};
use crate::geometry::layout::{broadcast_strides, norm_axes, norm_axis, split_at_axis, strides};
use crate::geometry::slice::{slice_view, split_part_range};
use crate::tensor::{dispatch, numel, Elem, HostTensor};

/// The shape gradient kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[
    ("ConcatGrad", concat_grad),
    ("GatherElementsGrad", gather_elements_grad),
    ("GatherGrad", gather_grad),
    ("ReduceGrad", reduce_grad),
    ("ReshapeTo", reshape_to),
    ("SliceGrad", slice_grad),
    ("SplitPart", split_part),
    ("SumTo", sum_to_kernel),
    ("Zeros", zeros),
];

/// SumTo(X) → X summed (f64) down to the declared shape.
fn sum_to_kernel(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    let shape = ctx.out_shape(0)?;
    let out = dispatch_float!(x.dtype(), "input X", T => {
        let sums = sum_to(x.view::<T>("input X")?, &x.shape, shape, "input X")?;
        from_f64s::<T>(shape.to_vec(), sums.into_iter())
    })?;
    Ok(vec![out])
}

/// ReshapeTo(X) → X with the declared shape.
fn reshape_to(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    let shape = ctx.out_shape(0)?;
    if numel(shape) != x.numel() {
        return Err(KernelError::shape("input X", format!("{} elements do not fill shape {shape:?}", x.numel())));
    }
    Ok(vec![HostTensor::new(shape.to_vec(), x.data.clone())?])
}

/// Zeros() → zeros of the declared type.
fn zeros(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    Ok(vec![HostTensor::zeros(ctx.out_dtype(0)?, ctx.out_shape(0)?)?])
}

/// Ints attribute `name`, `default` when absent.
fn ints_or(ctx: &Ctx<'_>, name: &str, default: Vec<i64>) -> Result<Vec<i64>> {
    Ok(ctx.attrs.ints_opt(name)?.map_or(default, <[i64]>::to_vec))
}

/// Ints attribute `name`, which must be present.
fn required_ints<'a>(ctx: &Ctx<'a>, name: &str) -> Result<&'a [i64]> {
    ctx.attrs.ints_opt(name)?.ok_or_else(|| KernelError::attr(name, "is required"))
}

/// SliceGrad(dY) → zeros of the declared shape with dY written where Slice read.
fn slice_grad(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let dy = ctx.input(0, "dY")?;
    let x_shape = ctx.out_shape(0)?;
    let (starts, ends) = (required_ints(ctx, "starts")?, required_ints(ctx, "ends")?);
    let axes = ints_or(ctx, "axes", (0..starts.len() as i64).collect())?;
    let axes = norm_axes(&axes, x_shape.len(), "axis")?;
    let steps = ints_or(ctx, "steps", vec![1; starts.len()])?;
    let (base, shape, view) = slice_view(x_shape, starts, ends, &axes, &steps)?;
    same_shape(dy, &shape, "dY")?;
    let data = dispatch!(dy.dtype(), T => {
        let mut dx = vec![T::default(); numel(x_shape)];
        strided_scatter(dy.view::<T>("input dY")?, &mut dx, base, &shape, &view);
        Ok(T::wrap(dx))
    })?;
    Ok(vec![HostTensor::new(x_shape.to_vec(), data)?])
}

/// SplitPart(X) → part `index` of `parts` of X along `axis`: the `array_split` part (the
/// first `len % parts` parts one longer).
fn split_part(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    let required = |name: &str| ctx.attrs.int_opt(name)?.ok_or_else(|| KernelError::attr(name, "is required"));
    let axis = norm_axis(required("axis")?, x.rank(), "axis")?;
    let range = split_part_range(x.shape[axis], required("index")?, required("parts")?)?;
    let (base, shape, view) = slice_view(&x.shape, &[range.start as i64], &[range.end as i64], &[axis], &[1])?;
    ctx.check_declared(0, &shape)?;
    let data = dispatch!(x.dtype(), T => Ok(T::wrap(strided_copy(x.view::<T>("input X")?, base, &shape, &view))))?;
    Ok(vec![HostTensor::new(shape, data)?])
}

/// ConcatGrad(dY) → dY split along `axis` into the declared outputs' sizes.
fn concat_grad(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let dy = ctx.input(0, "dY")?;
    let axis = ctx.attrs.int_opt("axis")?.ok_or_else(|| KernelError::attr("axis", "is required"))?;
    let axis = norm_axis(axis, dy.rank(), "axis")?;
    let mut total = 0usize;
    for (i, (_, shape)) in ctx.outputs.iter().enumerate() {
        let fits = shape.len() == dy.rank() && (0..shape.len()).all(|d| d == axis || shape[d] == dy.shape[d]);
        if !fits {
            return Err(KernelError::shape(
                format!("output {i}"),
                format!("shape {shape:?} is not a part of {:?} on axis {axis}", dy.shape),
            ));
        }
        total += shape[axis];
    }
    if total != dy.shape[axis] {
        return Err(KernelError::shape(
            "input dY",
            format!("axis {axis} has {} elements, the outputs {total}", dy.shape[axis]),
        ));
    }
    let own = strides(&dy.shape);
    let mut offset = 0;
    ctx.outputs
        .iter()
        .map(|(_, shape)| {
            let part = view_copy(dy, offset as isize * own[axis], shape.clone(), &own);
            offset += shape[axis];
            part
        })
        .collect()
}

/// ReduceGrad(dY) → dY broadcast back over the reduced `axes` of the declared shape,
/// divided by their size when `mean`.
fn reduce_grad(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let dy = ctx.input(0, "dY")?;
    let x_shape = ctx.out_shape(0)?;
    let axes = match ctx.attrs.ints_opt("axes")? {
        Some(a) if !a.is_empty() => norm_axes(a, x_shape.len(), "axis")?,
        _ => (0..x_shape.len()).collect(),
    };
    let mut kept = x_shape.to_vec();
    axes.iter().for_each(|&a| kept[a] = 1);
    let y_shape: Vec<usize> = if ctx.attrs.int("keepdims", 1)? != 0 {
        kept.clone()
    } else {
        (0..x_shape.len()).filter(|d| !axes.contains(d)).map(|d| x_shape[d]).collect()
    };
    same_shape(dy, &y_shape, "dY")?;
    let count = axes.iter().map(|&a| x_shape[a]).product::<usize>().max(1) as f64;
    let div = if ctx.attrs.int("mean", 0)? != 0 { count } else { 1.0 };
    let view = broadcast_strides(&kept, x_shape, "input dY")?;
    let out = dispatch_float!(dy.dtype(), "input dY", T => {
        let spread = strided_copy(dy.view::<T>("input dY")?, 0, x_shape, &view);
        from_f64s::<T>(x_shape.to_vec(), spread.into_iter().map(|v| v.to_f64() / div))
    })?;
    Ok(vec![out])
}

/// GatherGrad(dY, indices) → zeros of the declared shape with dY scatter-added (f64) at
/// the indices along `axis`; negative indices wrap.
fn gather_grad(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let (dy, indices) = (ctx.input(0, "dY")?, ctx.input(1, "indices")?);
    let data_shape = ctx.out_shape(0)?;
    let axis = norm_axis(ctx.attrs.int("axis", 0)?, data_shape.len(), "axis")?;
    let (outer, dim, inner) = split_at_axis(data_shape, axis);
    let mut y_shape = data_shape[..axis].to_vec();
    y_shape.extend_from_slice(&indices.shape);
    y_shape.extend_from_slice(&data_shape[axis + 1..]);
    same_shape(dy, &y_shape, "dY")?;
    let rows = indices
        .to_i64s("input indices")?
        .into_iter()
        .map(|i| {
            let wrapped = if i < 0 { i + dim as i64 } else { i };
            usize::try_from(wrapped).ok().filter(|&r| r < dim).ok_or_else(|| {
                KernelError::invalid(format!("index {i} is out of bounds for axis {axis} of size {dim}"))
            })
        })
        .collect::<Result<Vec<usize>>>()?;
    let out = dispatch_float!(dy.dtype(), "input dY", T => {
        let dys = dy.view::<T>("input dY")?;
        let mut dx = vec![0.0f64; numel(data_shape)];
        for o in 0..outer {
            for (i, &r) in rows.iter().enumerate() {
                let src = &dys[(o * rows.len() + i) * inner..][..inner];
                let dst = &mut dx[(o * dim + r) * inner..][..inner];
                dst.iter_mut().zip(src).for_each(|(d, s)| *d += s.to_f64());
            }
        }
        from_f64s::<T>(data_shape.to_vec(), dx.into_iter())
    })?;
    Ok(vec![out])
}

/// GatherElementsGrad: zeros of data's shape with dY added (f64, in index order) where
/// GatherElements read each of its elements.
fn gather_elements_grad(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let (dy, indices) = (ctx.input(0, "dY")?, ctx.input(1, "indices")?);
    let data_shape = ctx.out_shape(0)?;
    let axis = norm_axis(ctx.attrs.int("axis", 0)?, data_shape.len(), "axis")?;
    same_shape(dy, &indices.shape, "dY")?;
    let offsets = element_offsets(data_shape, &indices.shape, axis, &indices.to_i64s("input indices")?)?;
    let out = dispatch_float!(dy.dtype(), "input dY", T => {
        let mut dx = vec![0.0f64; numel(data_shape)];
        for (&at, d) in offsets.iter().zip(dy.view::<T>("input dY")?) {
            dx[at] += d.to_f64();
        }
        from_f64s::<T>(data_shape.to_vec(), dx.into_iter())
    })?;
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::tensor::HostTensor;
    use lms_proto::lms::DType::*;

    #[test]
    fn sum_to_unbroadcasts_right_aligned() {
        let x = tensor(&[2, 3, 2], (0..12).map(|v| v as f32).collect());
        assert_eq!(lms1("SumTo", &[], &[&x], &[3, 1]), vec![14.0, 22.0, 30.0]);
        assert_eq!(lms1("SumTo", &[], &[&x], &[]), vec![66.0]);
        assert_eq!(lms1("SumTo", &[], &[&x], &[2]), vec![30.0, 36.0]);
        assert!(run_lms("SumTo", &[], &[&x], &[(DtypeF32, vec![4])]).is_err());
    }

    #[test]
    fn reshape_and_zeros() {
        let x = tensor(&[2, 3], vec![1i64, 2, 3, 4, 5, 6]);
        let y = run_lms("ReshapeTo", &[], &[&x], &[(DtypeI64, vec![3, 2])]).unwrap();
        assert_eq!(y[0].shape, vec![3, 2]);
        assert_eq!(y[0].as_i64("y").unwrap(), x.as_i64("x").unwrap());
        assert!(run_lms("ReshapeTo", &[], &[&x], &[(DtypeI64, vec![4])]).is_err());
        let z = run_lms("Zeros", &[], &[], &[(DtypeF32, vec![2, 2])]).unwrap();
        assert_eq!(f32s(&z[0]), vec![0.0; 4]);
    }

    /// The gradient of a linear forward op `f` (f64 in, f64 out) by finite differences.
    fn linear_fd(x: &HostTensor, dy: &HostTensor, f: impl Fn(&HostTensor) -> HostTensor) -> Vec<f32> {
        fd_grad(x, |x| dot(&f(x), dy))
    }

    #[test]
    fn split_parts_concatenate_to_their_tensor() {
        let x = tensor(&[5, 2], (0..10).map(|v| v as f32).collect());
        let part = |i: i64, shape: &[usize]| {
            lms1("SplitPart", &[int("axis", 0), int("index", i), int("parts", 3)], &[&x], shape)
        };
        assert_eq!(part(0, &[2, 2]), [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(part(1, &[2, 2]), [4.0, 5.0, 6.0, 7.0]);
        assert_eq!(part(2, &[1, 2]), [8.0, 9.0]);
        let cols = lms1("SplitPart", &[int("axis", -1), int("index", 1), int("parts", 2)], &[&x], &[5, 1]);
        assert_eq!(cols, [1.0, 3.0, 5.0, 7.0, 9.0]);
        let beyond = [int("axis", 0), int("index", 3), int("parts", 3)];
        assert!(run_lms("SplitPart", &beyond, &[&x], &[(DtypeF32, vec![1, 2])]).is_err());
    }

    #[test]
    fn slice_grad_is_the_adjoint_of_slice() {
        let mut rng = Rng::new(91);
        let x = rng.tensor(&[4, 6]);
        let dy = rng.tensor(&[2, 3]);
        let (starts, ends, axes, steps) = ([1i64, 5], [3i64, 0], [0i64, -1], [1i64, -2]);
        let attrs = [ints("starts", &starts), ints("ends", &ends), ints("axes", &axes), ints("steps", &steps)];
        let got = lms1("SliceGrad", &attrs, &[&dy], &[4, 6]);
        let v = |a: &[i64]| tensor(&[2], a.to_vec());
        let fd = linear_fd(&x, &dy, |x| {
            run1("Slice", &[], &[x, &v(&starts), &v(&ends), &v(&axes), &v(&steps)], DtypeF64, &[2, 3])
        });
        assert_near(&got, &fd, 1e-6);
    }

    #[test]
    fn concat_grad_splits_into_the_declared_parts() {
        let dy = tensor(&[2, 5], (0..10).map(|v| v as f32).collect());
        let outs = run_lms("ConcatGrad", &[int("axis", 1)], &[&dy], &[(DtypeF32, vec![2, 2]), (DtypeF32, vec![2, 3])])
            .unwrap();
        assert_eq!(f32s(&outs[0]), vec![0.0, 1.0, 5.0, 6.0]);
        assert_eq!(f32s(&outs[1]), vec![2.0, 3.0, 4.0, 7.0, 8.0, 9.0]);
        let bad = run_lms("ConcatGrad", &[int("axis", 1)], &[&dy], &[(DtypeF32, vec![2, 2]), (DtypeF32, vec![2, 2])]);
        assert!(bad.is_err());
    }

    #[test]
    fn reduce_grad_is_the_adjoint_of_the_reductions() {
        let mut rng = Rng::new(92);
        let x = rng.tensor(&[2, 3, 4]);
        for (op, mean) in [("ReduceSum", 0), ("ReduceMean", 1)] {
            for keepdims in [0, 1] {
                let y_shape: Vec<usize> = if keepdims == 1 { vec![1, 3, 1] } else { vec![3] };
                let dy = rng.tensor(&y_shape);
                let attrs = [ints("axes", &[0, 2]), int("keepdims", keepdims), int("mean", mean)];
                let got = lms1("ReduceGrad", &attrs, &[&dy], &[2, 3, 4]);
                let fwd = [ints("axes", &[0, 2]), int("keepdims", keepdims)];
                let fd =
                    linear_fd(&x, &dy, |x| run(op, 13, &fwd, &[x], &[(DtypeF64, y_shape.clone())]).unwrap().remove(0));
                assert_near(&got, &fd, 1e-6);
            }
        }
    }

    #[test]
    fn gather_grad_scatter_adds_with_negative_indices() {
        let mut rng = Rng::new(93);
        let data = rng.tensor(&[2, 5, 3]);
        let indices = tensor(&[2, 2], vec![1i64, -1, 1, 0]);
        let dy = rng.tensor(&[2, 2, 2, 3]);
        let attrs = [int("axis", 1)];
        let got = lms1("GatherGrad", &attrs, &[&dy, &indices], &[2, 5, 3]);
        let fd = linear_fd(&data, &dy, |d| run1("Gather", &attrs, &[d, &indices], DtypeF64, &[2, 2, 2, 3]));
        assert_near(&got, &fd, 1e-6);
        let bad = tensor(&[1], vec![5i64]);
        let dy = rng.tensor(&[2, 1, 3]);
        let err = run_lms("GatherGrad", &attrs, &[&dy, &bad], &[(DtypeF32, vec![2, 5, 3])]).unwrap_err();
        assert_eq!(err.to_string(), "GatherGrad: index 5 is out of bounds for axis 1 of size 5");
    }

    #[test]
    fn gather_elements_grad_is_the_adjoint_of_gather_elements() {
        let mut rng = Rng::new(94);
        let data = rng.tensor(&[2, 4, 3]);
        // Shorter than data on axis 2, longer on the gathered axis 1, repeated and negative indices.
        let indices = tensor(&[2, 5, 2], vec![0i64, 3, -1, 1, 1, 1, 2, 0, 3, -4, 0, 0, 1, 2, 3, -1, 2, 2, 1, 0]);
        let dy = rng.tensor(&[2, 5, 2]);
        let attrs = [int("axis", 1)];
        let got = lms1("GatherElementsGrad", &attrs, &[&dy, &indices], &[2, 4, 3]);
        let fd = linear_fd(&data, &dy, |d| run1("GatherElements", &attrs, &[d, &indices], DtypeF64, &[2, 5, 2]));
        assert_near(&got, &fd, 1e-6);
        let bad = tensor(&[1, 1, 1], vec![-5i64]);
        let err = run_lms("GatherElementsGrad", &attrs, &[&rng.tensor(&[1, 1, 1]), &bad], &[(DtypeF32, vec![2, 4, 3])])
            .unwrap_err();
        assert_eq!(err.to_string(), "GatherElementsGrad: index -5 is out of bounds for axis 1 of size 4");
    }
}
