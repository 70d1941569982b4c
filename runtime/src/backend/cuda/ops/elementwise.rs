//! Elementwise ops (kernels in `elementwise.cu` and `training.cu`): unary maps and their
//! gradients, broadcast arithmetic, comparisons, logic, Where, Cast, dropout and the
//! optimizer updates.

use super::{check_dtype, check_shape, count, ptr, Arg, Exec, OpResult, Table};
use crate::attrs::Attrs;
use crate::backend::cuda::layout::{broadcast, contiguous, Layout, View};
use crate::backend::cuda::CudaBuffer;
use crate::error::KernelError;
use crate::geometry::layout::broadcast_shapes;
use crate::tensor::{dtype_name, dtype_size};
use cudarc::driver::DeviceRepr;
use lms_proto::lms::DType;
use lms_proto::ops::scratch::Part;

/// The ONNX elementwise ops.
pub(super) const ONNX: Table = &[
    ("Abs", |e| unary(e, Unary::Abs)),
    ("Add", |e| arithmetic(e, Binary::Add)),
    ("And", |e| logic(e, 0)),
    ("Cast", cast),
    ("Ceil", |e| unary(e, Unary::Ceil)),
    ("Clip", clip),
    ("Cos", |e| unary(e, Unary::Cos)),
    ("Div", |e| arithmetic(e, Binary::Div)),
    ("Elu", |e| unary(e, Unary::Elu)),
    ("Equal", |e| compare(e, Compare::Equal)),
    ("Erf", |e| unary(e, Unary::Erf)),
    ("Exp", |e| unary(e, Unary::Exp)),
    ("Floor", |e| unary(e, Unary::Floor)),
    ("Round", |e| unary(e, Unary::Round)),
    ("Gelu", gelu),
    ("Greater", |e| compare(e, Compare::Greater)),
    ("GreaterOrEqual", |e| compare(e, Compare::GreaterOrEqual)),
    ("HardSigmoid", |e| unary(e, Unary::HardSigmoid)),
    ("HardSwish", |e| unary(e, Unary::HardSwish)),
    ("IsInf", is_inf),
    ("IsNaN", is_nan),
    ("LeakyRelu", |e| unary(e, Unary::LeakyRelu)),
    ("Less", |e| compare(e, Compare::Less)),
    ("LessOrEqual", |e| compare(e, Compare::LessOrEqual)),
    ("Log", |e| unary(e, Unary::Log)),
    ("Mish", |e| unary(e, Unary::Mish)),
    ("Max", |e| variadic(e, Binary::Max)),
    ("Mean", |e| variadic(e, Binary::Add)),
    ("Min", |e| variadic(e, Binary::Min)),
    ("Mul", |e| arithmetic(e, Binary::Mul)),
    ("Neg", |e| unary(e, Unary::Neg)),
    ("Not", not),
    ("Or", |e| logic(e, 1)),
    ("PRelu", prelu),
    ("Pow", |e| arithmetic(e, Binary::Pow)),
    ("Reciprocal", |e| unary(e, Unary::Reciprocal)),
    ("Relu", |e| unary(e, Unary::Relu)),
    ("Selu", |e| unary(e, Unary::Selu)),
    ("Sigmoid", |e| unary(e, Unary::Sigmoid)),
    ("Sin", |e| unary(e, Unary::Sin)),
    ("Softplus", |e| unary(e, Unary::Softplus)),
    ("Softsign", |e| unary(e, Unary::Softsign)),
    ("Sqrt", |e| unary(e, Unary::Sqrt)),
    ("Sub", |e| arithmetic(e, Binary::Sub)),
    ("Sum", |e| variadic(e, Binary::Add)),
    ("Tanh", |e| unary(e, Unary::Tanh)),
    ("Where", where_),
    ("Xor", |e| logic(e, 2)),
];

/// The `lms` elementwise ops.
pub(super) const LMS: Table = &[
    ("AdamStep", adam_step),
    ("AdamUpdate", adam_update),
    ("DropoutGrad", dropout_grad),
    ("DropoutTrain", dropout_train),
    ("MomentumUpdate", momentum_update),
    ("PReluGrad", prelu_grad),
    ("PowGrad", pow_grad),
    ("SgdUpdate", sgd_update),
    ("UnaryGrad", unary_grad),
];

/// Unary op codes (`enum UnaryOp` in elementwise.cu).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub(super) enum Unary {
    Relu = 0,
    Neg,
    Abs,
    LeakyRelu,
    Sigmoid,
    Tanh,
    Elu,
    Selu,
    Softplus,
    Softsign,
    HardSigmoid,
    GeluErf,
    GeluTanh,
    Exp,
    Log,
    Reciprocal,
    Erf,
    Sqrt,
    Floor,
    Ceil,
    Clip,
    DivBy,
    Cos,
    Sin,
    HardSwish,
    Round,
    Mish,
}

