//! Memory simulation over a schedule: which tensors are live at each step and
//! the peak, in device memory and in host memory separately, with the same
//! rules the runtime's accounting follows (the contract: proto/OPS.md,
//! "Memory accounting").
//!
//! Which pool a tensor lives in and when its bytes are released are the
//! contract's rules (`lms_proto::contract::release`), which the runtime
//! follows too. While a node runs, its inputs and its outputs are live
//! together: the value recorded for a step is the pool's bytes after the
//! node's outputs are allocated and before anything is freed. The peak of a
//! pool is the largest value of its timeline, at the first step reaching it.

use super::scheduled::Scheduled;
use crate::ir::{Device, Graph, Node, NodeId, TensorId};
use lms_proto::contract::output_pool;
use lms_proto::contract::placement::{self, Lifetime, Placement};
use lms_proto::ops::scratch::scratch_bytes;

pub use lms_proto::contract::Pool;

/// The pool the outputs of `node` live in (the contract's rule,
/// [`lms_proto::contract::output_pool`]).
pub fn pool(node: &Node) -> Pool {
    output_pool(&node.domain, &node.op, node.device == Device::Cpu)
}

/// Memory over a schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryProfile {
    /// Device bytes live while each scheduled node runs (same length as the schedule).
    pub timeline: Vec<u64>,
    /// Device bytes of tensors resident for the whole run (parameterized vertices).
    pub resident_bytes: u64,
    /// Largest value of `timeline` (0 for an empty graph).
    pub peak_bytes: u64,
    /// Position in the schedule where the device peak happens (first, on ties).
    pub peak_step: usize,
    /// Device tensors live at the device peak, largest first (ties by id).
    pub live_at_peak: Vec<TensorId>,
    /// Scratch bytes of the node at the device peak (counted in `peak_bytes`).
    pub scratch_at_peak: u64,
    /// Host bytes live while each scheduled node runs (same length as the schedule).
    pub host_timeline: Vec<u64>,
    /// Largest value of `host_timeline` (0 when nothing lives in host memory).
    pub host_peak_bytes: u64,
    /// Position in the schedule where the host peak happens (first, on ties).
    pub host_peak_step: usize,
}

/// Simulates device and host memory over `schedule`, a topological order of `g`.
pub fn simulate(g: &Graph, schedule: &[NodeId]) -> MemoryProfile {
    simulate_scheduled(g, &Scheduled::new(g, schedule.to_vec()))
}

/// [`simulate`] over a view of `g` in its schedule already built.
pub fn simulate_scheduled(g: &Graph, view: &Scheduled) -> MemoryProfile {
    let (schedule, last) = (&view.schedule[..], &view.last_use);
    let bytes = |t: TensorId| g.tensor(t).ty.bytes();
    let pool_of = |t: TensorId| pool(g.node(g.tensor(t).producer.0));
    // Live bytes per pool, indexed by `Pool as usize`.
    let mut live = [0u64; 2];
    for &id in schedule {
        if g.node(id).parameterized {
            for &t in &g.node(id).outputs {
                live[pool_of(t) as usize] += bytes(t);
            }
        }
    }
    let resident_bytes = live[Pool::Device as usize];
    // Tensors to free after each step.
    let mut frees: Vec<Vec<TensorId>> = vec![Vec::new(); schedule.len()];
    for (t, _) in g.tensors() {
        if let Some(list) = frees.get_mut(last[t.index()]) {
            list.push(t);
        }
    }
    let mut timeline = Vec::with_capacity(schedule.len());
    let mut host_timeline = Vec::with_capacity(schedule.len());
    let scratch_of: Vec<u64> = schedule.iter().map(|&id| scratch(g, id)).collect();
    for (step, &id) in schedule.iter().enumerate() {
        let node = g.node(id);
        if !node.parameterized {
            for &t in &node.outputs {
                live[pool_of(t) as usize] += bytes(t);
            }
        }
        timeline.push(live[Pool::Device as usize] + scratch_of[step]);
        host_timeline.push(live[Pool::Host as usize]);
        for &t in &frees[step] {
            live[pool_of(t) as usize] -= bytes(t);
        }
    }
    let (peak_step, peak_bytes) = peak(&timeline);
    let (host_peak_step, host_peak_bytes) = peak(&host_timeline);
    let live_at_peak = live_at(g, view, peak_step);
    MemoryProfile {
        timeline,
        resident_bytes,
        peak_bytes,
        peak_step,
        live_at_peak,
        scratch_at_peak: scratch_of.get(peak_step).copied().unwrap_or(0),
        host_timeline,
        host_peak_bytes,
        host_peak_step,
    }
}

