//! Reductions (kernels in `reduce.cu`): ReduceSum/Mean/Max/Min, SumTo, ConvGradBias,
//! the global pools and their gradients, ReduceGrad, softmax and its gradients, and the
//! losses.

use super::{check_dtype, check_shape, count, ptr, Arg, Exec, OpResult, Table};
use crate::backend::cuda::layout::{broadcast, contiguous, Layout, View, MAX_RANK};
use crate::backend::cuda::memory::DeviceBlock;
use crate::backend::cuda::CudaBuffer;
use crate::error::KernelError;
use crate::geometry::layout::norm_axes;
use crate::geometry::softmax::softmax_layout;
use crate::tensor::numel;
use cudarc::driver::DeviceRepr;
use lms_proto::lms::DType;
use lms_proto::ops::scratch::{reduce_splits, total_partials_bytes, Part};
use lms_proto::ops::SoftmaxAxis;

/// The ONNX reductions.
pub(super) const ONNX: Table = &[
    ("GlobalAveragePool", |e| global_pool(e, Reduce::Sum)),
    ("GlobalMaxPool", |e| global_pool(e, Reduce::Max)),
    ("LogSoftmax", |e| softmax(e, true)),
    ("ReduceMax", |e| reduce(e, Reduce::Max, false)),
    ("ReduceMean", |e| reduce(e, Reduce::Sum, true)),
    ("ReduceMin", |e| reduce(e, Reduce::Min, false)),
    ("ReduceSum", |e| reduce(e, Reduce::Sum, false)),
    ("Softmax", |e| softmax(e, false)),
];

/// The `lms` reductions.
pub(super) const LMS: Table = &[
    ("ConvGradBias", conv_grad_bias),
    ("GlobalAveragePoolGrad", global_average_pool_grad),
    ("LogSoftmaxGrad", |e| softmax_grad(e, true)),
    ("MeanSquaredError", mean_squared_error),
    ("MeanSquaredErrorGrad", mean_squared_error_grad),
    ("ReduceGrad", reduce_grad),
    ("SoftmaxCrossEntropy", cross_entropy),
    ("SoftmaxCrossEntropyGrad", cross_entropy_grad),
    ("SoftmaxGrad", |e| softmax_grad(e, false)),
    ("SumTo", sum_to_op),
];

/// Reduction op codes (`enum ReduceOp` in reduce.cu).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
enum Reduce {
    Sum = 0,
    Max,
    Min,
}

/// `struct ReduceParams` in reduce.cu: the kept axes and the reduced axes of the input,
/// each with the input's strides.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ReduceParams {
    out_rank: i64,
    red_rank: i64,
    out_count: i64,
    red_count: i64,
    out_dims: [i64; MAX_RANK],
    out_strides: [i64; MAX_RANK],
    red_dims: [i64; MAX_RANK],
    red_strides: [i64; MAX_RANK],
}

// SAFETY: `ReduceParams` is `repr(C)` plain data mirroring the CUDA struct.
unsafe impl DeviceRepr for ReduceParams {}
// The CUDA struct: 4 + 4·8 i64s.
const _: () = assert!(std::mem::size_of::<ReduceParams>() == 288);

impl ReduceParams {
    /// Reducing `shape` over the axes marked in `reduced`; the outputs are the kept axes
    /// in order (row-major), as a keepdims or not output lays them out.
    fn new(shape: &[usize], reduced: &[bool]) -> OpResult<ReduceParams> {
        let strides = contiguous(shape);
        let pick = |want: bool| {
            let dims: Vec<usize> = (0..shape.len()).filter(|&d| reduced[d] == want).map(|d| shape[d]).collect();
            let st: Vec<i64> = (0..shape.len()).filter(|&d| reduced[d] == want).map(|d| strides[d]).collect();
            Layout::new(&dims, &[View::new(&st)])
        };
        let (kept, red) = (pick(false)?, pick(true)?);
        if kept.rank as usize > MAX_RANK || red.rank as usize > MAX_RANK {
            return Err(KernelError::NoCudaKernel("a reduction over more than 8 axes".into()).into());
        }
        Ok(ReduceParams {
            out_rank: kept.rank,
            red_rank: red.rank,
            out_count: kept.count,
            red_count: red.count,
            out_dims: kept.dims,
            out_strides: kept.strides[0],
            red_dims: red.dims,
            red_strides: red.strides[0],
        })
    }
}