/// The unary maps `UnaryGrad` differentiates, by op: `unary_grad_f32` evaluates the
/// derivative of the map's code (`unary_derivative` in elementwise.cu).
const DIFFERENTIABLE: &[(&str, Unary)] = &[
    ("Abs", Unary::Abs),
    ("Clip", Unary::Clip),
    ("Cos", Unary::Cos),
    ("Elu", Unary::Elu),
    ("Erf", Unary::Erf),
    ("Exp", Unary::Exp),
    ("HardSigmoid", Unary::HardSigmoid),
    ("HardSwish", Unary::HardSwish),
    ("LeakyRelu", Unary::LeakyRelu),
    ("Log", Unary::Log),
    ("Mish", Unary::Mish),
    ("Neg", Unary::Neg),
    ("Reciprocal", Unary::Reciprocal),
    ("Relu", Unary::Relu),
    ("Selu", Unary::Selu),
    ("Sigmoid", Unary::Sigmoid),
    ("Sin", Unary::Sin),
    ("Softplus", Unary::Softplus),
    ("Softsign", Unary::Softsign),
    ("Sqrt", Unary::Sqrt),
    ("Tanh", Unary::Tanh),
];

/// Binary op codes (`enum BinaryOp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub(super) enum Binary {
    Add = 0,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    PRelu,
}

/// Comparison op codes (`enum CompareOp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
enum Compare {
    Equal = 0,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

/// The layout of an elementwise op writing `out` (contiguous) and reading operands of
/// the given shapes broadcast to it.
pub(super) fn broadcast_layout(out: &[usize], operands: &[(&[usize], &str)]) -> OpResult<Layout> {
    let mut strides = vec![contiguous(out)];
    for (shape, what) in operands {
        strides.push(broadcast(shape, out, what)?);
    }
    let views: Vec<View<'_>> = strides.iter().map(|s| View::new(s)).collect();
    Ok(Layout::new(out, &views)?)
}

/// Runs the unary kernel `op` with parameters (a, b) from `x` into `y` (may be `x`).
pub(super) fn launch_unary(exec: &Exec<'_>, op: Unary, x: &CudaBuffer, y: &CudaBuffer, a: f32, b: f32) -> OpResult<()> {
    exec.launch(
        "unary_f32",
        x.numel() as u64,
        &[Arg::I32(op as i32), count(x), ptr(x), ptr(y), Arg::F32(a), Arg::F32(b)],
    )
}

/// A unary f32 op with its attributes (defaults as in ONNX).
fn unary(exec: &Exec<'_>, op: Unary) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.f32_input(0, "X")?;
    let (a, b) = unary_params(op, &exec.attrs)?;
    let y = exec.output(0)?;
    launch_unary(exec, op, x, &y, a, b)?;
    Ok(vec![y])
}

/// The parameters (a, b) a unary map and its derivative read, from the node's attributes
/// with ONNX's defaults: alpha as a, Selu's gamma and HardSigmoid's beta as b, and for an
/// `UnaryGrad` of Clip its `min` and `max` (the forward Clip reads its inputs).
fn unary_params(op: Unary, attrs: &Attrs<'_>) -> OpResult<(f32, f32)> {
    Ok(match op {
        Unary::LeakyRelu => (attrs.float("alpha", 0.01)?, 0.0),
        Unary::Elu => (attrs.float("alpha", 1.0)?, 0.0),
        Unary::Selu => (attrs.float("alpha", 1.673_263_2)?, attrs.float("gamma", 1.050_701)?),
        Unary::HardSigmoid => (attrs.float("alpha", 0.2)?, attrs.float("beta", 0.5)?),
        Unary::Clip => (attrs.float("min", f32::NEG_INFINITY)?, attrs.float("max", f32::INFINITY)?),
        _ => (0.0, 0.0),
    })
}

fn gelu(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    match exec.attrs.string("approximate", "none")? {
        "none" => unary(exec, Unary::GeluErf),
        "tanh" => unary(exec, Unary::GeluTanh),
        other => Err(KernelError::attr("approximate", format!("unknown value `{other}`")).into()),
    }
}

/// Clip with bounds from attributes (opset < 11) or scalar inputs; f32.
fn clip(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.f32_input(0, "X")?;
    let bound = |attr: &str, slot: usize, default: f32| -> OpResult<f32> {
        if exec.opt_input(slot).is_some() {
            let v = exec.host_value(slot, attr)?;
            return match v.as_f32(&format!("input {attr}"))? {
                [b] => Ok(*b),
                _ => Err(KernelError::shape(format!("input {attr}"), "expected a scalar").into()),
            };
        }
        Ok(exec.attrs.float_opt(attr)?.unwrap_or(default))
    };
    let (lo, hi) = (bound("min", 1, f32::NEG_INFINITY)?, bound("max", 2, f32::INFINITY)?);
    let y = exec.output(0)?;
    launch_unary(exec, Unary::Clip, x, &y, lo, hi)?;
    Ok(vec![y])
}

fn not(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.typed_input(0, "X", DType::DtypeBool)?;
    let y = exec.output(0)?;
    exec.launch("not_bool", x.numel() as u64, &[count(x), ptr(x), ptr(&y)])?;
    Ok(vec![y])
}

fn is_nan(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    classify(exec, 1, 0, 0)
}

/// IsInf: +inf where `detect_positive` (1), −inf where `detect_negative` (1).
fn is_inf(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let positive = exec.attrs.int("detect_positive", 1)? != 0;
    let negative = exec.attrs.int("detect_negative", 1)? != 0;
    classify(exec, 0, i32::from(positive), i32::from(negative))
}

/// A bool of X's shape: whether each element is NaN (`nan`), +inf (`positive`) or −inf (`negative`).
fn classify(exec: &Exec<'_>, nan: i32, positive: i32, negative: i32) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.f32_input(0, "X")?;
    let y = exec.output(0)?;
    exec.launch(
        "classify_f32",
        x.numel() as u64,
        &[count(x), ptr(x), ptr(&y), Arg::I32(nan), Arg::I32(positive), Arg::I32(negative)],
    )?;
    Ok(vec![y])
}

/// The binary kernel for operands of `dtype`.
fn binary_kernel(dtype: DType, op: Binary) -> OpResult<&'static str> {
    match (dtype, op) {
        (DType::DtypeF32, _) => Ok("binary_f32"),
        (DType::DtypeI64, op) if !matches!(op, Binary::Pow | Binary::PRelu) => Ok("binary_i64"),
        (DType::DtypeI32, op) if !matches!(op, Binary::Pow | Binary::PRelu) => Ok("binary_i32"),
        (other, _) => Err(KernelError::NoCudaKernel(format!("{op:?} on {}", dtype_name(other))).into()),
    }
}

