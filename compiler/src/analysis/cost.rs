//! Time of one op on a device: the op family's work (FLOPs, bytes; see
//! `shape::cost`) over a [`DeviceProfile`], by a roofline plus a per-launch
//! latency, or the measured time when the profile has one for the op and
//! its shapes.
//!
//! - Convolutions and matrix products ([`Engine::Matrix`]): the larger of
//!   FLOPs / the matrix peak (the precision the runtime computes them in) and
//!   bytes / memory bandwidth.
//! - Every other kernel ([`Engine::Vector`]): the larger of FLOPs / the FP32
//!   peak and bytes / memory bandwidth (elementwise and normalisation ops are
//!   bound by the bandwidth).
//! - Swap-outs and swap-ins: the tensor's bytes / the host link's bandwidth
//!   in that direction.
//! - Views and parameterized vertices (variables, inputs): no time.

use super::profile::{op_key, DeviceProfile};
use crate::ir::{Graph, NodeId};
use crate::shape::cost::{CostNode, Engine, Work};
use crate::shape::{self};

/// Work and predicted time of one op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpCost {
    pub flops: u64,
    /// Bytes read plus bytes written.
    pub bytes: u64,
    pub seconds: f64,
    pub engine: Engine,
}

impl OpCost {
    /// Nothing to run.
    pub const NONE: OpCost = OpCost { flops: 0, bytes: 0, seconds: 0.0, engine: Engine::View };
}

/// Turns work into time with one device profile.
#[derive(Clone, Copy, Debug)]
pub struct CostModel<'p> {
    profile: &'p DeviceProfile,
}

impl<'p> CostModel<'p> {
    /// A cost model over `profile`.
    pub fn new(profile: &'p DeviceProfile) -> CostModel<'p> {
        CostModel { profile }
    }

    /// The profile the model uses.
    pub fn profile(&self) -> &'p DeviceProfile {
        self.profile
    }

    /// The work of node `id` of `g` and its time on the profile's device.
    pub fn cost(&self, g: &Graph, id: NodeId) -> OpCost {
        let work = work(g, id);
        let measured = (!self.profile.op_seconds.is_empty())
            .then(|| self.profile.op_seconds.get(&op_key(g, id)).copied())
            .flatten();
        OpCost {
            flops: work.flops,
            bytes: work.bytes_read + work.bytes_written,
            seconds: measured.unwrap_or_else(|| self.seconds(&work)),
            engine: work.engine,
        }
    }

    /// The cost of every node of `g`, indexed by `NodeId::index()` (removed
    /// ids get [`OpCost::NONE`]). A planner that changes a few nodes can
    /// recompute only theirs and rerun the timeline on the table.
    pub fn costs(&self, g: &Graph) -> Vec<OpCost> {
        let mut table = vec![OpCost::NONE; g.node_bound()];
        for id in g.node_ids() {
            table[id.index()] = self.cost(g, id);
        }
        table
    }

    /// Roofline time of `work`, plus the launch latency for anything that
    /// runs a kernel or a copy.
    pub fn seconds(&self, work: &Work) -> f64 {
        let p = self.profile;
        let bytes = (work.bytes_read + work.bytes_written) as f64;
        let flops = work.flops as f64;
        let body = match work.engine {
            Engine::View => return 0.0,
            Engine::Matrix => (flops / p.matrix_flops()).max(bytes / p.memory_bytes_per_second),
            Engine::Vector => (flops / p.peak_flops.fp32).max(bytes / p.memory_bytes_per_second),
            Engine::DeviceToHost => work.bytes_read as f64 / p.device_to_host_bytes_per_second,
            Engine::HostToDevice => work.bytes_read as f64 / p.host_to_device_bytes_per_second,
        };
        body + p.launch_seconds
    }
}

/// The work of node `id`: its op family's rule over its tensors' types.
/// Parameterized vertices run nothing; an op without a rule is costed as a
/// copy of its inputs into its outputs.
pub fn work(g: &Graph, id: NodeId) -> Work {
    let node = g.node(id);
    if node.parameterized {
        return Work { flops: 0, bytes_read: 0, bytes_written: 0, engine: Engine::View };
    }
    let inputs: Vec<Option<&crate::ir::TensorType>> = node.inputs.iter().map(|t| t.map(|t| &g.tensor(t).ty)).collect();
    let outputs: Vec<&crate::ir::TensorType> = node.outputs.iter().map(|&t| &g.tensor(t).ty).collect();
    let cost_node = CostNode { op: &node.op, attrs: &node.attrs, inputs: &inputs, outputs: &outputs };
    shape::work(&cost_node).unwrap_or_else(|| cost_node.streaming(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::profile::DEFAULT_PROFILE;

    #[test]
    fn roofline_picks_the_bound_and_adds_the_launch() {
        let p = DeviceProfile::load(DEFAULT_PROFILE).unwrap();
        let m = CostModel::new(&p);
        let launch = p.launch_seconds;
        // 67 GFLOP on the FP32 peak of 67 TFLOP/s: 1 ms; its 1 MB is negligible.
        let gemm = Work { flops: 67_000_000_000, bytes_read: 1_000_000, bytes_written: 0, engine: Engine::Matrix };
        assert!((m.seconds(&gemm) - (1e-3 + launch)).abs() < 1e-12);
        // 3.35 GB at 3.35 TB/s: 1 ms, whatever the FLOPs.
        let relu = Work { flops: 1, bytes_read: 1_675_000_000, bytes_written: 1_675_000_000, engine: Engine::Vector };
        assert!((m.seconds(&relu) - (1e-3 + launch)).abs() < 1e-12);
        // A swap-in of 52 MB at 52 GB/s: 1 ms (only the bytes read cross the link).
        let swap = Work { flops: 0, bytes_read: 52_000_000, bytes_written: 52_000_000, engine: Engine::HostToDevice };
        assert!((m.seconds(&swap) - (1e-3 + launch)).abs() < 1e-12);
        let view = Work { flops: 0, bytes_read: 0, bytes_written: 0, engine: Engine::View };
        assert_eq!(m.seconds(&view), 0.0);
    }
}
