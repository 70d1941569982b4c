//! Slice with per-axis starts, ends and steps (negative steps and indices included),
//! given as attributes (opset < 10) or inputs.

use super::layout::strided_copy;
use super::{Ctx, Kernel};
use crate::error::{KernelError, Result};
use crate::geometry::layout::norm_axes;
use crate::geometry::slice::slice_view;
use crate::tensor::{dispatch, Elem, HostTensor};

/// The slice kernel.
pub(super) const KERNELS: &[(&str, Kernel)] = &[("Slice", slice)];

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
