//! Data movement on any dtype: views (Reshape and friends share their input's memory),
//! strided copies (Transpose, Concat, Split, Slice, Expand, Tile and their gradients),
//! Pad, Gather, GatherGrad, GatherElements, GatherElementsGrad, Trilu, fills.

use super::elementwise::{by_size, Binary};
use super::{check_dtype, check_shape, ptr, Arg, Exec, OpResult, Table};
use crate::backend::cuda::layout::{broadcast, contiguous, Layout, View, MAX_RANK};
use crate::backend::cuda::CudaBuffer;
use crate::error::KernelError;
use crate::geometry::layout::{norm_axes, norm_axis, split_at_axis};
use crate::geometry::slice::{slice_view, split_part_range, window_range};
use crate::geometry::triangle::Triangle;
use crate::tensor::{numel, HostTensor};
use cudarc::driver::DeviceRepr;
use lms_proto::lms::DType;
use lms_proto::ops::scratch::Part;

/// The ONNX data-movement ops.
pub(super) const ONNX: Table = &[
    ("Concat", concat),
    ("ConstantOfShape", constant_of_shape),
    ("Dropout", dropout),
    ("Expand", expand),
    ("Flatten", view),
    ("Gather", gather),
    ("GatherElements", gather_elements),
    ("Identity", view),
    ("Pad", pad),
    ("Reshape", view),
    ("Slice", slice),
    ("Split", split),
    ("Squeeze", view),
    ("Tile", tile),
    ("Transpose", transpose),
    ("Trilu", trilu),
    ("Unsqueeze", view),
];

/// The `lms` data-movement ops.
pub(super) const LMS: Table = &[
    ("ConcatGrad", concat_grad),
    ("GatherElementsGrad", gather_elements_grad),
    ("GatherGrad", gather_grad),
    ("ReshapeTo", view),
    ("OverlapAdd", overlap_add),
    ("SliceGrad", slice_grad),
    ("SplitPart", split_part),
    ("SplitWindow", split_window),
    ("Zeros", zeros),
];

const COPY: [&str; 4] = ["copy_1", "copy_2", "copy_4", "copy_8"];
const FILL: [&str; 4] = ["fill_1", "fill_2", "fill_4", "fill_8"];

/// `v` (isize strides from the CPU helpers) as i64.
fn to_i64(v: &[isize]) -> Vec<i64> {
    v.iter().map(|&s| s as i64).collect()
}

/// Copies `src` read through `src_view` into `dst` written through `dst_view`, both
/// over iteration shape `shape`.
pub(super) fn copy_strided(
    exec: &Exec<'_>,
    shape: &[usize],
    dst: &CudaBuffer,
    dst_view: View<'_>,
    src: &CudaBuffer,
    src_view: View<'_>,
) -> OpResult<()> {
    check_dtype(src, dst.dtype, "input")?;
    let layout = Layout::new(shape, &[dst_view, src_view])?;
    exec.launch(by_size(&COPY, dst.dtype)?, numel(shape) as u64, &[Arg::layout(&layout), ptr(dst), ptr(src)])
}

/// Copies `src` read through `src_view` into `dst` written densely (row-major) over
/// iteration shape `shape`.
fn copy_dense(
    exec: &Exec<'_>,
    shape: &[usize],
    dst: &CudaBuffer,
    src: &CudaBuffer,
    src_view: View<'_>,
) -> OpResult<()> {
    copy_strided(exec, shape, dst, View::new(&contiguous(shape)), src, src_view)
}

/// Fills `t` with the element whose little-endian bits are `bits`.
fn fill(exec: &Exec<'_>, t: &CudaBuffer, bits: u64) -> OpResult<()> {
    exec.launch(by_size(&FILL, t.dtype)?, t.numel() as u64, &[Arg::I64(t.numel() as i64), ptr(t), Arg::U64(bits)])
}