/// y = a op b with broadcasting; `y` has the broadcast shape. Integer kernels wrap like
/// the CPU's; an integer division by zero is the CPU's error (a flag the kernel sets).
pub(super) fn launch_binary(
    exec: &Exec<'_>,
    op: Binary,
    a: &CudaBuffer,
    b: &CudaBuffer,
    y: &CudaBuffer,
) -> OpResult<()> {
    check_dtype(b, a.dtype, "input B")?;
    let layout = broadcast_layout(&y.shape, &[(&a.shape, "input A"), (&b.shape, "input B")])?;
    let kernel = binary_kernel(a.dtype, op)?;
    let mut args = vec![Arg::I32(op as i32), Arg::layout(&layout), ptr(y), ptr(a), ptr(b)];
    if a.dtype == DType::DtypeF32 {
        return exec.launch(kernel, y.numel() as u64, &args);
    }
    let flag = if op == Binary::Div { Some(exec.error_flag()?) } else { None };
    args.push(Arg::Ptr(flag.as_ref().map_or(0, |f| f.ptr())));
    exec.launch(kernel, y.numel() as u64, &args)?;
    match flag {
        Some(flag) if exec.raised(&flag)? => Err(KernelError::invalid("integer division by zero").into()),
        _ => Ok(()),
    }
}

fn arithmetic(exec: &Exec<'_>, op: Binary) -> OpResult<Vec<CudaBuffer>> {
    let (a, b) = (exec.input(0, "A")?, exec.input(1, "B")?);
    let y = exec.output(0)?;
    launch_binary(exec, op, a, b, &y)?;
    Ok(vec![y])
}

/// PRelu: before opset 7 a slope with fewer axes aligns with the channel axis 1.
fn prelu(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (x, slope) = (exec.f32_input(0, "X")?, exec.f32_input(1, "slope")?);
    let mut slope = slope.clone();
    if exec.opset < 7
        && slope.shape.len() < x.shape.len()
        && x.shape.get(1..1 + slope.shape.len()) == Some(&slope.shape[..])
    {
        let mut shape = slope.shape.clone();
        shape.resize(x.shape.len() - 1, 1);
        slope = slope.view(&shape);
    }
    let y = exec.output(0)?;
    launch_binary(exec, Binary::PRelu, x, &slope, &y)?;
    Ok(vec![y])
}

