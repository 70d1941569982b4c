//! The predicted timeline of one training step, simulated as the runtime
//! issues it: every node in schedule order on its queue — kernels on the
//! compute stream, swap-outs on the device-to-host stream, swap-ins on the
//! host-to-device stream — each queue running its work in order, and each
//! node waiting for the nodes it reads and its control predecessors (a
//! swap-in waits for its swap-out and its trigger op; a consumer waits for
//! its swap-in). Where each node runs and for how long is one rule,
//! [`occupancy`], which the planner's and the time trigger's
//! [`ComputeClock`] read as well: parameterized vertices take no time;
//! a view takes the profile's per-node time on the compute stream (none on
//! a profile without one); with a profile whose copies do not overlap
//! compute (the CPU backend), copies take their time in line on the compute
//! stream.
//!
//! Stall: the time the compute stream sits idle because the next kernel
//! waits for a copy. Each stall is charged to the copy that ended last among
//! the ones the kernel waited for (through views). A swap is *exposed* when a
//! stall is charged to it, or when it ends after the last kernel (it then
//! lengthens the step).
//!
//! One pass over the schedule and the edges: O(V + E).

use super::cost::{CostModel, OpCost};
use super::profile::DeviceProfile;
use crate::ir::{Action, Graph, NodeId};
use crate::shape::cost::Engine;
use lms_proto::trace::Lane;

/// One node that ran (parameterized vertices and views that take no time are left out).
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub node: NodeId,
    pub lane: Lane,
    /// Seconds from the start of the step.
    pub start: f64,
    pub end: f64,
    pub flops: u64,
    pub bytes: u64,
    /// For a kernel: seconds the compute stream waited for a copy before it.
    /// For a copy: the stall charged to it.
    pub stall: f64,
}

/// The predicted step.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Events in schedule order.
    pub events: Vec<Event>,
    /// When the last stream finishes.
    pub step_seconds: f64,
    /// Busy time of the compute stream (kernels).
    pub compute_seconds: f64,
    /// Busy time of the host-to-device stream (swap-ins).
    pub h2d_seconds: f64,
    /// Busy time of the device-to-host stream (swap-outs).
    pub d2h_seconds: f64,
    /// Total time the compute stream waited for copies.
    pub stall_seconds: f64,
    /// FLOPs of every op.
    pub flops: u64,
    /// FLOPs of the matrix ops: convolutions, matrix products and their gradients.
    pub gemm_flops: u64,
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
}

impl Timeline {
    /// The copies (swap-outs and swap-ins), in schedule order.
    pub fn swaps(&self) -> impl Iterator<Item = &Event> {
        self.events.iter().filter(|e| e.lane != Lane::Compute)
    }

    /// True when the copy `event` is exposed: a stall is charged to it or it
    /// ends after the last kernel.
    pub fn is_exposed(&self, event: &Event) -> bool {
        let last_kernel = self.events.iter().rev().find(|e| e.lane == Lane::Compute).map_or(0.0, |e| e.end);
        event.lane != Lane::Compute && (event.stall > 0.0 || event.end > last_kernel)
    }
}

/// Simulates the step of `g` run in `schedule` order on `profile`'s device.
pub fn simulate(g: &Graph, schedule: &[NodeId], profile: &DeviceProfile) -> Timeline {
    let costs = CostModel::new(profile).costs(g);
    simulate_costed(g, schedule, &costs, profile.copies_overlap_compute)
}

