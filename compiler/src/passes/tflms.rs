//! TFLMS: graph rewriting with swap-out and swap-in ops (TFLMS §4-5).
//!
//! A tensor t made by a forward op f1 and read by a backward op f2 lives in
//! device memory from f1 to f2. The rewrite `f2ᴳ ∘ f1ᴳ  →  f2ᴳ ∘ swap_inᶜ ∘
//! swap_outᶜ ∘ f1ᴳ` (eq. 2-5) moves it to host memory in between:
//!
//! 1. **Which edges**: an edge (f1, f2) carrying a float tensor qualifies
//!    when f1 is in the forward phase and f2 in the backward phase (the
//!    phases come from the training-graph construction), or, with
//!    `swap_branches`, when both are forward ops and γ(f2) − γ(f1) >
//!    `branch_threshold` (α of §4.1). Edges of parameterized vertices
//!    (variables, inputs) are never rewritten, and neither are graph
//!    outputs (they stay in device memory to the end, so swapping them saves
//!    nothing). The op-type and scope filters apply to the producer f1.
//!    Tensors smaller than `min_bytes` are skipped. Tensors are taken in
//!    breadth-first order from the start ops, the first `n_tensors` of them.
//! 2. **Rewrite**: one `SwapOut` per tensor (all swap-outs of a tensor are
//!    fused, §4.2.2), placed right after its producer, in the producer's
//!    phase; one `SwapIn` per qualifying consumer, or, with `fuse_swapins`,
//!    per group of consumers whose γ lie within the fusing distance of the
//!    group's first one (§4.2.3): the group then shares one device copy. A
//!    swap-in has the phase of its first consumer. Both ops run on the CPU
//!    device (domain `lms`, proto/OPS.md); the swap-out's output lives in
//!    host memory and the swap-in's in device memory. Qualifying consumers
//!    read the swap-in's output; every other reader keeps reading the
//!    original tensor.
//! 3. **When to swap in**: a control edge g → swap-in from an op g. With
//!    the count trigger (the default), g is chosen by the direct-order
//!    (Algorithm 1) or the chain-rule (Algorithm 2) strategy, between `lb`
//!    and `ub`. With the time trigger, g is the latest op whose end still
//!    lets the transfer finish before the consumer starts, on the device
//!    profile's predicted timeline, given the queue on the host-to-device
//!    stream (Capuchin §4.4, the in-trigger; see `timed`). When no op
//!    qualifies the swap-in gets no control edge: it is triggered by its
//!    consumer and scheduled right before it.
//!
//! γ, the schedule and the reachability the strategies test are those of
//! the input graph. The rewrite is a patch ([`crate::pipeline::Patch`]) that
//! places each swap-out right after its producer and each swap-in right
//! after its control op (and its swap-out) in the schedule, so the memory
//! simulator sees the timing the paper intends; the pass manager checks the
//! result is acyclic, well formed and correctly scheduled.
//!
//! [`fit`] is the budget mode: it picks `n_tensors` and `lb` with the memory
//! simulator so that the rewritten graph fits given device and host budgets.

mod control;
mod fit;
mod peaks;
mod select;
mod splice;
#[cfg(test)]
mod tests;
mod timed;

pub use fit::{fit, ChosenRewrite, Fit, FreeKnobs, MAX_LB};
pub use select::check_knobs;
pub use splice::PASS;

use crate::analysis::order;
use crate::analysis::profile::{DeviceProfile, DEFAULT_PROFILE};
use crate::analysis::scheduled::Scheduled;
use crate::error::Result;
use crate::ir::{Graph, NodeId};
use crate::pipeline::{self, Patch};
use control::ControlSearch;
use select::SwapCandidate;
use serde::Serialize;
use std::fmt;
use std::sync::Arc;

/// How the control op of a swap-in is chosen (TFLMS §4.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CtrldStrategy {
    /// Algorithm 2: breadth-first along the forward ops from the swapped
    /// tensor's producer f1; at a depth between `lb` and `ub`, a backward
    /// consumer of the forward op reached, from which the swap-in's consumer
    /// is reachable. Bounds are relative to f1.
    #[default]
    ChainRule,
    /// Algorithm 1: walking back from the swap-in's consumer f2, the op
    /// closest to f2 whose distance γ(f2) − γ(v) is between `lb` and `ub`,
    /// with γ(v) > γ(f1), from which f2 is reachable. Bounds are relative to f2.
    DirectOrder,
}

/// What decides when a swap-in starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwapInTrigger {
    /// TFLMS's rule: a control op chosen by `ctrld_strategy` between `lb`
    /// and `ub` ops away (TFLMS §4.3).
    #[default]
    Count,
    /// Capuchin's in-trigger (Capuchin §4.4): the latest op that still lets
    /// the transfer finish before the consumer starts, on the predicted
    /// timeline of the configuration's device profile.
    Time,
}

