//! The live peaks of a TFLMS rewrite, without applying it.
//!
//! The rewritten schedule is the input's with each swap op at its anchor, as
//! `splice` places them: a swap-out right after its producer, a swap-in right
//! after its control op (after the producer when the control op is not
//! later), or right before its first consumer without one; at one anchor the
//! swap-outs first, then the swap-ins in queue order. Memory over that
//! schedule differs from the input's only in the swap ops' outputs and in when
//! a swapped tensor is released (after its swap-out and the readers that keep
//! it). So a [`Sweep`], made once from the input, gives the peaks
//! [`memory::simulate`] gives on the rewritten graph in one pass with no graph
//! built: the knob search of budget mode probes many rewrites of one graph.

use super::{Order, SwapPlan};
use crate::analysis::memory::{self, Pool};
use crate::budget::Budget;
use crate::ir::{Action, Attrs, Graph, SWAP_IN_OP, SWAP_OUT_OP};
use lms_proto::contract::LMS_DOMAIN;
use lms_proto::contract::{output_pool, release_after, TensorUse};
use lms_proto::ops::scratch::scratch_bytes;

/// Simulated live peaks of a graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Peaks {
    pub device: u64,
    pub host: u64,
}

impl Peaks {
    /// Whether both peaks are within `target`.
    pub(super) fn within(&self, target: Budget) -> bool {
        self.device <= target.device && self.host <= target.host
    }

    /// Bytes over `budgets`, both memories together.
    pub(super) fn overshoot(&self, budgets: Budget) -> u64 {
        self.device.saturating_sub(budgets.device) + self.host.saturating_sub(budgets.host)
    }
}

/// What every rewrite's peaks need of the input graph, by schedule position
/// and by tensor.
pub(super) struct Sweep<'g> {
    g: &'g Graph,
    /// Live bytes of the parameterized vertices' outputs, per pool.
    resident: [u64; 2],
    /// Per position: bytes its node makes (none for a parameterized one) and
    /// frees after it runs, per pool, and its scratch bytes.
    made: Vec<[u64; 2]>,
    freed: Vec<[u64; 2]>,
    scratch: Vec<u64>,
    /// Per tensor: bytes, pool, and the position after which the input
    /// releases it (`usize::MAX`: never).
    bytes: Vec<u64>,
    pool: Vec<Pool>,
    released: Vec<usize>,
    /// Per tensor: whether an update edge carries it into a variable.
    updates_variable: Vec<bool>,
    /// Per tensor: the last position of a reader, by reader.
    readers: Vec<Vec<usize>>,
}

/// A swap op in the rewritten schedule.
#[derive(Clone, Copy)]
enum Added {
    SwapOut(usize),
    SwapIn(usize, usize),
}