/// [`simulate`] with the cost of every node given (indexed by
/// `NodeId::index()`, as [`CostModel::costs`] makes it); `overlap`: copies
/// run on their own streams.
pub fn simulate_costed(g: &Graph, schedule: &[NodeId], costs: &[OpCost], overlap: bool) -> Timeline {
    let mut finish = vec![0.0f64; g.node_bound()];
    // Per node: the copy whose end its finish waits for, if a copy decides it.
    let mut blocker: Vec<Option<usize>> = vec![None; g.node_bound()];
    let mut free = [0.0f64; 3];
    let mut t = Timeline {
        events: Vec::with_capacity(schedule.len()),
        step_seconds: 0.0,
        compute_seconds: 0.0,
        h2d_seconds: 0.0,
        d2h_seconds: 0.0,
        stall_seconds: 0.0,
        flops: 0,
        gemm_flops: 0,
        h2d_bytes: 0,
        d2h_bytes: 0,
    };
    for &id in schedule {
        if g.node(id).parameterized {
            continue;
        }
        let cost = costs[id.index()];
        // The latest predecessor, and the copy that decides it.
        let (mut ready, mut waits_for) = (0.0f64, None);
        for (src, e) in g.in_edges(id) {
            if e.action != Action::Update && finish[src.index()] > ready {
                ready = finish[src.index()];
                waits_for = blocker[src.index()];
            }
        }
        t.flops += cost.flops;
        if cost.engine == Engine::Matrix {
            t.gemm_flops += cost.flops;
        }
        let Some((stream, seconds)) = occupancy(g, id, &cost, overlap) else {
            finish[id.index()] = ready;
            blocker[id.index()] = waits_for;
            continue;
        };
        let lane = lane_of(cost.engine);
        let start = ready.max(free[stream as usize]);
        let end = start + seconds;
        let mut stall = 0.0;
        if stream == Lane::Compute && ready > free[Lane::Compute as usize] {
            stall = ready - free[Lane::Compute as usize];
            t.stall_seconds += stall;
            if let Some(copy) = waits_for {
                t.events[copy].stall += stall;
            }
        }
        free[stream as usize] = end;
        finish[id.index()] = end;
        blocker[id.index()] = (lane != Lane::Compute).then_some(t.events.len());
        // A copy reads and writes one tensor's bytes: half its traffic crossed the link.
        match lane {
            Lane::Compute => t.compute_seconds += seconds,
            Lane::DeviceToHost => {
                t.d2h_seconds += seconds;
                t.d2h_bytes += cost.bytes / 2;
            }
            Lane::HostToDevice => {
                t.h2d_seconds += seconds;
                t.h2d_bytes += cost.bytes / 2;
            }
        }
        let kernel_stall = if lane == Lane::Compute { stall } else { 0.0 };
        t.events.push(Event { node: id, lane, start, end, flops: cost.flops, bytes: cost.bytes, stall: kernel_stall });
    }
    t.step_seconds = free.iter().copied().fold(0.0, f64::max);
    t
}

/// The lane an op of `engine` runs in: copies in theirs, everything else in
/// the compute stream's.
fn lane_of(engine: Engine) -> Lane {
    match engine {
        Engine::DeviceToHost => Lane::DeviceToHost,
        Engine::HostToDevice => Lane::HostToDevice,
        _ => Lane::Compute,
    }
}

/// Where node `id` of `g` with cost `cost` runs and for how long — the one
/// per-node rule of the time model: a kernel on the compute stream for its
/// cost's seconds; a view likewise (its seconds are the profile's per-node
/// time) unless it takes none; a copy on its own stream when `overlap` (copies run
/// beside compute), in line on the compute stream otherwise. `None`: a
/// parameterized vertex or a view that takes no time, which occupies no stream.
pub fn occupancy(g: &Graph, id: NodeId, cost: &OpCost, overlap: bool) -> Option<(Lane, f64)> {
    if g.node(id).parameterized || (cost.engine == Engine::View && cost.seconds == 0.0) {
        return None;
    }
    let lane = lane_of(cost.engine);
    Some((if overlap { lane } else { Lane::Compute }, cost.seconds))
}

/// The seconds each node of `g` takes on the compute stream by
/// [`occupancy`], indexed by `NodeId::index()` (`costs` as
/// [`CostModel::costs`] makes it): what [`ComputeClock`] adds up.
pub fn compute_seconds(g: &Graph, costs: &[OpCost], overlap: bool) -> Vec<f64> {
    let mut seconds = vec![0.0; costs.len()];
    for id in g.node_ids() {
        if let Some((Lane::Compute, s)) = occupancy(g, id, &costs[id.index()], overlap) {
            seconds[id.index()] = s;
        }
    }
    seconds
}

/// The compute stream of a schedule with no stalls: its nodes back to back
/// in schedule order, each taking its seconds on the compute stream
/// ([`compute_seconds`]; copies that overlap compute take none). The
/// planner times its decisions on it, and the time trigger places swap-ins
/// against it before the swaps exist.
#[derive(Clone, Debug, PartialEq)]
pub struct ComputeClock {
    /// `before[p]`: compute seconds of the positions before `p`.
    before: Vec<f64>,
}

impl ComputeClock {
    /// The clock of `schedule` with the compute seconds of every node in
    /// `seconds` (indexed by `NodeId::index()`, as [`compute_seconds`]
    /// makes it).
    pub fn new(schedule: &[NodeId], seconds: &[f64]) -> ComputeClock {
        let mut before = Vec::with_capacity(schedule.len() + 1);
        let mut now = 0.0;
        before.push(now);
        for &id in schedule {
            now += seconds[id.index()];
            before.push(now);
        }
        ComputeClock { before }
    }

    /// When the op at position `p` starts.
    pub fn start(&self, p: usize) -> f64 {
        self.before[p]
    }

    /// When the op at position `p` ends.
    pub fn end(&self, p: usize) -> f64 {
        self.before[p + 1]
    }

    /// Compute seconds of the positions `from..to` (none when `from >= to`).
    pub fn between(&self, from: usize, to: usize) -> f64 {
        if from >= to {
            0.0
        } else {
            self.before[to] - self.before[from]
        }
    }