/// The little-endian bits of a one-element host tensor, zero-extended.
fn element_bits(value: &HostTensor) -> u64 {
    let mut bytes = [0u8; 8];
    let le = value.to_le_bytes();
    let n = le.len().min(8);
    bytes[..n].copy_from_slice(&le[..n]);
    u64::from_le_bytes(bytes)
}

/// Reshape, Flatten, Squeeze, Unsqueeze, Identity, ReshapeTo: the input's memory with the
/// declared shape.
fn view(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.input(0, "data")?;
    let shape = exec.out_shape(0)?;
    if numel(shape) != x.numel() {
        return Err(
            KernelError::shape("input data", format!("{} elements do not fill shape {shape:?}", x.numel())).into()
        );
    }
    Ok(vec![x.view(shape)])
}

/// Dropout at inference: the input, and a mask of ones when declared.
fn dropout(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.input(0, "data")?;
    if exec.opt_input(2).is_some() {
        let training = exec.host_value(2, "training_mode")?;
        if training.as_bool("input training_mode")?.iter().any(|&b| b) {
            return Err(KernelError::unsupported("Dropout in training mode (inference form only)").into());
        }
    }
    let mut outs = vec![x.view(&x.shape)];
    if exec.outputs.len() > 1 {
        let mask = exec.output(1)?;
        fill(exec, &mask, scalar_bits(mask.dtype, 1.0)?)?;
        outs.push(mask);
    }
    Ok(outs)
}

/// The little-endian bits of `value` converted to an element of `dtype` (as a C cast).
fn scalar_bits(dtype: DType, value: f64) -> OpResult<u64> {
    Ok(match dtype {
        DType::DtypeF32 => u64::from((value as f32).to_bits()),
        DType::DtypeF64 => value.to_bits(),
        DType::DtypeI64 => value as i64 as u64,
        DType::DtypeI32 => u64::from(value as i32 as u32),
        DType::DtypeBool => u64::from(value != 0.0),
        DType::DtypeU8 => u64::from(value as u8),
        DType::DtypeI8 => u64::from(value as i8 as u8),
        other => {
            return Err(KernelError::unsupported(format!(
                "dtype {} on the CUDA backend",
                crate::tensor::dtype_name(other)
            ))
            .into())
        }
    })
}

fn zeros(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let y = exec.output(0)?;
    exec.zero(y.ptr(), y.bytes())?;
    Ok(vec![y])
}

/// ConstantOfShape whose shape input is not known on the host: the declared output
/// filled with attribute `value` (f32 0 by default).
fn constant_of_shape(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let value = exec.attrs.tensor_opt("value")?.unwrap_or_else(|| HostTensor::scalar(0.0f32));
    let y = exec.output(0)?;
    if value.numel() != 1 || value.dtype() != y.dtype {
        return Err(KernelError::attr("value", "expected one element of the output's dtype").into());
    }
    fill(exec, &y, element_bits(&value))?;
    Ok(vec![y])
}

fn transpose(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.input(0, "data")?;
    let rank = x.shape.len();
    let perm: Vec<usize> = match exec.attrs.ints_opt("perm")? {
        Some(p) => p.iter().map(|&a| usize::try_from(a).unwrap_or(usize::MAX)).collect(),
        None => (0..rank).rev().collect(),
    };
    let mut seen = vec![false; rank];
    if perm.len() != rank || !perm.iter().all(|&a| a < rank && !std::mem::replace(&mut seen[a], true)) {
        return Err(KernelError::attr("perm", format!("{perm:?} is not a permutation of {rank} axes")).into());
    }
    let own = contiguous(&x.shape);
    let y = exec.output(0)?;
    let src: Vec<i64> = perm.iter().map(|&a| own[a]).collect();
    copy_dense(exec, &y.shape, &y, x, View::new(&src))?;
    Ok(vec![y])
}

fn expand(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.input(0, "input")?;
    let y = exec.output(0)?;
    let src = broadcast(&x.shape, &y.shape, "input input")?;
    copy_dense(exec, &y.shape, &y, x, View::new(&src))?;
    Ok(vec![y])
}

