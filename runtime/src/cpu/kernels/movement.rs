//! Data movement on any dtype: Transpose, Concat, Split, Gather, GatherElements, Expand, Tile,
//! Trilu.

use super::layout::strided_copy;
use super::{Ctx, Kernel};
use crate::error::{KernelError, Result};
use crate::geometry::layout::{broadcast_shapes, broadcast_strides, norm_axis, split_at_axis, strides, to_dim};
use crate::geometry::triangle::Triangle;
use crate::tensor::{dispatch, numel, Elem, HostTensor};

/// The data-movement kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[
    ("Concat", concat),
    ("Expand", expand),
    ("Gather", gather),
    ("GatherElements", gather_elements),
    ("Split", split),
    ("Tile", tile),
    ("Transpose", transpose),
    ("Trilu", trilu),
];

/// A new tensor reading `x` through a strided view (any dtype).
pub(super) fn view_copy(x: &HostTensor, base: isize, shape: Vec<usize>, view_strides: &[isize]) -> Result<HostTensor> {
    let data = dispatch!(x.dtype(), T => Ok(T::wrap(strided_copy(x.view::<T>("input")?, base, &shape, view_strides))))?;
    HostTensor::new(shape, data)
}

/// Transpose by `perm` (default: reverse the axes).
fn transpose(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "data")?;
    let perm: Vec<usize> = match ctx.attrs.ints_opt("perm")? {
        Some(p) => p.iter().map(|&a| usize::try_from(a).unwrap_or(usize::MAX)).collect(),
        None => (0..x.rank()).rev().collect(),
    };
    let mut seen = vec![false; x.rank()];
    if perm.len() != x.rank() || !perm.iter().all(|&a| a < x.rank() && !std::mem::replace(&mut seen[a], true)) {
        return Err(KernelError::attr("perm", format!("{perm:?} is not a permutation of {} axes", x.rank())));
    }
    let own = strides(&x.shape);
    let shape = perm.iter().map(|&a| x.shape[a]).collect();
    let view: Vec<isize> = perm.iter().map(|&a| own[a]).collect();
    Ok(vec![view_copy(x, 0, shape, &view)?])
}

/// Concat along `axis`; every other dimension must agree.
fn concat(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let first = ctx.input(0, "inputs_0")?;
    let axis = norm_axis(
        ctx.attrs.int_opt("axis")?.ok_or_else(|| KernelError::attr("axis", "is required"))?,
        first.rank(),
        "axis",
    )?;
    let parts = (0..ctx.inputs.len()).map(|i| ctx.input(i, &format!("inputs_{i}"))).collect::<Result<Vec<_>>>()?;
    let mut shape = first.shape.clone();
    shape[axis] = 0;
    for (i, p) in parts.iter().enumerate() {
        let same = p.rank() == first.rank() && (0..p.rank()).all(|d| d == axis || p.shape[d] == first.shape[d]);
        if !same {
            return Err(KernelError::shape(
                format!("input inputs_{i}"),
                format!("shape {:?} does not concat with {:?} on axis {axis}", p.shape, first.shape),
            ));
        }
        shape[axis] += p.shape[axis];
    }
    let outer = numel(&first.shape[..axis]);
    let data = dispatch!(first.dtype(), T => {
        let views = parts.iter().enumerate().map(|(i, p)| p.view::<T>(&format!("input inputs_{i}"))).collect::<Result<Vec<_>>>()?;
        let mut out = Vec::with_capacity(numel(&shape));
        for o in 0..outer {
            for (p, v) in parts.iter().zip(&views) {
                let chunk = numel(&p.shape[axis..]);
                out.extend_from_slice(&v[o * chunk..][..chunk]);
            }
        }
        Ok(T::wrap(out))
    })?;
    Ok(vec![HostTensor::new(shape, data)?])
}

