//! The budget planner (`--strategy auto`): TSPLIT Algorithm 2's greedy on
//! extra time per byte, with Capuchin §4's swap-or-recompute choice.
//!
//! Memory is simulated over the training graph's schedule once; then, while
//! the peak is over the device budget, the planner takes the candidate with
//! the smallest extra predicted time per byte it removes from the peak:
//!
//! - **swap** a tensor to host memory over its *gap*, the longest stretch
//!   between two of its uses ([`facts::Droppable`]: for a forward tensor,
//!   usually from its last forward use to its first backward one), and back
//!   before the use that ends the gap. The swap-in starts after the latest
//!   op that still hides its transfer (at the peak at the earliest, so the
//!   peak is relieved); its extra time is the part of the transfer not hidden
//!   behind compute, plus what the tensor adds to a saturated link over the
//!   whole phase. Host memory is counted against the host budget.
//! - **recompute** it: drop it over its gap and re-run its producer chain
//!   ([`crate::passes::recompute`], forward ops only) just before the use
//!   that ends the gap; the extra time is the chain's compute time. The
//!   tensors a chain reads are pinned there: a swapped one comes back in
//!   before; a recomputed one makes the chains that read it re-make it too
//!   (their extra time counts).
//!
//! Each decision updates one device and one host [`tracker::Tracker`] in
//! O(log n) (the rematerialization approach of XLA) instead of re-simulating
//! the graph per probe, and candidates wait in a lazy priority queue: costs
//! only grow as decisions accumulate, so a popped candidate is re-costed and
//! taken when it is still the cheapest; when it removes more than the
//! peak's excess, a candidate that removes the whole excess for less extra
//! time in total is taken instead. Ties go to the larger tensor, then
//! the lower tensor id, then swap before recompute: the plan is
//! deterministic.
//!
//! A clean-up pass then undoes decisions (most expensive first) whose removal
//! still fits, and moves each swap-in back towards the op that hides its
//! transfer as far as the budget allows. New candidate kinds (split) are
//! added to [`Kind`] and costed in `candidate.rs`. What `--strategy auto`
//! runs is [`search`] (`search.rs`): this planner at every budget of a
//! fixed ladder up to the budget, TFLMS's plan, and batch splits (`split.rs`), the
//! fastest on the timeline kept.

mod apply;
mod candidate;
mod facts;
#[cfg(test)]
mod milp;
pub mod report;
mod resume;
mod search;
mod split;
#[cfg(test)]
mod tests;
mod tracker;

pub use apply::{patch, PASS};
pub use facts::{Droppable, Facts, Speeds};
pub use report::{decision_reports, DecisionReport, RECOMPUTE, SWAP};
pub use search::{fits_quickly, search, Planned};
pub use split::{ChosenSplit, SplitChoice};

use crate::analysis::footprint::{Footprint, MAX_ROUNDS};
use crate::analysis::memory;
use crate::analysis::profile::DeviceProfile;
use crate::analysis::timeline;
use crate::budget::Budget;
use crate::error::{Error, Result};
use crate::ir::{Graph, NodeId, TensorId};
use crate::passes::recompute::Chain;
use crate::pipeline::{self, Patch};
use crate::units::format_bytes;
use candidate::Candidate;
use resume::{Greedy, Progress};
use std::rc::Rc;
use tracker::Tracker;

/// The longest producer chain a recompute re-runs, in nodes.
pub const DEFAULT_MAX_CHAIN: usize = 8;

/// Budget and limits of one planning run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// The device and host memory the plan must fit.
    pub budget: Budget,
    /// Longest recompute chain, in nodes.
    pub max_chain: usize,
}

impl PlanOptions {
    /// Planning within `budget`, recomputing chains of at most
    /// [`DEFAULT_MAX_CHAIN`] nodes.
    pub fn new(budget: Budget) -> PlanOptions {
        PlanOptions { budget, max_chain: DEFAULT_MAX_CHAIN }
    }
}

/// How a tensor leaves device memory.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// Swapped out after its last use before its gap; swapped back in after the
    /// node at schedule position `trigger`.
    Swap { trigger: usize },
    /// Re-made by re-running `chain` right before its first reader after its gap.
    Recompute { chain: Chain },
}