/// Tile: the output [r0·d0, r1·d1, ...] is row-major [r0, d0, r1, d1, ...] reading X
/// with stride 0 on each repeat axis.
fn tile(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.input(0, "input")?;
    let y = exec.output(0)?;
    let own = contiguous(&x.shape);
    let (mut split, mut src) = (Vec::new(), Vec::new());
    for (d, &n) in x.shape.iter().enumerate() {
        let r = y.shape.get(d).copied().unwrap_or(0) / n.max(1);
        split.extend([r, n]);
        src.extend([0, own[d]]);
    }
    if numel(&split) != y.numel() {
        return Err(KernelError::shape("output 0", format!("{:?} is not a tiling of {:?}", y.shape, x.shape)).into());
    }
    copy_dense(exec, &split, &y, x, View::new(&src))?;
    Ok(vec![y])
}

/// Copies the consecutive parts of `x` along `axis` into `parts` (Split, ConcatGrad).
fn split_into(exec: &Exec<'_>, x: &CudaBuffer, axis: usize, parts: &[CudaBuffer]) -> OpResult<()> {
    let own = contiguous(&x.shape);
    let mut offset = 0i64;
    for part in parts {
        let view = View { strides: &own, offset: offset * own[axis] };
        copy_dense(exec, &part.shape, part, x, view)?;
        offset += part.shape[axis] as i64;
    }
    Ok(())
}

fn concat(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let y = exec.output(0)?;
    let axis = exec.attrs.int_opt("axis")?.ok_or_else(|| KernelError::attr("axis", "is required"))?;
    let axis = norm_axis(axis, y.shape.len(), "axis")?;
    let own = contiguous(&y.shape);
    let mut offset = 0i64;
    for i in 0..exec.inputs.len() {
        let part = exec.input(i, &format!("inputs_{i}"))?;
        let fits = part.shape.len() == y.shape.len()
            && (0..part.shape.len()).all(|d| d == axis || part.shape[d] == y.shape[d]);
        if !fits {
            return Err(KernelError::shape(
                format!("input inputs_{i}"),
                format!("shape {:?} does not concat into {:?} on axis {axis}", part.shape, y.shape),
            )
            .into());
        }
        let view = View { strides: &own, offset: offset * own[axis] };
        copy_strided(exec, &part.shape, &y, view, part, View::new(&contiguous(&part.shape)))?;
        offset += part.shape[axis] as i64;
    }
    if offset as usize != y.shape[axis] {
        return Err(KernelError::shape(
            "output 0",
            format!("axis {axis} has {} elements, the inputs {offset}", y.shape[axis]),
        )
        .into());
    }
    Ok(vec![y])
}

/// The declared outputs, checked to be consecutive parts of `x` along `axis`.
fn parts_of(exec: &Exec<'_>, x: &CudaBuffer, axis: usize) -> OpResult<Vec<CudaBuffer>> {
    let mut total = 0;
    for (i, (_, shape)) in exec.outputs.iter().enumerate() {
        let fits = shape.len() == x.shape.len() && (0..shape.len()).all(|d| d == axis || shape[d] == x.shape[d]);
        if !fits {
            return Err(KernelError::shape(
                format!("output {i}"),
                format!("shape {shape:?} is not a part of {:?} on axis {axis}", x.shape),
            )
            .into());
        }
        total += shape[axis];
    }
    if total != x.shape[axis] {
        return Err(KernelError::shape(
            "input",
            format!("axis {axis} has {} elements, the outputs {total}", x.shape[axis]),
        )
        .into());
    }
    (0..exec.outputs.len()).map(|i| exec.output(i)).collect()
}

/// Split into the declared outputs (their sizes along `axis` come from the graph).
fn split(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.input(0, "input")?;
    let axis = norm_axis(exec.attrs.int("axis", 0)?, x.shape.len(), "axis")?;
    let parts = parts_of(exec, x, axis)?;
    split_into(exec, x, axis, &parts)?;
    Ok(parts)
}

