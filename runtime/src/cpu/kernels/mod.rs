//! Kernels of the CPU reference backend, one module per op family.
//!
//! [`run_op`] runs an op, by its [`OpId`], from a table indexed by op built once from the
//! families' tables (ONNX ops here, ops of the `lms` domain, `proto/OPS.md`, in those of
//! [`training`]) on host tensors, and checks that what it made has the dtypes and shapes the
//! graph declares; [`forward`] and [`lms`] run an op named by its type. Kernels are
//! single-threaded with a fixed accumulation order, so equal inputs give bit-identical
//! outputs. Float sums (reductions, norms, softmax, average pooling) accumulate in f64;
//! GEMM-based ops (MatMul, Gemm, Conv, ConvTranspose) accumulate in the tensor's type.

mod binary;
mod conv;
mod conv_transpose;
mod layout;
mod linalg;
mod movement;
mod norm;
mod num;
mod pad;
mod pool;
mod reduce;
mod shape_ops;
mod slice;
mod softmax;
mod training;
mod unary;

#[cfg(test)]
mod testutil;

use crate::attrs::Attrs;
use crate::backend::KernelContext;
use crate::error::{KernelError, Result};
use crate::tensor::{dtype_name, numel, HostTensor};
use lms_proto::contract::{LMS_DOMAIN, LMS_DOMAIN_VERSION};
use lms_proto::lms::DType;
use lms_proto::ops::{registry, OpId};
use std::sync::OnceLock;

/// A kernel: computes a node's outputs from its context.
type Kernel = fn(&Ctx<'_>) -> Result<Vec<HostTensor>>;

/// What a kernel sees of its node.
struct Ctx<'a> {
    /// The ONNX opset of the node's domain (selects defaults and attribute forms).
    opset: i64,
    /// The node's attributes.
    attrs: Attrs<'a>,
    /// Input slots; `None` or past the end is an absent optional input.
    inputs: &'a [Option<&'a HostTensor>],
    /// The dtype and shape the graph declares for each output.
    outputs: &'a [(DType, Vec<usize>)],
    /// The run's seed and step.
    exec: &'a KernelContext,
}

impl<'a> Ctx<'a> {
    /// Input `i`, named `name` in errors, which must be present.
    fn input(&self, i: usize, name: &str) -> Result<&'a HostTensor> {
        self.opt_input(i).ok_or_else(|| KernelError::MissingInput(name.to_string()))
    }

    /// Input `i` when present.
    fn opt_input(&self, i: usize) -> Option<&'a HostTensor> {
        self.inputs.get(i).copied().flatten()
    }

    /// The declared dtype of output `i`.
    fn out_dtype(&self, i: usize) -> Result<DType> {
        self.outputs.get(i).map(|o| o.0).ok_or_else(|| KernelError::invalid(format!("output {i} is not declared")))
    }

    /// The declared shape of output `i`.
    fn out_shape(&self, i: usize) -> Result<&'a [usize]> {
        self.outputs.get(i).map(|o| &o.1[..]).ok_or_else(|| KernelError::invalid(format!("output {i} is not declared")))
    }

    /// Checks a shape computed from input values against the declared output `i`
    /// before anything of that shape is allocated.
    fn check_declared(&self, i: usize, shape: &[usize]) -> Result<()> {
        match self.outputs.get(i) {
            Some((_, declared)) if declared == shape => Ok(()),
            Some((_, declared)) => Err(KernelError::shape(
                format!("output {i}"),
                format!("inputs give shape {shape:?}, the graph declares {declared:?}"),
            )),
            None => Err(KernelError::invalid(format!("output {i} is not declared"))),
        }
    }

    /// Ints given either as attribute `attr` (older opsets) or as input `i` (newer ones).
    fn ints_attr_or_input(&self, attr: &str, i: usize, name: &str) -> Result<Option<Vec<i64>>> {
        match (self.attrs.ints_opt(attr)?, self.opt_input(i)) {
            (Some(v), None) => Ok(Some(v.to_vec())),
            (None, Some(t)) => t.to_i64s(&format!("input {name}")).map(Some),
            (None, None) => Ok(None),
            (Some(_), Some(_)) => Err(KernelError::attr(attr, format!("given both as attribute and as input {name}"))),
        }
    }
}

