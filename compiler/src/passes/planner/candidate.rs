//! Candidates at a peak and their cost: the extra predicted time of a swap
//! or a recompute, per byte it removes from the peak; and the lazy queue the
//! greedy takes them from. A new kind of candidate (split) is a new [`Move`]
//! costed in [`Planner::cost`] and applied in `Planner::take`.

use super::facts::{Droppable, Facts};
use super::{Kind, Planner, State};
use crate::ir::TensorId;
use crate::passes::recompute;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// What a candidate does to its tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Move {
    Swap,
    Recompute,
}

/// A candidate decision on a droppable tensor, costed at one peak.
#[derive(Clone, Debug)]
pub(super) struct Candidate {
    /// Index into `Facts::droppable`.
    pub index: usize,
    pub what: Move,
    pub extra_seconds: f64,
    /// Extra seconds per byte removed from the peak.
    pub ratio: f64,
    pub bytes: u64,
    /// The decision, once costed.
    pub kind: Option<Kind>,
    /// A recompute of a tensor that decided chains read inside its gap:
    /// those chains, grown to re-make it too (Capuchin §4.4).
    pub rechained: Vec<Rechained>,
}

/// A decided recompute whose chain grows because a tensor it reads is
/// recomputed too.
#[derive(Clone, Debug)]
pub(super) struct Rechained {
    /// Index into `Facts::droppable` of the decision's gap.
    pub index: usize,
    pub old: recompute::Chain,
    pub grown: recompute::Chain,
}

impl Candidate {
    /// An uncosted candidate.
    pub fn new(index: usize, what: Move) -> Candidate {
        Candidate { index, what, extra_seconds: 0.0, ratio: 0.0, bytes: 0, kind: None, rechained: Vec::new() }
    }

    /// Cheapest first: ratio, then larger tensors, then lower index, swap
    /// before recompute.
    fn rank(&self, other: &Candidate) -> Ordering {
        self.ratio
            .total_cmp(&other.ratio)
            .then(other.bytes.cmp(&self.bytes))
            .then(self.index.cmp(&other.index))
            .then(self.what.cmp(&other.what))
    }
}

/// Heap entry: the heap is a max-heap, so the order is reversed.
#[derive(Clone)]
struct Entry(Candidate);

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.rank(&self.0)
    }
}

/// Costed candidates, cheapest first. Costs only grow as decisions are
/// taken, so a stored cost is a lower bound: the cheapest entry is re-costed
/// and taken when it is still no dearer than the next one.
#[derive(Clone, Default)]
pub(super) struct Queue {
    heap: BinaryHeap<Entry>,
}

impl Queue {
    pub fn new(candidates: Vec<Candidate>) -> Queue {
        Queue { heap: candidates.into_iter().map(Entry).collect() }
    }

    /// The cheapest candidate still valid under `recost` (which returns
    /// `None` for one no longer possible).
    pub fn pop_cheapest(&mut self, mut recost: impl FnMut(&Candidate) -> Option<Candidate>) -> Option<Candidate> {
        while let Some(Entry(stored)) = self.heap.pop() {
            let Some(fresh) = recost(&stored) else { continue };
            match self.heap.peek() {
                Some(Entry(next)) if fresh.rank(next) == Ordering::Greater => self.heap.push(Entry(fresh)),
                _ => return Some(fresh),
            }
        }
        None
    }
}

impl Queue {
    /// Puts a costed candidate back.
    pub fn push(&mut self, c: Candidate) {
        self.heap.push(Entry(c));
    }

    /// Among the candidates that remove at least `excess` bytes each, the one
    /// with the smallest extra time under `recost` (which returns `None` for
    /// one no longer possible); it stays queued. Stored costs are lower
    /// bounds, so candidates are re-costed in their order until none stored
    /// is cheaper than the best found.
    pub fn cheapest_covering(
        &self,
        excess: u64,
        mut recost: impl FnMut(&Candidate) -> Option<Candidate>,
    ) -> Option<Candidate> {
        let mut covering: Vec<&Candidate> = self.heap.iter().map(|e| &e.0).filter(|c| c.bytes >= excess).collect();
        covering.sort_by(|a, b| a.extra_seconds.total_cmp(&b.extra_seconds).then(a.rank(b)));
        let mut best: Option<Candidate> = None;
        for stored in covering {
            if best.as_ref().is_some_and(|b| b.extra_seconds <= stored.extra_seconds) {
                break;
            }
            if let Some(fresh) = recost(stored) {
                if best.as_ref().is_none_or(|b| fresh.extra_seconds < b.extra_seconds) {
                    best = Some(fresh);
                }
            }
        }
        best
    }
}

