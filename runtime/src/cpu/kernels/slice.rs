//! Slice with per-axis starts, ends and steps (negative steps and indices included),
//! given as attributes (opset < 10) or inputs.

use super::layout::{norm_axes, strided_copy, strides};
use super::{Ctx, Kernel};
use crate::error::{KernelError, Result};
use crate::tensor::{dispatch, Elem, HostTensor};

/// The slice kernel.
pub(super) const KERNELS: &[(&str, Kernel)] = &[("Slice", slice)];

/// Start index and length of `start..end` by `step` on an axis of size `dim`, clamped
/// as ONNX specifies (in i128, so extreme starts, ends and steps cannot overflow).
fn bounds(start: i64, end: i64, step: i64, dim: usize) -> (usize, usize) {
    let (dim, step) = (dim as i128, i128::from(step));
    let resolve = |v: i64| {
        if v < 0 {
            i128::from(v) + dim
        } else {
            i128::from(v)
        }
    };
    let (s, e) = (resolve(start), resolve(end));
    let (s, len) = if step > 0 {
        let (s, e) = (s.clamp(0, dim), e.clamp(0, dim));
        (s, if e > s { (e - s - 1) / step + 1 } else { 0 })
    } else {
        let (s, e) = (s.max(0).min(dim - 1), e.max(-1).min(dim - 1));
        (s, if s > e { (s - e - 1) / -step + 1 } else { 0 })
    };
    (s.max(0) as usize, len as usize)
}

fn slice(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "data")?;
    let required = |attr: &str, i: usize| {
        ctx.ints_attr_or_input(attr, i, attr)?.ok_or_else(|| KernelError::MissingInput(attr.to_string()))
    };
    let (starts, ends) = (required("starts", 1)?, required("ends", 2)?);
    let axes = match ctx.ints_attr_or_input("axes", 3, "axes")? {
        Some(a) => norm_axes(&a, x.rank(), "axis")?,
        None => (0..starts.len()).collect(),
    };
    let steps =
        ctx.opt_input(4).map(|t| t.to_i64s("input steps")).transpose()?.unwrap_or_else(|| vec![1; starts.len()]);
    let (base, shape, view) = slice_view(&x.shape, &starts, &ends, &axes, &steps)?;
    let data = dispatch!(x.dtype(), T => Ok(T::wrap(strided_copy(x.view::<T>("input data")?, base, &shape, &view))))?;
    Ok(vec![HostTensor::new(shape, data)?])
}

/// The positions along its axis of `SplitPart` part `index` of `parts` of an axis of
/// length `len`: the `array_split` part (the first `len % parts` parts one longer).
pub(crate) fn split_part_range(len: usize, index: i64, parts: i64) -> Result<std::ops::Range<usize>> {
    if parts < 1 || index < 0 || index >= parts || parts as usize > len.max(1) {
        return Err(KernelError::attr("parts", format!("part {index} of {parts} does not fit length {len}")));
    }
    let (index, parts) = (index as usize, parts as usize);
    let part_len = |i: usize| len / parts + usize::from(i < len % parts);
    let start = (0..index).map(part_len).sum::<usize>();
    Ok(start..start + part_len(index))
}

/// The positions `begin..end` of a `SplitWindow` along an axis of length `len`, checked
/// to lie inside it.
pub(crate) fn window_range(len: usize, begin: i64, end: i64) -> Result<std::ops::Range<usize>> {
    match (usize::try_from(begin), usize::try_from(end)) {
        (Ok(b), Ok(e)) if b <= e && e <= len => Ok(b..e),
        _ => Err(KernelError::attr("end", format!("window {begin}..{end} does not fit length {len}"))),
    }
}

