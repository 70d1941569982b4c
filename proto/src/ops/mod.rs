//! The op definitions both sides of the contract read: for every op, shape and
//! dtype inference (from the types and, for shape arithmetic, the constant
//! values of a node's inputs, the types of its outputs), its cost rule and its
//! split rules.
//!
//! One module per op family lists its ops in a registry that [`infer`] and
//! [`is_supported`] share. Small integer tensors (shapes, axes, indices) are
//! evaluated at compile time so that `Reshape`, `Slice`, `ConstantOfShape`
//! and friends get concrete shapes, as in graphs exported from PyTorch that
//! compute shapes with `Shape`/`Gather`/`Concat`.

pub mod axes;
mod constant;
mod conv;
pub mod cost;
mod elementwise;
mod indexing;
mod lms_outputs;
mod nn;
mod pool;
mod reduce;
pub mod registry;
pub mod scratch;
pub mod split;
mod tensor_ops;
mod util;
pub mod window;

pub use axes::AxesMap;
pub use lms_outputs::LmsNode;
pub use nn::SoftmaxAxis;
pub use registry::{Family, OpId};

use crate::types::{Attr, AttrError, Attrs, TensorData, TensorType};
use cost::KernelClass;

/// A value flowing into or out of a node during inference: its type and,
/// when known at compile time, its contents.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// Element type and shape.
    pub ty: TensorType,
    /// Contents, when known at compile time (constants and folded results).
    pub data: Option<TensorData>,
}

impl Value {
    /// A value of known type and unknown contents.
    pub fn of_type(ty: TensorType) -> Value {
        Value { ty, data: None }
    }

    /// A value known at compile time.
    pub fn constant(data: TensorData) -> Value {
        Value { ty: data.ty.clone(), data: Some(data) }
    }
}

/// Largest number of elements a value computed at compile time may have;
/// bigger results keep only their type.
pub const MAX_FOLDED_ELEMENTS: usize = 1 << 16;

/// Everything inference knows about one node.
pub struct Node<'a> {
    /// ONNX op type, e.g. `Conv`.
    pub op: &'a str,
    /// Opset version of the default domain the model imports.
    pub opset: i64,
    /// The node's attributes.
    pub attrs: &'a Attrs,
    /// One entry per input slot; `None` for an omitted optional input
    /// (trailing omitted inputs may also be left out).
    pub inputs: &'a [Option<&'a Value>],
    /// Number of outputs the node declares.
    pub num_outputs: usize,
}