/// Split along `axis` into the declared outputs: sizes from attribute or input `split`,
/// else equal parts (the last one smaller when the axis does not divide evenly).
fn split(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "input")?;
    let axis = norm_axis(ctx.attrs.int("axis", 0)?, x.rank(), "axis")?;
    let dim = x.shape[axis];
    let count = ctx.outputs.len();
    let sizes: Vec<usize> = match ctx.ints_attr_or_input("split", 1, "split")? {
        Some(s) => s.iter().map(|&v| to_dim(v, "split size")).collect::<Result<_>>()?,
        None => {
            let part = dim.div_ceil(count.max(1));
            (0..count).map(|i| part.min(dim.saturating_sub(i * part))).collect()
        }
    };
    let total = sizes.iter().try_fold(0usize, |acc, &n| acc.checked_add(n));
    if sizes.len() != count || total != Some(dim) {
        return Err(KernelError::invalid(format!(
            "split {sizes:?} does not cut axis {axis} of size {dim} into {count} outputs"
        )));
    }
    let own = strides(&x.shape);
    let mut offset = 0;
    sizes
        .iter()
        .map(|&n| {
            let mut shape = x.shape.clone();
            shape[axis] = n;
            let part = view_copy(x, offset as isize * own[axis], shape, &own);
            offset += n;
            part
        })
        .collect()
}