/// Reduces `x` over the axes marked in `reduced` into `y` (the kept elements in order),
/// dividing sums by `divisor`.
fn launch_reduce(
    exec: &Exec<'_>,
    op: Reduce,
    x: &CudaBuffer,
    reduced: &[bool],
    y: &CudaBuffer,
    divisor: f64,
) -> OpResult<()> {
    check_dtype(x, DType::DtypeF32, "input")?;
    let p = ReduceParams::new(&x.shape, reduced)?;
    if p.out_count as usize != y.numel() {
        return Err(KernelError::shape(
            "output 0",
            format!("{} elements, the reduction makes {}", y.numel(), p.out_count),
        )
        .into());
    }
    let (outputs, elements) = (p.out_count as u64, p.red_count as u64);
    if outputs == 0 {
        // An empty output: nothing to write (and no split of zero outputs).
        return Ok(());
    }
    if let Some(splits) = reduce_splits(outputs, elements) {
        // Few outputs, many elements each: split each output's elements among warps.
        let chunk = elements.div_ceil(splits);
        let partial = exec.scratch_sized(Part::ReducePartials, outputs * splits * 8)?;
        exec.launch_warps(
            "reduce_partial_f32",
            outputs * splits,
            &[
                Arg::I32(op as i32),
                Arg::params(&p),
                Arg::I64(splits as i64),
                Arg::I64(chunk as i64),
                ptr(x),
                Arg::Ptr(partial.ptr()),
            ],
        )?;
        exec.launch(
            "reduce_finish_f32",
            outputs,
            &[
                Arg::I32(op as i32),
                Arg::I64(outputs as i64),
                Arg::I64(splits as i64),
                Arg::Ptr(partial.ptr()),
                ptr(y),
                Arg::F64(divisor),
            ],
        )
    } else {
        exec.launch_warps(
            "reduce_f32",
            outputs,
            &[Arg::I32(op as i32), Arg::params(&p), ptr(x), ptr(y), Arg::F64(divisor)],
        )
    }
}

/// Sums `x` down to `y`'s shape (numpy unbroadcast, shapes right-aligned).
pub(super) fn sum_to(exec: &Exec<'_>, x: &CudaBuffer, y: &CudaBuffer) -> OpResult<()> {
    broadcast(&y.shape, &x.shape, "output 0")?;
    let lead = x.shape.len() - y.shape.len();
    let reduced: Vec<bool> =
        (0..x.shape.len()).map(|d| d < lead || (y.shape[d - lead] == 1 && x.shape[d] != 1)).collect();
    launch_reduce(exec, Reduce::Sum, x, &reduced, y, 1.0)
}

fn sum_to_op(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.f32_input(0, "X")?;
    let y = exec.output(0)?;
    sum_to(exec, x, &y)?;
    Ok(vec![y])
}

/// ReduceSum, ReduceMean (`mean`), ReduceMax, ReduceMin over `axes` (attribute or input).
fn reduce(exec: &Exec<'_>, op: Reduce, mean: bool) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.f32_input(0, "data")?;
    let axes = exec.ints_attr_or_input("axes", 1, "axes")?.unwrap_or_default();
    if axes.is_empty() && exec.attrs.int("noop_with_empty_axes", 0)? != 0 {
        return Ok(vec![x.view(exec.out_shape(0)?)]);
    }
    let rank = x.shape.len();
    let axes = if axes.is_empty() { (0..rank).collect() } else { norm_axes(&axes, rank, "axis")? };
    let reduced: Vec<bool> = (0..rank).map(|d| axes.contains(&d)).collect();
    let count: usize = axes.iter().map(|&a| x.shape[a]).product();
    let y = exec.output(0)?;
    let divisor = if mean { count.max(1) as f64 } else { 1.0 };
    launch_reduce(exec, op, x, &reduced, &y, divisor)?;
    Ok(vec![y])
}

/// ConvGradBias: dY summed over every axis but 1.
fn conv_grad_bias(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let dy = exec.f32_input(0, "dY")?;
    if dy.shape.len() < 2 {
        return Err(KernelError::shape("input dY", format!("expected [N, M, ...], found {:?}", dy.shape)).into());
    }
    let reduced: Vec<bool> = (0..dy.shape.len()).map(|d| d != 1).collect();
    let y = exec.output(0)?;
    launch_reduce(exec, Reduce::Sum, dy, &reduced, &y, 1.0)?;
    Ok(vec![y])
}