/// One decision of the plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub tensor: TensorId,
    /// The gap of the tensor it acts on (an index into the droppable gaps
    /// of the planner's facts): a tensor may be decided once per gap.
    pub droppable: usize,
    pub kind: Kind,
    /// Bytes the decision removes from device memory while it holds.
    pub bytes: u64,
    /// Predicted extra step time.
    pub extra_seconds: f64,
    /// The schedule position of the peak the decision was taken for.
    pub peak_step: usize,
}

/// What [`plan`] decided and the memory it predicts.
#[derive(Clone, Debug)]
pub struct Decisions {
    /// The planner's decisions (none when [`search`] kept TFLMS's plan).
    pub decisions: Vec<Decision>,
    /// The planner's (conservative) device peak of the plan.
    pub device_peak: u64,
    pub host_peak: u64,
    /// Whether `device_peak` is within the device budget.
    pub fits: bool,
}

/// The state of a droppable tensor during planning.
#[derive(Clone, Debug, PartialEq)]
enum State {
    Kept,
    Swapped { trigger: usize },
    Recomputed { chain: Chain },
}

/// Everything one planning run updates.
#[derive(Clone)]
struct Planner<'f, 'g> {
    facts: &'f Facts<'g>,
    options: PlanOptions,
    device: Tracker,
    host: Tracker,
    /// State of each droppable tensor, indexed like `facts.droppable`.
    state: Vec<State>,
    /// Positions where a recompute chain reads each droppable tensor.
    pins: Vec<Vec<usize>>,
    /// Indices of `facts.droppable` ordered by the end of their gap (where
    /// a recompute of the gap runs its chain), then by index.
    by_gap_end: Rc<[usize]>,
    /// Bytes swapped out and in so far.
    swapped_bytes: u64,
    decisions: Vec<Decision>,
}

/// Plans swap and recompute decisions that bring `g`'s device peak over
/// `schedule` within `options.budget.device`. Returns the plan even when it
/// does not fit (`fits` false): its peak is the smallest this planner reaches.
pub fn plan(g: &Graph, schedule: &[NodeId], speeds: &Speeds, options: PlanOptions) -> Decisions {
    let facts = Facts::new(g, schedule, speeds);
    plan_with(&facts, options)
}

/// [`plan`] on facts already gathered (a budget search plans one graph many times).
pub fn plan_with(facts: &Facts<'_>, options: PlanOptions) -> Decisions {
    let mut run = Progress::start(facts, options, by_gap_end(facts).into());
    run.greedy(false);
    run.planner.finish()
}

/// Indices of `facts.droppable` ordered by the end of their gap, then by index.
fn by_gap_end(facts: &Facts<'_>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..facts.droppable.len()).collect();
    order.sort_by_key(|&i| (facts.droppable[i].gap_end, i));
    order
}

impl Planner<'_, '_> {
    /// Cleans the greedy's plan up when it fits, and returns it.
    fn finish(mut self) -> Decisions {
        let budget = self.options.budget.device;
        if self.device.peak().1 <= budget {
            self.clean_up();
        }
        let device_peak = self.device.peak().1;
        Decisions { device_peak, host_peak: self.host.peak().1, fits: device_peak <= budget, decisions: self.decisions }
    }

    /// Every candidate that frees memory at `step`, costed.
    fn candidates_at(&self, step: usize) -> Vec<Candidate> {
        let mut found = Vec::new();
        for (i, d) in self.facts.droppable.iter().enumerate() {
            if matches!(self.state[i], State::Recomputed { .. }) || !d.covers(step) {
                continue;
            }
            for kind in [candidate::Move::Swap, candidate::Move::Recompute] {
                if let Some(c) = self.cost(&Candidate::new(i, kind), step) {
                    found.push(c);
                }
            }
        }
        found
    }