/// Seconds of a swap-in triggered after position `trigger` that are not
/// hidden behind the compute before the tensor's first reader after its gap.
pub(super) fn swap_in_exposed(facts: &Facts<'_>, d: &Droppable, trigger: usize) -> f64 {
    let lead = d.bytes as f64 / facts.speeds.h2d_bytes_per_second;
    (lead - facts.clock.between(trigger + 1, d.gap_end)).max(0.0)
}

/// Extra seconds from `bytes` more traffic on links already carrying
/// `already` bytes each way: swap-outs beyond what the forward phase's
/// compute hides, swap-ins beyond what the backward phase's hides.
pub(super) fn link_overload(facts: &Facts<'_>, bytes: u64, already: u64) -> f64 {
    let over = |moved: u64, bandwidth: f64, hidden: f64| (moved as f64 / bandwidth - hidden).max(0.0);
    let s = facts.speeds;
    let (before, after) = (already, already + bytes);
    over(after, s.d2h_bytes_per_second, facts.forward_seconds)
        - over(before, s.d2h_bytes_per_second, facts.forward_seconds)
        + over(after, s.h2d_bytes_per_second, facts.backward_seconds)
        - over(before, s.h2d_bytes_per_second, facts.backward_seconds)
}

/// A recompute chain may keep a tensor it reads past that tensor's last use
/// when the tensor is at most this share of the one it re-makes.
const MAX_EXTENDED_SHARE: u64 = 64;

impl Planner<'_, '_> {
    /// Costs candidate `c` at the peak `step`; `None` when it is not possible
    /// (tensor already decided, not freed at the step, no host room, a chain
    /// reads it there, or no recompute chain within the bound). For a tensor
    /// already swapped whose swap-in starts before `step`, a swap delays the
    /// swap-in to `step` (cost: the extra exposed transfer) and a recompute
    /// replaces the swap (cost: the chain less what the swap cost).
    pub(super) fn cost(&self, c: &Candidate, step: usize) -> Option<Candidate> {
        let facts = self.facts;
        let d = &facts.droppable[c.index];
        // A swapped tensor whose swap-in starts before the peak may start
        // later, or be recomputed instead.
        let swapped_until = match self.state[c.index] {
            State::Kept => None,
            State::Swapped { trigger } if trigger < step => Some(trigger),
            _ => return None,
        };
        if !d.covers(step) {
            return None;
        }
        let pinned_in = |from: usize, to: usize| self.pins[c.index].iter().any(|&p| from <= p && p <= to);
        let mut rechained = Vec::new();
        let (kind, extra_seconds) = match c.what {
            Move::Swap => {
                if !d.swappable {
                    return None;
                }
                let lead = d.bytes as f64 / facts.speeds.h2d_bytes_per_second;
                let (out_from, hosted_from) = match swapped_until {
                    Some(old) => (old + 1, old + 1),
                    None => (d.gap_start + 1, d.out_at + 1),
                };
                // Back in time for the op that hides the transfer, or for the
                // first recompute chain that reads it, whichever is earlier.
                let hiding = facts.clock.latest_hiding(d.gap_start, d.gap_end, lead).max(step);
                let first_pin = self.pins[c.index].iter().copied().filter(|&p| p > step).min();
                let trigger = first_pin.map_or(hiding, |p| hiding.min(p - 1));
                // The host peak bounds every range of the host timeline: the
                // range is looked at only when the peak leaves no room.
                let host = self.options.budget.host;
                if trigger < step
                    || pinned_in(out_from, trigger)
                    || (self.host.peak().1 + d.bytes > host && self.host.max_in(hosted_from, trigger) + d.bytes > host)
                {
                    return None;
                }
                let extra = match swapped_until {
                    Some(old) => swap_in_exposed(facts, d, trigger) - swap_in_exposed(facts, d, old),
                    None => swap_in_exposed(facts, d, trigger) + link_overload(facts, d.bytes, self.swapped_bytes),
                };
                (Kind::Swap { trigger }, extra)
            }
            Move::Recompute => {
                let chain = self.chain(d, None)?;
                rechained = self.rechain(c.index)?;
                let seconds = |chain: &recompute::Chain| chain.seconds(&facts.speeds.node_seconds);
                let grown: f64 = rechained.iter().map(|r| seconds(&r.grown) - seconds(&r.old)).sum();
                let undone_swap = swapped_until.map_or(0.0, |old| {
                    swap_in_exposed(facts, d, old) + link_overload(facts, d.bytes, self.swapped_bytes - d.bytes)
                });
                let extra = seconds(&chain) + grown - undone_swap;
                (Kind::Recompute { chain }, extra)
            }
        };
        Some(Candidate {
            index: c.index,
            what: c.what,
            extra_seconds,
            ratio: extra_seconds / d.bytes as f64,
            bytes: d.bytes,
            kind: Some(kind),
            rechained,
        })
    }

