//! The time trigger: each swap-in's control op from the predicted timeline
//! of a device profile (Capuchin §4.4, the in-trigger), instead of TFLMS's
//! op counts.
//!
//! The timeline is the one `analysis::timeline` predicts for the rewritten
//! graph: ops run back to back on the compute stream in schedule order
//! (`analysis::timeline::ComputeClock` over the input's scheduled view, each
//! op for its time by the time model's per-node rule; a control op is a
//! kernel), swap-outs queue on the device-to-host stream right after their producers,
//! and swap-ins queue on the host-to-device stream in schedule order, each
//! starting when its control op has ended, its swap-out has ended and the
//! swap-ins before it are done. The swap-ins are queued in the order of
//! their first consumers (earliest deadline first), so their control ops
//! never go back in the schedule.
//!
//! Two passes over that queue:
//! 1. **Latest start** (backwards): a swap-in must end before its consumer
//!    starts and before the next swap-in in the queue must start, so it
//!    must start by `min(consumer start, next latest start) − transfer`.
//! 2. **Control op** (forwards): the latest op between the swapped tensor's
//!    producer (inclusive) and the consumer whose end is at most that latest
//!    start — or, when the swap-in cannot start by then because its
//!    swap-out or the queue is later, at most the time it can start. Stalls
//!    this predicts delay the compute stream after the consumer, and the
//!    later swap-ins' deadlines with it.
//!
//! The control op lies before the consumer in the schedule and at or after
//! the producer, so the rewritten schedule stays topological: the swap-in
//! still follows its swap-out and no cycle appears (the pass manager checks
//! both). With a profile whose copies run in line with compute (the CPU
//! backend) nothing overlaps, so the control op is the last op before the
//! consumer: the swap-in holds device memory for the shortest time.

use super::{Order, SwapPlan};
use crate::analysis::cost::CostModel;
use crate::analysis::cost::OpCost;
use crate::analysis::profile::DeviceProfile;
use crate::analysis::scheduled::Scheduled;
use crate::analysis::timeline::{self, ComputeClock};
use crate::ir::Graph;
use crate::shape::cost::{Engine, Work};