/// Scratch bytes of node `id` while it runs (the contract's
/// [`lms_proto::ops::scratch::scratch_bytes`]).
pub fn scratch(g: &Graph, id: NodeId) -> u64 {
    let node = g.node(id);
    let inputs: Vec<Option<&[usize]>> = node.inputs.iter().map(|t| t.map(|t| &g.tensor(t).ty.shape[..])).collect();
    let outputs: Vec<&[usize]> = node.outputs.iter().map(|&t| &g.tensor(t).ty.shape[..]).collect();
    scratch_bytes(&node.domain, &node.op, &node.attrs, &inputs, &outputs)
}

/// The static placement of the tensors of `pool` along `schedule` (the contract's
/// [`lms_proto::contract::placement`], which the runtime computes from the `.lms` too):
/// by tensor id, then in the device pool each scheduled node's scratch block, live at its
/// step only (index: the tensor count + its position).
pub fn placement(g: &Graph, schedule: &[NodeId], which: Pool) -> Placement {
    placement_within(g, &Scheduled::new(g, schedule.to_vec()), which, 0)
}

/// [`placement`] over a view of `g` in its schedule, stopped at the first arena of at most
/// `enough` bytes ([`placement::place_within`]: within `enough` exactly when [`placement`]'s is).
pub fn placement_within(g: &Graph, view: &Scheduled, which: Pool, enough: u64) -> Placement {
    let (schedule, last, position) = (&view.schedule[..], &view.last_use, &view.position);
    let end = schedule.len().saturating_sub(1);
    let mut lifetimes = vec![None; g.tensor_count()];
    for (t, tensor) in g.tensors() {
        let producer = g.node(tensor.producer.0);
        let born = position[tensor.producer.0.index()];
        if born == usize::MAX || pool(producer) != which {
            continue;
        }
        lifetimes[t.index()] = Some(Lifetime {
            bytes: tensor.ty.bytes(),
            first: if producer.parameterized { 0 } else { born },
            last: last[t.index()].min(end),
        });
    }
    if which == Pool::Device {
        lifetimes.extend(schedule.iter().enumerate().map(|(position, &id)| {
            let bytes = scratch(g, id);
            (bytes > 0).then_some(Lifetime { bytes, first: position, last: position })
        }));
    }
    placement::place_within(&lifetimes, enough)
}

/// (step, bytes) of the first largest value of a timeline; (0, 0) when empty.
fn peak(timeline: &[u64]) -> (usize, u64) {
    timeline.iter().enumerate().fold((0, 0), |best, (i, &b)| if b > best.1 { (i, b) } else { best })
}

