//! Memory simulation over a schedule: which tensors are live at each step and
//! the peak, with the same rules the runtime's accounting follows.
//!
//! Rules: tensors of parameterized vertices (variables, inputs) are resident
//! for the whole run. Every other tensor is allocated when its producer runs
//! and freed right after its last reader in the schedule; graph outputs stay
//! until the end; a tensor nobody reads is freed right after its producer.
//! While a node runs, its inputs and its outputs are live together. A tensor
//! carried by an update edge replaces its variable's storage, so in bytes it
//! is freed right after its producer. (The contract: proto/OPS.md, "Memory
//! accounting".)

use crate::ir::{Action, Graph, NodeId, TensorId};

/// Memory over a schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryProfile {
    /// Bytes live while each scheduled node runs (same length as the schedule).
    pub timeline: Vec<u64>,
    /// Bytes of tensors resident for the whole run (parameterized vertices).
    pub resident_bytes: u64,
    /// Largest value of `timeline` (0 for an empty graph).
    pub peak_bytes: u64,
    /// Position in the schedule where the peak happens (first, on ties).
    pub peak_step: usize,
    /// Tensors live at the peak, largest first (ties by id).
    pub live_at_peak: Vec<TensorId>,
}

/// The step after which each tensor's bytes are freed, indexed by
/// `TensorId::index()`: the last reader's position, `usize::MAX` for graph
/// outputs and tensors of parameterized vertices, the producer's position for
/// unread tensors and for tensors that update a variable.
pub fn last_use(g: &Graph, schedule: &[NodeId]) -> Vec<usize> {
    let mut position = vec![0usize; g.node_bound()];
    for (step, id) in schedule.iter().enumerate() {
        position[id.index()] = step;
    }
    let mut last = vec![0usize; g.tensor_count()];
    for (t, tensor) in g.tensors() {
        let producer = tensor.producer.0;
        last[t.index()] = if g.node(producer).parameterized {
            usize::MAX
        } else {
            g.readers(t).map(|(r, _)| position[r.index()]).fold(position[producer.index()], usize::max)
        };
    }
    for (_, _, e) in g.edges() {
        if let (Action::Update, Some(t)) = (e.action, e.tensor) {
            last[t.index()] = position[g.tensor(t).producer.0.index()];
        }
    }
    for &t in &g.outputs {
        last[t.index()] = usize::MAX;
    }
    last
}

/// Simulates memory over `schedule`, a topological order of `g`.
pub fn simulate(g: &Graph, schedule: &[NodeId]) -> MemoryProfile {
    let last = last_use(g, schedule);
    let bytes = |t: TensorId| g.tensor(t).ty.bytes();
    let mut resident_bytes = 0u64;
    for &id in schedule {
        if g.node(id).parameterized {
            resident_bytes += g.node(id).outputs.iter().map(|&t| bytes(t)).sum::<u64>();
        }
    }
    // Tensors to free after each step.
    let mut frees: Vec<Vec<TensorId>> = vec![Vec::new(); schedule.len()];
    for (t, _) in g.tensors() {
        if let Some(list) = frees.get_mut(last[t.index()]) {
            list.push(t);
        }
    }
    let mut live = resident_bytes;
    let mut timeline = Vec::with_capacity(schedule.len());
    for (step, &id) in schedule.iter().enumerate() {
        let node = g.node(id);
        if !node.parameterized {
            live += node.outputs.iter().map(|&t| bytes(t)).sum::<u64>();
        }
        timeline.push(live);
        live -= frees[step].iter().map(|&t| bytes(t)).sum::<u64>();
    }
    let (peak_step, peak_bytes) = timeline
        .iter()
        .enumerate()
        .fold((0, 0), |best, (i, &b)| if b > best.1 { (i, b) } else { best });
    let live_at_peak = live_at(g, schedule, &last, peak_step);
    MemoryProfile { timeline, resident_bytes, peak_bytes, peak_step, live_at_peak }
}

/// Tensors live while `schedule[step]` runs, largest first.
fn live_at(g: &Graph, schedule: &[NodeId], last: &[usize], step: usize) -> Vec<TensorId> {
    let mut position = vec![usize::MAX; g.node_bound()];
    for (i, id) in schedule.iter().enumerate() {
        position[id.index()] = i;
    }
    let mut live: Vec<TensorId> = g
        .tensors()
        .filter(|(t, tensor)| {
            let born = position[tensor.producer.0.index()];
            let resident = g.node(tensor.producer.0).parameterized;
            (resident || born <= step) && last[t.index()] >= step && born != usize::MAX
        })
        .map(|(t, _)| t)
        .collect();
    live.sort_by_key(|&t| (std::cmp::Reverse(g.tensor(t).ty.bytes()), t));
    live
}