fn concat_grad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let dy = exec.input(0, "dY")?;
    let axis = exec.attrs.int_opt("axis")?.ok_or_else(|| KernelError::attr("axis", "is required"))?;
    let axis = norm_axis(axis, dy.shape.len(), "axis")?;
    let parts = parts_of(exec, dy, axis)?;
    split_into(exec, dy, axis, &parts)?;
    Ok(parts)
}

/// The strided view (offset, shape, strides) a Slice of `dims` reads, from its
/// attributes (opset < 10) or inputs.
fn slice_geometry(exec: &Exec<'_>, dims: &[usize]) -> OpResult<(i64, Vec<usize>, Vec<i64>)> {
    let required = |attr: &str, i: usize| -> OpResult<Vec<i64>> {
        exec.ints_attr_or_input(attr, i, attr)?.ok_or_else(|| KernelError::MissingInput(attr.to_string()).into())
    };
    let (starts, ends) = (required("starts", 1)?, required("ends", 2)?);
    let axes = match exec.ints_attr_or_input("axes", 3, "axes")? {
        Some(a) => norm_axes(&a, dims.len(), "axis")?,
        None => (0..starts.len()).collect(),
    };
    let steps = match exec.opt_input(4) {
        Some(_) => exec.host_value(4, "steps")?.to_i64s("input steps")?,
        None => vec![1; starts.len()],
    };
    let (base, shape, view) = slice_view(dims, &starts, &ends, &axes, &steps)?;
    Ok((base as i64, shape, to_i64(&view)))
}

fn slice(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.input(0, "data")?;
    let (base, shape, view) = slice_geometry(exec, &x.shape)?;
    let y = exec.output(0)?;
    check_shape(&y, &shape, "output 0")?;
    let src = View { strides: &view, offset: base };
    copy_dense(exec, &shape, &y, x, src)?;
    Ok(vec![y])
}

/// SplitPart: one `array_split` part of X along `axis`, a strided copy.
fn split_part(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    axis_range(exec, |len, attr| Ok(split_part_range(len, attr("index")?, attr("parts")?)?))
}

/// SplitWindow: the positions `begin..end` of X along `axis`, a strided copy.
fn split_window(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    axis_range(exec, |len, attr| Ok(window_range(len, attr("begin")?, attr("end")?)?))
}

/// An int attribute of the node, which must be present.
type RequiredInt<'a> = &'a dyn Fn(&str) -> OpResult<i64>;

/// The positions of X along attribute `axis` that `range` gives from the axis's length
/// and the node's int attributes, copied densely into output 0.
fn axis_range(
    exec: &Exec<'_>,
    range: impl Fn(usize, RequiredInt<'_>) -> OpResult<std::ops::Range<usize>>,
) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.input(0, "X")?;
    let required = |name: &str| -> OpResult<i64> {
        exec.attrs.int_opt(name)?.ok_or_else(|| KernelError::attr(name, "is required").into())
    };
    let axis = norm_axis(required("axis")?, x.shape.len(), "axis")?;
    let range = range(x.shape[axis], &required)?;
    let (base, shape, view) = slice_view(&x.shape, &[range.start as i64], &[range.end as i64], &[axis], &[1])?;
    let y = exec.output(0)?;
    check_shape(&y, &shape, "output 0")?;
    copy_dense(exec, &shape, &y, x, View { strides: &to_i64(&view), offset: base as i64 })?;
    Ok(vec![y])
}

