//! What the planner knows about the training graph before deciding anything:
//! the scheduled view (each node's place, each tensor's release), memory over
//! the schedule, the compute clock (each node's time on the compute stream
//! by the time model's one per-node rule, `analysis::timeline`), and the
//! tensors a decision may drop (with the stretch of the schedule where each
//! is not needed).

use crate::analysis::cost::CostModel;
use crate::analysis::memory::{self, MemoryProfile};
use crate::analysis::profile::DeviceProfile;
use crate::analysis::scheduled::Scheduled;
use crate::analysis::timeline::{self, ComputeClock};
use crate::ir::{Action, Device, Graph, NodeId, Phase, TensorId};
use std::ops::Range;

/// Per-op time and transfer speeds the planner predicts with.
#[derive(Clone, Debug, PartialEq)]
pub struct Speeds {
    /// Predicted time of each node on the compute stream, indexed by
    /// `NodeId::index()` (`timeline::compute_seconds`: what the timeline's
    /// simulation charges the compute stream for it).
    pub node_seconds: Vec<f64>,
    /// Device-to-host bandwidth (swap-outs), bytes per second.
    pub d2h_bytes_per_second: f64,
    /// Host-to-device bandwidth (swap-ins), bytes per second.
    pub h2d_bytes_per_second: f64,
}

impl Speeds {
    /// The time model of `profile` for the nodes of `g`.
    pub fn from_profile(g: &Graph, profile: &DeviceProfile) -> Speeds {
        let costs = CostModel::new(profile).costs(g);
        Speeds {
            node_seconds: timeline::compute_seconds(g, &costs, profile.copies_overlap_compute),
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
    /// The compute stream's clock over the schedule, by `speeds`.
    pub clock: ComputeClock,
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
        let clock = ComputeClock::new(schedule, &speeds.node_seconds);
        let forward = schedule.iter().filter(|&&id| g.node(id).phase == Phase::Forward);
        let forward_seconds = forward.map(|id| speeds.node_seconds[id.index()]).sum::<f64>();
        let total = clock.between(0, schedule.len());
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
            clock,
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::{self, FrontendOptions};
    use crate::shape::cost::Engine;
    use crate::train::{self, Loss, Optimizer, TrainOptions};
    use lms_proto::trace::Lane;
    use std::path::PathBuf;

    /// On a CPU profile with a per-node time (views take time), the
    /// planner's compute seconds between two positions are the time the
    /// timeline's simulation keeps the compute stream busy between them.
    #[test]
    fn the_planners_seconds_are_the_timelines_compute_time() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/models/tiny_gpt.onnx");
        let model = frontend::load(&path, &FrontendOptions { batch: Some(4), ..Default::default() }).unwrap();
        let options = TrainOptions {
            loss: Loss::SoftmaxCrossEntropy,
            optimizer: Optimizer::Sgd { lr: 0.1 },
            ..Default::default()
        };
        let g = train::build(&model.graph, &options).unwrap();
        let mut profile = DeviceProfile::load("cpu").unwrap();
        profile.node_seconds = 2e-6;
        let views = g.node_ids().filter(|&id| crate::analysis::cost::work(&g, id).engine == Engine::View);
        assert!(views.filter(|&id| !g.node(id).parameterized).count() > 0, "no view takes the per-node time");

        let schedule = g.schedule().to_vec();
        let speeds = Speeds::from_profile(&g, &profile);
        let facts = Facts::new(&g, &schedule, &speeds);
        let t = timeline::simulate(&g, &schedule, &profile);
        let mut busy = vec![0.0; schedule.len()];
        for e in t.events.iter().filter(|e| e.lane == Lane::Compute) {
            busy[facts.view.position(e.node)] = e.end - e.start;
        }
        let n = schedule.len();
        for (from, to) in [(0, n), (0, n / 2), (n / 3, 2 * n / 3), (n / 2, n), (n / 2, n / 2 + 1)] {
            let (planner, simulated) = (facts.clock.between(from, to), busy[from..to].iter().sum::<f64>());
            assert!(
                (planner - simulated).abs() <= 1e-9 * simulated,
                "{from}..{to}: planner {planner} s, timeline {simulated} s"
            );
        }
        let total = facts.forward_seconds + facts.backward_seconds;
        assert!((total - t.compute_seconds).abs() <= 1e-9 * total, "{total} s vs {} s", t.compute_seconds);
    }
}