/// Evaluates `$body` with `$T` bound to the numeric (non-bool) element type of `$dtype`.
macro_rules! dispatch_num {
    ($dtype:expr, $what:expr, $T:ident => $body:expr) => {
        $crate::tensor::dispatch_among!(
            $dtype, $T => $body,
            numeric,
            other => Err($crate::cpu::kernels::dtype_error($what, "a numeric type", other))
        )
    };
}

/// Evaluates `$body` with `$T` bound to the float element type of `$dtype`.
macro_rules! dispatch_float {
    ($dtype:expr, $what:expr, $T:ident => $body:expr) => {
        $crate::tensor::dispatch_among!(
            $dtype, $T => $body,
            [DtypeF32 => f32, DtypeF64 => f64],
            other => Err($crate::cpu::kernels::dtype_error($what, "f32 or f64", other))
        )
    };
}

use {dispatch_float, dispatch_num};

/// A dtype error about `what`.
fn dtype_error(what: &str, expected: &str, found: DType) -> KernelError {
    KernelError::Dtype { what: what.to_string(), expected: expected.to_string(), found: dtype_name(found).to_string() }
}

/// A family's table of (op type, kernel).
type Table = &'static [(&'static str, Kernel)];

/// Every family's table of (op type, kernel).
const FAMILIES: &[Table] = &[
    unary::KERNELS,
    binary::KERNELS,
    conv::KERNELS,
    conv_transpose::KERNELS,
    pool::KERNELS,
    linalg::KERNELS,
    norm::KERNELS,
    softmax::KERNELS,
    reduce::KERNELS,
    shape_ops::KERNELS,
    movement::KERNELS,
    slice::KERNELS,
    pad::KERNELS,
];

/// The op types (default ONNX domain) that [`forward`] implements, sorted.
pub fn supported_ops() -> Vec<&'static str> {
    op_names(FAMILIES)
}

/// The op types of the `lms` domain that [`lms`] implements, sorted.
pub fn supported_lms_ops() -> Vec<&'static str> {
    op_names(training::FAMILIES)
}

/// The op types of some families' tables, sorted.
fn op_names(families: &[Table]) -> Vec<&'static str> {
    let mut ops: Vec<_> = families.iter().flat_map(|f| f.iter().map(|(op, _)| *op)).collect();
    ops.sort_unstable();
    ops
}

/// Runs the forward kernel of `node_op` (an ONNX op type of the default domain).
///
/// `opset` is the node's ONNX opset: it picks attribute defaults and whether values
/// come as attributes or inputs (both forms are accepted where ONNX moved them).
/// `inputs` has one slot per node input, `None` for an absent optional one.
/// `outputs` gives the dtype and shape the graph declares for each output; the kernel
/// makes exactly these outputs, and any disagreement is an error naming the op.
pub fn forward(
    node_op: &str,
    opset: i64,
    attrs: &Attrs<'_>,
    inputs: &[Option<&HostTensor>],
    outputs: &[(DType, Vec<usize>)],
) -> Result<Vec<HostTensor>> {
    let op = registry::resolve("", node_op).ok_or_else(|| KernelError::UnknownOp(node_op.to_string()))?;
    run_op(op, opset, attrs, inputs, outputs, &KernelContext::default())
}