/// OverlapAdd: zeros of the declared shape, then each part added in place at
/// `begins[i]` along `axis` (the binary Add kernel over a strided window of the output),
/// in part order as on the CPU.
fn overlap_add(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let y = exec.output(0)?;
    check_dtype(&y, DType::DtypeF32, "output 0")?;
    let axis = exec.attrs.int_opt("axis")?.ok_or_else(|| KernelError::attr("axis", "is required"))?;
    let axis = norm_axis(axis, y.shape.len(), "axis")?;
    let begins = exec.attrs.ints_opt("begins")?.ok_or_else(|| KernelError::attr("begins", "is required"))?;
    if begins.len() != exec.inputs.len() || begins.is_empty() {
        return Err(
            KernelError::attr("begins", format!("{} begins for {} parts", begins.len(), exec.inputs.len())).into()
        );
    }
    exec.zero(y.ptr(), y.bytes())?;
    let own = contiguous(&y.shape);
    for (i, &begin) in begins.iter().enumerate() {
        let part = exec.input(i, &format!("P{i}"))?;
        check_dtype(part, DType::DtypeF32, &format!("input P{i}"))?;
        let range =
            window_range(y.shape[axis], begin, begin.saturating_add(part.shape.get(axis).map_or(0, |&l| l as i64)))?;
        let mut shape = y.shape.clone();
        shape[axis] = range.len();
        check_shape(part, &shape, &format!("input P{i}"))?;
        let window = View { strides: &own, offset: range.start as i64 * own[axis] };
        let same = View { strides: &own, offset: range.start as i64 * own[axis] };
        let layout = Layout::new(&shape, &[window, same, View::new(&contiguous(&shape))])?;
        let args = [Arg::I32(Binary::Add as i32), Arg::layout(&layout), ptr(&y), ptr(&y), ptr(part)];
        exec.launch("binary_f32", numel(&shape) as u64, &args)?;
    }
    Ok(vec![y])
}

/// SliceGrad: zeros of the declared shape with dY written where Slice read.
fn slice_grad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let dy = exec.input(0, "dY")?;
    let dx = exec.output(0)?;
    let ints = |name: &str| exec.attrs.ints_opt(name).map(|v| v.map(<[i64]>::to_vec));
    let required =
        |name: &str| -> OpResult<Vec<i64>> { ints(name)?.ok_or_else(|| KernelError::attr(name, "is required").into()) };
    let (starts, ends) = (required("starts")?, required("ends")?);
    let axes = ints("axes")?.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let axes = norm_axes(&axes, dx.shape.len(), "axis")?;
    let steps = ints("steps")?.unwrap_or_else(|| vec![1; starts.len()]);
    let (base, shape, view) = slice_view(&dx.shape, &starts, &ends, &axes, &steps)?;
    check_shape(dy, &shape, "input dY")?;
    exec.zero(dx.ptr(), dx.bytes())?;
    let view = to_i64(&view);
    let dst = View { strides: &view, offset: base as i64 };
    copy_strided(exec, &shape, &dx, dst, dy, View::new(&contiguous(&shape)))?;
    Ok(vec![dx])
}

/// Pad's parameters (`struct PadParams` in indexing.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct PadParams {
    rank: i64,
    mode: i64,
    count: i64,
    out_dims: [i64; MAX_RANK],
    in_dims: [i64; MAX_RANK],
    in_strides: [i64; MAX_RANK],
    begin: [i64; MAX_RANK],
}

// SAFETY: `PadParams` is `repr(C)` plain data mirroring the CUDA struct.
unsafe impl DeviceRepr for PadParams {}
// The CUDA struct: 3 + 4·8 i64s.
const _: () = assert!(std::mem::size_of::<PadParams>() == 280);