/// Sum, Max, Min, Mean over any number of inputs, folded left to right with
/// broadcasting into Y (each partial result broadcast to Y's shape, so no temporary);
/// Mean divides the sum by the count.
fn variadic(exec: &Exec<'_>, op: Binary) -> OpResult<Vec<CudaBuffer>> {
    let first = exec.input(0, "data_0")?;
    let n = exec.inputs.len();
    let mean = exec.op == "Mean";
    if n == 1 && !mean {
        return Ok(vec![first.view(&first.shape)]);
    }
    let y = exec.output(0)?;
    let mut shape = first.shape.clone();
    for i in 1..n {
        let next = exec.input(i, &format!("data_{i}"))?;
        shape = broadcast_shapes(&shape, &next.shape, &format!("input data_{i}"))?;
    }
    check_shape(&y, &shape, "output 0")?;
    // Y = data_0 op data_1, then Y = Y op data_i: elementwise, so in place.
    for i in 1..n {
        let acc = if i == 1 { first } else { &y };
        launch_binary(exec, op, acc, exec.input(i, &format!("data_{i}"))?, &y)?;
    }
    if mean {
        check_dtype(&y, DType::DtypeF32, "input data_0")?;
        if n == 1 {
            launch_unary(exec, Unary::DivBy, first, &y, 1.0, 0.0)?;
        } else {
            launch_unary(exec, Unary::DivBy, &y, &y, n as f32, 0.0)?;
        }
    }
    Ok(vec![y])
}

fn compare(exec: &Exec<'_>, op: Compare) -> OpResult<Vec<CudaBuffer>> {
    let (a, b) = (exec.input(0, "A")?, exec.input(1, "B")?);
    check_dtype(b, a.dtype, "input B")?;
    let kernel = match a.dtype {
        DType::DtypeF32 => "compare_f32",
        DType::DtypeI64 => "compare_i64",
        DType::DtypeI32 => "compare_i32",
        DType::DtypeBool | DType::DtypeU8 if op == Compare::Equal => "compare_u8",
        other => return Err(KernelError::NoCudaKernel(format!("{op:?} on {}", dtype_name(other))).into()),
    };
    let y = exec.output(0)?;
    let layout = broadcast_layout(&y.shape, &[(&a.shape, "input A"), (&b.shape, "input B")])?;
    exec.launch(kernel, y.numel() as u64, &[Arg::I32(op as i32), Arg::layout(&layout), ptr(&y), ptr(a), ptr(b)])?;
    Ok(vec![y])
}

/// And (0), Or (1), Xor (2) on bool operands.
fn logic(exec: &Exec<'_>, op: i32) -> OpResult<Vec<CudaBuffer>> {
    let a = exec.typed_input(0, "A", DType::DtypeBool)?;
    let b = exec.typed_input(1, "B", DType::DtypeBool)?;
    let y = exec.output(0)?;
    let layout = broadcast_layout(&y.shape, &[(&a.shape, "input A"), (&b.shape, "input B")])?;
    exec.launch("logic_bool", y.numel() as u64, &[Arg::I32(op), Arg::layout(&layout), ptr(&y), ptr(a), ptr(b)])?;
    Ok(vec![y])
}

/// The kernel of `family` for elements of `dtype`: `family_1`, `_2`, `_4` or `_8`.
pub(super) fn by_size(family: &'static [&'static str; 4], dtype: DType) -> OpResult<&'static str> {
    match dtype_size(dtype) {
        Some(1) => Ok(family[0]),
        Some(2) => Ok(family[1]),
        Some(4) => Ok(family[2]),
        Some(8) => Ok(family[3]),
        _ => Err(KernelError::unsupported(format!("dtype {} on the CUDA backend", dtype_name(dtype))).into()),
    }
}

fn where_(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let c = exec.typed_input(0, "condition", DType::DtypeBool)?;
    let (x, y) = (exec.input(1, "X")?, exec.input(2, "Y")?);
    check_dtype(y, x.dtype, "input Y")?;
    let out = exec.output(0)?;
    let layout =
        broadcast_layout(&out.shape, &[(&c.shape, "input condition"), (&x.shape, "input X"), (&y.shape, "input Y")])?;
    exec.launch(
        by_size(&["where_1", "where_2", "where_4", "where_8"], x.dtype)?,
        out.numel() as u64,
        &[Arg::layout(&layout), ptr(&out), ptr(c), ptr(x), ptr(y)],
    )?;
    Ok(vec![out])
}

