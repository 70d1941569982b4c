//! Classification of tensors into inputs, parameters, activations and
//! constants, as `lms inspect` reports them and training builds on.

use crate::ir::{Graph, NodeId, TensorId, INPUT_OP, VARIABLE_OP};

/// What a tensor is, for memory accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorClass {
    /// Fed from outside (a data input).
    Input,
    /// A weight: a float tensor of rank ≥ 1 that an op depending on data
    /// reads, computed only from constants and made from a float initializer
    /// or, as in the model-zoo "light" models, a `ConstantOfShape` (so not
    /// from literal `Constant` ops alone, like masks and scale factors).
    Parameter,
    /// A float tensor that depends on a data input: kept for the backward pass
    /// when training.
    Activation,
    /// Computed only from constants and not a parameter: shapes, folded
    /// values, the inner steps of a constant chain.
    Constant,
    /// A non-float tensor that depends on data (indices, masks).
    Other,
}

/// Classifies every tensor of `g`, indexed by `TensorId::index()`.
/// `schedule` must be a topological order of `g`.
pub fn classify(g: &Graph, schedule: &[NodeId]) -> Vec<TensorClass> {
    // A node depends on data when it is an input or reads a tensor that does.
    let mut data_dependent = vec![false; g.node_bound()];
    // A node makes weights when it is a float initializer, a ConstantOfShape,
    // or an op on a weight.
    let mut makes_weights = vec![false; g.node_bound()];
    for &id in schedule {
        let node = g.node(id);
        let reads = |flags: &[bool]| node.inputs.iter().flatten().any(|t| flags[g.tensor(*t).producer.0.index()]);
        data_dependent[id.index()] = node.op == INPUT_OP || reads(&data_dependent);
        makes_weights[id.index()] = match node.op.as_str() {
            VARIABLE_OP => node.outputs.iter().any(|&t| g.tensor(t).ty.dtype.is_float()),
            "ConstantOfShape" => true,
            _ => reads(&makes_weights),
        };
    }
    let mut classes = Vec::with_capacity(g.tensor_count());
    for (t, tensor) in g.tensors() {
        let producer = tensor.producer.0;
        let class = if g.node(producer).op == INPUT_OP {
            TensorClass::Input
        } else if data_dependent[producer.index()] {
            if tensor.ty.dtype.is_float() {
                TensorClass::Activation
            } else {
                TensorClass::Other
            }
        } else if tensor.ty.dtype.is_float()
            && tensor.ty.rank() > 0
            && makes_weights[producer.index()]
            && read_by_data_op(g, t, &data_dependent)
        {
            TensorClass::Parameter
        } else {
            TensorClass::Constant
        };
        classes.push(class);
    }
    classes
}

fn read_by_data_op(g: &Graph, t: TensorId, data_dependent: &[bool]) -> bool {
    g.readers(t).any(|(reader, _)| data_dependent[reader.index()])
}