fn pad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.input(0, "data")?;
    let rank = x.shape.len();
    let mode = match exec.attrs.string("mode", "constant")? {
        "constant" => 0,
        "reflect" => 1,
        "edge" => 2,
        "wrap" => 3,
        other => return Err(KernelError::attr("mode", format!("unknown value `{other}`")).into()),
    };
    let pads = exec.ints_attr_or_input("pads", 1, "pads")?.ok_or_else(|| KernelError::MissingInput("pads".into()))?;
    let axes = match exec.opt_input(3) {
        Some(_) => norm_axes(&exec.host_value(3, "axes")?.to_i64s("input axes")?, rank, "axis")?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(KernelError::invalid(format!("{} pads for {} axes", pads.len(), axes.len())).into());
    }
    if rank > MAX_RANK {
        return Err(KernelError::NoCudaKernel(format!("Pad of rank {rank}")).into());
    }
    let value = match (exec.opt_input(2), exec.attrs.float_opt("value")?) {
        (Some(_), _) => element_bits(&exec.host_value(2, "constant_value")?),
        (None, Some(v)) => scalar_bits(x.dtype, f64::from(v))?,
        (None, None) => 0,
    };
    let y = exec.output(0)?;
    let mut begin = vec![0; rank];
    for (k, &a) in axes.iter().enumerate() {
        begin[a] = pads[k];
        let want = x.shape[a] as i64 + pads[k] + pads[k + axes.len()];
        if want != y.shape[a] as i64 {
            return Err(KernelError::shape("output 0", format!("pads {pads:?} do not give {:?}", y.shape)).into());
        }
    }
    if mode != 0 && x.shape.contains(&0) && y.numel() > 0 {
        return Err(KernelError::invalid("cannot pad an empty axis except with a constant").into());
    }
    launch_pad(exec, x, &y, &begin, mode, value)?;
    Ok(vec![y])
}

/// Writes `y` from `x` shifted by `begin` per axis (element `o` of `y` reads `o − begin`
/// of `x`): padding where `begin` ≥ 0, filled per `mode` (0: the element whose bits are
/// `value`, 1 reflect, 2 edge, 3 wrap), and cropping where it is negative.
pub(super) fn launch_pad(
    exec: &Exec<'_>,
    x: &CudaBuffer,
    y: &CudaBuffer,
    begin: &[i64],
    mode: i64,
    value: u64,
) -> OpResult<()> {
    let rank = x.shape.len();
    if rank > MAX_RANK || begin.len() != rank || y.shape.len() != rank {
        return Err(KernelError::NoCudaKernel(format!("Pad of rank {rank}")).into());
    }
    let mut p = PadParams {
        rank: rank as i64,
        mode,
        count: y.numel() as i64,
        out_dims: [1; MAX_RANK],
        in_dims: [1; MAX_RANK],
        in_strides: [0; MAX_RANK],
        begin: [0; MAX_RANK],
    };
    for (d, &stride) in contiguous(&x.shape).iter().enumerate() {
        p.out_dims[d] = y.shape[d] as i64;
        p.in_dims[d] = x.shape[d] as i64;
        p.in_strides[d] = stride;
        p.begin[d] = begin[d];
    }
    exec.launch(
        by_size(&["pad_1", "pad_2", "pad_4", "pad_8"], x.dtype)?,
        y.numel() as u64,
        &[Arg::params(&p), ptr(x), ptr(y), Arg::U64(value)],
    )
}

/// Whether indices are i64 (1) or i32 (0); other dtypes are errors.
fn index_width(idx: &CudaBuffer) -> OpResult<i32> {
    match idx.dtype {
        DType::DtypeI64 => Ok(1),
        DType::DtypeI32 => Ok(0),
        _ => check_dtype(idx, DType::DtypeI64, "input indices").map(|_| 0),
    }
}

fn gather(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (x, idx) = (exec.input(0, "data")?, exec.input(1, "indices")?);
    let axis = norm_axis(exec.attrs.int("axis", 0)?, x.shape.len(), "axis")?;
    let (outer, dim, inner) = split_at_axis(&x.shape, axis);
    let y = exec.output(0)?;
    exec.launch(
        by_size(&["gather_1", "gather_2", "gather_4", "gather_8"], x.dtype)?,
        y.numel() as u64,
        &[
            Arg::I64(outer as i64),
            Arg::I64(dim as i64),
            Arg::I64(inner as i64),
            Arg::I64(idx.numel() as i64),
            ptr(idx),
            Arg::I32(index_width(idx)?),
            ptr(x),
            ptr(&y),
        ],
    )?;
    Ok(vec![y])
}