    /// The latest position `q` in `earliest..before` such that the ops
    /// after `q` and before `before` take at least `lead` seconds: a
    /// transfer started after `q` is hidden. `earliest` when none is.
    pub fn latest_hiding(&self, earliest: usize, before: usize, lead: f64) -> usize {
        // before[q + 1] <= before[before] - lead, the largest such q.
        let limit = self.before[before] - lead;
        let k = self.before[..=before].partition_point(|&p| p <= limit);
        k.saturating_sub(2).max(earliest).min(before.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attrs, DType, Device, Node, Phase, TensorId, TensorType, SWAP_IN_OP, SWAP_OUT_OP};
    use lms_proto::contract::LMS_DOMAIN;

    /// Adds a node with one f32[4] output.
    fn add(g: &mut Graph, name: &str, op: &str, parameterized: bool, inputs: &[TensorId]) -> (NodeId, TensorId) {
        let swap = op.starts_with("Swap");
        let node = Node {
            name: name.into(),
            op: op.into(),
            domain: if swap { LMS_DOMAIN.into() } else { String::new() },
            attrs: Attrs::new(),
            parameterized,
            phase: Phase::Forward,
            device: if swap { Device::Cpu } else { Device::Gpu },
            inputs: inputs.iter().map(|&t| Some(t)).collect(),
            outputs: vec![],
        };
        let id = g.add_node(node, vec![(name.into(), TensorType::new(DType::F32, vec![4]))]);
        (id, g.node(id).outputs[0])
    }

    /// x → a → swap-out → swap-in (triggered by c) → d, and x → c → d; each
    /// kernel takes 1 s, each copy 2 s.
    fn swapped() -> (Graph, Vec<NodeId>, Vec<OpCost>, [NodeId; 4]) {
        let mut g = Graph::new("swap", 13);
        let (_, x) = add(&mut g, "x", "Input", true, &[]);
        let (a, at) = add(&mut g, "a", "Relu", false, &[x]);
        let (_, out) = add(&mut g, "out", SWAP_OUT_OP, false, &[at]);
        let (c, ct) = add(&mut g, "c", "Relu", false, &[x]);
        let (back, bt) = add(&mut g, "in", SWAP_IN_OP, false, &[out]);
        g.add_control_edge(c, back);
        let (d, dt) = add(&mut g, "d", "Add", false, &[bt, ct]);
        g.outputs = vec![dt];
        let schedule = crate::analysis::order::schedule(&g).unwrap();
        let mut costs = vec![OpCost::NONE; g.node_bound()];
        for id in g.node_ids().filter(|&id| !g.node(id).parameterized) {
            let engine = crate::analysis::cost::work(&g, id).engine;
            let seconds = if engine == Engine::Matrix || engine == Engine::Vector { 1.0 } else { 2.0 };
            costs[id.index()] = OpCost { flops: 4, bytes: 32, seconds, engine };
        }
        (g, schedule, costs, [a, back, c, d])
    }

    #[test]
    fn streams_overlap_and_a_late_swap_in_stalls_its_consumer() {
        let (g, schedule, costs, [a, back, c, d]) = swapped();
        let t = simulate_costed(&g, &schedule, &costs, true);
        let at = |id: NodeId| t.events.iter().find(|e| e.node == id).map(|e| (e.start, e.end, e.stall)).unwrap();
        assert_eq!(at(a), (0.0, 1.0, 0.0));
        assert_eq!(at(c), (1.0, 2.0, 0.0));
        // The swap-in waits for the swap-out (ends at 3) and its trigger c (ends at 2).
        assert_eq!(at(back), (3.0, 5.0, 3.0));
        // d waits 3 s for the swap-in: the stall is charged to it.
        assert_eq!(at(d), (5.0, 6.0, 3.0));
        assert_eq!((t.step_seconds, t.compute_seconds, t.d2h_seconds, t.h2d_seconds), (6.0, 3.0, 2.0, 2.0));
        assert_eq!((t.stall_seconds, t.h2d_bytes, t.d2h_bytes, t.flops), (3.0, 16, 16, 20));
        let exposed: Vec<bool> = t.swaps().map(|e| t.is_exposed(e)).collect();
        assert_eq!(exposed, [false, true], "the swap-out ends before the last kernel");
    }

    #[test]
    fn copies_in_line_with_compute_do_not_stall() {
        let (g, schedule, costs, _) = swapped();
        let t = simulate_costed(&g, &schedule, &costs, false);
        assert_eq!((t.step_seconds, t.stall_seconds), (7.0, 0.0));
        let lanes: Vec<Lane> = t.events.iter().map(|e| e.lane).collect();
        assert_eq!(lanes, [Lane::Compute, Lane::DeviceToHost, Lane::Compute, Lane::HostToDevice, Lane::Compute]);
    }
}
