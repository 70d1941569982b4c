//! One graph in one schedule, viewed once: each node's position and each
//! tensor's release step (after its last use, by the contract's rule). The
//! memory simulator and the placement, TFLMS's ordering and the planner's
//! facts read this view instead of each computing positions and uses again.

use crate::ir::{Action, Graph, NodeId};
use lms_proto::contract::{release_after, TensorUse};

/// A schedule of a graph with its positions and tensor releases. It holds no
/// reference to the graph: it is valid for the graph version it was built
/// from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scheduled {
    /// The nodes in execution order.
    pub schedule: Vec<NodeId>,
    /// Position of every scheduled node, indexed by `NodeId::index()`;
    /// `usize::MAX` for nodes not in the schedule.
    pub position: Vec<usize>,
    /// The step after which each tensor's bytes are freed, indexed by
    /// `TensorId::index()`, by the contract's release rule
    /// ([`lms_proto::contract::release_after`]); `usize::MAX`: kept until the end.
    pub last_use: Vec<usize>,
}

impl Scheduled {
    /// The view of `g` run in `schedule` order.
    pub fn new(g: &Graph, schedule: Vec<NodeId>) -> Scheduled {
        let mut position = vec![usize::MAX; g.node_bound()];
        for (i, id) in schedule.iter().enumerate() {
            position[id.index()] = i;
        }
        let last_use = last_use(g, &position);
        Scheduled { schedule, position, last_use }
    }

    /// Position of the scheduled node `id`.
    pub fn position(&self, id: NodeId) -> usize {
        self.position[id.index()]
    }
}

/// The release step of every tensor of `g` with its nodes at `position`.
fn last_use(g: &Graph, position: &[usize]) -> Vec<usize> {
    let mut updates_variable = vec![false; g.tensor_count()];
    for (_, _, e) in g.edges() {
        if let (Action::Update, Some(t)) = (e.action, e.tensor) {
            updates_variable[t.index()] = true;
        }
    }
    let mut graph_output = vec![false; g.tensor_count()];
    for &t in &g.outputs {
        graph_output[t.index()] = true;
    }
    let mut last = vec![usize::MAX; g.tensor_count()];
    for (t, tensor) in g.tensors() {
        let usage = TensorUse {
            produced_at: position[tensor.producer.0.index()],
            last_read: g.readers(t).map(|(r, _)| position[r.index()]).max(),
            resident: g.node(tensor.producer.0).parameterized,
            updates_variable: updates_variable[t.index()],
            graph_output: graph_output[t.index()],
        };
        last[t.index()] = release_after(usage).unwrap_or(usize::MAX);
    }
    last
}