/// Trilu: as the CPU kernel, one thread per element (`k` read back to the host).
fn trilu(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.input(0, "input")?;
    let k = match exec.opt_input(1) {
        Some(_) => Some(exec.host_value(1, "k")?.to_i64s("input k")?),
        None => None,
    };
    let Triangle { rows, cols, k, upper } = Triangle::read(&x.shape, exec.attrs.int("upper", 1)?, k.as_deref())?;
    let y = exec.output(0)?;
    check_shape(&y, &x.shape, "output")?;
    check_dtype(x, y.dtype, "input")?;
    exec.launch(
        by_size(&["trilu_1", "trilu_2", "trilu_4", "trilu_8"], x.dtype)?,
        y.numel() as u64,
        &[
            Arg::I64(y.numel() as i64),
            Arg::I64(rows as i64),
            Arg::I64(cols as i64),
            Arg::I64(k),
            Arg::I32(upper as i32),
            ptr(x),
            ptr(&y),
        ],
    )?;
    Ok(vec![y])
}

/// Checks that GatherElements' indices of `index_shape` fit data of `shape` along `axis`.
fn check_element_indices(shape: &[usize], index_shape: &[usize], axis: usize) -> OpResult<()> {
    let fits = index_shape.len() == shape.len()
        && index_shape.iter().zip(shape).enumerate().all(|(d, (&i, &n))| d == axis || i <= n);
    if !fits {
        return Err(KernelError::invalid(format!(
            "indices of shape {index_shape:?} do not fit data of shape {shape:?} along axis {axis}"
        ))
        .into());
    }
    Ok(())
}

/// GatherElements: iterates the indices' shape, reading data through its strides off
/// the axis (view 1, whose axis stride is 0) plus index·stride along it; an
/// out-of-range index reads zero, as Gather's.
fn gather_elements(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (x, idx) = (exec.input(0, "data")?, exec.input(1, "indices")?);
    let axis = norm_axis(exec.attrs.int("axis", 0)?, x.shape.len(), "axis")?;
    check_element_indices(&x.shape, &idx.shape, axis)?;
    let y = exec.output(0)?;
    check_shape(&y, &idx.shape, "output")?;
    let mut base = contiguous(&x.shape);
    let stride = std::mem::replace(&mut base[axis], 0);
    let layout = Layout::new(&idx.shape, &[View::new(&contiguous(&idx.shape)), View::new(&base)])?;
    exec.launch(
        by_size(&["gather_elements_1", "gather_elements_2", "gather_elements_4", "gather_elements_8"], x.dtype)?,
        y.numel() as u64,
        &[
            Arg::layout(&layout),
            Arg::I64(x.shape[axis] as i64),
            Arg::I64(stride),
            ptr(idx),
            Arg::I32(index_width(idx)?),
            ptr(x),
            ptr(&y),
        ],
    )?;
    Ok(vec![y])
}

/// GatherElementsGrad: each element of dData that the indices can reach (the indices'
/// shape, the axis as long as data's) sums, in index order and in f64 as the CPU
/// backend, the dY positions along the axis whose index names it; no atomics, so the
/// result does not depend on the schedule. The rest of dData is zero.
fn gather_elements_grad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (dy, idx) = (exec.f32_input(0, "dY")?, exec.input(1, "indices")?);
    let dx = exec.output(0)?;
    let axis = norm_axis(exec.attrs.int("axis", 0)?, dx.shape.len(), "axis")?;
    check_element_indices(&dx.shape, &idx.shape, axis)?;
    check_shape(dy, &idx.shape, "input dY")?;
    exec.zero(dx.ptr(), dx.bytes())?;
    let mut reach = idx.shape.clone();
    reach[axis] = dx.shape[axis];
    let mut base = contiguous(&idx.shape);
    let stride = std::mem::replace(&mut base[axis], 0);
    let mut coordinate = vec![0i64; reach.len()];
    coordinate[axis] = 1;
    let layout = Layout::new(&reach, &[View::new(&contiguous(&dx.shape)), View::new(&base), View::new(&coordinate)])?;
    exec.launch(
        "gather_elements_grad_f32",
        numel(&reach) as u64,
        &[
            Arg::layout(&layout),
            Arg::I64(dx.shape[axis] as i64),
            Arg::I64(idx.shape[axis] as i64),
            Arg::I64(stride),
            ptr(idx),
            Arg::I32(index_width(idx)?),
            ptr(dy),
            ptr(&dx),
        ],
    )?;
    Ok(vec![dx])
}