/// Gather slices along `axis` at `indices` (negative counts from the end; checked).
fn gather(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let (x, idx) = (ctx.input(0, "data")?, ctx.input(1, "indices")?);
    let axis = norm_axis(ctx.attrs.int("axis", 0)?, x.rank(), "axis")?;
    let (outer, dim, inner) = split_at_axis(&x.shape, axis);
    let picks = idx
        .to_i64s("input indices")?
        .into_iter()
        .map(|i| {
            let j = if i < 0 { i + dim as i64 } else { i };
            usize::try_from(j).ok().filter(|&j| j < dim).ok_or_else(|| {
                KernelError::invalid(format!("index {i} is out of bounds for axis {axis} of size {dim}"))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut shape = x.shape[..axis].to_vec();
    shape.extend_from_slice(&idx.shape);
    shape.extend_from_slice(&x.shape[axis + 1..]);
    let data = dispatch!(x.dtype(), T => {
        let xs = x.view::<T>("input data")?;
        let mut out = Vec::with_capacity(numel(&shape));
        for o in 0..outer {
            for &j in &picks {
                out.extend_from_slice(&xs[(o * dim + j) * inner..][..inner]);
            }
        }
        Ok(T::wrap(out))
    })?;
    Ok(vec![HostTensor::new(shape, data)?])
}

/// Trilu: each matrix of the last two axes keeps the triangle `geometry::triangle` reads;
/// the others are zero.
fn trilu(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "input")?;
    let k = ctx.opt_input(1).map(|k| k.to_i64s("input k")).transpose()?;
    let triangle = Triangle::read(&x.shape, ctx.attrs.int("upper", 1)?, k.as_deref())?;
    let data = dispatch!(x.dtype(), T => {
        let xs = x.view::<T>("input input")?;
        Ok(T::wrap(xs.iter().enumerate().map(|(e, &v)| if triangle.keeps(e) { v } else { T::default() }).collect()))
    })?;
    Ok(vec![HostTensor::new(x.shape.clone(), data)?])
}

/// GatherElements: out[i] = data[i with its `axis` coordinate replaced by indices[i]].
fn gather_elements(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let (x, idx) = (ctx.input(0, "data")?, ctx.input(1, "indices")?);
    let axis = norm_axis(ctx.attrs.int("axis", 0)?, x.rank(), "axis")?;
    let offsets = element_offsets(&x.shape, &idx.shape, axis, &idx.to_i64s("input indices")?)?;
    let data = dispatch!(x.dtype(), T => {
        let xs = x.view::<T>("input data")?;
        Ok(T::wrap(offsets.iter().map(|&at| xs[at]).collect()))
    })?;
    Ok(vec![HostTensor::new(idx.shape.clone(), data)?])
}

/// For each position of `indices` (row major over `index_shape`), the flat offset in a
/// tensor of `shape` that GatherElements along `axis` reads there (negative indices
/// wrap); an error when the shapes disagree or an index is out of bounds.
pub(super) fn element_offsets(
    shape: &[usize],
    index_shape: &[usize],
    axis: usize,
    indices: &[i64],
) -> Result<Vec<usize>> {
    let fits = index_shape.len() == shape.len()
        && index_shape.iter().zip(shape).enumerate().all(|(d, (&i, &n))| d == axis || i <= n);
    if !fits {
        return Err(KernelError::invalid(format!(
            "indices of shape {index_shape:?} do not fit data of shape {shape:?} along axis {axis}"
        )));
    }
    let (data_strides, index_strides) = (strides(shape), strides(index_shape));
    let dim = shape[axis];
    indices
        .iter()
        .enumerate()
        .map(|(flat, &i)| {
            let j = if i < 0 { i + dim as i64 } else { i };
            let j = usize::try_from(j).ok().filter(|&j| j < dim).ok_or_else(|| {
                KernelError::invalid(format!("index {i} is out of bounds for axis {axis} of size {dim}"))
            })?;
            Ok((0..shape.len())
                .map(|d| {
                    let coord = if d == axis { j } else { flat / index_strides[d] as usize % index_shape[d] };
                    coord * data_strides[d] as usize
                })
                .sum())
        })
        .collect()
}

/// Broadcast the input to the numpy broadcast of its shape and input `shape`.
fn expand(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "input")?;
    let target = ctx
        .input(1, "shape")?
        .to_i64s("input shape")?
        .iter()
        .map(|&d| to_dim(d, "shape dimension"))
        .collect::<Result<Vec<_>>>()?;
    let shape = broadcast_shapes(&x.shape, &target, "input shape")?;
    ctx.check_declared(0, &shape)?;
    let view = broadcast_strides(&x.shape, &shape, "input input")?;
    Ok(vec![view_copy(x, 0, shape, &view)?])
}

/// Tile: repeat the input `repeats[d]` times along each axis d.
fn tile(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "input")?;
    let repeats = ctx.input(1, "repeats")?.to_i64s("input repeats")?;
    if repeats.len() != x.rank() {
        return Err(KernelError::shape("input repeats", format!("{} values for rank {}", repeats.len(), x.rank())));
    }
    // The output [r0·d0, r1·d1, ...] is row-major [r0, d0, r1, d1, ...] reading X with
    // stride 0 on each repeat axis.
    let own = strides(&x.shape);
    let (mut split_shape, mut view, mut shape) = (Vec::new(), Vec::new(), Vec::new());
    for (d, &r) in repeats.iter().enumerate() {
        let r = to_dim(r, "repeat")?;
        split_shape.extend([r, x.shape[d]]);
        view.extend([0, own[d]]);
        shape.push(
            r.checked_mul(x.shape[d])
                .ok_or_else(|| KernelError::invalid(format!("repeat {r} of axis {d} overflows")))?,
        );
    }
    ctx.check_declared(0, &shape)?;
    let tiled = view_copy(x, 0, split_shape, &view)?;
    Ok(vec![HostTensor::new(shape, tiled.data)?])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::tensor::HostTensor;
    use lms_proto::lms::DType::*;

    fn iota(shape: &[usize]) -> HostTensor {
        tensor(shape, (0..shape.iter().product::<usize>() as i64).collect())
    }

    fn i64s(t: &HostTensor) -> Vec<i64> {
        t.as_i64("t").unwrap().to_vec()
    }

    #[test]
    fn trilu_keeps_a_triangle_of_each_matrix() {
        let x = tensor(&[3, 4], (1..=12i64).collect());
        let k = |k: i64| tensor(&[], vec![k]);
        let y = run1("Trilu", &[], &[&x, &k(1)], DtypeI64, &[3, 4]);
        assert_eq!(i64s(&y), vec![0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12]);
        let y = run1("Trilu", &[int("upper", 0)], &[&x, &k(-1)], DtypeI64, &[3, 4]);
        assert_eq!(i64s(&y), vec![0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0]);
        let y = run1("Trilu", &[int("upper", 0)], &[&tensor(&[2, 2, 2], (1..=8i64).collect())], DtypeI64, &[2, 2, 2]);
        assert_eq!(i64s(&y), vec![1, 0, 3, 4, 5, 0, 7, 8]);
        let two = tensor(&[2], vec![0i64, 1]);
        assert!(run("Trilu", 14, &[], &[&x, &two], &[(DtypeI64, vec![3, 4])]).is_err());
    }

    #[test]
    fn transpose_general_permutation() {
        let x = iota(&[2, 3, 4]);
        let y = run1("Transpose", &[ints("perm", &[1, 2, 0])], &[&x], DtypeI64, &[3, 4, 2]);
        let mut want = Vec::new();
        for j in 0..3 {
            for k in 0..4 {
                for i in 0..2 {
                    want.push((i * 12 + j * 4 + k) as i64);
                }
            }
        }
        assert_eq!(i64s(&y), want);
        let y = run1("Transpose", &[], &[&iota(&[2, 3])], DtypeI64, &[3, 2]);
        assert_eq!(i64s(&y), vec![0, 3, 1, 4, 2, 5]);
        assert!(run("Transpose", 17, &[ints("perm", &[0, 0, 1])], &[&x], &[(DtypeI64, vec![2, 2, 3])]).is_err());
    }

    #[test]
    fn concat_and_split_invert_each_other() {
        let (a, b) = (iota(&[2, 1, 2]), tensor(&[2, 2, 2], vec![10i64, 11, 12, 13, 14, 15, 16, 17]));
        let y = run1("Concat", &[int("axis", -2)], &[&a, &b], DtypeI64, &[2, 3, 2]);
        assert_eq!(i64s(&y), vec![0, 1, 10, 11, 12, 13, 2, 3, 14, 15, 16, 17]);
        let split = tensor(&[2], vec![1i64, 2]);
        let spec = [(DtypeI64, vec![2, 1, 2]), (DtypeI64, vec![2, 2, 2])];
        let parts = run("Split", 13, &[int("axis", 1)], &[&y, &split], &spec).unwrap();
        assert_eq!((&parts[0], &parts[1]), (&a, &b));
        let parts = run("Split", 11, &[int("axis", 1), ints("split", &[1, 2])], &[&y], &spec).unwrap();
        assert_eq!((&parts[0], &parts[1]), (&a, &b));
        // Equal parts, the last one smaller.
        let spec = [(DtypeI64, vec![2]), (DtypeI64, vec![2]), (DtypeI64, vec![1])];
        let parts = run("Split", 18, &[int("num_outputs", 3)], &[&iota(&[5])], &spec).unwrap();
        assert_eq!(parts.iter().map(i64s).collect::<Vec<_>>(), vec![vec![0, 1], vec![2, 3], vec![4]]);
    }

    #[test]
    fn gather_with_negative_indices_and_bounds_checks() {
        let x = iota(&[3, 4]);
        let idx = tensor(&[2, 2], vec![0i64, -1, 2, -4]);
        let y = run1("Gather", &[int("axis", 1)], &[&x, &idx], DtypeI64, &[3, 2, 2]);
        assert_eq!(i64s(&y), vec![0, 3, 2, 0, 4, 7, 6, 4, 8, 11, 10, 8]);
        let idx = tensor(&[], vec![-1i32]);
        assert_eq!(i64s(&run1("Gather", &[], &[&x, &idx], DtypeI64, &[4])), vec![8, 9, 10, 11]);
        let bad = tensor(&[1], vec![3i64]);
        let err = run("Gather", 17, &[], &[&x, &bad], &[(DtypeI64, vec![1, 4])]).unwrap_err();
        assert_eq!(err.to_string(), "Gather: index 3 is out of bounds for axis 0 of size 3");
        // GatherElements (ONNX's example): out[i][j] = x[i][idx[i][j]] along axis 1.
        let x = tensor(&[2, 2], vec![1i64, 2, 3, 4]);
        let idx = tensor(&[2, 2], vec![0i64, 0, 1, -2]);
        assert_eq!(i64s(&run1("GatherElements", &[int("axis", 1)], &[&x, &idx], DtypeI64, &[2, 2])), vec![1, 1, 4, 3]);
        let idx = tensor(&[1, 2], vec![1i64, 0]);
        assert_eq!(i64s(&run1("GatherElements", &[], &[&x, &idx], DtypeI64, &[1, 2])), vec![3, 2]);
        let err = run("GatherElements", 13, &[], &[&x, &tensor(&[1], vec![0i64])], &[(DtypeI64, vec![1])]).unwrap_err();
        assert!(err.to_string().contains("do not fit data of shape [2, 2]"), "{err}");
    }

    #[test]
    fn expand_and_tile() {
        let x = tensor(&[3, 1], vec![1.0f32, 2.0, 3.0]);
        let shape = tensor(&[3], vec![2i64, 1, 2]);
        let y = run1("Expand", &[], &[&x, &shape], DtypeF32, &[2, 3, 2]);
        assert_eq!(f32s(&y), vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
        let reps = tensor(&[2], vec![2i64, 3]);
        let y = run1("Tile", &[], &[&iota(&[2, 2]), &reps], DtypeI64, &[4, 6]);
        let row0 = [0, 1, 0, 1, 0, 1];
        let row1 = [2, 3, 2, 3, 2, 3];
        assert_eq!(i64s(&y), [row0, row1, row0, row1].concat());
    }
}