    /// Applies a costed candidate to the trackers and records the decision.
    fn take(&mut self, c: Candidate, step: usize) {
        let d = &self.facts.droppable[c.index];
        let bytes = d.bytes as i64;
        let kind = c.kind.expect("a costed candidate has its decision");
        // A swapped tensor is decided again: a later swap-in, or a recompute.
        let previous = match self.state[c.index] {
            State::Swapped { trigger } => Some(trigger),
            _ => None,
        };
        if let Some(old) = previous {
            self.device.add(d.gap_start + 1, old, bytes);
            self.host.add(d.out_at + 1, old, -bytes);
            self.swapped_bytes -= d.bytes;
        }
        match &kind {
            Kind::Swap { trigger } => {
                self.device.add(d.gap_start + 1, *trigger, -bytes);
                self.host.add(d.out_at + 1, *trigger, bytes);
                self.swapped_bytes += d.bytes;
                self.state[c.index] = State::Swapped { trigger: *trigger };
            }
            Kind::Recompute { chain } => {
                self.device.add(d.gap_start + 1, d.gap_end - 1, -bytes);
                self.run_chain(d.gap_end, chain, 1);
                self.state[c.index] = State::Recomputed { chain: chain.clone() };
            }
        }
        for r in c.rechained {
            let at = self.facts.droppable[r.index].gap_end;
            self.run_chain(at, &r.old, -1);
            self.run_chain(at, &r.grown, 1);
            let node_seconds = &self.facts.speeds.node_seconds;
            let decision = self.decisions.iter_mut().find(|x| x.droppable == r.index).expect("decided before");
            decision.extra_seconds += r.grown.seconds(node_seconds) - r.old.seconds(node_seconds);
            decision.kind = Kind::Recompute { chain: r.grown.clone() };
            self.state[r.index] = State::Recomputed { chain: r.grown };
        }
        if previous.is_some() {
            let decision = self.decisions.iter_mut().find(|x| x.droppable == c.index).expect("decided before");
            decision.kind = kind;
            decision.extra_seconds += c.extra_seconds;
            return;
        }
        self.decisions.push(Decision {
            tensor: d.tensor,
            droppable: c.index,
            kind,
            bytes: d.bytes,
            extra_seconds: c.extra_seconds,
            peak_step: step,
        });
    }

    /// Adds (`sign` 1) or removes (-1) what running `chain` right before
    /// position `at` holds: its transient bytes, the sources it keeps past
    /// their last use, and a pin on each source's gap there.
    fn run_chain(&mut self, at: usize, chain: &Chain, sign: i64) {
        self.device.add(at, at, chain.transient_bytes as i64 * sign);
        for (from, bytes) in self.extended(chain, at) {
            self.device.add(from, at, bytes * sign);
        }
        for s in &chain.sources {
            let Some(j) = self.facts.gap_at(*s, at) else { continue };
            if sign > 0 {
                self.pins[j].push(at);
            } else if let Some(k) = self.pins[j].iter().position(|&p| p == at) {
                self.pins[j].swap_remove(k);
            }
        }
    }

    /// Whether tensor `u` has a device copy at `step` in the current plan:
    /// between its producer and last use, unless `step` falls in a gap where
    /// it is dropped (before the swap-in of a swapped one).
    fn resident(&self, u: TensorId, step: usize) -> bool {
        let facts = self.facts;
        let made = facts.view.position[facts.g.tensor(u).producer.0.index()];
        if step < made || step > facts.view.last_use[u.index()] {
            return false;
        }
        let Some(i) = facts.gap_at(u, step) else { return true };
        match &self.state[i] {
            State::Kept => true,
            State::Swapped { trigger } => step > *trigger,
            State::Recomputed { .. } => false,
        }
    }

    /// Undoes decisions (most expensive first) whose removal still fits;
    /// then starts each delayed swap-in as early as the budget allows, up
    /// to the op that hides its transfer.
    fn clean_up(&mut self) {
        let budget = self.options.budget.device;
        let mut order: Vec<usize> = (0..self.decisions.len()).collect();
        order.sort_by(|&a, &b| {
            let (x, y) = (&self.decisions[a], &self.decisions[b]);
            y.extra_seconds.total_cmp(&x.extra_seconds).then(b.cmp(&a))
        });
        let mut undone = vec![false; self.decisions.len()];
        for i in order {
            let decision = self.decisions[i].clone();
            let j = decision.droppable;
            // Kept, the tensor is resident wherever a chain reads it, so undoing is always sound.
            self.revert(j, &decision, 1);
            if self.device.peak().1 <= budget && self.host.peak().1 <= self.options.budget.host {
                undone[i] = true;
                self.state[j] = State::Kept;
            } else {
                self.revert(j, &decision, -1);
            }
        }
        let mut kept = Vec::new();
        for (decision, undone) in std::mem::take(&mut self.decisions).into_iter().zip(undone) {
            if !undone {
                kept.push(decision);
            }
        }
        self.decisions = kept;
        for i in 0..self.decisions.len() {
            self.start_swap_in_earlier(i);
        }
    }