/// Runs the kernel of `node_op`, an op of the `lms` domain (`proto/OPS.md`): training-mode
/// forward ops, losses, gradients and optimizer updates.
///
/// `inputs` and `outputs` are as for [`forward`]; `exec` gives the run's seed and step,
/// from which random ops draw.
pub fn lms(
    node_op: &str,
    attrs: &Attrs<'_>,
    inputs: &[Option<&HostTensor>],
    outputs: &[(DType, Vec<usize>)],
    exec: &KernelContext,
) -> Result<Vec<HostTensor>> {
    let op = registry::resolve(LMS_DOMAIN, node_op).ok_or_else(|| KernelError::UnknownOp(node_op.to_string()))?;
    run_op(op, LMS_DOMAIN_VERSION, attrs, inputs, outputs, exec)
}

/// The CPU kernel of each op, indexed by [`OpId`] (built once from the families' tables).
fn kernel(op: OpId) -> Option<Kernel> {
    static TABLE: OnceLock<Vec<Option<Kernel>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = vec![None; registry::all().count()];
        for (domain, families) in [("", FAMILIES), (LMS_DOMAIN, training::FAMILIES)] {
            for &(name, kernel) in families.iter().flat_map(|f| f.iter()) {
                if let Some(op) = registry::resolve(domain, name) {
                    table[op.index()] = Some(kernel);
                }
            }
        }
        table
    })[op.index()]
}

/// Runs the kernel of `op` (a node's op, resolved when its program was loaded): checks the
/// inputs, runs it and checks its outputs. `opset` is the node's opset, the others are as
/// for [`forward`] and [`lms`].
pub fn run_op(
    op: OpId,
    opset: i64,
    attrs: &Attrs<'_>,
    inputs: &[Option<&HostTensor>],
    outputs: &[(DType, Vec<usize>)],
    exec: &KernelContext,
) -> Result<Vec<HostTensor>> {
    let node_op = op.name();
    let kernel = kernel(op).ok_or_else(|| KernelError::UnknownOp(node_op.to_string()))?;
    let ctx = Ctx { opset, attrs: *attrs, inputs, outputs, exec };
    for (i, t) in ctx.inputs.iter().enumerate() {
        if let Some(t) = t.filter(|t| t.numel() != numel(&t.shape)) {
            let msg = format!("{} elements do not fill shape {:?}", t.numel(), t.shape);
            return Err(KernelError::Op {
                op: node_op.to_string(),
                error: Box::new(KernelError::shape(format!("input {i}"), msg)),
            });
        }
    }
    let in_op = |error| KernelError::Op { op: node_op.to_string(), error: Box::new(error) };
    let results = kernel(&ctx).map_err(in_op)?;
    check_outputs(&results, ctx.outputs).map_err(in_op)?;
    Ok(results)
}

