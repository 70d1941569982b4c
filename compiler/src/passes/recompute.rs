//! Recompute analysis (SuperNeurons §3.4, Capuchin §4.4): the producer chain
//! that re-makes a dropped forward tensor before its backward use.
//!
//! A tensor's chain starts at its producer and walks back through the inputs:
//! an input that is still in device memory where the chain runs (a variable,
//! a tensor still live, the device copy of a swapped or recomputed tensor) is
//! a *source* and ends the walk; any other input is re-made too, by its own
//! producer, up to a bound on the chain's length. Random ops (dropout, random
//! generators) never re-draw: a tensor whose chain needs one is not
//! recomputed. Only deterministic forward GPU ops are re-run, so a
//! recomputed tensor is bit-identical to the original on the same backend
//! and is the same term to the verifier.

use crate::ir::{Device, Graph, Node, NodeId, Phase, TensorId};

/// Ops whose outputs are random draws: re-running them would re-draw.
pub const RANDOM_OPS: &[&str] = &[
    "DropoutTrain",
    "Dropout",
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
    "Bernoulli",
    "Multinomial",
];

/// Whether a node may be re-run to re-make its outputs: a deterministic
/// forward op on the GPU that is not a variable or input.
pub fn is_recomputable(node: &Node) -> bool {
    !node.parameterized
        && node.phase == Phase::Forward
        && node.device == Device::Gpu
        && !RANDOM_OPS.contains(&node.op.as_str())
}

/// The nodes to re-run to re-make one tensor, and what they read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// Nodes to clone, in schedule order; the tensor's producer is last.
    pub nodes: Vec<NodeId>,
    /// Tensors the chain reads that it does not make (distinct, by id).
    pub sources: Vec<TensorId>,
    /// Largest bytes of chain outputs other than the re-made tensor live at
    /// once while the chain runs (each freed after its last reader in the
    /// chain, unread outputs right away).
    pub transient_bytes: u64,
}

impl Chain {
    /// Predicted time of the chain: the sum of its nodes' times.
    pub fn seconds(&self, node_seconds: &[f64]) -> f64 {
        self.nodes.iter().map(|n| node_seconds[n.index()]).sum()
    }
}

/// The chain that re-makes `t`, or `None` when it would need a random or
/// non-recomputable op, or more than `max_nodes` nodes. `available(u)` says
/// whether tensor `u` is in device memory where the chain runs; `position`
/// is each node's place in the schedule (indexed by `NodeId::index()`).
pub fn chain(
    g: &Graph,
    t: TensorId,
    available: impl Fn(TensorId) -> bool,
    position: &[usize],
    max_nodes: usize,
) -> Option<Chain> {
    let mut nodes: Vec<NodeId> = Vec::new();
    let mut sources: Vec<TensorId> = Vec::new();
    let mut stack = vec![g.tensor(t).producer.0];
    while let Some(n) = stack.pop() {
        if nodes.contains(&n) {
            continue;
        }
        let node = g.node(n);
        if !is_recomputable(node) || nodes.len() == max_nodes {
            return None;
        }
        nodes.push(n);
        for &u in node.inputs.iter().flatten() {
            let producer = g.tensor(u).producer.0;
            if g.node(producer).parameterized || available(u) {
                if !sources.contains(&u) {
                    sources.push(u);
                }
            } else {
                stack.push(producer);
            }
        }
    }
    nodes.sort_by_key(|n| position[n.index()]);
    // A tensor both made by the chain and available elsewhere is read from the chain.
    sources.retain(|u| !nodes.contains(&g.tensor(*u).producer.0));
    sources.sort();
    let transient_bytes = transient_bytes(g, t, &nodes);
    Some(Chain { nodes, sources, transient_bytes })
}

/// Peak bytes of the chain's outputs other than `t` while the chain runs in
/// `nodes` order.
fn transient_bytes(g: &Graph, t: TensorId, nodes: &[NodeId]) -> u64 {
    // Step of the last chain reader of each output (its producer's step when unread).
    let last_reader = |u: TensorId, made_at: usize| {
        nodes
            .iter()
            .enumerate()
            .filter(|(_, &n)| g.node(n).inputs.contains(&Some(u)))
            .map(|(i, _)| i)
            .fold(made_at, usize::max)
    };
    let mut frees: Vec<u64> = vec![0; nodes.len()];
    let (mut live, mut peak) = (0u64, 0u64);
    for (i, &n) in nodes.iter().enumerate() {
        for &u in &g.node(n).outputs {
            if u == t {
                continue;
            }
            let bytes = g.tensor(u).ty.bytes();
            live += bytes;
            frees[last_reader(u, i)] += bytes;
        }
        peak = peak.max(live);
        live -= frees[i];
    }
    peak
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egraph::testing::Net;
    use crate::ir::Attrs;

    /// x -> a = Relu(x) -> b = Sigmoid(a) -> c = Tanh(b); dropout d of b.
    fn net() -> (Net, [TensorId; 5]) {
        let mut net = Net::new();
        let x = net.input("x", &[2, 3]);
        let a = net.op("a", "Relu", Attrs::new(), &[x], &[2, 3]);
        let b = net.op("b", "Sigmoid", Attrs::new(), &[a], &[2, 3]);
        let c = net.op("c", "Tanh", Attrs::new(), &[b], &[2, 3]);
        let d = net.ops("d", "DropoutTrain", "lms", Attrs::new(), &[b], &[&[2, 3], &[2, 3]])[0];
        (net, [x, a, b, c, d])
    }

    fn positions(net: &Net) -> Vec<usize> {
        let schedule = net.g.schedule();
        let mut position = vec![0; net.g.node_bound()];
        for (i, id) in schedule.iter().enumerate() {
            position[id.index()] = i;
        }
        position
    }

    #[test]
    fn chains_stop_at_available_tensors_and_respect_the_bound() {
        let (net, [_, a, b, c, _]) = net();
        let g = &net.g;
        let position = positions(&net);
        let producer = |t: TensorId| g.tensor(t).producer.0;
        let short = chain(g, c, |u| u == b, &position, 8).unwrap();
        assert_eq!((short.nodes, short.sources), (vec![producer(c)], vec![b]));
        let long = chain(g, c, |_| false, &position, 8).unwrap();
        assert_eq!(long.nodes, vec![producer(a), producer(b), producer(c)]);
        assert_eq!(long.sources.len(), 1, "only the input is read from outside");
        // a and b are live together while b is made: 2 x 24 bytes.
        assert_eq!(long.transient_bytes, 48);
        assert_eq!(chain(g, c, |_| false, &position, 2), None, "three nodes exceed the bound");
    }

    #[test]
    fn random_ops_are_never_re_run() {
        let (net, [.., b, _, d]) = net();
        let position = positions(&net);
        assert_eq!(chain(&net.g, d, |u| u == b, &position, 8), None);
    }
}