    /// Adds back (`sign` 1) or removes again (`sign` -1) a decision's bytes.
    fn revert(&mut self, j: usize, decision: &Decision, sign: i64) {
        let d = &self.facts.droppable[j];
        let bytes = d.bytes as i64 * sign;
        match &decision.kind {
            Kind::Swap { trigger } => {
                self.device.add(d.gap_start + 1, *trigger, bytes);
                self.host.add(d.out_at + 1, *trigger, -bytes);
            }
            Kind::Recompute { chain } => {
                self.device.add(d.gap_start + 1, d.gap_end - 1, bytes);
                self.run_chain(d.gap_end, chain, -sign);
            }
        }
    }

    /// Moves decision `i`'s swap-in trigger earlier, towards the latest op
    /// that hides its transfer, as far as the device budget allows.
    fn start_swap_in_earlier(&mut self, i: usize) {
        let Kind::Swap { trigger } = self.decisions[i].kind else { return };
        let j = self.decisions[i].droppable;
        let d = &self.facts.droppable[j];
        let lead = d.bytes as f64 / self.facts.speeds.h2d_bytes_per_second;
        let hiding = self.facts.clock.latest_hiding(d.gap_start, d.gap_end, lead);
        if hiding >= trigger {
            return;
        }
        // The earliest q in hiding..trigger with room for the tensor over q+1..=trigger.
        let budget = self.options.budget.device;
        let fits = |q: usize| self.device.max_in(q + 1, trigger) + d.bytes <= budget;
        let (mut lo, mut hi) = (hiding, trigger);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if fits(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        if lo < trigger {
            self.device.add(lo + 1, trigger, d.bytes as i64);
            self.host.add(lo + 1, trigger, -(d.bytes as i64));
            let decision = &mut self.decisions[i];
            decision.kind = Kind::Swap { trigger: lo };
            decision.extra_seconds = candidate::swap_in_exposed(self.facts, d, lo)
                + candidate::link_overload(self.facts, d.bytes, self.swapped_bytes - d.bytes);
        }
    }
}

/// Predicted extra step time of `decisions`: swap-in time not hidden behind
/// compute, recompute chains, and swap traffic beyond what each phase hides.
pub fn extra_seconds(facts: &Facts<'_>, decisions: &[Decision]) -> f64 {
    let mut swapped = 0;
    let mut extra = 0.0;
    for decision in decisions {
        let d = &facts.droppable[decision.droppable];
        match &decision.kind {
            Kind::Swap { trigger } => {
                extra += candidate::swap_in_exposed(facts, d, *trigger);
                swapped += d.bytes;
            }
            Kind::Recompute { chain } => extra += chain.seconds(&facts.speeds.node_seconds),
        }
    }
    extra + candidate::link_overload(facts, swapped, 0)
}

/// The node whose own working set (its inputs and outputs plus everything
/// resident) is largest, and that working set: no plan goes below it.
pub fn largest_working_set(g: &Graph, schedule: &[NodeId]) -> (NodeId, u64) {
    let profile = memory::simulate(g, schedule);
    let device_bytes = |t: &TensorId| {
        let producer = g.node(g.tensor(*t).producer.0);
        if memory::pool(producer) == memory::Pool::Device && !producer.parameterized {
            g.tensor(*t).ty.bytes()
        } else {
            0
        }
    };
    schedule
        .iter()
        .map(|&id| {
            let node = g.node(id);
            let mut tensors: Vec<TensorId> = node.inputs.iter().flatten().chain(&node.outputs).copied().collect();
            tensors.sort();
            tensors.dedup();
            (id, profile.resident_bytes + tensors.iter().map(device_bytes).sum::<u64>())
        })
        .fold((schedule[0], 0), |best, (id, bytes)| if bytes > best.1 { (id, bytes) } else { best })
}

/// The planned graph and what it takes.
#[derive(Clone, Debug)]
pub struct Fitted {
    /// The changes that carry out the plan on the training graph.
    pub patch: Patch,
    /// The training graph with the patch applied.
    pub graph: Graph,
    pub plan: Decisions,
    /// Each decision with its ΔM, ΔT and why.
    pub reports: Vec<DecisionReport>,
    /// Live peaks and placed arenas of `graph` (the memory simulator and the
    /// placement, not the planner's estimate); from [`fit`], arenas placed
    /// only until they fit ([`Footprint::within`]: [`Footprint::of`] gives
    /// the arenas the `.lms` records).
    pub footprint: Footprint,
}

/// Plans `g` for `options`' budgets and applies the plan: a plan fits when
/// its placed arenas are within the budgets ([`Footprint::fits`]). The
/// planner tracks live bytes, so it plans at a live target, the budgets at
/// first; while the plan's arenas are over them it plans again at a target
/// lowered in proportion ([`Footprint::lower`]), at most [`MAX_ROUNDS`] times. Fails with
/// [`Error::NoPlan`] when no plan fits.
pub fn fit(g: &Graph, speeds: &Speeds, options: PlanOptions) -> Result<Fitted> {
    let facts = Facts::new(g, g.schedule(), speeds);
    fit_faster(&mut Greedy::new(&facts), options, None, OnNoPlan::Explain)
        .map(|fitted| fitted.expect("a fit with nothing to beat drops no plan"))
}

/// A predicted step a search already has a plan for: a plan that is not
/// faster on `profile` is dropped before its arenas are placed (placing is
/// most of what a plan costs, and a search keeps only the fastest plan).
#[derive(Clone, Copy)]
pub(crate) struct ToBeat<'p> {
    pub profile: &'p DeviceProfile,
    pub step_seconds: f64,
}

