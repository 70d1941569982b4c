//! The control op of a swap-in (TFLMS §4.3): the op g whose control
//! edge g → swap-in starts the swap-in, by the direct-order strategy
//! (Algorithm 1) or the chain-rule strategy (Algorithm 2).
//!
//! Both strategies pick g with γ(f1) < γ(g) < γ(f2) from which f2 is
//! reachable, for the swapped tensor's producer f1 and the swap-in's (first)
//! consumer f2. That keeps the rewritten graph acyclic: every path through
//! the new edges goes from an op of smaller γ to one of larger γ. Where the
//! paper picks "randomly" among candidates, this picks the one first in the
//! schedule, so rewrites are deterministic. Both read and control edges
//! count for reachability and for an op's successors.

use super::{CtrldStrategy, Order, TflmsConfig};
use crate::ir::{Action, Graph, NodeId, Phase};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Searches control ops over one graph, reusing its scratch space.
pub(super) struct ControlSearch<'a> {
    g: &'a Graph,
    order: &'a Order,
    /// Per node: the search that last visited it (`epoch`), for
    /// breadth-first and backward walks.
    walked: Vec<u32>,
    /// Per node: the reachability test that last visited it.
    reached: Vec<u32>,
    epoch: u32,
}

impl<'a> ControlSearch<'a> {
    /// A search over `g`, ordered by `order`.
    pub(super) fn new(g: &'a Graph, order: &'a Order) -> ControlSearch<'a> {
        ControlSearch { g, order, walked: vec![0; g.node_bound()], reached: vec![0; g.node_bound()], epoch: 0 }
    }

    /// The control op for a swap-in of the tensor made by `f1` that `f2`
    /// reads first, by `cfg`'s strategy and bounds; `None` when no op
    /// qualifies.
    pub(super) fn find(&mut self, cfg: &TflmsConfig, f1: NodeId, f2: NodeId) -> Option<NodeId> {
        if cfg.lb > cfg.ub {
            return None;
        }
        match cfg.ctrld_strategy {
            CtrldStrategy::DirectOrder => self.direct_order(f1, f2, cfg.lb, cfg.ub),
            CtrldStrategy::ChainRule => self.chain_rule(f1, f2, cfg.lb, cfg.ub),
        }
    }

    /// Algorithm 1: among the ops v from which f2 is reachable, with
    /// γ(v) > γ(f1) and lb ≤ γ(f2) − γ(v) ≤ ub, one closest to f2.
    ///
    /// Walks f2's ancestors in decreasing γ: every ancestor with distance
    /// below `lb` is expanded, so the first one popped at distance ≥ `lb`
    /// is at the smallest such distance, and (ties by schedule position)
    /// the first in the schedule there.
    fn direct_order(&mut self, f1: NodeId, f2: NodeId, lb: u32, ub: u32) -> Option<NodeId> {
        let epoch = self.next_epoch();
        let (target, floor) = (self.order.gamma(f2), self.order.gamma(f1));
        let mut heap = BinaryHeap::new();
        self.push_ancestors(&mut heap, f2, floor, epoch);
        while let Some((gamma, _, v)) = heap.pop() {
            let distance = target.saturating_sub(gamma);
            if distance >= lb {
                return (distance <= ub).then_some(v);
            }
            self.push_ancestors(&mut heap, v, floor, epoch);
        }
        None
    }

    /// Pushes the direct predecessors of `of` with γ above `floor` that this
    /// search has not seen, keyed by (γ, earliest in the schedule first).
    fn push_ancestors(
        &mut self,
        heap: &mut BinaryHeap<(u32, Reverse<usize>, NodeId)>,
        of: NodeId,
        floor: u32,
        epoch: u32,
    ) {
        for (src, e) in self.g.in_edges(of) {
            let gamma = self.order.gamma(src);
            if orders(e.action) && gamma > floor && self.walked[src.index()] != epoch {
                self.walked[src.index()] = epoch;
                heap.push((gamma, Reverse(self.order.position(src)), src));
            }
        }
    }

    /// Algorithm 2: breadth-first along forward ops from f1; at each depth
    /// between `lb` and `ub`, the first backward successor f of an op at that
    /// depth with γ(f1) < γ(f) < γ(f2) from which f2 is reachable.
    fn chain_rule(&mut self, f1: NodeId, f2: NodeId, lb: u32, ub: u32) -> Option<NodeId> {
        let epoch = self.next_epoch();
        let (low, high) = (self.order.gamma(f1), self.order.gamma(f2));
        self.walked[f1.index()] = epoch;
        let mut level = vec![f1];
        for depth in 0..=ub {
            if level.is_empty() {
                return None;
            }
            level.sort_by_key(|&id| self.order.position(id));
            let mut next = Vec::new();
            for &s in &level {
                let successors = self.successors(s);
                if depth >= lb {
                    for &f in &successors {
                        let gamma = self.order.gamma(f);
                        if self.g.node(f).phase == Phase::Backward && low < gamma && gamma < high && self.reaches(f, f2)
                        {
                            return Some(f);
                        }
                    }
                }
                for f in successors {
                    let node = self.g.node(f);
                    // An op's successors have a larger γ, so below an op with
                    // γ ≥ γ(f2) − 1 no candidate is left: the walk stops there.
                    let useful = self.order.gamma(f) + 1 < high;
                    if useful && node.phase == Phase::Forward && !node.parameterized && self.walked[f.index()] != epoch
                    {
                        self.walked[f.index()] = epoch;
                        next.push(f);
                    }
                }
            }
            level = next;
        }
        None
    }

    /// The ops `of` orders directly (read and control edges), in schedule order.
    fn successors(&self, of: NodeId) -> Vec<NodeId> {
        let mut out: Vec<NodeId> = self.g.out_edges(of).filter(|(_, e)| orders(e.action)).map(|(dst, _)| dst).collect();
        out.sort_by_key(|&id| self.order.position(id));
        out.dedup();
        out
    }

    /// True when `to` is reachable from `from`. Only ops with γ below γ(to)
    /// can lie on a path to it, so the walk goes no further. Marks persist
    /// within one search, whose tests all have the same `to`: an op marked
    /// by a test that failed cannot reach `to` either.
    fn reaches(&mut self, from: NodeId, to: NodeId) -> bool {
        let epoch = self.epoch;
        let limit = self.order.gamma(to);
        let mut stack = vec![from];
        self.reached[from.index()] = epoch;
        while let Some(v) = stack.pop() {
            for (dst, e) in self.g.out_edges(v) {
                if !orders(e.action) || self.reached[dst.index()] == epoch {
                    continue;
                }
                if dst == to {
                    return true;
                }
                self.reached[dst.index()] = epoch;
                if self.order.gamma(dst) < limit {
                    stack.push(dst);
                }
            }
        }
        false
    }

    /// Starts a new search: marks from earlier searches no longer count.
    fn next_epoch(&mut self) -> u32 {
        self.epoch += 1;
        self.epoch
    }
}

/// Edges that order execution: reads and control edges (update edges into
/// variables do not, TFLMS Definition 2).
fn orders(action: Action) -> bool {
    action != Action::Update
}
