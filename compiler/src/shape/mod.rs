//! Shape and dtype inference: from the types (and, for shape arithmetic, the
//! constant values) of a node's inputs, the types of its outputs.
//!
//! One module per op family registers its ops in [`infer`]. Small integer
//! tensors (shapes, axes, indices) are evaluated at compile time so that
//! `Reshape`, `Slice`, `ConstantOfShape` and friends get concrete shapes, as
//! in graphs exported from PyTorch that compute shapes with `Shape`/`Gather`/
//! `Concat`.

mod conv;
mod elementwise;
mod nn;
mod pool;
mod reduce;
mod util;
mod window;

use crate::ir::{AttrError, Attrs, TensorData, TensorType};

/// A value flowing into or out of a node during inference: its type and,
/// when known at compile time, its contents.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub ty: TensorType,
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
    pub attrs: &'a Attrs,
    /// One entry per input slot; `None` for an omitted optional input.
    pub inputs: &'a [Option<&'a Value>],
    /// Number of outputs the node declares.
    pub num_outputs: usize,
}

/// Why inference failed for a node; the caller adds the node's name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("unsupported op '{0}'")]
    UnsupportedOp(String),
    #[error(transparent)]
    Attr(#[from] AttrError),
    #[error("unsupported value {value} for attribute '{name}'")]
    UnsupportedAttr { name: String, value: String },
    #[error("expected {expected} inputs, got {got}")]
    InputCount { expected: String, got: usize },
    #[error("input {index} is required")]
    MissingInput { index: usize },
    #[error("expected {expected} outputs, got {got}")]
    OutputCount { expected: String, got: usize },
    #[error("input {index} must be known at compile time (it gives {what})")]
    NotConstant { index: usize, what: &'static str },
    #[error("{0}")]
    Invalid(String),
}

/// Result of inference for one node.
pub type ShapeResult<T> = Result<T, ShapeError>;

/// Infers every output an op can produce, optional ones included; [`infer`]
/// keeps the ones the node declares.
type InferFn = fn(&Node<'_>) -> ShapeResult<Vec<Value>>;

/// Every supported op, by family. The single source of truth for [`infer`],
/// [`is_supported`] and [`supported_ops`].
const REGISTRY: &[&[(&str, InferFn)]] = &[elementwise::OPS, conv::OPS, pool::OPS, nn::OPS, reduce::OPS];

/// Largest number of elements any inferred tensor may have (2^40).
const MAX_ELEMENTS: usize = 1 << 40;

fn lookup(op: &str) -> Option<InferFn> {
    REGISTRY.iter().flat_map(|family| family.iter()).find(|(name, _)| *name == op).map(|&(_, f)| f)
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
        let bytes = util::checked_numel(&out.ty.shape)?.checked_mul(out.ty.dtype.size());
        if bytes.is_none() || out.ty.numel() > MAX_ELEMENTS {
            return Err(ShapeError::Invalid(format!(
                "shape too large: {} has more than 2^40 elements",
                util::fmt_shape(&out.ty.shape)
            )));
        }
    }
    Ok(outputs)
}

/// True when [`infer`] knows the op.
pub fn is_supported(op: &str) -> bool {
    lookup(op).is_some()
}

/// The names of all supported ops, family by family.
pub fn supported_ops() -> impl Iterator<Item = &'static str> {
    REGISTRY.iter().flat_map(|family| family.iter().map(|&(name, _)| name))
}
