//! The memory plan a graph carries: the strategy, the budgets it was planned
//! for, the device profile of its time model, and each decision the memory
//! passes took (serialized as lms.proto's `Plan`).

use super::{NodeId, TensorId};

/// Strategy name of a graph no memory pass rewrote.
pub const NO_STRATEGY: &str = "none";

/// What the memory passes planned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// `none`, `tflms`, or another memory strategy's name.
    pub strategy: String,
    /// Device memory the plan was made to fit; `None` without a budget.
    pub budget_device_bytes: Option<u64>,
    /// Host memory the plan may use for swapped tensors; `None` without a budget.
    pub budget_host_bytes: Option<u64>,
    /// Name of the device profile whose time model the plan used; empty when none.
    pub device_profile: String,
    /// The profile's JSON when it came from a file (the plan carries it, so
    /// the file may move); `None` for a shipped profile, named above.
    pub device_profile_json: Option<String>,
    /// Tensors moved to host memory, in the order they were decided.
    pub swaps: Vec<SwapDecision>,
    /// Tensors dropped and re-made by a chain of clones, in the order they were decided.
    pub recomputes: Vec<RecomputeDecision>,
}

impl Default for Plan {
    fn default() -> Plan {
        Plan {
            strategy: NO_STRATEGY.to_string(),
            budget_device_bytes: None,
            budget_host_bytes: None,
            device_profile: String::new(),
            device_profile_json: None,
            swaps: Vec::new(),
            recomputes: Vec::new(),
        }
    }
}

/// A tensor swapped out after its producer and back in before later readers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwapDecision {
    pub tensor: TensorId,
    /// The `SwapOut` node.
    pub swap_out: NodeId,
    /// Its swap-ins.
    pub swap_ins: Vec<SwapInDecision>,
}

/// One swap-in and the node whose completion starts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwapInDecision {
    /// The `SwapIn` node.
    pub node: NodeId,
    /// The control op before it; `None`: its first consumer starts it.
    pub trigger: Option<NodeId>,
}

/// A forward tensor dropped after its last forward use and re-made by
/// clones of its producer chain right before its first backward reader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecomputeDecision {
    pub tensor: TensorId,
    /// The clones, in the order they run; the last one outputs the copy.
    pub chain: Vec<NodeId>,
    /// The first backward reader, which reads the copy.
    pub before: NodeId,
}