/// The knobs of TFLMS (TFLMS Table 2). Optimizer scopes are replaced by
/// the phase each node records; scopes still select ops by name.
///
/// A *scope* is a prefix of node names split on `/`: scope `block/conv`
/// holds `block/conv` and `block/conv/grad`, not `block/conv1`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TflmsConfig {
    /// How many tensors to swap, counted in breadth-first order from the
    /// start ops; `None`: all that qualify.
    pub n_tensors: Option<usize>,
    /// Lower bound of the control-op distance (default 1).
    pub lb: u32,
    /// Upper bound of the control-op distance (default 10000).
    pub ub: u32,
    /// Strategy for the swap-ins' control ops (default chain rule).
    pub ctrld_strategy: CtrldStrategy,
    /// Fuse the swap-ins of a tensor whose consumers are close (default off).
    pub fuse_swapins: bool,
    /// Consumers whose γ differ from the first consumer of their group by at
    /// most this much share one swap-in. `None` (the default) means `lb`: a
    /// separate swap-in for a consumer within `lb` of the previous one would
    /// be triggered before that one ran, so both copies would be in device
    /// memory at once and fusing is never worse.
    pub fuse_threshold: Option<u32>,
    /// Also swap forward-to-forward edges longer than `branch_threshold`.
    pub swap_branches: bool,
    /// α: a forward edge (u, v) is swapped when γ(v) − γ(u) > α (default 0).
    pub branch_threshold: u32,
    /// Only tensors made by ops of these types (empty: any type).
    pub incl_types: Vec<String>,
    /// Never tensors made by ops of these types.
    pub excl_types: Vec<String>,
    /// Only tensors made by ops in these scopes (empty: any scope).
    pub incl_scopes: Vec<String>,
    /// Never tensors made by ops in these scopes.
    pub excl_scopes: Vec<String>,
    /// Start the breadth-first search from the ops in this scope.
    pub starting_scope: Option<String>,
    /// Start the breadth-first search from the ops with these names.
    pub starting_op_names: Vec<String>,
    /// What starts each swap-in (default: the count rule).
    pub trigger: SwapInTrigger,
    /// Never swap tensors smaller than this many bytes (default 0: any size).
    pub min_bytes: u64,
    /// The device whose predicted timeline places time-triggered swap-ins
    /// (default `h100-sxm`; the plan records its name).
    #[serde(skip)]
    pub profile: Arc<DeviceProfile>,
}

impl Default for TflmsConfig {
    /// Table 2's defaults; the search starts from every parameterized vertex
    /// (variables and inputs), as TFLMS does.
    fn default() -> TflmsConfig {
        TflmsConfig {
            n_tensors: None,
            lb: 1,
            ub: 10000,
            ctrld_strategy: CtrldStrategy::ChainRule,
            fuse_swapins: false,
            fuse_threshold: None,
            swap_branches: false,
            branch_threshold: 0,
            incl_types: Vec::new(),
            excl_types: Vec::new(),
            incl_scopes: Vec::new(),
            excl_scopes: Vec::new(),
            starting_scope: None,
            starting_op_names: Vec::new(),
            trigger: SwapInTrigger::Count,
            min_bytes: 0,
            profile: Arc::new(DeviceProfile::load(DEFAULT_PROFILE).expect("the shipped default profile parses")),
        }
    }
}

impl TflmsConfig {
    /// The γ distance within which consumers share a swap-in.
    pub fn fuse_distance(&self) -> u32 {
        self.fuse_threshold.unwrap_or(self.lb)
    }
}

/// What [`rewrite`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TflmsReport {
    /// The swapped tensors, in the breadth-first order they were picked.
    pub tensors: Vec<SwappedTensor>,
    /// Nodes added: swap-outs plus swap-ins.
    pub ops_added: usize,
    /// Swap-ins for which no control op was found.
    pub swap_ins_without_control: usize,
}

impl TflmsReport {
    /// Bytes of all swapped tensors.
    pub fn swapped_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.bytes).sum()
    }
}

/// A tensor moved to host memory between its producer and its consumers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SwappedTensor {
    /// The tensor's name.
    pub tensor: String,
    /// Its size.
    pub bytes: u64,
    /// γ(v) − γ(u) for its producer u and its last swapped consumer v, in
    /// the input graph.
    pub distance: u32,
    /// The swap-out node.
    pub swap_out: String,
    /// Its swap-ins, in schedule order of their first consumers.
    pub swap_ins: Vec<SwapInReport>,
}

/// One swap-in of a swapped tensor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SwapInReport {
    /// The swap-in node.
    pub node: String,
    /// The consumers that read it, in schedule order.
    pub consumers: Vec<String>,
    /// What starts it.
    pub trigger: Trigger,
}

/// What starts a swap-in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Trigger {
    /// A control edge from this op.
    After(String),
    /// No control op was found: its first consumer needs it.
    Consumer,
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::After(op) => write!(f, "after '{op}'"),
            Trigger::Consumer => f.write_str("triggered by consumer"),
        }
    }
}