/// Checks a kernel's results against the graph's declared outputs.
fn check_outputs(results: &[HostTensor], declared: &[(DType, Vec<usize>)]) -> Result<()> {
    if results.len() != declared.len() {
        return Err(KernelError::invalid(format!(
            "kernel made {} outputs, the graph declares {}",
            results.len(),
            declared.len()
        )));
    }
    for (i, (t, (dtype, shape))) in results.iter().zip(declared).enumerate() {
        if t.dtype() != *dtype || t.shape != *shape {
            return Err(KernelError::shape(
                format!("output {i}"),
                format!(
                    "kernel made {} {:?}, the graph declares {} {:?}",
                    dtype_name(t.dtype()),
                    t.shape,
                    dtype_name(*dtype),
                    shape
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;

    /// The registry and the CPU backend agree: every table entry is an op of the registry,
    /// and every op a backend runs as a kernel ([`lms_proto::ops::registry::OpDef::is_kernel`]) has a CPU kernel,
    /// so a node resolved at load always finds its kernel.
    #[test]
    fn every_op_of_the_registry_has_a_cpu_kernel() {
        for (domain, families) in [("", FAMILIES), (LMS_DOMAIN, training::FAMILIES)] {
            for (name, _) in families.iter().flat_map(|f| f.iter()) {
                assert!(registry::resolve(domain, name).is_some(), "CPU kernel {name} ({domain:?}) is no op");
            }
        }
        let missing: Vec<&str> =
            registry::all().filter(|&op| op.def().is_kernel() && kernel(op).is_none()).map(OpId::name).collect();
        assert!(missing.is_empty(), "ops without a CPU kernel: {missing:?}");
    }

    #[test]
    fn unknown_op_and_output_mismatch_are_errors() {
        let x = tensor(&[2], vec![1.0f32, -1.0]);
        let err = run("NoSuchOp", 17, &[], &[&x], &[(DType::DtypeF32, vec![2])]).unwrap_err();
        assert_eq!(err.to_string(), "no CPU kernel for op `NoSuchOp`");
        let err = run("Relu", 17, &[], &[&x], &[(DType::DtypeF32, vec![3])]).unwrap_err();
        assert_eq!(err.to_string(), "Relu: output 0: kernel made f32 [2], the graph declares f32 [3]");
        let err = run("Relu", 17, &[], &[], &[(DType::DtypeF32, vec![2])]).unwrap_err();
        assert_eq!(err.to_string(), "Relu: input X is missing");
    }

    #[test]
    fn inconsistent_inputs_and_data_shaped_outputs_are_checked() {
        let broken = HostTensor { shape: vec![3], data: crate::tensor::Buffer::F32(vec![1.0]) };
        let err = run("Relu", 17, &[], &[&broken], &[(DType::DtypeF32, vec![3])]).unwrap_err();
        assert_eq!(err.to_string(), "Relu: input 0: 1 elements do not fill shape [3]");
        // A Range whose values disagree with the graph fails before allocating.
        let (s, l, d) = (tensor::<i64>(&[], vec![0]), tensor::<i64>(&[], vec![i64::MAX]), tensor::<i64>(&[], vec![1]));
        let err = run("Range", 17, &[], &[&s, &l, &d], &[(DType::DtypeI64, vec![4])]).unwrap_err();
        assert!(err.to_string().starts_with("Range: output 0: inputs give shape"), "{err}");
    }

    #[test]
    fn supported_ops_are_unique() {
        let ops = supported_ops();
        let mut dedup = ops.clone();
        dedup.dedup();
        assert_eq!(ops, dedup);
        assert!(ops.contains(&"Conv") && ops.contains(&"Softmax"));
    }

    #[test]
    fn every_lms_kernel_op_of_the_contract_is_implemented() {
        // The ops OPS.md defines, but Variable and Input (default domain, placed by the
        // session) and SwapOut and SwapIn (copies that the executor issues itself).
        let contract: Vec<&str> = include_str!("../../../../proto/OPS.md")
            .lines()
            .filter(|l| !l.contains("(domain `\"\"`)"))
            .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
            .filter(|op| !matches!(*op, "SwapOut" | "SwapIn"))
            .collect();
        let mut sorted = contract.clone();
        sorted.sort_unstable();
        assert_eq!(supported_lms_ops(), sorted);
        assert!(contract.len() > 30, "{contract:?}");
        let onnx = supported_ops();
        assert!(sorted.iter().all(|op| !onnx.contains(op)));
    }

    #[test]
    fn lms_ops_run_only_through_their_dispatcher() {
        let x = tensor(&[2], vec![1.0f32, -1.0]);
        let spec = [(DType::DtypeF32, vec![])];
        let err = run("MeanSquaredError", 17, &[], &[&x, &x], &spec).unwrap_err();
        assert_eq!(err.to_string(), "no CPU kernel for op `MeanSquaredError`");
        let slots = [Some(&x), Some(&x)];
        let exec = KernelContext::default();
        let loss = lms("MeanSquaredError", &Attrs::new(&[]), &slots, &spec, &exec).unwrap();
        assert_eq!(loss[0], HostTensor::scalar(0.0f32));
        let err = lms("Relu", &Attrs::new(&[]), &slots[..1], &[(DType::DtypeF32, vec![2])], &exec);
        assert_eq!(err.unwrap_err().to_string(), "no CPU kernel for op `Relu`");
    }
}