/// GlobalAveragePool (mean) or GlobalMaxPool over the spatial axes of [N, C, ...].
fn global_pool(exec: &Exec<'_>, op: Reduce) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.f32_input(0, "X")?;
    if x.shape.len() < 2 {
        return Err(KernelError::shape("input X", format!("expected [N, C, spatial...], found {:?}", x.shape)).into());
    }
    let reduced: Vec<bool> = (0..x.shape.len()).map(|d| d >= 2).collect();
    let spatial = numel(&x.shape[2..]).max(1) as f64;
    let y = exec.output(0)?;
    launch_reduce(exec, op, x, &reduced, &y, if op == Reduce::Sum { spatial } else { 1.0 })?;
    Ok(vec![y])
}

/// dst = src broadcast to dst's shape, divided by `divisor`.
fn spread(exec: &Exec<'_>, src: &CudaBuffer, kept: &[usize], dst: &CudaBuffer, divisor: f64) -> OpResult<()> {
    let view = broadcast(kept, &dst.shape, "input dY")?;
    let own = contiguous(&dst.shape);
    let layout = Layout::new(&dst.shape, &[View::new(&own), View::new(&view)])?;
    exec.launch("copy_div_f32", dst.numel() as u64, &[Arg::layout(&layout), ptr(dst), ptr(src), Arg::F64(divisor)])
}

/// GlobalAveragePoolGrad: dY / spatial size, broadcast over the spatial axes.
fn global_average_pool_grad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let dy = exec.f32_input(0, "dY")?;
    let dx = exec.output(0)?;
    if dx.shape.len() < 2 {
        return Err(KernelError::shape("output 0", format!("expected [N, C, spatial...], found {:?}", dx.shape)).into());
    }
    let mut kept = dx.shape[..2].to_vec();
    kept.resize(dx.shape.len(), 1);
    check_shape(dy, &kept, "input dY")?;
    spread(exec, dy, &kept, &dx, numel(&dx.shape[2..]).max(1) as f64)?;
    Ok(vec![dx])
}

/// ReduceGrad: dY broadcast back over the reduced `axes`, divided by their size when `mean`.
fn reduce_grad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let dy = exec.f32_input(0, "dY")?;
    let dx = exec.output(0)?;
    let rank = dx.shape.len();
    let axes = match exec.attrs.ints_opt("axes")? {
        Some(a) if !a.is_empty() => norm_axes(a, rank, "axis")?,
        _ => (0..rank).collect(),
    };
    let mut kept = dx.shape.clone();
    axes.iter().for_each(|&a| kept[a] = 1);
    let dy_shape: Vec<usize> = if exec.attrs.int("keepdims", 1)? != 0 {
        kept.clone()
    } else {
        (0..rank).filter(|d| !axes.contains(d)).map(|d| dx.shape[d]).collect()
    };
    check_shape(dy, &dy_shape, "input dY")?;
    let count = axes.iter().map(|&a| dx.shape[a]).product::<usize>().max(1) as f64;
    let divisor = if exec.attrs.int("mean", 0)? != 0 { count } else { 1.0 };
    spread(exec, dy, &kept, &dx, divisor)?;
    Ok(vec![dx])
}

/// Threads per block for rows of `n` elements: a multiple of 32, at most 256.
fn row_threads(n: usize) -> u32 {
    (n.div_ceil(32) * 32).clamp(32, 256) as u32
}

/// The (outer, n, inner) rows of a softmax over `shape` along the `axis` attribute
/// in the node's [`SoftmaxAxis`] form.
fn softmax_rows(exec: &Exec<'_>, shape: &[usize], form: SoftmaxAxis) -> OpResult<(usize, usize, usize)> {
    let axis = exec.attrs.int("axis", form.default)?;
    Ok(softmax_layout(shape, axis, form.coerced)?)
}

/// Launches softmax kernel `name` with one block per row of `rows`, passing the row
/// layout, `log`, then `buffers`.
fn launch_softmax(
    exec: &Exec<'_>,
    name: &'static str,
    (outer, n, inner): (usize, usize, usize),
    log: bool,
    buffers: &[&CudaBuffer],
) -> OpResult<()> {
    let mut args =
        vec![Arg::I64((outer * inner) as i64), Arg::I64(n as i64), Arg::I64(inner as i64), Arg::I32(i32::from(log))];
    args.extend(buffers.iter().map(|b| ptr(b)));
    exec.launch_blocks(name, (outer * inner) as u64, row_threads(n), &args)
}