    /// The decided chains that read droppable `i`'s tensor inside its gap,
    /// each grown to re-make that tensor as well; `None` when one cannot
    /// grow (bound, random op, overwritten variable) or a pin inside the gap
    /// belongs to none of them.
    fn rechain(&self, i: usize) -> Option<Vec<Rechained>> {
        let d = &self.facts.droppable[i];
        // A decided chain that reads the tensor inside its gap pins it where
        // the chain runs, at the end of the chain's own gap: only the gaps
        // ending at a pin are looked at, in index order.
        let mut pinned: Vec<usize> = self.pins[i].iter().copied().filter(|&p| d.covers(p)).collect();
        let pins = pinned.len();
        pinned.sort_unstable();
        pinned.dedup();
        let mut readers: Vec<usize> = pinned.into_iter().flat_map(|p| self.gaps_ending_at(p)).copied().collect();
        readers.sort_unstable();
        let mut found = Vec::new();
        for j in readers {
            let State::Recomputed { chain } = &self.state[j] else { continue };
            if chain.sources.contains(&d.tensor) {
                let grown = self.chain(&self.facts.droppable[j], Some(d.tensor))?;
                found.push(Rechained { index: j, old: chain.clone(), grown });
            }
        }
        (pins == found.len()).then_some(found)
    }

    /// The droppable gaps that end at schedule position `at`, by index.
    fn gaps_ending_at(&self, at: usize) -> &[usize] {
        let droppable = &self.facts.droppable;
        let from = self.by_gap_end.partition_point(|&j| droppable[j].gap_end < at);
        let to = self.by_gap_end.partition_point(|&j| droppable[j].gap_end <= at);
        &self.by_gap_end[from..to]
    }

    /// The chain that re-makes `d` right before its first reader after its gap
    /// from what is resident there, or what it may keep until then
    /// ([`Planner::extendable`]); `None` when there is none within the
    /// bound, or when it would read a variable already overwritten there
    /// (every reader of a variable runs before its writer, so a batch norm's
    /// running statistics, written in the forward phase, keep it out).
    /// `dropped`, when given, is treated as not resident.
    fn chain(&self, d: &Droppable, dropped: Option<TensorId>) -> Option<recompute::Chain> {
        let facts = self.facts;
        let at = d.gap_end;
        let available = |u: TensorId| Some(u) != dropped && (self.resident(u, at) || self.extendable(u, d));
        let chain = recompute::chain(facts.g, d.tensor, available, &facts.view.position, self.options.max_chain)?;
        let overwritten = |u: TensorId| facts.writer[u.index()].is_some_and(|w| w < at);
        let reads_overwritten =
            chain.nodes.iter().any(|&n| facts.g.node(n).inputs.iter().flatten().any(|&u| overwritten(u)));
        (!reads_overwritten).then_some(chain)
    }

    /// Whether a chain re-making `d` may read `u` by keeping it past its last
    /// use: `u` is made by an op (not a variable) and is small beside `d` (a
    /// batch norm's merged statistics, read by the normalization of each part).
    fn extendable(&self, u: TensorId, d: &Droppable) -> bool {
        let facts = self.facts;
        let producer = facts.g.tensor(u).producer.0;
        !facts.g.node(producer).parameterized
            && facts.view.position[producer.index()] < d.gap_end
            && facts.g.tensor(u).ty.bytes() * MAX_EXTENDED_SHARE <= d.bytes
    }

    /// The sources of `chain`, run before position `at`, that it keeps past
    /// their last use: from where, and their bytes.
    pub(super) fn extended(&self, chain: &recompute::Chain, at: usize) -> Vec<(usize, i64)> {
        let facts = self.facts;
        chain
            .sources
            .iter()
            .filter(|s| facts.view.last_use[s.index()] < at)
            .map(|s| (facts.view.last_use[s.index()] + 1, facts.g.tensor(*s).ty.bytes() as i64))
            .collect()
    }
}