/// Sets the control op of every swap-in of `plans` by the predicted
/// timeline on `profile`, and returns the order the swap-ins join the
/// host-to-device queue: (plan, swap-in) pairs by first consumer.
pub(super) fn place(
    g: &Graph,
    order: &Order,
    profile: &DeviceProfile,
    plans: &mut [SwapPlan<'_>],
) -> Vec<(usize, usize)> {
    let model = CostModel::new(profile);
    let costs = model.costs(g);
    let clock =
        ComputeClock::new(&order.view.schedule, &timeline::compute_seconds(g, &costs, profile.copies_overlap_compute));
    let kernels = kernel_positions(g, &order.view, &costs);
    let swap_out_end = swap_out_ends(g, plans, order, &clock, &model);
    let mut queue: Vec<Queued> = plans
        .iter()
        .enumerate()
        .flat_map(|(i, plan)| {
            let swap_out_end = &swap_out_end;
            plan.swap_ins.iter().enumerate().map(move |(j, swap_in)| Queued {
                plan: (i, j),
                producer: order.position(plan.candidate.producer),
                consumer: order.position(swap_in.consumers[0]),
                released: swap_out_end[i],
                seconds: copy_seconds(&model, g.tensor(plan.candidate.tensor).ty.bytes(), Engine::HostToDevice),
            })
        })
        .collect();
    queue.sort_by_key(|q| (q.consumer, q.plan));
    let controls: Vec<Option<usize>> = if profile.copies_overlap_compute {
        overlapped(&queue, &clock, &kernels, order.view.schedule.len())
    } else {
        queue.iter().map(|q| kernels_in(&kernels, q.producer, q.consumer).last().copied()).collect()
    };
    for (q, control) in queue.iter().zip(controls) {
        plans[q.plan.0].swap_ins[q.plan.1].control = control.map(|p| order.view.schedule[p]);
    }
    queue.into_iter().map(|q| q.plan).collect()
}

/// A swap-in in the host-to-device queue.
struct Queued {
    /// (plan, swap-in) indices.
    plan: (usize, usize),
    /// Schedule positions of the swapped tensor's producer and of the
    /// swap-in's first consumer.
    producer: usize,
    consumer: usize,
    /// When its swap-out ends: it cannot start before.
    released: f64,
    /// Transfer time.
    seconds: f64,
}

/// The control op (schedule position) of each swap-in of `queue` (in queue
/// order) when copies overlap compute, by the two passes of the module doc;
/// `kernels`: the positions that run a kernel; `positions`: the schedule's length.
fn overlapped(queue: &[Queued], clock: &ComputeClock, kernels: &[usize], positions: usize) -> Vec<Option<usize>> {
    // Pass 1: the latest start of each swap-in.
    let mut latest = vec![0.0f64; queue.len()];
    let mut next_start = f64::INFINITY;
    for (k, q) in queue.iter().enumerate().rev() {
        next_start = clock.start(q.consumer).min(next_start) - q.seconds;
        latest[k] = next_start;
    }
    // Pass 2: control ops, front to back, with the stalls they cause.
    let mut stalls = Stalls::new(positions);
    let (mut queue_free, mut first_allowed) = (0.0f64, 0usize);
    let mut controls = Vec::with_capacity(queue.len());
    for (k, q) in queue.iter().enumerate() {
        let shift = stalls.through(q.consumer);
        let ready = q.released.max(queue_free);
        let by = (latest[k] + shift).max(ready);
        let lo = q.producer.max(first_allowed);
        let control = last_kernel_ending_by(clock, kernels_in(kernels, lo, q.consumer), by, &stalls)
            .or_else(|| kernels_in(kernels, lo, q.consumer).first().copied());
        let start = match control {
            Some(c) => ready.max(clock.end(c) + stalls.through(c)),
            None => ready,
        };
        queue_free = start + q.seconds;
        stalls.add(q.consumer, queue_free - clock.start(q.consumer));
        // Later swap-ins queue behind this one: their control ops come no
        // earlier (after the consumer itself when this one has none).
        first_allowed = control.unwrap_or(q.consumer);
        controls.push(control);
    }
    controls
}

/// Seconds to copy `bytes` one way on the profile's host link.
fn copy_seconds(model: &CostModel<'_>, bytes: u64, engine: Engine) -> f64 {
    model.seconds(&Work { flops: 0, bytes_read: bytes, bytes_written: bytes, engine })
}

/// When each plan's swap-out ends: the device-to-host queue in schedule
/// order (by producer, then plan order), each starting when its producer
/// ends.
fn swap_out_ends(
    g: &Graph,
    plans: &[SwapPlan<'_>],
    order: &Order,
    clock: &ComputeClock,
    model: &CostModel<'_>,
) -> Vec<f64> {
    let mut by_producer: Vec<usize> = (0..plans.len()).collect();
    by_producer.sort_by_key(|&i| (order.position(plans[i].candidate.producer), i));
    let mut ends = vec![0.0; plans.len()];
    let mut free = 0.0f64;
    for i in by_producer {
        let candidate = plans[i].candidate;
        let bytes = g.tensor(candidate.tensor).ty.bytes();
        free =
            free.max(clock.end(order.position(candidate.producer))) + copy_seconds(model, bytes, Engine::DeviceToHost);
        ends[i] = free;
    }
    ends
}

/// The positions of `g` in `view` that run a kernel (Matrix and Vector
/// engines, no parameterized vertex), ascending: where a control op may go.
fn kernel_positions(g: &Graph, view: &Scheduled, costs: &[OpCost]) -> Vec<usize> {
    let runs_kernel = |id: crate::ir::NodeId| {
        !g.node(id).parameterized && matches!(costs[id.index()].engine, Engine::Matrix | Engine::Vector)
    };
    view.schedule.iter().enumerate().filter(|&(_, &id)| runs_kernel(id)).map(|(p, _)| p).collect()
}

/// The positions of `kernels` (ascending) in `lo..hi`.
fn kernels_in(kernels: &[usize], lo: usize, hi: usize) -> &[usize] {
    let start = kernels.partition_point(|&p| p < lo);
    &kernels[start..kernels.partition_point(|&p| p < hi).max(start)]
}

/// The last of `kernels` (ascending positions) that ends by `by` on `clock`
/// once `stalls` delay it. Ends only grow along the schedule, so a binary
/// search finds it.
fn last_kernel_ending_by(clock: &ComputeClock, kernels: &[usize], by: f64, stalls: &Stalls) -> Option<usize> {
    let n = kernels.partition_point(|&p| clock.end(p) + stalls.through(p) <= by);
    n.checked_sub(1).map(|k| kernels[k])
}

/// Predicted delays of the compute stream. A consumer starts when its
/// swap-ins have ended, and every later kernel moves with it, so the delay
/// at a position is the largest lateness (swap-in end − undelayed start) of
/// the consumers at or before it: a prefix maximum (a Fenwick tree over
/// positions).
struct Stalls {
    tree: Vec<f64>,
}

impl Stalls {
    fn new(positions: usize) -> Stalls {
        Stalls { tree: vec![0.0; positions + 1] }
    }

    /// The delay of the op at position `p`.
    fn through(&self, p: usize) -> f64 {
        let (mut i, mut delay) = (p + 1, 0.0f64);
        while i > 0 {
            delay = delay.max(self.tree[i]);
            i &= i - 1;
        }
        delay
    }

    /// The consumer at `p` needs a swap-in that ends `late` seconds after its
    /// undelayed start.
    fn add(&mut self, p: usize, late: f64) {
        let mut i = p + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].max(late);
            i += i & i.wrapping_neg();
        }
    }
}