/// GatherGrad: dY scatter-added at the indices along `axis`, deterministically: the
/// (index, position) keys are sorted on the GPU and each index sums its rows of dY in
/// position order, as the CPU backend does.
fn gather_grad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (dy, idx) = (exec.f32_input(0, "dY")?, exec.input(1, "indices")?);
    let dx = exec.output(0)?;
    let axis = norm_axis(exec.attrs.int("axis", 0)?, dx.shape.len(), "axis")?;
    let (outer, dim, inner) = split_at_axis(&dx.shape, axis);
    let mut y_shape = dx.shape[..axis].to_vec();
    y_shape.extend_from_slice(&idx.shape);
    y_shape.extend_from_slice(&dx.shape[axis + 1..]);
    check_shape(dy, &y_shape, "input dY")?;
    let count = idx.numel();
    if count >= 1 << 32 || dim >= 1 << 32 {
        return Err(KernelError::NoCudaKernel("GatherGrad with 2^32 or more indices or rows".into()).into());
    }
    exec.zero(dx.ptr(), dx.bytes())?;
    if count == 0 {
        return Ok(vec![dx]);
    }
    let padded = count.next_power_of_two();
    let keys = exec.scratch_part(Part::SortKeys)?;
    if keys.bytes() != padded as u64 * 8 {
        return Err(
            KernelError::invalid(format!("sort keys of {} bytes planned for {padded} keys", keys.bytes())).into()
        );
    }
    exec.launch(
        "index_keys",
        padded as u64,
        &[
            Arg::I64(count as i64),
            Arg::I64(padded as i64),
            Arg::I64(dim as i64),
            ptr(idx),
            Arg::I32(index_width(idx)?),
            Arg::Ptr(keys.ptr()),
        ],
    )?;
    let mut k = 2;
    while k <= padded {
        let mut j = k / 2;
        while j > 0 {
            exec.launch(
                "bitonic_step",
                padded as u64,
                &[Arg::I64(padded as i64), Arg::I64(j as i64), Arg::I64(k as i64), Arg::Ptr(keys.ptr())],
            )?;
            j /= 2;
        }
        k *= 2;
    }
    exec.launch_blocks(
        "gather_grad_f32",
        count as u64,
        256,
        &[
            Arg::I64(count as i64),
            Arg::I64(outer as i64),
            Arg::I64(dim as i64),
            Arg::I64(inner as i64),
            Arg::Ptr(keys.ptr()),
            ptr(dy),
            ptr(&dx),
        ],
    )?;
    Ok(vec![dx])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_become_fill_patterns() {
        assert_eq!(element_bits(&HostTensor::scalar(1.0f32)), 0x3f80_0000);
        assert_eq!(element_bits(&HostTensor::scalar(-1i64)), u64::MAX);
        assert_eq!(element_bits(&HostTensor::scalar(true)), 1);
        assert_eq!(scalar_bits(DType::DtypeF32, 1.0).ok(), Some(0x3f80_0000));
        assert_eq!(scalar_bits(DType::DtypeI32, -1.0).ok(), Some(0xffff_ffff));
        assert_eq!(scalar_bits(DType::DtypeBool, 1.0).ok(), Some(1));
        assert!(scalar_bits(DType::DtypeF16, 1.0).is_err());
    }
}