/// The code of a dtype in `enum DtypeCode` (elementwise.cu).
fn dtype_code(dtype: DType) -> OpResult<i32> {
    Ok(match dtype {
        DType::DtypeF32 => 0,
        DType::DtypeF64 => 1,
        DType::DtypeI64 => 2,
        DType::DtypeI32 => 3,
        DType::DtypeBool => 4,
        DType::DtypeU8 => 5,
        DType::DtypeI8 => 6,
        other => return Err(KernelError::NoCudaKernel(format!("Cast from or to {}", dtype_name(other))).into()),
    })
}

fn cast(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.input(0, "input")?;
    let y = exec.output(0)?;
    if x.dtype == y.dtype {
        return Ok(vec![x.view(&y.shape)]);
    }
    exec.launch(
        "cast",
        x.numel() as u64,
        &[count(x), Arg::I32(dtype_code(x.dtype)?), Arg::I32(dtype_code(y.dtype)?), ptr(x), ptr(&y)],
    )?;
    Ok(vec![y])
}

/// UnaryGrad: dX = dY · f′(X), f named by attribute `op`.
fn unary_grad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (dy, x) = (exec.f32_input(0, "dY")?, exec.f32_input(1, "X")?);
    check_shape(dy, &x.shape, "input dY")?;
    let name = exec.attrs.string("op", "")?;
    let Some(&(_, op)) = DIFFERENTIABLE.iter().find(|(n, _)| *n == name) else {
        return Err(KernelError::attr("op", format!("`{name}` has no UnaryGrad")).into());
    };
    let (alpha, gamma) = unary_params(op, &exec.attrs)?;
    let dx = exec.output(0)?;
    exec.launch(
        "unary_grad_f32",
        x.numel() as u64,
        &[Arg::I32(op as i32), count(x), ptr(dy), ptr(x), ptr(&dx), Arg::F64(alpha.into()), Arg::F64(gamma.into())],
    )?;
    Ok(vec![dx])
}

/// PowGrad: dX = dY · P · X^(P−1) over the broadcast of X and P, summed back to X.
fn pow_grad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (dy, x, p) = (exec.f32_input(0, "dY")?, exec.f32_input(1, "X")?, exec.f32_input(2, "P")?);
    let shape = broadcast_shapes(&x.shape, &p.shape, "inputs X, P")?;
    check_shape(dy, &shape, "input dY")?;
    let dx = exec.output(0)?;
    let full = match shape == x.shape {
        true => dx.clone(),
        false => exec.scratch_buffer(Part::Broadcast, DType::DtypeF32, &shape)?,
    };
    let layout = broadcast_layout(&shape, &[(&dy.shape, "input dY"), (&x.shape, "input X"), (&p.shape, "input P")])?;
    exec.launch("pow_grad_f32", full.numel() as u64, &[Arg::layout(&layout), ptr(&full), ptr(dy), ptr(x), ptr(p)])?;
    if shape != x.shape {
        super::reduce::sum_to(exec, &full, &dx)?;
    }
    Ok(vec![dx])
}

/// PReluGrad: dX elementwise over X's shape, and dSlope with one thread per slope
/// element summing, in X's order and in double as the CPU backend, over the X positions
/// broadcast to it (no atomics, no scratch).
fn prelu_grad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (dy, x, slope) = (exec.f32_input(0, "dY")?, exec.f32_input(1, "X")?, exec.f32_input(2, "slope")?);
    check_shape(dy, &x.shape, "input dY")?;
    let (dx, dslope) = (exec.output(0)?, exec.output(1)?);
    check_shape(&dslope, &slope.shape, "output dSlope")?;
    let along = crate::backend::cuda::layout::broadcast(&slope.shape, &x.shape, "input slope")?;
    let xs = contiguous(&x.shape);
    let data = Layout::new(&x.shape, &[View::new(&xs), View::new(&xs), View::new(&xs), View::new(&along)])?;
    exec.launch("prelu_grad_data_f32", x.numel() as u64, &[Arg::layout(&data), ptr(&dx), ptr(dy), ptr(x), ptr(slope)])?;
    // Axes where the slope (right-aligned) is longer than 1 index its elements; the rest are summed.
    let lead = x.shape.len() - slope.shape.len();
    let kept = |d: usize| d >= lead && slope.shape[d - lead] != 1;
    let own: Vec<usize> = (0..x.shape.len()).map(|d| if kept(d) { x.shape[d] } else { 1 }).collect();
    let summed: Vec<usize> = (0..x.shape.len()).map(|d| if kept(d) { 1 } else { x.shape[d] }).collect();
    let outer = Layout::new(&own, &[View::new(&contiguous(&own)), View::new(&xs)])?;
    let inner = Layout::new(&summed, &[View::new(&xs)])?;
    exec.launch(
        "prelu_grad_slope_f32",
        dslope.numel() as u64,
        &[Arg::layout(&outer), Arg::layout(&inner), ptr(&dslope), ptr(dy), ptr(x)],
    )?;
    Ok(vec![dx, dslope])
}