/// The strided view (base offset, shape, strides) of data of shape `dims` that a Slice
/// with these per-axis `starts`, `ends`, `steps` on (non-negative, distinct) `axes` reads.
pub(crate) fn slice_view(
    dims: &[usize],
    starts: &[i64],
    ends: &[i64],
    axes: &[usize],
    steps: &[i64],
) -> Result<(isize, Vec<usize>, Vec<isize>)> {
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(KernelError::invalid("starts, ends, axes and steps differ in length"));
    }
    let own = strides(dims);
    let (mut shape, mut view, mut base) = (dims.to_vec(), own.clone(), 0isize);
    for (k, &axis) in axes.iter().enumerate() {
        if steps[k] == 0 {
            return Err(KernelError::invalid(format!("step 0 on axis {axis}")));
        }
        let (start, len) = bounds(starts[k], ends[k], steps[k], dims[axis]);
        shape[axis] = len;
        if len > 0 {
            base += start as isize * own[axis];
        }
        // With two or more elements |step| < dim, so the product cannot overflow.
        if len > 1 {
            view[axis] = own[axis] * steps[k] as isize;
        }
    }
    Ok((base, shape, view))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::tensor::HostTensor;
    use lms_proto::lms::DType::*;

    fn v(values: &[i64]) -> HostTensor {
        tensor(&[values.len()], values.to_vec())
    }

    fn slice(x: &HostTensor, starts: &[i64], ends: &[i64], axes: &[i64], steps: &[i64], out: &[usize]) -> Vec<i64> {
        let y = run1("Slice", &[], &[x, &v(starts), &v(ends), &v(axes), &v(steps)], DtypeI64, out);
        y.as_i64("y").unwrap().to_vec()
    }

    #[test]
    fn negative_steps_and_indices() {
        let x = v(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(slice(&x, &[-1], &[i64::MIN], &[0], &[-1], &[10]), vec![9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
        assert_eq!(slice(&x, &[8], &[1], &[0], &[-3], &[3]), vec![8, 5, 2]);
        assert_eq!(slice(&x, &[-3], &[i64::MAX], &[0], &[1], &[3]), vec![7, 8, 9]);
        assert_eq!(slice(&x, &[1], &[100], &[0], &[4], &[3]), vec![1, 5, 9]);
        assert_eq!(slice(&x, &[5], &[2], &[0], &[1], &[0]), Vec::<i64>::new());
        assert_eq!(slice(&x, &[100], &[-100], &[0], &[-2], &[5]), vec![9, 7, 5, 3, 1]);
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        let x = v(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(slice(&x, &[9], &[0], &[0], &[i64::MIN], &[1]), vec![9]);
        assert_eq!(slice(&x, &[i64::MIN], &[i64::MAX], &[0], &[i64::MAX], &[1]), vec![0]);
        let empty = tensor::<i64>(&[0], vec![]);
        let y = run1("Slice", &[], &[&empty, &v(&[-1]), &v(&[i64::MIN]), &v(&[0]), &v(&[-1])], DtypeI64, &[0]);
        assert_eq!(y.numel(), 0);
    }

    #[test]
    fn multi_axis_inputs_and_attributes() {
        let x = tensor(&[3, 4], (0..12).collect::<Vec<i64>>());
        // Rows 2..0 backwards, columns 1..4 by 2.
        assert_eq!(slice(&x, &[-1, 1], &[-4, 4], &[0, -1], &[-1, 2], &[3, 2]), vec![9, 11, 5, 7, 1, 3]);
        let y = run(
            "Slice",
            9,
            &[ints("starts", &[1]), ints("ends", &[3]), ints("axes", &[1])],
            &[&x],
            &[(DtypeI64, vec![3, 2])],
        )
        .unwrap();
        assert_eq!(y[0].as_i64("y").unwrap(), &[1, 2, 5, 6, 9, 10]);
        // Without axes and steps: leading axes, step 1.
        let y = run("Slice", 13, &[], &[&x, &v(&[1]), &v(&[2])], &[(DtypeI64, vec![1, 4])]).unwrap();
        assert_eq!(y[0].as_i64("y").unwrap(), &[4, 5, 6, 7]);
        let err = run("Slice", 13, &[], &[&x, &v(&[0]), &v(&[1]), &v(&[0]), &v(&[0])], &[(DtypeI64, vec![1, 4])]);
        assert!(err.is_err());
    }
}
