//! The lms intermediate representation: G = (V, E, λ, τ) on petgraph
//! (TFLMS Definition 1), tensor types and constants, attributes, and the
//! stable text form.

mod graph;
mod plan;

pub use graph::{
    Action, CycleError, Device, Edge, Graph, Node, NodeId, Phase, Tensor, TensorId, VerifyError, INPUT_OP,
    OVERLAP_ADD_OP, SPLIT_PART_OP, SPLIT_WINDOW_OP, SWAP_IN_OP, SWAP_OUT_OP, VARIABLE_OP,
};
pub use lms_proto::types::{f16_to_f32, numel, Attr, AttrError, Attrs, DType, Shape, TensorData, TensorType};
pub use plan::{Plan, RecomputeDecision, SwapDecision, SwapInDecision, NO_STRATEGY};