fn softmax(exec: &Exec<'_>, log: bool) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.f32_input(0, "input")?;
    let rows = softmax_rows(exec, &x.shape, SoftmaxAxis::at_opset(exec.opset))?;
    let y = exec.output(0)?;
    launch_softmax(exec, "softmax_f32", rows, log, &[x, &y])?;
    Ok(vec![y])
}

fn softmax_grad(exec: &Exec<'_>, log: bool) -> OpResult<Vec<CudaBuffer>> {
    let (dy, y) = (exec.f32_input(0, "dY")?, exec.f32_input(1, "Y")?);
    check_shape(dy, &y.shape, "input dY")?;
    let rows = softmax_rows(exec, &y.shape, SoftmaxAxis::new(exec.attrs.int("coerce", 0)? != 0))?;
    let dx = exec.output(0)?;
    launch_softmax(exec, "softmax_grad_f32", rows, log, &[dy, y, &dx])?;
    Ok(vec![dx])
}

/// Sum modes of `sum_partial` (`enum SumMode` in reduce.cu).
#[derive(Clone, Copy)]
#[repr(i32)]
enum SumMode {
    SquaredDiff = 1,
    F64 = 2,
}

/// out[0] = (Σ over n elements of mode's terms) / divisor, in a fixed order.
fn total(exec: &Exec<'_>, mode: SumMode, n: u64, operands: [u64; 3], out: &CudaBuffer, divisor: f64) -> OpResult<()> {
    let grid = n.div_ceil(256).clamp(1, 1024);
    let partial = exec.scratch_part(Part::Partials)?;
    if partial.bytes() != total_partials_bytes(n) || partial.bytes() != grid * 8 {
        return Err(KernelError::invalid(format!(
            "{} bytes of partial sums planned for {grid} blocks",
            partial.bytes()
        ))
        .into());
    }
    exec.launch_blocks(
        "sum_partial",
        grid,
        256,
        &[
            Arg::I32(mode as i32),
            Arg::I64(n as i64),
            Arg::Ptr(operands[0]),
            Arg::Ptr(operands[1]),
            Arg::Ptr(operands[2]),
            Arg::Ptr(partial.ptr()),
        ],
    )?;
    exec.launch_blocks(
        "sum_finish",
        1,
        256,
        &[Arg::I64(grid as i64), Arg::Ptr(partial.ptr()), Arg::F64(divisor), ptr(out)],
    )
}

/// The logits and labels, the logits' rows and classes, and whether the labels are i64
/// (1) or i32 (0), checking the labels.
fn cross_entropy_operands<'a>(exec: &Exec<'a>) -> OpResult<(&'a CudaBuffer, &'a CudaBuffer, usize, usize, i32)> {
    let logits = exec.f32_input(0, "logits")?;
    let Some((&k, positions)) = logits.shape.split_last().filter(|(&k, _)| k > 0) else {
        return Err(KernelError::shape(
            "input logits",
            format!("expected [..., K] with K > 0, found {:?}", logits.shape),
        )
        .into());
    };
    let labels = exec.input(1, "labels")?;
    check_shape(labels, positions, "input labels")?;
    let wide = match labels.dtype {
        DType::DtypeI64 => 1,
        _ => {
            check_dtype(labels, DType::DtypeI32, "input labels")?;
            0
        }
    };
    Ok((logits, labels, numel(positions), k, wide))
}

/// What SoftmaxCrossEntropy(Grad) over `rows` positions divides by: attribute `positions`
/// (a part of a batch split is told the whole count), or `rows`; at least 1.
fn cross_entropy_divisor(exec: &Exec<'_>, rows: usize) -> OpResult<f64> {
    let positions = exec.attrs.int("positions", rows as i64)?;
    if positions < 0 {
        return Err(KernelError::invalid(format!("attribute positions {positions} is negative")).into());
    }
    Ok(positions.max(1) as f64)
}

/// SoftmaxCrossEntropy: Σ over positions of −log softmax(logits)[label], divided by the
/// positions (or attribute `positions`).
fn cross_entropy(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (logits, labels, rows, k, wide) = cross_entropy_operands(exec)?;
    let loss = exec.output(0)?;
    let per_row = exec.scratch_part(Part::Rows)?;
    if per_row.bytes() != rows as u64 * 8 {
        return Err(KernelError::invalid(format!("{} bytes planned for {rows} rows", per_row.bytes())).into());
    }
    let flag = exec.error_flag()?;
    exec.launch_blocks(
        "xent_rows_f32",
        rows as u64,
        row_threads(k),
        &[
            Arg::I64(rows as i64),
            Arg::I64(k as i64),
            ptr(logits),
            ptr(labels),
            Arg::I32(wide),
            Arg::Ptr(per_row.ptr()),
            Arg::Ptr(flag.ptr()),
        ],
    )?;
    let divisor = cross_entropy_divisor(exec, rows)?;
    total(exec, SumMode::F64, rows as u64, [0, 0, per_row.ptr()], &loss, divisor)?;
    check_labels(exec, &flag, k)?;
    Ok(vec![loss])
}