/// The TFLMS rewrite of `g` with the knobs of `cfg`, as a patch, and what it
/// swaps. Fails when a starting op or scope names nothing in `g`, or when
/// `g` has a cycle.
pub fn patch(g: &Graph, cfg: &TflmsConfig) -> Result<(Patch, TflmsReport)> {
    Analysis::new(g, cfg)?.patch(cfg)
}

/// [`patch`] applied to a copy of `g` (checked by the pass manager's
/// invariants): the rewritten graph and what was swapped.
pub fn rewrite(g: &Graph, cfg: &TflmsConfig) -> Result<(Graph, TflmsReport)> {
    Analysis::new(g, cfg)?.rewrite(cfg)
}

/// The input graph's scheduled view (its schedule, each node's position and
/// each tensor's release) and γ.
struct Order {
    view: Scheduled,
    /// γ (TFLMS Definition 2), indexed by `NodeId::index()`.
    gamma: Vec<u32>,
}

impl Order {
    fn new(g: &Graph) -> Result<Order> {
        let view = Scheduled::new(g, order::schedule(g)?);
        let gamma = order::gamma(g, &view.schedule);
        Ok(Order { view, gamma })
    }

    fn gamma(&self, id: NodeId) -> u32 {
        self.gamma[id.index()]
    }

    fn position(&self, id: NodeId) -> usize {
        self.view.position(id)
    }
}

/// A swap planned on the input graph: the tensor and its swap-ins.
struct SwapPlan<'a> {
    candidate: &'a SwapCandidate,
    swap_ins: Vec<SwapInPlan>,
}

/// A swap-in planned: the consumers it serves (schedule order) and its
/// control op.
struct SwapInPlan {
    consumers: Vec<NodeId>,
    control: Option<NodeId>,
}

/// What every rewrite of one graph shares: its ordering and the tensors
/// that qualify, in breadth-first order. Budget mode rewrites many times
/// with different `n_tensors` and `lb` from one analysis.
struct Analysis<'g> {
    g: &'g Graph,
    order: Order,
    candidates: Vec<SwapCandidate>,
}

impl<'g> Analysis<'g> {
    /// Orders `g` and finds the tensors that qualify under `cfg`'s edge
    /// rules, filters and start ops (`n_tensors`, `lb`, `ub`, the strategy
    /// and fusing are used by [`Analysis::rewrite`]).
    fn new(g: &'g Graph, cfg: &TflmsConfig) -> Result<Analysis<'g>> {
        let order = Order::new(g)?;
        let candidates = select::candidates(g, &order, cfg)?;
        Ok(Analysis { g, order, candidates })
    }

    /// Plans the first `cfg.n_tensors` candidates and applies the patch to a
    /// copy of the graph.
    fn rewrite(&self, cfg: &TflmsConfig) -> Result<(Graph, TflmsReport)> {
        let (patch, report) = self.patch(cfg)?;
        Ok((pipeline::apply_checked(self.g, &patch)?.0, report))
    }

    /// Plans the first `cfg.n_tensors` candidates as a patch.
    fn patch(&self, cfg: &TflmsConfig) -> Result<(Patch, TflmsReport)> {
        let (plans, queue) = self.plans(cfg);
        Ok(splice::splice(self.g, &self.order, &plans, &queue))
    }

    /// The live peaks of the rewrite with `cfg`'s knobs, without applying it.
    fn peaks(&self, sweep: &peaks::Sweep, cfg: &TflmsConfig) -> peaks::Peaks {
        let (plans, queue) = self.plans(cfg);
        sweep.peaks(&self.order, &plans, &queue)
    }

    /// The swaps of the first `cfg.n_tensors` candidates with their control
    /// ops, and the order their swap-ins are added: (plan, swap-in) pairs.
    fn plans(&self, cfg: &TflmsConfig) -> (Vec<SwapPlan<'_>>, Vec<(usize, usize)>) {
        let count = cfg.n_tensors.unwrap_or(self.candidates.len());
        let mut plans: Vec<SwapPlan<'_>> = self
            .candidates
            .iter()
            .take(count)
            .map(|candidate| {
                let groups = select::group_consumers(&candidate.consumers, &self.order, cfg);
                let swap_ins = groups.into_iter().map(|consumers| SwapInPlan { consumers, control: None }).collect();
                SwapPlan { candidate, swap_ins }
            })
            .collect();
        let queue = match cfg.trigger {
            SwapInTrigger::Count => {
                let mut search = ControlSearch::new(self.g, &self.order);
                let mut queue = Vec::new();
                for (i, plan) in plans.iter_mut().enumerate() {
                    for (j, swap_in) in plan.swap_ins.iter_mut().enumerate() {
                        swap_in.control = search.find(cfg, plan.candidate.producer, swap_in.consumers[0]);
                        queue.push((i, j));
                    }
                }
                queue
            }
            SwapInTrigger::Time => timed::place(self.g, &self.order, &cfg.profile, &mut plans),
        };
        (plans, queue)
    }
}