impl<'g> Sweep<'g> {
    /// The sweep of `g` over `order`'s schedule.
    pub(super) fn new(g: &'g Graph, order: &Order) -> Sweep<'g> {
        let schedule = &order.view.schedule;
        let released = order.view.last_use.clone();
        let mut sweep = Sweep {
            g,
            resident: [0; 2],
            made: vec![[0; 2]; schedule.len()],
            freed: vec![[0; 2]; schedule.len()],
            scratch: schedule.iter().map(|&id| memory::scratch(g, id)).collect(),
            bytes: vec![0; g.tensor_count()],
            pool: vec![Pool::Device; g.tensor_count()],
            released,
            updates_variable: vec![false; g.tensor_count()],
            readers: vec![Vec::new(); g.tensor_count()],
        };
        for (t, tensor) in g.tensors() {
            let producer = tensor.producer.0;
            let (bytes, pool) = (tensor.ty.bytes(), memory::pool(g.node(producer)));
            sweep.bytes[t.index()] = bytes;
            sweep.pool[t.index()] = pool;
            if g.node(producer).parameterized {
                sweep.resident[pool as usize] += bytes;
            } else {
                sweep.made[order.position(producer)][pool as usize] += bytes;
            }
            if let Some(freed) = sweep.freed.get_mut(sweep.released[t.index()]) {
                freed[pool as usize] += bytes;
            }
            sweep.readers[t.index()] = g.readers(t).map(|(r, _)| order.position(r)).collect();
        }
        for (_, _, e) in g.edges() {
            if let (Action::Update, Some(t)) = (e.action, e.tensor) {
                sweep.updates_variable[t.index()] = true;
            }
        }
        sweep
    }

    /// The live peaks of the rewrite that carries out `plans`, its swap-ins
    /// added in `queue` order ([`super::splice::splice`]'s arguments).
    pub(super) fn peaks(&self, order: &Order, plans: &[SwapPlan<'_>], queue: &[(usize, usize)]) -> Peaks {
        let steps = self.made.len();
        // (anchor, 0 before / 1 after it, order added, op): sorted, the rewritten order.
        let mut added: Vec<(usize, u8, usize, Added)> = Vec::with_capacity(plans.len() + queue.len());
        for (i, plan) in plans.iter().enumerate() {
            added.push((order.position(plan.candidate.producer), 1, i, Added::SwapOut(i)));
        }
        for (k, &(i, j)) in queue.iter().enumerate() {
            let producer = order.position(plans[i].candidate.producer);
            let swap_in = &plans[i].swap_ins[j];
            let (anchor, side) = match swap_in.control.map(|c| order.position(c)) {
                Some(c) if c > producer => (c, 1),
                Some(_) => (producer, 1),
                None => (order.position(swap_in.consumers[0]), 0),
            };
            added.push((anchor, side, plans.len() + k, Added::SwapIn(i, j)));
        }
        added.sort_unstable_by_key(|&(anchor, side, k, _)| (anchor, side, k));
        // Rewritten positions of the input's nodes and of the swap ops.
        let mut moved = vec![0usize; steps];
        let mut swap_out_at = vec![0usize; plans.len()];
        let mut swap_in_at: Vec<Vec<usize>> = plans.iter().map(|p| vec![0; p.swap_ins.len()]).collect();
        let mut rewritten: Vec<Option<Added>> = Vec::with_capacity(steps + added.len());
        let mut next = added.iter().peekable();
        for (p, at) in moved.iter_mut().enumerate() {
            let mut place = |rewritten: &mut Vec<Option<Added>>, op: Added| {
                match op {
                    Added::SwapOut(i) => swap_out_at[i] = rewritten.len(),
                    Added::SwapIn(i, j) => swap_in_at[i][j] = rewritten.len(),
                }
                rewritten.push(Some(op));
            };
            while let Some(&&(_, _, _, op)) = next.peek().filter(|a| a.0 == p && a.1 == 0) {
                place(&mut rewritten, op);
                next.next();
            }
            *at = rewritten.len();
            rewritten.push(None);
            while let Some(&&(_, _, _, op)) = next.peek().filter(|a| a.0 == p) {
                place(&mut rewritten, op);
                next.next();
            }
        }
        // Bytes each rewritten step makes and frees beyond the input's, per pool.
        let mut made = vec![[0u64; 2]; rewritten.len()];
        let mut freed = vec![[0u64; 2]; rewritten.len()];
        let mut kept = vec![[0u64; 2]; steps];
        let (out_pool, in_pool) =
            (output_pool(LMS_DOMAIN, SWAP_OUT_OP, true) as usize, output_pool(LMS_DOMAIN, SWAP_IN_OP, true) as usize);
        let mut scratch = vec![0u64; rewritten.len()];
        for (i, plan) in plans.iter().enumerate() {
            let c = plan.candidate;
            let (t, bytes, pool) =
                (c.tensor.index(), self.bytes[c.tensor.index()], self.pool[c.tensor.index()] as usize);
            // The swapped tensor: released after its swap-out and the readers that keep it.
            if !self.updates_variable[t] && self.released[t] != usize::MAX {
                let keeps = self.readers[t]
                    .iter()
                    .filter(|&&r| !c.consumers.iter().any(|&n| order.position(n) == r))
                    .map(|&r| moved[r])
                    .max();
                let usage = TensorUse {
                    produced_at: moved[order.position(c.producer)],
                    last_read: Some(keeps.map_or(swap_out_at[i], |r| r.max(swap_out_at[i]))),
                    resident: false,
                    updates_variable: false,
                    graph_output: false,
                };
                kept[self.released[t]][pool] += bytes;
                if let Some(at) = release_after(usage) {
                    freed[at][pool] += bytes;
                }
            }
            let shape = &self.g.tensor(c.tensor).ty.shape[..];
            made[swap_out_at[i]][out_pool] += bytes;
            scratch[swap_out_at[i]] = scratch_bytes(LMS_DOMAIN, SWAP_OUT_OP, &Attrs::new(), &[Some(shape)], &[shape]);
            let last_swap_in = swap_in_at[i].iter().copied().max().unwrap_or(swap_out_at[i]);
            freed[last_swap_in.max(swap_out_at[i])][out_pool] += bytes;
            for (j, swap_in) in plan.swap_ins.iter().enumerate() {
                let at = swap_in_at[i][j];
                made[at][in_pool] += bytes;
                scratch[at] = scratch_bytes(LMS_DOMAIN, SWAP_IN_OP, &Attrs::new(), &[Some(shape)], &[shape]);
                let last = swap_in.consumers.iter().map(|&n| moved[order.position(n)]).max().unwrap_or(at);
                freed[last.max(at)][in_pool] += bytes;
            }
        }
        let mut live = self.resident;
        let mut peaks = Peaks { device: 0, host: 0 };
        let mut p = 0;
        for (step, op) in rewritten.iter().enumerate() {
            let (mut made_here, mut freed_here, mut scratch_here) = (made[step], freed[step], scratch[step]);
            if op.is_none() {
                for pool in 0..2 {
                    made_here[pool] += self.made[p][pool];
                    freed_here[pool] += self.freed[p][pool] - kept[p][pool];
                }
                scratch_here = self.scratch[p];
                p += 1;
            }
            for pool in 0..2 {
                live[pool] += made_here[pool];
            }
            peaks.device = peaks.device.max(live[Pool::Device as usize] + scratch_here);
            peaks.host = peaks.host.max(live[Pool::Host as usize]);
            for pool in 0..2 {
                live[pool] -= freed_here[pool];
            }
        }
        peaks
    }
}