/// The dropout ratio: attribute `ratio` (0.5), in [0, 1).
fn ratio(exec: &Exec<'_>) -> OpResult<f64> {
    let ratio = exec.float_attr("ratio", 0.5)?;
    if (0.0..1.0).contains(&ratio) {
        Ok(ratio)
    } else {
        Err(KernelError::attr("ratio", format!("{ratio} is outside [0, 1)")).into())
    }
}

/// The ChaCha8 key of a dropout node (`struct ChaChaKey` in training.cu): the
/// little-endian words of (run seed, node seed, step, "dropout\0"), as the CPU backend
/// seeds its ChaCha8Rng.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChaChaKey {
    words: [u32; 8],
}

// SAFETY: `ChaChaKey` is `repr(C)` plain data mirroring the CUDA struct.
unsafe impl DeviceRepr for ChaChaKey {}
// The CUDA struct: 8 u32s.
const _: () = assert!(std::mem::size_of::<ChaChaKey>() == 32);

impl ChaChaKey {
    /// The key of (run seed, node seed, step).
    pub(crate) fn new(run_seed: u64, seed: i64, step: u64) -> ChaChaKey {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&run_seed.to_le_bytes());
        bytes[8..16].copy_from_slice(&seed.to_le_bytes());
        bytes[16..24].copy_from_slice(&step.to_le_bytes());
        bytes[24..].copy_from_slice(b"dropout\0");
        let mut words = [0u32; 8];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(4)) {
            *w = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        }
        ChaChaKey { words }
    }
}

/// DropoutTrain: the CPU backend's masks (ChaCha8 from run seed, node seed and step).
fn dropout_train(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.f32_input(0, "X")?;
    let ratio = ratio(exec)?;
    let key = ChaChaKey::new(exec.context.run_seed, exec.attrs.int("seed", 0)?, exec.context.step);
    let y = exec.output(0)?;
    // An undeclared mask is the node's scratch (none for an empty X, with nothing to draw).
    let mask = match (exec.outputs.len() > 1, x.numel()) {
        (true, _) => exec.output(1)?,
        (false, 0) => return Ok(vec![y]),
        (false, _) => exec.scratch_buffer(Part::Mask, DType::DtypeBool, &x.shape)?,
    };
    check_dtype(&mask, DType::DtypeBool, "output mask")?;
    exec.launch(
        "dropout_f32",
        (x.numel() as u64).div_ceil(8),
        &[count(x), Arg::params(&key), Arg::F64(ratio), Arg::F64(1.0 - ratio), ptr(x), ptr(&y), ptr(&mask)],
    )?;
    let mut outs = vec![y, mask];
    outs.truncate(exec.outputs.len());
    Ok(outs)
}

fn dropout_grad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let dy = exec.f32_input(0, "dY")?;
    let mask = exec.typed_input(1, "mask", DType::DtypeBool)?;
    check_shape(mask, &dy.shape, "input mask")?;
    let keep = 1.0 - ratio(exec)?;
    let dx = exec.output(0)?;
    exec.launch("dropout_grad_f32", dy.numel() as u64, &[count(dy), Arg::F64(keep), ptr(dy), ptr(mask), ptr(&dx)])?;
    Ok(vec![dx])
}

/// Input W and the other named inputs, all f32 of W's shape.
fn optimizer_operands<'a>(exec: &Exec<'a>, names: &[&str]) -> OpResult<Vec<&'a CudaBuffer>> {
    let w = exec.f32_input(0, "W")?;
    let mut operands = vec![w];
    for (i, name) in names.iter().enumerate() {
        let t = exec.f32_input(i + 1, name)?;
        check_shape(t, &w.shape, &format!("input {name}"))?;
        operands.push(t);
    }
    Ok(operands)
}

fn sgd_update(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let lr = exec.required_float("lr")?;
    let v = optimizer_operands(exec, &["dW"])?;
    let w = exec.output(0)?;
    exec.launch("sgd_f32", w.numel() as u64, &[count(&w), Arg::F64(lr), ptr(v[0]), ptr(v[1]), ptr(&w)])?;
    Ok(vec![w])
}

