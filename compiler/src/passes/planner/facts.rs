//! What the planner knows about the training graph before deciding anything:
//! the scheduled view (each node's place, each tensor's release), memory over
//! the schedule, each node's time and the prefix sums of compute time, and
//! the tensors a decision may drop (with the stretch of
//! the schedule where each is not needed).

use crate::analysis::cost::CostModel;
use crate::analysis::memory::{self, MemoryProfile};
use crate::analysis::profile::DeviceProfile;
use crate::analysis::scheduled::Scheduled;
use crate::ir::{Action, Device, Graph, NodeId, Phase, TensorId};
use std::ops::Range;

/// Per-op time and transfer speeds the planner predicts with.
#[derive(Clone, Debug, PartialEq)]
pub struct Speeds {
    /// Predicted compute time of each node, indexed by `NodeId::index()`.
    pub node_seconds: Vec<f64>,
    /// Device-to-host bandwidth (swap-outs), bytes per second.
    pub d2h_bytes_per_second: f64,
    /// Host-to-device bandwidth (swap-ins), bytes per second.
    pub h2d_bytes_per_second: f64,
}

impl Speeds {
    /// The time model of `profile` for the nodes of `g`.
    pub fn from_profile(g: &Graph, profile: &DeviceProfile) -> Speeds {
        Speeds {
            node_seconds: CostModel::new(profile).costs(g).iter().map(|c| c.seconds).collect(),
            d2h_bytes_per_second: profile.device_to_host_bytes_per_second,
            h2d_bytes_per_second: profile.host_to_device_bytes_per_second,
        }
    }
}

/// A stretch of the schedule (a *gap*) between two consecutive uses of a
/// tensor with at least one op in between: the tensor can be swapped out or
/// recomputed there. A forward tensor kept for the backward phase has one
/// from its last forward reader to its first backward one (TFLMS); a tensor
/// made in parts and read twice by a batch norm split in two phases (its
/// statistics, then its normalization), or a gradient waiting for the other
/// branch of a residual block, has others. Each gap of a tensor is decided
/// on its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Droppable {
    pub tensor: TensorId,
    pub bytes: u64,
    /// Position of its producer.
    pub made: usize,
    /// Position of the last use before the gap (its producer or a reader).
    pub gap_start: usize,
    /// Position of the first reader after the gap.
    pub gap_end: usize,
    /// Position after which a swap-out over this gap is placed: the
    /// producer's for the tensor's first gap (the transfer starts as early
    /// as it can), the gap's start for a later one.
    pub out_at: usize,
    /// Whether a swap may move it (float data, as TFLMS swaps).
    pub swappable: bool,
}

impl Droppable {
    /// Whether dropping it frees memory at `step`.
    pub fn covers(&self, step: usize) -> bool {
        self.gap_start < step && step < self.gap_end
    }
}

/// The schedule, times and droppable tensors of one training graph.
pub struct Facts<'g> {
    pub g: &'g Graph,
    pub schedule: &'g [NodeId],
    /// The schedule's view: each node's position, each tensor's release step.
    pub view: Scheduled,
    /// Device and host memory over the schedule, before any decision.
    pub memory: MemoryProfile,
    /// `prefix[k]`: compute seconds of the first `k` scheduled nodes.
    pub prefix: Vec<f64>,
    /// Compute seconds of the forward phase and of the rest.
    pub forward_seconds: f64,
    pub backward_seconds: f64,
    pub speeds: &'g Speeds,
    /// The gaps of every tensor, each tensor's in schedule order.
    pub droppable: Vec<Droppable>,
    /// The range of `droppable` holding each tensor's gaps, indexed by
    /// `TensorId::index()`.
    pub gaps: Vec<Range<usize>>,
    /// Position of the node that writes each variable's tensor (update
    /// edge), indexed by `TensorId::index()` of the variable's tensor.
    pub writer: Vec<Option<usize>>,
}

impl<'g> Facts<'g> {
    /// Gathers the facts of `g` run in `schedule`.
    pub fn new(g: &'g Graph, schedule: &'g [NodeId], speeds: &'g Speeds) -> Facts<'g> {
        let view = Scheduled::new(g, schedule.to_vec());
        let memory = memory::simulate_scheduled(g, &view);
        let mut prefix = Vec::with_capacity(schedule.len() + 1);
        let (mut total, mut forward_seconds) = (0.0, 0.0);
        prefix.push(0.0);
        for &id in schedule {
            let s = speeds.node_seconds[id.index()];
            total += s;
            if g.node(id).phase == Phase::Forward {
                forward_seconds += s;
            }
            prefix.push(total);
        }
        let mut writer = vec![None; g.tensor_count()];
        for (src, dst, e) in g.edges() {
            if e.action == Action::Update {
                writer[g.node(dst).outputs[0].index()] = Some(view.position(src));
            }
        }
        let mut facts = Facts {
            g,
            schedule,
            view,
            memory,
            prefix,
            forward_seconds,
            backward_seconds: total - forward_seconds,
            speeds,
            droppable: Vec::new(),
            gaps: vec![0..0; g.tensor_count()],
            writer,
        };
        facts.find_droppable();
        facts
    }

    /// The gaps of the tensors of GPU ops outside the update phase that are
    /// not graph outputs and not variables.
    fn find_droppable(&mut self) {
        let g = self.g;
        let mut is_output = vec![false; g.tensor_count()];
        for &t in &g.outputs {
            is_output[t.index()] = true;
        }
        for (step, &id) in self.schedule.iter().enumerate() {
            let node = g.node(id);
            if node.parameterized || node.phase == Phase::Update || node.device != Device::Gpu {
                continue;
            }
            for &t in &node.outputs {
                let tensor = g.tensor(t);
                if is_output[t.index()] || self.view.last_use[t.index()] == step || tensor.ty.bytes() == 0 {
                    continue;
                }
                let mut uses: Vec<usize> = g.readers(t).map(|(r, _)| self.view.position(r)).collect();
                uses.push(step);
                uses.sort_unstable();
                uses.dedup();
                let first = self.droppable.len();
                for w in uses.windows(2).filter(|w| w[1] > w[0] + 1) {
                    let out_at = if self.droppable.len() == first { step } else { w[0] };
                    self.droppable.push(Droppable {
                        tensor: t,
                        bytes: tensor.ty.bytes(),
                        made: step,
                        gap_start: w[0],
                        gap_end: w[1],
                        out_at,
                        swappable: tensor.ty.dtype.is_float(),
                    });
                }
                self.gaps[t.index()] = first..self.droppable.len();
            }
        }
    }

    /// The gap of tensor `t` that `step` falls in (strictly inside), if any.
    pub fn gap_at(&self, t: TensorId, step: usize) -> Option<usize> {
        self.gaps[t.index()].clone().find(|&i| self.droppable[i].covers(step))
    }

    /// Compute seconds of the scheduled nodes at positions `from..to`.
    pub fn seconds_between(&self, from: usize, to: usize) -> f64 {
        if from >= to {
            0.0
        } else {
            self.prefix[to] - self.prefix[from]
        }
    }

    /// The latest position `q` in `earliest..before` such that the nodes
    /// after `q` and before `before` take at least `lead` seconds: a
    /// transfer started after `q` is hidden. `earliest` when none is.
    pub fn latest_hiding(&self, earliest: usize, before: usize, lead: f64) -> usize {
        // prefix[q + 1] <= prefix[before] - lead, the largest such q.
        let limit = self.prefix[before] - lead;
        let k = self.prefix[..=before].partition_point(|&p| p <= limit);
        k.saturating_sub(2).max(earliest).min(before.saturating_sub(1))
    }
}