impl ToBeat<'_> {
    /// Whether `graph`, run in its schedule, is predicted no faster.
    fn not_beaten_by(&self, graph: &Graph) -> bool {
        timeline::simulate(graph, graph.schedule(), self.profile).step_seconds >= self.step_seconds
    }

    /// Whether the plan of `decisions` on the graph of `facts` is surely
    /// predicted no faster, by [`step_at_least`] and before its graph is
    /// built. The margin covers the rounding of the two sums, so this
    /// answers yes only where [`ToBeat::not_beaten_by`] would.
    fn surely_not_beaten_by(&self, facts: &Facts<'_>, decisions: &[Decision]) -> bool {
        step_at_least(facts, decisions, self.profile) * (1.0 - 1e-9) >= self.step_seconds
    }
}

/// A step the timeline of the plan of `decisions` on the graph of `facts`
/// never goes below, from the decisions alone (no graph built): each stream
/// runs its work one op at a time, so the step is at least each stream's
/// busy time. The compute stream runs the graph's ops and the copies of the
/// recompute chains (a copy takes its original's time); each swap adds a
/// swap-out and a swap-in of the tensor's bytes, each at least its link's
/// bandwidth plus the launch latency (nothing where the profile has
/// measured op times, which may time a copy below that), on their own
/// streams where copies overlap compute and on the compute stream where not.
fn step_at_least(facts: &Facts<'_>, decisions: &[Decision], profile: &DeviceProfile) -> f64 {
    let copy_seconds = |bytes: u64, bytes_per_second: f64| {
        if profile.op_seconds.is_empty() {
            bytes as f64 / bytes_per_second + profile.launch_seconds
        } else {
            0.0
        }
    };
    let mut compute = facts.clock.between(0, facts.schedule.len());
    let (mut out, mut back) = (0.0, 0.0);
    for decision in decisions {
        let bytes = facts.droppable[decision.droppable].bytes;
        match &decision.kind {
            Kind::Recompute { chain } => compute += chain.seconds(&facts.speeds.node_seconds),
            Kind::Swap { .. } => {
                out += copy_seconds(bytes, profile.device_to_host_bytes_per_second);
                back += copy_seconds(bytes, profile.host_to_device_bytes_per_second);
            }
        }
    }
    if profile.copies_overlap_compute {
        compute.max(out).max(back)
    } else {
        compute + out + back
    }
}