fn momentum_update(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (lr, momentum) = (exec.required_float("lr")?, exec.required_float("momentum")?);
    let v = optimizer_operands(exec, &["V", "dW"])?;
    let (w, vel) = (exec.output(0)?, exec.output(1)?);
    exec.launch(
        "momentum_f32",
        w.numel() as u64,
        &[count(&w), Arg::F64(lr), Arg::F64(momentum), ptr(v[0]), ptr(v[1]), ptr(v[2]), ptr(&w), ptr(&vel)],
    )?;
    Ok(vec![w, vel])
}

fn adam_step(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let t = exec.f32_input(0, "t")?;
    let next = exec.output(0)?;
    exec.launch("adam_step_f32", t.numel() as u64, &[count(t), ptr(t), ptr(&next)])?;
    Ok(vec![next])
}

fn adam_update(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let lr = exec.required_float("lr")?;
    let (beta1, beta2) = (exec.float_attr("beta1", 0.9)?, exec.float_attr("beta2", 0.999)?);
    let eps = exec.float_attr("epsilon", 1e-8)?;
    let v = optimizer_operands(exec, &["M", "V", "dW"])?;
    let t = exec.f32_input(4, "t")?;
    if t.numel() != 1 {
        return Err(KernelError::shape("input t", "expected a scalar").into());
    }
    let (w, m, vv) = (exec.output(0)?, exec.output(1)?, exec.output(2)?);
    exec.launch(
        "adam_f32",
        w.numel() as u64,
        &[
            count(&w),
            Arg::F64(lr),
            Arg::F64(beta1),
            Arg::F64(beta2),
            Arg::F64(eps),
            ptr(t),
            ptr(v[0]),
            ptr(v[1]),
            ptr(v[2]),
            ptr(v[3]),
            ptr(&w),
            ptr(&m),
            ptr(&vv),
        ],
    )?;
    Ok(vec![w, m, vv])
}

#[cfg(test)]
mod tests {
    use super::*;
    use lms_proto::ops::registry::{self, GradientForm};
    use rand_chacha::ChaCha8Rng;
    use rand_core::{RngCore, SeedableRng};
    use std::collections::BTreeSet;

    /// `UnaryGrad` evaluates a derivative for exactly the maps whose definitions state a
    /// unary gradient, and for Clip (whose rule reads its bounds from its inputs).
    #[test]
    fn differentiable_maps_are_those_of_the_stated_unary_gradients() {
        let stated: BTreeSet<&str> = registry::all()
            .filter(|id| matches!(id.def().gradient, Some(GradientForm::Unary { .. })))
            .map(|id| id.name())
            .chain(["Clip"])
            .collect();
        let differentiable: BTreeSet<&str> = DIFFERENTIABLE.iter().map(|&(name, _)| name).collect();
        assert_eq!(differentiable, stated);
    }

    /// ChaCha8 block `counter` under `key`, as `chacha8_block` in training.cu computes it.
    fn chacha8_block(key: &ChaChaKey, counter: u64) -> [u32; 16] {
        let mut s = [0u32; 16];
        s[..4].copy_from_slice(&[0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574]);
        s[4..12].copy_from_slice(&key.words);
        s[12] = counter as u32;
        s[13] = (counter >> 32) as u32;
        let mut x = s;
        let quarter = |x: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize| {
            x[a] = x[a].wrapping_add(x[b]);
            x[d] = (x[d] ^ x[a]).rotate_left(16);
            x[c] = x[c].wrapping_add(x[d]);
            x[b] = (x[b] ^ x[c]).rotate_left(12);
            x[a] = x[a].wrapping_add(x[b]);
            x[d] = (x[d] ^ x[a]).rotate_left(8);
            x[c] = x[c].wrapping_add(x[d]);
            x[b] = (x[b] ^ x[c]).rotate_left(7);
        };
        for _ in 0..4 {
            quarter(&mut x, 0, 4, 8, 12);
            quarter(&mut x, 1, 5, 9, 13);
            quarter(&mut x, 2, 6, 10, 14);
            quarter(&mut x, 3, 7, 11, 15);
            quarter(&mut x, 0, 5, 10, 15);
            quarter(&mut x, 1, 6, 11, 12);
            quarter(&mut x, 2, 7, 8, 13);
            quarter(&mut x, 3, 4, 9, 14);
        }
        std::array::from_fn(|i| x[i].wrapping_add(s[i]))
    }