/// Why inference failed for a node; the caller adds the node's name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// The op type has no inference rule.
    #[error("unsupported op '{0}'")]
    UnsupportedOp(String),
    /// A missing attribute, or one of the wrong kind.
    #[error(transparent)]
    Attr(#[from] AttrError),
    /// An attribute value lms does not support or ONNX does not allow.
    #[error("unsupported value {value} for attribute '{name}'")]
    UnsupportedAttr { name: String, value: String },
    /// Too few or too many input slots.
    #[error("expected {expected} inputs, got {got}")]
    InputCount { expected: String, got: usize },
    /// Too few or too many declared outputs.
    #[error("expected {expected} outputs, got {got}")]
    OutputCount { expected: String, got: usize },
    /// A required input slot is empty.
    #[error("input {index} is required")]
    MissingInput { index: usize },
    /// An input that determines a shape is not known at compile time.
    #[error("input {index} must be known at compile time (it gives {what})")]
    NotConstant { index: usize, what: &'static str },
    /// Inputs or attributes that do not fit together (shapes, axes, sizes).
    #[error("{0}")]
    Invalid(String),
}

/// Result of inference for one node.
pub type ShapeResult<T> = Result<T, ShapeError>;

/// Infers every output an op can produce, optional ones included; [`infer`]
/// keeps the ones the node declares.
type InferFn = fn(&Node<'_>) -> ShapeResult<Vec<Value>>;

/// The work (FLOPs, bytes) of a node, by its op's cost rule; `None` for an
/// op without one.
pub fn work(node: &cost::CostNode<'_>) -> Option<cost::Work> {
    registry::by_name(node.op).map(|id| (id.def().cost)(node))
}

/// The class of kernel `op` runs as, for the rates a measured profile gives
/// by class: convolutions and matrix products (by the matrix `engine`) by
/// their family, ops that evaluate a transcendental function per element
/// ([`transcendental_evaluations`]) as such, normalisations, pooling and
/// reductions as reductions, the rest (and an op without a cost rule) as
/// elementwise kernels.
pub fn kernel_class(op: &str, attrs: &Attrs, engine: cost::Engine) -> KernelClass {
    match (registry::by_name(op).map(|id| id.def().family), engine) {
        (Some(Family::Conv), cost::Engine::Matrix) => KernelClass::Conv,
        (_, cost::Engine::Matrix) => KernelClass::MatMul,
        _ if transcendental_evaluations(op, attrs) > 0 => KernelClass::Transcendental,
        (Some(Family::Pool | Family::Nn | Family::Reduce), _) => KernelClass::Reduction,
        _ => KernelClass::Elementwise,
    }
}

/// How many times per element a kernel of `op` evaluates an exponential,
/// logarithm, error function, hyperbolic or trigonometric function or a
/// power (0: none), as its definition states (`OpDef::evaluations`);
/// `UnaryGrad` evaluates the derivative of the op its `op` attribute names
/// (`GradientForm::Unary`: a sigmoid's, tanh's or error function's one, a
/// ReLU's none).
pub fn transcendental_evaluations(op: &str, attrs: &Attrs) -> u64 {
    let Some(id) = registry::by_name(op) else { return 0 };
    if op != "UnaryGrad" {
        return id.def().evaluations;
    }
    let differentiated = match attrs.get("op") {
        Some(Attr::String(f)) => registry::by_name(f).and_then(|f| f.def().gradient),
        _ => None,
    };
    match differentiated {
        Some(registry::GradientForm::Unary { evaluations, .. }) => evaluations,
        _ => 0,
    }
}

/// Largest number of elements any inferred tensor may have (2^40).
const MAX_ELEMENTS: usize = 1 << 40;

/// The inference rule for an op type.
fn lookup(op: &str) -> Option<InferFn> {
    registry::by_name(op).and_then(|id| id.def().infer)
}

/// Infers the output values of `node`: one per declared output.
pub fn infer(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    let infer_op = lookup(node.op).ok_or_else(|| ShapeError::UnsupportedOp(node.op.to_string()))?;
    let mut outputs = infer_op(node)?;
    if node.num_outputs == 0 || node.num_outputs > outputs.len() {
        let expected = if outputs.len() == 1 { "1".to_string() } else { format!("1 to {}", outputs.len()) };
        return Err(ShapeError::OutputCount { expected, got: node.num_outputs });
    }
    outputs.truncate(node.num_outputs);
    for out in &outputs {
        if !util::checked_numel(&out.ty.shape).is_ok_and(|n| n <= MAX_ELEMENTS) {
            return Err(ShapeError::Invalid(format!(
                "shape too large: {} has more than 2^40 elements",
                util::fmt_shape(&out.ty.shape)
            )));
        }
    }
    Ok(outputs)
}

/// Whether `declared`, the output types a node declares, are the ones [`infer`] gives
/// for its op, attributes and inputs (`node.num_outputs` is `declared.len()`); `Err` says
/// what each side is, or why inference failed.
pub fn check_outputs(node: &Node<'_>, declared: &[&TensorType]) -> Result<(), String> {
    let expected: Vec<TensorType> = infer(node).map_err(|e| e.to_string())?.into_iter().map(|v| v.ty).collect();
    compare_outputs(declared, &expected)
}

/// Whether the `declared` output types are the `expected` ones; `Err` lists both.
pub fn compare_outputs(declared: &[&TensorType], expected: &[TensorType]) -> Result<(), String> {
    if declared.iter().copied().ne(expected.iter()) {
        let show = |tys: Vec<String>| tys.join(", ");
        return Err(format!(
            "declares outputs [{}] but its inputs give [{}]",
            show(declared.iter().map(|t| t.to_string()).collect()),
            show(expected.iter().map(|t| t.to_string()).collect())
        ));
    }
    Ok(())
}

/// The output types a node of lms op `op` must declare, by the op's output rule
/// ([`LmsNode`] has its inputs' types and declared outputs); `None` for an op without one
/// (an ONNX op, `Zeros`, the swaps).
pub fn expected_lms_outputs(op: OpId, node: &LmsNode<'_>) -> Option<ShapeResult<Vec<TensorType>>> {
    op.def().outputs.map(|rule| lms_outputs::expected(rule, node))
}

/// True when [`infer`] knows the op.
pub fn is_supported(op: &str) -> bool {
    lookup(op).is_some()
}

/// The names of all supported ops, family by family.
pub fn supported_ops() -> impl Iterator<Item = &'static str> {
    registry::FAMILIES.iter().flat_map(|family| family.ops.iter().map(|&(name, _)| name))
}

#[cfg(test)]
mod tests {
    use super::util::testing::{f, run};
    use super::*;
    use crate::types::{Attr, DType};
    use std::collections::BTreeSet;

    /// The evaluations are the definitions': an op's own, and for `UnaryGrad` those of the
    /// derivative its `op` names (none for an op without a stated unary gradient).
    #[test]
    fn transcendental_evaluations_are_the_definitions() {
        let none = Attrs::new();
        let grad = |f: &str| Attrs::new().with("op", Attr::String(f.into()));
        let forward: Vec<u64> = ["Softmax", "Tanh", "Pow", "Relu", "MatMul", "Unknown"]
            .iter()
            .map(|op| transcendental_evaluations(op, &none))
            .collect();
        assert_eq!(forward, [2, 1, 1, 0, 0, 0]);
        let derivatives: Vec<u64> = ["Sigmoid", "Elu", "Relu", "Clip", "Floor"]
            .iter()
            .map(|f| transcendental_evaluations("UnaryGrad", &grad(f)))
            .collect();
        assert_eq!(derivatives, [1, 1, 0, 0, 0]);
        assert_eq!(transcendental_evaluations("UnaryGrad", &none), 0);
    }

    const REQUIRED: &[&str] = &[
        "Conv",
        "ConvTranspose",
        "BatchNormalization",
        "Relu",
        "LeakyRelu",
        "Sigmoid",
        "Tanh",
        "Elu",
        "Selu",
        "PRelu",
        "Softplus",
        "Softsign",
        "Neg",
        "Abs",
        "Exp",
        "Log",
        "Reciprocal",
        "Erf",
        "HardSigmoid",
        "HardSwish",
        "Cos",
        "Sin",
        "Sqrt",
        "Pow",
        "Floor",
        "Ceil",
        "Not",
        "IsNaN",
        "IsInf",
        "Clip",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "LRN",
        "Gemm",
        "MatMul",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Equal",
        "Less",
        "Greater",
        "Where",
        "Sum",
        "Max",
        "Min",
        "Mean",
        "Concat",
        "Split",
        "Reshape",
        "Flatten",
        "Transpose",
        "Unsqueeze",
        "Squeeze",
        "Softmax",
        "LogSoftmax",
        "Dropout",
        "Gather",
        "GatherElements",
        "LayerNormalization",
        "InstanceNormalization",
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "Slice",
        "Cast",
        "Identity",
        "Constant",
        "ConstantOfShape",
        "Shape",
        "Expand",
        "Tile",
        "Pad",
        "Range",
    ];

    #[test]
    fn registry_is_complete_and_unique() {
        let ops: Vec<&str> = supported_ops().collect();
        let unique: BTreeSet<&str> = ops.iter().copied().collect();
        assert_eq!(unique.len(), ops.len(), "an op is registered twice");
        for op in REQUIRED {
            assert!(is_supported(op), "{op} is not supported");
        }
        assert!(!is_supported("LSTM"));
        assert_eq!(run("LSTM", 13, Attrs::new(), &[], 1).unwrap_err().to_string(), "unsupported op 'LSTM'");
    }

    /// Every op shape inference knows and every lms op of the contract
    /// (proto/OPS.md's tables) has exactly one cost rule.
    #[test]
    fn every_op_has_one_cost_rule() {
        let costed: Vec<&str> =
            registry::FAMILIES.iter().flat_map(|family| family.costs.iter().map(|&(name, _)| name)).collect();
        let unique: BTreeSet<&str> = costed.iter().copied().collect();
        assert_eq!(unique.len(), costed.len(), "an op has two cost rules");
        let contract = include_str!("../../OPS.md");
        let lms_ops = contract.lines().filter_map(|line| line.strip_prefix("| `")?.split('`').next());
        let ops: Vec<&str> = supported_ops().chain(lms_ops).collect();
        assert!(ops.len() > 100, "the contract's tables were not found");
        for op in ops {
            assert!(unique.contains(op), "{op} has no cost rule");
        }
    }

    #[test]
    fn output_counts_are_checked() {
        assert_eq!(run("Relu", 13, Attrs::new(), &[f(&[2])], 2).unwrap_err().to_string(), "expected 1 outputs, got 2");
        assert_eq!(run("Relu", 13, Attrs::new(), &[f(&[2])], 0).unwrap_err().to_string(), "expected 1 outputs, got 0");
        assert_eq!(run("Dropout", 13, Attrs::new(), &[f(&[2])], 1).unwrap().len(), 1);
    }

    /// A small deterministic generator (64-bit LCG).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            self.0 >> 33
        }

        fn pick<T: Clone>(&mut self, items: &[T]) -> T {
            items[self.next() as usize % items.len()].clone()
        }
    }

    /// Adversarial nodes of every supported op must give a result or an
    /// error, never a panic (overflow included: tests run with debug assertions).
    #[test]
    fn fuzzed_nodes_never_panic() {
        let ints = [i64::MIN, -4, -2, -1, 0, 1, 2, 3, 7, 1 << 31, i64::MAX];
        let dims = [0usize, 1, 2, 3, 5, 1 << 20, 1 << 40, usize::MAX];
        let dtypes = [DType::F32, DType::I64, DType::I32, DType::Bool, DType::U8, DType::F16, DType::U64];
        let names = [
            "axis",
            "axes",
            "perm",
            "pads",
            "strides",
            "dilations",
            "kernel_shape",
            "group",
            "split",
            "num_outputs",
            "starts",
            "ends",
            "keepdims",
            "to",
            "value",
            "value_ints",
            "value_int",
            "auto_pad",
            "ceil_mode",
            "transA",
            "transB",
            "allowzero",
            "start",
            "end",
            "output_shape",
            "output_padding",
            "broadcast",
            "size",
            "mode",
            "noop_with_empty_axes",
            "spatial",
            "stash_type",
        ];
        let ops: Vec<&str> = supported_ops().collect();
        let mut rng = Lcg(42);
        for _ in 0..60_000 {
            // Inputs mostly derived from one base shape, so that many nodes get past the checks.
            let base: Vec<usize> = (0..rng.next() % 6)
                .map(|_| if rng.next() % 8 == 0 { rng.pick(&dims) } else { 1 + rng.next() as usize % 4 })
                .collect();
            let mut values = Vec::new();
            for i in 0..rng.next() % 6 {
                let dtype = if i == 0 && rng.next() % 2 == 0 { DType::F32 } else { rng.pick(&dtypes) };
                let value = match rng.next() % 6 {
                    0 | 1 => Value::of_type(TensorType::new(dtype, base.clone())),
                    2 => Value::of_type(TensorType::new(
                        dtype,
                        base[base.len().min(1 + rng.next() as usize % 3)..].to_vec(),
                    )),
                    3 => Value::of_type(TensorType::new(dtype, base.get(1).map(|&c| vec![c]).unwrap_or_default())),
                    _ => {
                        let n = rng.next() as usize % 6;
                        let data: Vec<i64> = (0..n.max(1)).map(|_| rng.pick(&ints)).collect();
                        let shape = if n == 0 { vec![] } else { vec![n] };
                        Value::constant(TensorData::from_i64(shape, &data))
                    }
                };
                values.push(value);
            }
            let mut attrs = Attrs::new();
            for _ in 0..rng.next() % 4 {
                let name = rng.pick(&names);
                let attr = match rng.next() % 5 {
                    0 => Attr::Int(rng.pick(&ints)),
                    1 => Attr::Ints((0..rng.next() % 7).map(|_| rng.pick(&ints)).collect()),
                    2 => Attr::String(rng.pick(&["SAME_UPPER", "VALID", "NOTSET", "edge", "bogus"]).into()),
                    3 => Attr::Tensor(TensorData::from_i64(vec![1], &[rng.pick(&ints)])),
                    _ => Attr::Float(-1.5),
                };
                attrs.set(name, attr);
            }
            let mut slots: Vec<Option<&Value>> = values.iter().map(Some).collect();
            if !slots.is_empty() && rng.next() % 5 == 0 {
                let i = rng.next() as usize % slots.len();
                slots[i] = None;
            }
            let op = rng.pick(&ops);
            let opset = rng.pick(&[6, 7, 9, 10, 11, 12, 13, 15, 18, 21]);
            let node = Node { op, opset, attrs: &attrs, inputs: &slots, num_outputs: rng.pick(&[1, 1, 1, 2, 3, 0]) };
            let _ = infer(&node);
        }
    }
}