/// What a fit returns when the planner's plan at the budgets misses them
/// by its live peak (no plan of the graph fits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnNoPlan {
    /// [`Error::NoPlan`] naming the op at the plan's peak (the plan is
    /// applied and its memory simulated to find it).
    Explain,
    /// `Ok(None)`, as for a dropped plan: for a search that moves on to its
    /// next budget either way.
    Skip,
}

/// [`fit`] with `greedy`'s runs (on the graph's facts), dropping the plan
/// (`Ok(None)`) as soon as a round's plan fits its live target but is
/// predicted no faster than `to_beat` (a lower target adds decisions, so
/// later rounds are taken to be no faster): first by [`step_at_least`],
/// without building its graph, else by the built graph's timeline. A
/// round's plan is made into a graph only where it fits its live target
/// (or to explain, by `on_no_plan`, why none fits).
pub(crate) fn fit_faster(
    greedy: &mut Greedy<'_, '_>,
    options: PlanOptions,
    to_beat: Option<ToBeat<'_>>,
    on_no_plan: OnNoPlan,
) -> Result<Option<Fitted>> {
    let facts = greedy.facts;
    let g = facts.g;
    let budgets = options.budget;
    let mut target = budgets;
    // The placed plan closest to fitting: its overshoot and why it does not fit.
    let mut closest: Option<(u64, Error)> = None;
    for round in 0..MAX_ROUNDS {
        let plan = greedy.plan(PlanOptions { budget: target, ..options });
        if !plan.fits {
            if round > 0 {
                break;
            }
            if on_no_plan == OnNoPlan::Skip {
                return Ok(None);
            }
            let (graph, _) = pipeline::apply_unchecked(g, &apply::patch_named(facts, &greedy.names, &plan.decisions))?;
            let profile = memory::simulate(&graph, graph.schedule());
            let peak_op = &graph.node(graph.schedule()[profile.peak_step]).name;
            return Err(no_plan(g, facts.schedule, profile.peak_bytes, peak_op, options.budget.device));
        }
        if to_beat.is_some_and(|b| b.surely_not_beaten_by(facts, &plan.decisions)) {
            return Ok(None);
        }
        let patch = apply::patch_named(facts, &greedy.names, &plan.decisions);
        // Checked once it may be kept: most plans of a search are dropped unplaced.
        let (graph, _) = pipeline::apply_unchecked(g, &patch)?;
        if to_beat.is_some_and(|b| b.not_beaten_by(&graph)) {
            return Ok(None);
        }
        pipeline::check_patched(&graph, &patch)?;
        let footprint = Footprint::within(&graph, graph.schedule(), budgets);
        if footprint.fits(budgets) {
            let reports = decision_reports(facts, &plan.decisions);
            return Ok(Some(Fitted { patch, graph, plan, reports, footprint }));
        }
        let overshoot = footprint.overshoot(budgets);
        if closest.as_ref().is_none_or(|(o, _)| overshoot < *o) {
            closest = Some((overshoot, arena_over(&graph, &footprint, budgets)));
        }
        let lowered = footprint.lower(target, budgets);
        if lowered == target {
            break;
        }
        target = lowered;
    }
    Err(closest.map(|(_, e)| e).expect("the first round returns or records a placed plan"))
}

/// The planner's plan for `options`' budgets, applied whether or not its
/// arenas fit them (`lms compile --force`; [`fit`] is the checked search).
pub fn best_effort(g: &Graph, speeds: &Speeds, options: PlanOptions) -> Result<Fitted> {
    let facts = Facts::new(g, g.schedule(), speeds);
    let plan = plan_with(&facts, options);
    let patch = patch(&facts, &plan.decisions);
    let (graph, _) = pipeline::apply_checked(g, &patch)?;
    let footprint = Footprint::of(&graph, graph.schedule());
    let reports = decision_reports(&facts, &plan.decisions);
    Ok(Fitted { patch, graph, plan, reports, footprint })
}