    /// The kernel's stream (block b = elements 8b..8b+8, two words each, low word first)
    /// is the CPU backend's ChaCha8Rng stream, so GPU dropout masks equal CPU ones.
    #[test]
    fn dropout_stream_matches_the_cpu_backends_chacha8() {
        let key = ChaChaKey::new(7, -3, 12);
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&7u64.to_le_bytes());
        seed[8..16].copy_from_slice(&(-3i64).to_le_bytes());
        seed[16..24].copy_from_slice(&12u64.to_le_bytes());
        seed[24..].copy_from_slice(b"dropout\0");
        let mut rng = ChaCha8Rng::from_seed(seed);
        for e in 0..100u64 {
            let words = chacha8_block(&key, e / 8);
            let k = (e % 8) as usize * 2;
            let ours = (u64::from(words[k + 1]) << 32) | u64::from(words[k]);
            assert_eq!(ours, rng.next_u64(), "element {e}");
        }
    }

    /// The names of `enum NAME { ... }` in `source`, without their prefix, lower case and
    /// without underscores.
    fn c_enum(source: &str, name: &str) -> Vec<String> {
        let body = source
            .split(&format!("enum {name} {{"))
            .nth(1)
            .and_then(|rest| rest.split('}').next())
            .unwrap_or_else(|| panic!("enum {name} not found"));
        body.split(',')
            .map(|v| v.split('=').next().unwrap_or("").trim())
            .filter(|v| !v.is_empty())
            .map(|v| v.split_once('_').map_or(v, |(_, rest)| rest).replace('_', "").to_lowercase())
            .collect()
    }

    /// The op codes of the Rust enums are the CUDA enums' values.
    #[test]
    fn op_codes_match_the_cuda_enums() {
        let source = include_str!("../../../../kernels/elementwise.cu");
        let lower = |v: &dyn std::fmt::Debug| format!("{v:?}").to_lowercase();
        let unary = [
            Unary::Relu,
            Unary::Neg,
            Unary::Abs,
            Unary::LeakyRelu,
            Unary::Sigmoid,
            Unary::Tanh,
            Unary::Elu,
            Unary::Selu,
            Unary::Softplus,
            Unary::Softsign,
            Unary::HardSigmoid,
            Unary::GeluErf,
            Unary::GeluTanh,
            Unary::Exp,
            Unary::Log,
            Unary::Reciprocal,
            Unary::Erf,
            Unary::Sqrt,
            Unary::Floor,
            Unary::Ceil,
            Unary::Clip,
            Unary::DivBy,
            Unary::Cos,
            Unary::Sin,
            Unary::HardSwish,
            Unary::Round,
            Unary::Mish,
        ];
        let names: Vec<String> = unary.iter().map(|v| lower(v)).collect();
        assert_eq!(names, c_enum(source, "UnaryOp"));
        assert!(unary.iter().enumerate().all(|(i, &v)| v as usize == i));
        let binary =
            [Binary::Add, Binary::Sub, Binary::Mul, Binary::Div, Binary::Pow, Binary::Max, Binary::Min, Binary::PRelu];
        let names: Vec<String> = binary.iter().map(|v| lower(v)).collect();
        assert_eq!(names, c_enum(source, "BinaryOp"));
        assert!(binary.iter().enumerate().all(|(i, &v)| v as usize == i));
        let compare = [Compare::Equal, Compare::Less, Compare::LessOrEqual, Compare::Greater, Compare::GreaterOrEqual];
        let names: Vec<String> = compare.iter().map(|v| lower(v)).collect();
        assert_eq!(names, c_enum(source, "CompareOp"));
        assert!(compare.iter().enumerate().all(|(i, &v)| v as usize == i));
        assert_eq!(c_enum(source, "LogicOp"), ["and", "or", "xor"]);
        assert_eq!(c_enum(source, "DtypeCode"), ["f32", "f64", "i64", "i32", "bool", "u8", "i8"]);
    }

    #[test]
    fn kernels_by_dtype() {
        assert_eq!(binary_kernel(DType::DtypeI64, Binary::Add).ok(), Some("binary_i64"));
        assert!(binary_kernel(DType::DtypeI64, Binary::Pow).is_err());
        assert!(binary_kernel(DType::DtypeF64, Binary::Add).is_err());
        let family = &["a", "b", "c", "d"];
        assert_eq!(by_size(family, DType::DtypeBool).ok(), Some("a"));
        assert_eq!(by_size(family, DType::DtypeI64).ok(), Some("d"));
        assert!(by_size(family, DType::DtypeBf16).is_err());
        assert_eq!(dtype_code(DType::DtypeI8).ok(), Some(6));
    }
}