/// The CPU's error when a kernel flagged a label outside [0, K): the first such position
/// and its label, read back from the device.
fn check_labels(exec: &Exec<'_>, flag: &DeviceBlock, k: usize) -> OpResult<()> {
    if !exec.raised(flag)? {
        return Ok(());
    }
    let labels = exec.host_value(1, "labels")?.to_i64s("input labels")?;
    let outside = labels.iter().enumerate().find(|(_, &l)| usize::try_from(l).map_or(true, |c| c >= k));
    let message = match outside {
        Some((p, label)) => format!("label {label} at position {p} is outside [0, {k})"),
        None => format!("a label is outside [0, {k})"),
    };
    Err(KernelError::invalid(message).into())
}

/// SoftmaxCrossEntropyGrad: (softmax − onehot) / positions (or attribute `positions`).
fn cross_entropy_grad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (logits, labels, rows, k, wide) = cross_entropy_operands(exec)?;
    let divisor = cross_entropy_divisor(exec, rows)?;
    let dx = exec.output(0)?;
    let flag = exec.error_flag()?;
    exec.launch_blocks(
        "xent_grad_f32",
        rows as u64,
        row_threads(k),
        &[
            Arg::I64(rows as i64),
            Arg::I64(k as i64),
            Arg::F64(divisor),
            ptr(logits),
            ptr(labels),
            Arg::I32(wide),
            ptr(&dx),
            Arg::Ptr(flag.ptr()),
        ],
    )?;
    check_labels(exec, &flag, k)?;
    Ok(vec![dx])
}

/// MeanSquaredError's prediction and target, checked to have the same shape.
fn mse_operands<'a>(exec: &Exec<'a>) -> OpResult<(&'a CudaBuffer, &'a CudaBuffer)> {
    let (p, t) = (exec.f32_input(0, "prediction")?, exec.f32_input(1, "target")?);
    check_shape(t, &p.shape, "input target")?;
    Ok((p, t))
}

fn mean_squared_error(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (p, t) = mse_operands(exec)?;
    let loss = exec.output(0)?;
    let n = p.numel() as u64;
    total(exec, SumMode::SquaredDiff, n, [p.ptr(), t.ptr(), 0], &loss, n.max(1) as f64)?;
    Ok(vec![loss])
}

fn mean_squared_error_grad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (p, t) = mse_operands(exec)?;
    let dp = exec.output(0)?;
    exec.launch(
        "mse_grad_f32",
        p.numel() as u64,
        &[count(p), Arg::F64(p.numel().max(1) as f64), ptr(p), ptr(t), ptr(&dp)],
    )?;
    Ok(vec![dp])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduce_params_split_kept_and_reduced_axes() {
        // [2, 3, 4] reduced over axis 1: kept (2, 4) with strides (12, 1), reduced 3 by 4.
        let p = ReduceParams::new(&[2, 3, 4], &[false, true, false]).unwrap();
        assert_eq!((p.out_rank, p.out_count, p.red_rank, p.red_count), (2, 8, 1, 3));
        assert_eq!((&p.out_dims[..2], &p.out_strides[..2]), (&[2, 4][..], &[12, 1][..]));
        assert_eq!((p.red_dims[0], p.red_strides[0]), (3, 4));
        // Channels of [N, C, H, W]: the reduced N and H·W do not merge (C lies between).
        let p = ReduceParams::new(&[8, 16, 5, 5], &[true, false, true, true]).unwrap();
        assert_eq!((p.out_rank, p.out_count, p.red_rank, p.red_count), (1, 16, 2, 200));
        assert_eq!((&p.red_dims[..2], &p.red_strides[..2]), (&[8, 25][..], &[400, 1][..]));
        // Everything reduced: one output.
        let p = ReduceParams::new(&[3, 5], &[true, true]).unwrap();
        assert_eq!((p.out_rank, p.out_count, p.red_rank, p.red_count), (0, 1, 1, 15));
        assert_eq!(row_threads(1), 32);
        assert_eq!(row_threads(50), 64);
        assert_eq!(row_threads(50_000), 256);
    }
}