/// [`fit`], and when that plan swaps, the recompute-only plan too: of the two, the one
/// the full timeline on `profile` predicts faster is kept (ties: the plan with swaps). The
/// planner costs a swap by its own transfer against the compute it can hide behind; that
/// transfers queue behind one another on the host link, and stall the backward pass when
/// they do, only the timeline of the whole step shows.
pub fn fit_fastest(g: &Graph, speeds: &Speeds, profile: &DeviceProfile, options: PlanOptions) -> Result<Fitted> {
    let facts = Facts::new(g, g.schedule(), speeds);
    fit_fastest_below(&mut Greedy::new(&facts), profile, options, None, OnNoPlan::Explain)
        .map(|fitted| fitted.expect("a fit with nothing to beat drops no plan"))
}

/// [`fit_fastest`] with `greedy`'s runs, `Ok(None)` where its plan would be
/// predicted no faster than `to_beat` seconds ([`fit_faster`], which
/// `on_no_plan` also tells what to return where no plan fits); the
/// recompute-only plan is tried also where the plan with swaps is dropped
/// or does not fit.
pub(crate) fn fit_fastest_below(
    greedy: &mut Greedy<'_, '_>,
    profile: &DeviceProfile,
    options: PlanOptions,
    to_beat: Option<f64>,
    on_no_plan: OnNoPlan,
) -> Result<Option<Fitted>> {
    let beat = |step_seconds| ToBeat { profile, step_seconds };
    let with_host = fit_faster(greedy, options, to_beat.map(beat), on_no_plan);
    if options.budget.host == 0 {
        return with_host;
    }
    // A plan with swaps that is dropped as no faster than `to_beat`, or
    // whose arenas do not fit, says nothing of the recompute-only plan.
    let to_beat = match &with_host {
        Ok(Some(f)) if !f.plan.decisions.iter().any(|d| matches!(d.kind, Kind::Swap { .. })) => return with_host,
        Ok(Some(f)) => Some(timeline::simulate(&f.graph, f.graph.schedule(), profile).step_seconds),
        Ok(None) | Err(Error::NoPlan { .. }) => to_beat,
        Err(_) => return with_host,
    };
    let no_host = PlanOptions { budget: Budget { host: 0, ..options.budget }, ..options };
    match fit_faster(greedy, no_host, to_beat.map(beat), on_no_plan) {
        Ok(Some(recompute_only)) => Ok(Some(recompute_only)),
        Ok(None) => Ok(with_host.ok().flatten()),
        Err(Error::NoPlan { .. }) => with_host,
        Err(e) => Err(e),
    }
}

/// The one-line error for a graph no plan fits: the op whose own working
/// set exceeds the budget (or the op at the best plan's peak) and the
/// smallest peak any plan reaches.
fn no_plan(g: &Graph, schedule: &[NodeId], smallest: u64, peak_op: &str, budget: u64) -> Error {
    let (op, working_set) = largest_working_set(g, schedule);
    let why = if working_set > budget {
        format!(
            "op '{}' alone needs {} (its inputs and outputs plus the resident variables)",
            g.node(op).name,
            format_bytes(working_set)
        )
    } else {
        format!("the best plan peaks at op '{peak_op}'")
    };
    Error::NoPlan { pool: "device", why, smallest, budget }
}

/// The error for a graph whose best plan is within the budgets by its live
/// peaks but not by its placed arenas: the pool furthest over, its arena
/// and live peak.
fn arena_over(graph: &Graph, footprint: &Footprint, budgets: Budget) -> Error {
    let (pool, used, budget) = footprint.furthest_over(budgets);
    let op = graph.schedule().get(used.peak_step).map_or("", |&id| graph.node(id).name.as_str());
    let why = format!(
        "the best plan's {pool} arena needs {} placed, {} over, with its live peak {} at op '{}'",
        format_bytes(used.arena_bytes),
        format_bytes(used.arena_bytes.saturating_sub(budget)),
        format_bytes(used.peak_bytes),
        lms_proto::escape::Escaped(op)
    );
    Error::NoPlan { pool, why, smallest: used.peak_bytes, budget }
}
