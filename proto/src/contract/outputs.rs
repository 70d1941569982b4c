//! The op semantics the contract checks: every node whose op has a shape rule
//! ([`crate::ops`]; an lms op's output rule, [`ops::expected_lms_outputs`]) declares the
//! output types the rule gives for its inputs' types, attributes and known values, so a
//! kernel on either backend only ever sees shapes and dtypes the rule produced (a kernel
//! allocates its outputs from the declared types and launches over sizes taken from its
//! inputs). Where the rule needs a value the file does not carry (a `Slice`'s starts
//! computed at run time), the node's kernel checks the sizes it reads instead.

use super::describe;
use super::ops::NodeKind;
use super::program::Program;
use crate::escape::Escaped;
use crate::ops::{self, LmsNode, OpId, ShapeError, Value, MAX_FOLDED_ELEMENTS};
use crate::types::{Attr, Attrs, DType, TensorData, TensorType};

/// Checks, in schedule order, every kernel node whose op has a shape or output rule; `Err`
/// names the first whose declared outputs differ from the rule's, and how.
pub fn check_output_types(program: &Program) -> Result<(), String> {
    let mut values: Vec<Option<Value>> = vec![None; program.tensor_count()];
    for &n in program.order() {
        let node = program.node(n);
        let Some(op) = program.op(n).filter(|_| program.kind(n) == NodeKind::Kernel) else { continue };
        let what = || describe::node(program.graph(), n);
        if !op.def().is_onnx() {
            check_lms_outputs(program, n, op).map_err(|e| format!("{}: {e}", what()))?;
            continue;
        }
        for &t in program.node_inputs(n).iter().flatten() {
            if values[t].is_none() {
                values[t] = Some(value(program, t));
            }
        }
        let inputs: Vec<Option<&Value>> =
            program.node_inputs(n).iter().map(|t| t.and_then(|t| values[t].as_ref())).collect();
        let mut attrs = Attrs::new();
        for a in &node.attributes {
            let value = Attr::from_proto(a)
                .ok_or_else(|| format!("{}: attribute '{}' has no value", what(), Escaped(&a.name)))?;
            attrs.set(a.name.clone(), value);
        }
        let declared: Vec<TensorType> = program.node_outputs(n).iter().map(|&t| tensor_type(program, t)).collect();
        let request = ops::Node {
            op: &node.op,
            opset: program.opset(n),
            attrs: &attrs,
            inputs: &inputs,
            num_outputs: declared.len(),
        };
        let expected: Vec<TensorType> = match ops::infer(&request) {
            Ok(outputs) => outputs.into_iter().map(|v| v.ty).collect(),
            // A size the op reads from a tensor computed at run time: its kernel checks it.
            Err(ShapeError::NotConstant { .. }) => continue,
            Err(e) => return Err(format!("{}: {}", what(), Escaped(&e.to_string()))),
        };
        ops::compare_outputs(&declared.iter().collect::<Vec<_>>(), &expected)
            .map_err(|e| format!("{}: {e}", what()))?;
    }
    Ok(())
}

/// Checks node `n` of lms op `op` against the op's output rule, if it has one.
fn check_lms_outputs(program: &Program, n: usize, op: OpId) -> Result<(), String> {
    let attrs = Attrs::without_tensors(&program.node(n).attributes);
    let inputs: Vec<Option<TensorType>> =
        program.node_inputs(n).iter().map(|t| t.map(|t| tensor_type(program, t))).collect();
    let inputs: Vec<Option<&TensorType>> = inputs.iter().map(Option::as_ref).collect();
    let declared: Vec<TensorType> = program.node_outputs(n).iter().map(|&t| tensor_type(program, t)).collect();
    let declared: Vec<&TensorType> = declared.iter().collect();
    let node = LmsNode { attrs: &attrs, inputs: &inputs, declared: &declared };
    match ops::expected_lms_outputs(op, &node) {
        None => Ok(()),
        Some(Err(e)) => Err(Escaped(&e.to_string()).to_string()),
        Some(Ok(expected)) => ops::compare_outputs(&declared, &expected),
    }
}

/// The type of tensor `t` as the shape rules take it.
fn tensor_type(program: &Program, t: usize) -> TensorType {
    let ty = program.tensor_type(t);
    let dtype = DType::from_code(ty.dtype as i32).expect("the contract admits only defined dtypes");
    TensorType::new(dtype, ty.shape.clone())
}

/// Tensor `t` as a shape rule's input: its type, and its values where the file carries
/// them and they are small enough to fold (shapes, axes, sizes).
fn value(program: &Program, t: usize) -> Value {
    let ty = tensor_type(program, t);
    let data = &program.graph().tensors[t].data;
    let small = ty.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).is_some_and(|n| n <= MAX_FOLDED_ELEMENTS);
    let data = if data.is_empty() || !small { None } else { TensorData::from_bytes(ty.clone(), data.clone()) };
    Value { ty, data }
}
