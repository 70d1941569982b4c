//! The two ops of a spatial (halo) split: SplitWindow, the overlapping input window a
//! part reads, and OverlapAdd, which adds the parts' input-gradient windows back into
//! one tensor where they overlap. Output shapes come from the graph.

use super::super::layout::strided_copy;
use super::super::{dispatch_float, Ctx, Kernel};
use crate::error::{KernelError, Result};
use crate::geometry::layout::{norm_axis, split_at_axis};
use crate::geometry::slice::{slice_view, window_range};
use crate::tensor::{dispatch, numel, Elem, HostTensor};

/// The halo split kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[("OverlapAdd", overlap_add), ("SplitWindow", split_window)];

/// Int attribute `name`, which must be present.
fn required_int(ctx: &Ctx<'_>, name: &str) -> Result<i64> {
    ctx.attrs.int_opt(name)?.ok_or_else(|| KernelError::attr(name, "is required"))
}

/// SplitWindow(X) → the positions `begin..end` of X along `axis`.
fn split_window(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    let axis = norm_axis(required_int(ctx, "axis")?, x.rank(), "axis")?;
    let range = window_range(x.shape[axis], required_int(ctx, "begin")?, required_int(ctx, "end")?)?;
    let (base, shape, view) = slice_view(&x.shape, &[range.start as i64], &[range.end as i64], &[axis], &[1])?;
    ctx.check_declared(0, &shape)?;
    let data = dispatch!(x.dtype(), T => Ok(T::wrap(strided_copy(x.view::<T>("input X")?, base, &shape, &view))))?;
    Ok(vec![HostTensor::new(shape, data)?])
}

/// OverlapAdd(P0, …, Pn−1) → zeros of the declared shape with each part Pi added at
/// position `begins[i]` along `axis`, in part order (Pi has the declared shape but along
/// `axis`).
fn overlap_add(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let shape = ctx.out_shape(0)?;
    let axis = norm_axis(required_int(ctx, "axis")?, shape.len(), "axis")?;
    let begins = ctx.attrs.ints_opt("begins")?.ok_or_else(|| KernelError::attr("begins", "is required"))?;
    if begins.len() != ctx.inputs.len() || begins.is_empty() {
        return Err(KernelError::attr("begins", format!("{} begins for {} parts", begins.len(), ctx.inputs.len())));
    }
    let (outer, len, inner) = split_at_axis(shape, axis);
    let mut parts = Vec::with_capacity(begins.len());
    for (i, &begin) in begins.iter().enumerate() {
        let part = ctx.input(i, &format!("P{i}"))?;
        let at = usize::try_from(begin).ok().filter(|&b| b <= len);
        let fits = part.rank() == shape.len()
            && (0..shape.len()).all(|d| d == axis || part.shape[d] == shape[d])
            && at.is_some_and(|at| at + part.shape[axis] <= len);
        if !fits {
            return Err(KernelError::shape(
                format!("input P{i}"),
                format!("shape {:?} at {begin} on axis {axis} is not inside {shape:?}", part.shape),
            ));
        }
        parts.push((part, at.unwrap_or(0)));
    }
    let data = dispatch_float!(ctx.out_dtype(0)?, "output", T => {
        let mut out = vec![T::default(); numel(shape)];
        for (i, (part, at)) in parts.iter().enumerate() {
            let values = part.view::<T>(&format!("input P{i}"))?;
            let plen = part.shape[axis];
            for o in 0..outer {
                let dst = &mut out[(o * len + at) * inner..(o * len + at + plen) * inner];
                for (d, s) in dst.iter_mut().zip(&values[o * plen * inner..(o + 1) * plen * inner]) {
                    *d += *s;
                }
            }
        }
        Ok(T::wrap(out))
    })?;
    Ok(vec![HostTensor::new(shape.to_vec(), data)?])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use lms_proto::lms::DType::*;

    #[test]
    fn split_window_copies_the_positions_and_checks_its_bounds() {
        let x = tensor(&[2, 5], (0..10).map(|v| v as f32).collect());
        let window = |begin, end, shape: &[usize]| {
            lms1("SplitWindow", &[int("axis", -1), int("begin", begin), int("end", end)], &[&x], shape)
        };
        assert_eq!(window(1, 4, &[2, 3]), [1.0, 2.0, 3.0, 6.0, 7.0, 8.0]);
        assert_eq!(window(0, 5, &[2, 5]), (0..10).map(|v| v as f32).collect::<Vec<_>>());
        let past = [int("axis", 1), int("begin", 3), int("end", 6)];
        assert!(run_lms("SplitWindow", &past, &[&x], &[(DtypeF32, vec![2, 3])]).is_err());
        let backwards = [int("axis", 1), int("begin", 3), int("end", 2)];
        assert!(run_lms("SplitWindow", &backwards, &[&x], &[(DtypeF32, vec![2, 0])]).is_err());
    }

    #[test]
    fn overlap_add_adds_the_parts_where_they_overlap_and_leaves_zeros_elsewhere() {
        let a = tensor(&[2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = tensor(&[2, 2], vec![10.0f32, 20.0, 30.0, 40.0]);
        let attrs = [int("axis", 1), ints("begins", &[0, 2])];
        assert_eq!(
            lms1("OverlapAdd", &attrs, &[&a, &b], &[2, 5]),
            [1.0, 2.0, 13.0, 20.0, 0.0, 4.0, 5.0, 36.0, 40.0, 0.0]
        );
        let beyond = [int("axis", 1), ints("begins", &[0, 4])];
        let err = run_lms("OverlapAdd", &beyond, &[&a, &b], &[(DtypeF32, vec![2, 5])]).unwrap_err();
        assert!(err.to_string().contains("input P1"), "{err}");
        let short = [int("axis", 1), ints("begins", &[0])];
        assert!(run_lms("OverlapAdd", &short, &[&a, &b], &[(DtypeF32, vec![2, 5])]).is_err());
    }
}
