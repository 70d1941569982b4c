//! The op semantics the contract checks: every node whose op has a shape rule
//! ([`crate::ops`]) declares the output types the rule gives for its inputs' types,
//! attributes and known values, so a kernel on either backend only ever sees shapes and
//! dtypes the rule produced (a kernel allocates its outputs from the declared types and
//! launches over sizes taken from its inputs). Where the rule needs a value the file does
//! not carry (a `Slice`'s starts computed at run time), the node's kernel checks the sizes
//! it reads instead.

use super::describe;
use super::ops::NodeKind;
use super::program::Program;
use crate::escape::Escaped;
use crate::ops::{self, ShapeError, Value, MAX_FOLDED_ELEMENTS};
use crate::types::{Attr, Attrs, DType, TensorData, TensorType};

/// Checks, in schedule order, every ONNX node with a shape rule; `Err` names the first
/// whose declared outputs differ from the rule's, and how.
pub fn check_output_types(program: &Program) -> Result<(), String> {
    let mut values: Vec<Option<Value>> = vec![None; program.tensor_count()];
    for &n in program.order() {
        let node = program.node(n);
        if program.kind(n) != NodeKind::Kernel || !program.op(n).is_some_and(|op| op.def().is_onnx()) {
            continue;
        }
        let what = || describe::node(program.graph(), n);
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
