//! Checks of `Graph.tensors` and of constant tensors carried by attributes: known dtypes,
//! byte counts computed with checked arithmetic and capped, initial data of the right size,
//! producers that name them.

use super::describe;
use super::dtype::{dtype_name, known_dtype, tensor_bytes};
use crate::escape::Escaped;
use crate::lms::{attribute, DType, Graph, Node};

/// The element type, shape and size of a tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Size in bytes: elements × element size, at most 2^48.
    pub bytes: u64,
}

/// Checks each tensor's dtype, byte count, initial data and producer; returns the types.
pub fn tensor_types(graph: &Graph) -> Result<Vec<TensorType>, String> {
    let nodes = graph.nodes.len();
    let mut types = Vec::with_capacity(graph.tensors.len());
    for (t, tensor) in graph.tensors.iter().enumerate() {
        let what = || describe::tensor(graph, t);
        let dtype = known_dtype(tensor.dtype).map_err(|e| format!("{}: {e}", what()))?;
        let bytes = tensor_bytes(dtype, &tensor.shape).map_err(|e| format!("{}: {e}", what()))?;
        if tensor.bytes != bytes {
            return Err(format!(
                "{}: {} bytes declared, but {} {:?} takes {bytes}",
                what(),
                tensor.bytes,
                dtype_name(dtype),
                tensor.shape
            ));
        }
        if !tensor.data.is_empty() && tensor.data.len() as u64 != bytes {
            return Err(format!("{}: data holds {} bytes, the type takes {bytes}", what(), tensor.data.len()));
        }
        let producer = tensor.producer as usize;
        let Some(node) = graph.nodes.get(producer) else {
            return Err(format!("{}: producer is node id {producer}, but the graph has {nodes} nodes", what()));
        };
        if node.outputs.get(tensor.producer_output as usize) != Some(&(t as u32)) {
            return Err(format!(
                "{}: {} output {} is not this tensor",
                what(),
                describe::node(graph, producer),
                tensor.producer_output
            ));
        }
        // Every dimension is at most 2^48, so it fits in usize on 64-bit targets.
        let shape = tensor.shape.iter().map(|&d| d as usize).collect();
        types.push(TensorType { dtype, shape, bytes });
    }
    Ok(types)
}

/// Checks that every attribute of `node` holds a value, and that a constant tensor in one
/// has a known dtype and exactly the bytes its shape takes.
pub fn check_attributes(node: &Node) -> Result<(), String> {
    for a in &node.attributes {
        let name = Escaped(&a.name);
        match &a.value {
            None => return Err(format!("attribute '{name}' has no value")),
            Some(attribute::Value::Tensor(value)) => {
                let dtype = known_dtype(value.dtype).map_err(|e| format!("attribute '{name}': {e}"))?;
                let bytes = tensor_bytes(dtype, &value.shape).map_err(|e| format!("attribute '{name}': {e}"))?;
                if value.data.len() as u64 != bytes {
                    return Err(format!(
                        "attribute '{name}': data holds {} bytes, {} {:?} takes {bytes}",
                        value.data.len(),
                        dtype_name(dtype),
                        value.shape
                    ));
                }
            }
            Some(_) => {}
        }
    }
    Ok(())
}