/// Device tensors live while the node at `step` of `view` runs, largest first.
fn live_at(g: &Graph, view: &Scheduled, step: usize) -> Vec<TensorId> {
    let (position, last) = (&view.position, &view.last_use);
    let mut live: Vec<TensorId> = g
        .tensors()
        .filter(|(t, tensor)| {
            let producer = g.node(tensor.producer.0);
            let born = position[tensor.producer.0.index()];
            pool(producer) == Pool::Device
                && born != usize::MAX
                && (producer.parameterized || born <= step)
                && last[t.index()] >= step
        })
        .map(|(t, _)| t)
        .collect();
    live.sort_by_key(|&t| (std::cmp::Reverse(g.tensor(t).ty.bytes()), t));
    live
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egraph::testing::Net;
    use crate::ir::{Attr, Attrs, DType, Phase, TensorType, SWAP_IN_OP, SWAP_OUT_OP};
    use lms_proto::contract::LMS_DOMAIN;

    /// Adds a node with one f32[4] (16-byte) output named like it.
    fn add(g: &mut Graph, name: &str, op: &str, device: Device, parameterized: bool, inputs: &[TensorId]) -> TensorId {
        let domain = if op.starts_with("Swap") { LMS_DOMAIN } else { "" };
        let node = Node {
            name: name.into(),
            op: op.into(),
            domain: domain.into(),
            attrs: Attrs::new(),
            parameterized,
            phase: Phase::Forward,
            device,
            inputs: inputs.iter().map(|&t| Some(t)).collect(),
            outputs: vec![],
        };
        let id = g.add_node(node, vec![(name.into(), TensorType::new(DType::F32, vec![4]))]);
        g.node(id).outputs[0]
    }

    #[test]
    fn swap_out_counts_in_host_memory_and_swap_in_in_device_memory() {
        let mut g = Graph::new("swap", 13);
        let x = add(&mut g, "x", "Input", Device::Gpu, true, &[]);
        let a = add(&mut g, "a", "Relu", Device::Gpu, false, &[x]);
        let out = add(&mut g, "out", SWAP_OUT_OP, Device::Cpu, false, &[a]);
        let c = add(&mut g, "c", "Relu", Device::Gpu, false, &[x]);
        let back = add(&mut g, "in", SWAP_IN_OP, Device::Cpu, false, &[out]);
        let d = add(&mut g, "d", "Add", Device::Gpu, false, &[back, c]);
        g.outputs = vec![d];
        let schedule = crate::analysis::order::schedule(&g).unwrap();
        let p = simulate(&g, &schedule);
        // x is resident; a is freed after the swap-out, the host copy after
        // the swap-in; d is an output.
        assert_eq!(p.timeline, [16, 32, 32, 32, 48, 64]);
        assert_eq!(p.host_timeline, [0, 0, 16, 16, 16, 0]);
        assert_eq!((p.peak_bytes, p.peak_step, p.resident_bytes), (64, 5, 16));
        assert_eq!((p.host_peak_bytes, p.host_peak_step), (16, 2));
        assert_eq!(p.live_at_peak.len(), 4, "x, in, c, d: the host copy is not device memory");
    }
    #[test]
    fn a_convolution_with_asymmetric_pads_takes_its_padded_input_as_scratch() {
        let mut net = Net::new();
        let x = net.input("x", &[1, 2, 8, 8]);
        let w = net.variable("w", &[2, 2, 3, 3]);
        // The top part of a halo split: a pad above, none below.
        let pads = Attrs::new().with("pads", Attr::Ints(vec![1, 1, 0, 1]));
        let y = net.op("y", "Conv", pads, &[x, w], &[1, 2, 7, 8]);
        let mut g = net.g;
        g.outputs = vec![y];
        let schedule = crate::analysis::order::schedule(&g).unwrap();
        let conv = *schedule.last().unwrap();
        let padded = 2 * 9 * 10 * 4;
        assert_eq!(scratch(&g, conv), padded);
        let p = simulate(&g, &schedule);
        let tensors = (8 * 8 + 2 * 9 + 7 * 8) * 2 * 4;
        assert_eq!((p.peak_bytes, p.scratch_at_peak), (tensors + padded, padded));
        let arena = placement(&g, &schedule, Pool::Device).arena_bytes;
        assert!(
            arena >= placement::aligned(padded) + 3 * 256,
            "the scratch block is placed beside the tensors: {arena}"
        );
    }
}
