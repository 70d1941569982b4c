//! Unit tests of the TFLMS pass on a hand-built training graph.

use super::{fit, rewrite, CtrldStrategy, FreeKnobs, SwapInTrigger, TflmsConfig, TflmsReport, Trigger};
use crate::analysis::footprint::Footprint;
use crate::analysis::profile::{DeviceProfile, DEFAULT_PROFILE};
use crate::analysis::timeline::{self, Timeline};
use crate::analysis::{memory, order};
use crate::budget::Budget;
use crate::emit::text::to_text;
use crate::error::Error;
use crate::ir::{Attrs, DType, Device, Graph, Node, NodeId, Phase, TensorId, TensorType, SWAP_IN_OP, SWAP_OUT_OP};
use crate::shape::cost::{Engine, Work};

/// Builds graphs whose nodes each make one f32[4] tensor named like the node.
struct Builder {
    g: Graph,
}

impl Builder {
    fn node(
        &mut self,
        name: &str,
        op: &str,
        phase: Phase,
        parameterized: bool,
        inputs: &[TensorId],
    ) -> (NodeId, TensorId) {
        let node = Node {
            name: name.into(),
            op: op.into(),
            domain: String::new(),
            attrs: Attrs::new(),
            parameterized,
            phase,
            device: Device::Gpu,
            inputs: inputs.iter().map(|&t| Some(t)).collect(),
            outputs: vec![],
        };
        let id = self.g.add_node(node, vec![(name.into(), TensorType::new(DType::F32, vec![4]))]);
        (id, self.g.node(id).outputs[0])
    }

    fn op(&mut self, name: &str, op: &str, phase: Phase, inputs: &[TensorId]) -> TensorId {
        self.node(name, op, phase, false, inputs).1
    }
}

/// A training graph (γ in brackets):
///
/// ```text
/// forward   x, w [0]  →  l1/mm = MatMul(x, w) [1]  →  l1/relu [2]  →  l2/relu [3]
///           l3/add = Add(l2/relu, l1/mm) [4]  →  loss [5] (graph output)
/// backward  loss/grad(l3/add) [5]  →  l3/grad(·, l2/relu) [6]  →  l2/grad(·, l1/relu) [7]
///           →  l1/relu/grad(·, l1/mm) [8]  →  l1/mm/grad(·, l1/mm) [9]  →  l1/mm/grad_w(·, x) [10]
/// update    w/update(w, ·) [11], writing w
/// ```
///
/// `l1/mm` has two backward consumers, γ 8 and 9, and a forward one 3 later.
fn training_graph() -> Graph {
    let mut b = Builder { g: Graph::new("chain", 13) };
    use Phase::{Backward as B, Forward as F};
    let x = b.node("x", "Input", F, true, &[]).1;
    let (w_node, w) = b.node("w", "Variable", F, true, &[]);
    let f1 = b.op("l1/mm", "MatMul", F, &[x, w]);
    let f2 = b.op("l1/relu", "Relu", F, &[f1]);
    let f3 = b.op("l2/relu", "Relu", F, &[f2]);
    let f4 = b.op("l3/add", "Add", F, &[f3, f1]);
    let loss = b.op("loss", "Loss", F, &[f4]);
    let g5 = b.op("loss/grad", "LossGrad", B, &[f4]);
    let g4 = b.op("l3/grad", "UnaryGrad", B, &[g5, f3]);
    let g3 = b.op("l2/grad", "UnaryGrad", B, &[g4, f2]);
    let g2 = b.op("l1/relu/grad", "UnaryGrad", B, &[g3, f1]);
    let g1 = b.op("l1/mm/grad", "Mul", B, &[g2, f1]);
    let gw = b.op("l1/mm/grad_w", "MatMul", B, &[g1, x]);
    let update = b.op("w/update", "SgdUpdate", Phase::Update, &[w, gw]);
    b.g.add_update_edge(update, w_node);
    b.g.inputs = vec![x];
    b.g.outputs = vec![loss];
    b.g
}

/// Rewrites the training graph and checks what every rewrite must hold:
/// well formed, acyclic, its stored schedule topological.
fn rewritten(cfg: &TflmsConfig) -> (Graph, TflmsReport) {
    let (g, report) = rewrite(&training_graph(), cfg).expect("rewrites");
    g.verify().expect("well formed");
    let schedule = order::schedule(&g).expect("acyclic");
    assert_eq!(schedule, g.schedule(), "the stored schedule is topological");
    (g, report)
}

fn swapped(report: &TflmsReport) -> Vec<&str> {
    report.tensors.iter().map(|t| t.tensor.as_str()).collect()
}

/// The tensors swapped by the rewrite under the default config changed by `edit`.
fn swapped_with(edit: impl FnOnce(&mut TflmsConfig)) -> Vec<String> {
    let mut cfg = TflmsConfig::default();
    edit(&mut cfg);
    swapped(&rewritten(&cfg).1).iter().map(|s| s.to_string()).collect()
}

/// The trigger of the first swap-in of `l1/mm` under `strategy` with bounds `lb`, `ub`.
fn first_trigger(strategy: CtrldStrategy, lb: u32, ub: u32) -> Trigger {
    let cfg = TflmsConfig { ctrld_strategy: strategy, lb, ub, ..TflmsConfig::default() };
    triggers(&rewritten(&cfg).1, "l1/mm")[0].clone()
}

/// The position of a node (by name) in `g`'s default schedule.
fn scheduled_at(g: &Graph) -> impl Fn(&str) -> usize + '_ {
    let schedule: Vec<&str> = order::schedule(g).expect("acyclic").iter().map(|&id| g.node(id).name.as_str()).collect();
    move |name| schedule.iter().position(|n| *n == name).expect("scheduled")
}

/// The device and host peaks of `g` over its default schedule.
fn profile(g: &Graph) -> memory::MemoryProfile {
    memory::simulate(g, &order::schedule(g).expect("acyclic"))
}

/// Live peaks and placed arenas of `g` over its schedule.
fn footprint(g: &Graph) -> Footprint {
    Footprint::of(g, &order::schedule(g).expect("acyclic"))
}

fn node_named<'g>(g: &'g Graph, name: &str) -> &'g Node {
    g.node_ids().map(|id| g.node(id)).find(|n| n.name == name).unwrap_or_else(|| panic!("no node '{name}'"))
}

/// Names of the tensors a node reads, slot by slot.
fn reads(g: &Graph, name: &str) -> Vec<String> {
    node_named(g, name).inputs.iter().flatten().map(|&t| g.tensor(t).name.clone()).collect()
}

/// The triggers of the swap-ins of `tensor`, in order.
fn triggers(report: &TflmsReport, tensor: &str) -> Vec<Trigger> {
    let t = report.tensors.iter().find(|t| t.tensor == tensor).unwrap_or_else(|| panic!("'{tensor}' not swapped"));
    t.swap_ins.iter().map(|s| s.trigger.clone()).collect()
}

fn after(op: &str) -> Trigger {
    Trigger::After(op.into())
}

#[test]
fn forward_to_backward_edges_are_rewritten() {
    let (g, report) = rewritten(&TflmsConfig::default());
    // Breadth-first from x and w: l3/add is 2 read edges away, l2/relu 3.
    assert_eq!(swapped(&report), ["l1/mm", "l1/relu", "l3/add", "l2/relu"]);
    // Backward readers read the swap-ins; forward readers the original.
    assert_eq!(reads(&g, "l1/relu/grad"), ["l2/grad", "l1/mm/swap_in"]);
    assert_eq!(reads(&g, "l1/mm/grad"), ["l1/relu/grad", "l1/mm/swap_in_2"]);
    assert_eq!(reads(&g, "l3/add"), ["l2/relu", "l1/mm"]);
    assert_eq!(reads(&g, "loss"), ["l3/add"]);
    assert_eq!(reads(&g, "loss/grad"), ["l3/add/swap_in"]);
    // One swap-out per tensor, on the CPU in the producer's phase; swap-ins
    // in the consumer's phase.
    let swap_out = node_named(&g, "l1/mm/swap_out");
    assert_eq!(
        (swap_out.op.as_str(), swap_out.domain.as_str(), swap_out.device, swap_out.phase),
        (SWAP_OUT_OP, "lms", Device::Cpu, Phase::Forward)
    );
    assert_eq!(reads(&g, "l1/mm/swap_out"), ["l1/mm"]);
    let swap_in = node_named(&g, "l1/mm/swap_in");
    assert_eq!((swap_in.op.as_str(), swap_in.device, swap_in.phase), (SWAP_IN_OP, Device::Cpu, Phase::Backward));
    assert_eq!(reads(&g, "l1/mm/swap_in"), ["l1/mm/swap_out"]);
    let t = &report.tensors[0];
    assert_eq!((t.bytes, t.distance, t.swap_out.as_str()), (16, 8, "l1/mm/swap_out"));
    assert_eq!(report.ops_added, 4 + 5);
    // The text form shows the swaps and their control edges.
    let text = to_text(&g).expect("acyclic");
    assert!(text.contains("%l1/mm/swap_out: f32[4] = lms::SwapOut(%l1/mm)  # l1/mm/swap_out γ2 fwd cpu"), "{text}");
    assert!(text.contains("= lms::SwapIn(%l1/mm/swap_out) after(l2/grad)"), "{text}");
}

#[test]
fn the_input_graph_is_not_changed() {
    let g = training_graph();
    let before = to_text(&g).expect("acyclic");
    rewrite(&g, &TflmsConfig::default()).expect("rewrites");
    assert_eq!(to_text(&g).expect("acyclic"), before);
}

#[test]
fn edges_of_variables_and_inputs_are_not_rewritten() {
    let (g, report) = rewritten(&TflmsConfig::default());
    assert!(!swapped(&report).iter().any(|t| *t == "x" || *t == "w"));
    assert_eq!(reads(&g, "l1/mm/grad_w"), ["l1/mm/grad", "x"]);
    assert_eq!(reads(&g, "w/update"), ["w", "l1/mm/grad_w"]);
    let updates: Vec<_> = g
        .edges()
        .filter(|(_, _, e)| e.action == crate::ir::Action::Update)
        .map(|(s, d, _)| (g.node(s).name.clone(), g.node(d).name.clone()))
        .collect();
    assert_eq!(updates, [("w/update".to_string(), "w".to_string())]);
}

#[test]
fn graph_outputs_are_not_swapped() {
    let mut g = training_graph();
    let add = g.tensors().find(|(_, t)| t.name == "l3/add").map(|(id, _)| id).expect("l3/add");
    g.outputs.push(add);
    let (_, report) = rewrite(&g, &TflmsConfig::default()).expect("rewrites");
    assert_eq!(swapped(&report), ["l1/mm", "l1/relu", "l2/relu"]);
}

#[test]
fn types_and_scopes_filter_producers() {
    assert_eq!(swapped_with(|c| c.excl_types = vec!["Relu".into()]), ["l1/mm", "l3/add"]);
    assert_eq!(swapped_with(|c| c.incl_types = vec!["Relu".into()]), ["l1/relu", "l2/relu"]);
    assert_eq!(swapped_with(|c| c.incl_scopes = vec!["l1".into()]), ["l1/mm", "l1/relu"]);
    assert_eq!(swapped_with(|c| c.excl_scopes = vec!["l1/".into()]), ["l3/add", "l2/relu"]);
    // Included types and scopes add up; exclusions win.
    let both = swapped_with(|c| {
        c.incl_types = vec!["Add".into()];
        c.incl_scopes = vec!["l2".into()];
        c.excl_types = vec!["Relu".into()];
    });
    assert_eq!(both, ["l3/add"]);
    // "l" is not a scope of "l1/mm": scopes split on '/'.
    assert!(swapped_with(|c| c.incl_scopes = vec!["l".into()]).is_empty());
    assert!(
        super::select::in_scope("a/b/c", "a/b")
            && super::select::in_scope("a/b", "a/b")
            && !super::select::in_scope("a/bc", "a/b")
    );
}

#[test]
fn n_tensors_counts_in_breadth_first_order_from_the_start() {
    assert_eq!(swapped_with(|c| c.n_tensors = Some(2)), ["l1/mm", "l1/relu"]);
    assert_eq!(swapped_with(|c| c.n_tensors = Some(0)), Vec::<String>::new());
    // From l2/relu: l1's tensors are not reachable.
    assert_eq!(swapped_with(|c| c.starting_op_names = vec!["l2/relu".into()]), ["l2/relu", "l3/add"]);
    assert_eq!(
        swapped_with(|c| {
            c.starting_scope = Some("l3".into());
            c.n_tensors = Some(1);
        }),
        ["l3/add"]
    );
    let unknown =
        rewrite(&training_graph(), &TflmsConfig { starting_op_names: vec!["nope".into()], ..TflmsConfig::default() });
    assert!(matches!(unknown, Err(Error::Usage(ref m)) if m.contains("'nope'")), "{unknown:?}");
    let empty =
        rewrite(&training_graph(), &TflmsConfig { starting_scope: Some("nope".into()), ..TflmsConfig::default() });
    assert!(matches!(empty, Err(Error::Usage(_))));
}

#[test]
fn direct_order_walks_back_from_the_consumer_between_lb_and_ub() {
    let direct = |lb, ub| first_trigger(CtrldStrategy::DirectOrder, lb, ub);
    // The first swap-in of l1/mm (γ1) feeds l1/relu/grad (γ8).
    assert_eq!(direct(1, 10000), after("l2/grad")); // γ7
    assert_eq!(direct(3, 10000), after("loss/grad")); // γ5; `loss` (γ5) does not reach it
    assert_eq!(direct(6, 10000), after("l1/relu")); // γ2, a forward op
    assert_eq!(direct(7, 10000), Trigger::Consumer); // γ1 is not after l1/mm
    assert_eq!(direct(3, 3), after("loss/grad"));
    assert_eq!(direct(4, 3), Trigger::Consumer); // lb > ub
}

#[test]
fn chain_rule_walks_the_forward_ops_between_lb_and_ub() {
    let chain = |lb, ub| first_trigger(CtrldStrategy::ChainRule, lb, ub);
    // From l1/mm: depth 1 is l1/relu (read by l2/grad) and l3/add (read by
    // loss/grad); depth 2 is l2/relu (read by l3/grad) and loss; depth 3 is
    // empty (l3/add was seen at depth 1).
    assert_eq!(chain(1, 10000), after("l2/grad"));
    assert_eq!(chain(2, 10000), after("l3/grad"));
    assert_eq!(chain(3, 10000), Trigger::Consumer);
    assert_eq!(chain(1, 1), after("l2/grad"));
    assert_eq!(chain(2, 1), Trigger::Consumer);
    // Depth 0 is l1/mm itself: its backward reader l1/relu/grad is not
    // before the consumer, so the search goes on to depth 1.
    assert_eq!(chain(0, 10000), after("l2/grad"));
}

#[test]
fn swap_ins_without_a_control_op_are_counted_and_run_before_their_consumer() {
    let (g, report) = rewritten(&TflmsConfig::default());
    // l3/add → loss/grad: no op lies between them.
    assert_eq!(triggers(&report, "l3/add"), [Trigger::Consumer]);
    assert_eq!(report.swap_ins_without_control, 1);
    let at = scheduled_at(&g);
    assert_eq!(at("l3/add/swap_in") + 1, at("loss/grad"));
    assert!(g
        .in_edges(g.node_ids().find(|&id| g.node(id).name == "l3/add/swap_in").expect("added"))
        .all(|(_, e)| e.action != crate::ir::Action::Control));
    // Chain rule at depth 3 or more finds nothing for any swap-in.
    let (_, report) = rewritten(&TflmsConfig { lb: 3, ..TflmsConfig::default() });
    assert_eq!(report.swap_ins_without_control, 5);
}

#[test]
fn control_ops_order_the_swap_ins() {
    let (g, _) = rewritten(&TflmsConfig::default());
    let at = scheduled_at(&g);
    // Swap-outs right after their producers, swap-ins right after their control ops.
    assert_eq!(at("l1/mm/swap_out"), at("l1/mm") + 1);
    assert_eq!(at("l1/mm/swap_in"), at("l2/grad") + 1);
    assert!(at("l1/mm/swap_in") < at("l1/relu/grad"));
}

#[test]
fn fusing_merges_close_consumers() {
    let swap_ins = |cfg: TflmsConfig| {
        let (g, report) = rewritten(&cfg);
        let t = report.tensors.iter().find(|t| t.tensor == "l1/mm").cloned().expect("swapped");
        (g, t.swap_ins)
    };
    // Apart: one swap-in per consumer.
    assert_eq!(swap_ins(TflmsConfig::default()).1.len(), 2);
    // Fused (γ 8 and 9 are within lb = 1): one swap-in that both read.
    let (g, fused) = swap_ins(TflmsConfig { fuse_swapins: true, ..TflmsConfig::default() });
    assert_eq!(fused.len(), 1);
    assert_eq!(fused[0].consumers, ["l1/relu/grad", "l1/mm/grad"]);
    assert_eq!(reads(&g, "l1/relu/grad")[1], "l1/mm/swap_in");
    assert_eq!(reads(&g, "l1/mm/grad")[1], "l1/mm/swap_in");
    // A threshold of 0 keeps them apart.
    assert_eq!(
        swap_ins(TflmsConfig { fuse_swapins: true, fuse_threshold: Some(0), ..TflmsConfig::default() }).1.len(),
        2
    );
}

#[test]
fn swap_branches_rewrites_long_forward_edges() {
    let forward_readers = |threshold: u32| {
        let cfg = TflmsConfig { swap_branches: true, branch_threshold: threshold, ..TflmsConfig::default() };
        let (g, report) = rewritten(&cfg);
        (reads(&g, "l3/add"), report.tensors[0].swap_ins.len())
    };
    // l1/mm (γ1) → l3/add (γ4): distance 3.
    assert_eq!(forward_readers(2), (vec!["l2/relu".to_string(), "l1/mm/swap_in".to_string()], 3));
    assert_eq!(forward_readers(3), (vec!["l2/relu".to_string(), "l1/mm".to_string()], 2));
    let (g, _) = rewritten(&TflmsConfig { swap_branches: true, branch_threshold: 2, ..TflmsConfig::default() });
    assert_eq!(node_named(&g, "l1/mm/swap_in").phase, Phase::Forward);
}

#[test]
fn the_rewrite_moves_bytes_to_host_memory() {
    let g = training_graph();
    let before = profile(&g);
    let (rewritten, _) = rewrite(&g, &TflmsConfig::default()).expect("rewrites");
    let after = profile(&rewritten);
    assert_eq!(before.host_peak_bytes, 0);
    assert!(after.host_peak_bytes > 0);
    assert!(after.peak_bytes <= before.peak_bytes, "{} > {}", after.peak_bytes, before.peak_bytes);
}

#[test]
fn fit_leaves_a_fitting_graph_alone() {
    let g = training_graph();
    let result = fit(&g, &TflmsConfig::default(), FreeKnobs::ALL, Budget { device: u64::MAX, host: 0 }).expect("fits");
    assert!(result.plan.is_none());
    assert_eq!(result.after, result.before);
}

#[test]
fn fit_finds_the_fewest_swapped_bytes_then_the_largest_lb() {
    let g = training_graph();
    // Plans fit by their placed device arena.
    let arena = |g: &Graph| footprint(g).device.arena_bytes;
    let (all, _) = rewrite(&g, &TflmsConfig::default()).expect("rewrites");
    let budget = arena(&all);
    assert!(budget < arena(&g), "swapping lowers this graph's arena");
    let result =
        fit(&g, &TflmsConfig::default(), FreeKnobs::ALL, Budget { device: budget, host: u64::MAX }).expect("fits");
    let plan = result.plan.expect("rewritten");
    assert!(result.after.device.arena_bytes <= budget);
    let n = plan.config.n_tensors.expect("chosen");
    // No fewer tensors fit, with any lb.
    for lb in 1..=super::fit::MAX_LB {
        let fewer = TflmsConfig { n_tensors: Some(n - 1), lb, ..TflmsConfig::default() };
        assert!(arena(&rewrite(&g, &fewer).expect("rewrites").0) > budget, "n = {} fits with lb = {lb}", n - 1);
    }
    // No larger lb fits with these tensors.
    for lb in plan.config.lb + 1..=super::fit::MAX_LB {
        let later = TflmsConfig { n_tensors: Some(n), lb, ..TflmsConfig::default() };
        assert!(arena(&rewrite(&g, &later).expect("rewrites").0) > budget, "lb = {lb} fits too");
    }
}

#[test]
fn fit_names_the_overshoot_when_nothing_fits() {
    let g = training_graph();
    let err = fit(&g, &TflmsConfig::default(), FreeKnobs::ALL, Budget { device: 1, host: u64::MAX })
        .expect_err("cannot fit in 1 byte");
    let Error::OverBudget { pool, arena, peak, budget, ref op } = err else { panic!("{err}") };
    assert_eq!((pool, budget), ("device", 1));
    assert!(arena >= peak && peak > 1 && !op.is_empty());
    assert!(err.to_string().starts_with("does not fit in device memory: the plan needs"), "{err}");
    // A host budget of 0 allows no swap at all.
    let (all, _) = rewrite(&g, &TflmsConfig::default()).expect("rewrites");
    let budget = footprint(&all).device.arena_bytes;
    assert!(matches!(
        fit(&g, &TflmsConfig::default(), FreeKnobs::ALL, Budget { device: budget, host: 0 }),
        Err(Error::OverBudget { .. })
    ));
}

/// Device and host arenas of the rewrite with these knobs.
fn arenas_with(g: &Graph, n_tensors: usize, lb: u32) -> (u64, u64) {
    let cfg = TflmsConfig { n_tensors: Some(n_tensors), lb, ..TflmsConfig::default() };
    let f = footprint(&rewrite(g, &cfg).expect("rewrites").0);
    (f.device.arena_bytes, f.host.arena_bytes)
}

#[test]
fn fit_finds_fewer_swaps_when_swapping_everything_exceeds_the_host_budget() {
    let g = training_graph();
    let (_, host_all) = arenas_with(&g, usize::MAX, 1);
    // The plan swapping one tensor: its device arena is the budget, and its
    // host arena, below that of swapping everything, the host budget.
    let (device, host) = (1..=super::fit::MAX_LB).map(|lb| arenas_with(&g, 1, lb)).min().expect("a plan");
    assert!(
        device < footprint(&g).device.arena_bytes && host < host_all,
        "the fixture must make the case: {device} {host} {host_all}"
    );
    let result = fit(&g, &TflmsConfig::default(), FreeKnobs::ALL, Budget { device, host }).expect("one swap fits");
    let plan = result.plan.expect("rewritten");
    assert_eq!(plan.config.n_tensors, Some(1));
    assert!(result.after.device.arena_bytes <= device && result.after.host.arena_bytes <= host);
}

#[test]
fn fit_never_changes_a_knob_the_user_set() {
    let g = training_graph();
    let budget = arenas_with(&g, usize::MAX, 1).0;
    let given = TflmsConfig { n_tensors: Some(usize::MAX), lb: 2, ..TflmsConfig::default() };
    let fixed = FreeKnobs { n_tensors: false, lb: false };
    let plan = fit(&g, &given, fixed, Budget { device: budget, host: u64::MAX }).map(|f| f.plan.expect("rewritten"));
    // Either the given knobs fit, or the search fails; it never picks others.
    if let Ok(plan) = plan {
        assert_eq!((plan.config.n_tensors, plan.config.lb), (Some(usize::MAX), 2));
    }
    let lb_only = FreeKnobs { n_tensors: true, lb: false };
    let plan =
        fit(&g, &TflmsConfig { lb: 1, ..TflmsConfig::default() }, lb_only, Budget { device: budget, host: u64::MAX })
            .expect("swapping everything with lb 1 fits")
            .plan
            .expect("rewritten");
    assert_eq!(plan.config.lb, 1);
    let n_only = FreeKnobs { n_tensors: false, lb: true };
    let plan = fit(
        &g,
        &TflmsConfig { n_tensors: Some(usize::MAX), ..TflmsConfig::default() },
        n_only,
        Budget { device: budget, host: u64::MAX },
    )
    .expect("swapping everything fits")
    .plan
    .expect("rewritten");
    assert_eq!(plan.config.n_tensors, Some(usize::MAX));
}

/// The default profile with a host link of `link` bytes/s each way and no
/// launch latency: kernels take their bytes over the memory bandwidth.
fn profile_with_link(link: f64) -> DeviceProfile {
    let mut p = DeviceProfile::load(DEFAULT_PROFILE).unwrap();
    (p.host_to_device_bytes_per_second, p.device_to_host_bytes_per_second, p.launch_seconds) = (link, link, 0.0);
    p.memory_bytes_per_second = 1e9;
    p
}

/// The time-triggered rewrite of the training graph on `profile`, and its
/// predicted timeline.
fn timed(profile: &DeviceProfile, edit: impl FnOnce(&mut TflmsConfig)) -> (Graph, TflmsReport, Timeline) {
    let mut cfg =
        TflmsConfig { trigger: SwapInTrigger::Time, profile: profile.clone().into(), ..TflmsConfig::default() };
    edit(&mut cfg);
    let (g, report) = rewritten(&cfg);
    let t = timeline::simulate(&g, g.schedule(), profile);
    (g, report, t)
}

#[test]
fn time_trigger_is_the_latest_op_that_lets_the_transfer_finish_in_time() {
    // A link much faster than the kernels: no transfer needs to wait.
    let profile = profile_with_link(1e12);
    let (g, report, t) = timed(&profile, |_| {});
    assert_eq!(t.stall_seconds, 0.0, "every swap-in ends before its consumer starts");
    // Independently: on the input graph's timeline, the last kernel from the
    // producer on whose end plus the transfer is at most the consumer's start.
    let input = training_graph();
    let before = timeline::simulate(&input, &order::schedule(&input).unwrap(), &profile);
    let at = |name: &str| before.events.iter().find(|e| input.node(e.node).name == name).expect("a kernel");
    let copy = crate::analysis::cost::CostModel::new(&profile).seconds(&Work {
        flops: 0,
        bytes_read: 16,
        bytes_written: 16,
        engine: Engine::HostToDevice,
    });
    for tensor in &report.tensors {
        let producer =
            before.events.iter().position(|e| input.node(e.node).outputs[0] == tensor_id(&input, &tensor.tensor));
        for swap_in in &tensor.swap_ins {
            let deadline = at(&swap_in.consumers[0]).start - copy;
            let expected = before.events[producer.expect("the producer runs")..]
                .iter()
                .take_while(|e| e.end <= deadline)
                .last()
                .map(|e| input.node(e.node).name.clone());
            assert_eq!(swap_in.trigger, after(&expected.expect("an op ends in time")), "{}", swap_in.node);
        }
    }
    // The control edges keep each swap-in after its swap-out (the rewrite's
    // schedule is topological, checked by `rewritten`).
    let pos = scheduled_at(&g);
    assert!(pos("l1/mm/swap_out") < pos("l1/mm/swap_in"));
}

fn tensor_id(g: &Graph, name: &str) -> TensorId {
    g.tensors().find(|(_, t)| t.name == name).map(|(id, _)| id).expect("tensor exists")
}

#[test]
fn a_slow_link_triggers_earlier_and_stalls_no_more_than_the_chain_rule() {
    let fast = timed(&profile_with_link(1e12), |_| {}).1;
    for link in [1e9, 1e8, 1e7] {
        let profile = profile_with_link(link);
        let (g, report, t) = timed(&profile, |_| {});
        let pos = scheduled_at(&g);
        for (slow, fast) in report.tensors.iter().zip(&fast.tensors) {
            for (a, b) in slow.swap_ins.iter().zip(&fast.swap_ins) {
                assert!(pos(&a.node) <= pos(&b.node), "link {link}: {} later than on a fast link", a.node);
            }
        }
        // Against the count rule's default strategy at every lb the budget
        // search tries.
        for lb in 1..=super::MAX_LB {
            let (counted, _) = rewritten(&TflmsConfig { lb, ..TflmsConfig::default() });
            let stall = timeline::simulate(&counted, counted.schedule(), &profile).stall_seconds;
            assert!(t.stall_seconds <= stall, "link {link}, lb {lb}: time {} > count {stall}", t.stall_seconds);
        }
    }
}

#[test]
fn without_overlap_the_swap_in_follows_the_last_kernel_before_its_consumer() {
    let profile = DeviceProfile::load("cpu").unwrap();
    let (_, report, _) = timed(&profile, |_| {});
    assert_eq!(triggers(&report, "l1/mm"), [after("l2/grad"), after("l1/relu/grad")]);
    assert_eq!(triggers(&report, "l3/add"), [after("loss")]);
}

#[test]
fn min_bytes_skips_small_tensors() {
    assert_eq!(swapped_with(|c| c.min_bytes = 16).len(), 4);
    assert!(swapped_with(|c| c.min_bytes = 17).is_empty());
}

#[test]
fn fit_with_the_time_trigger_chooses_only_n_tensors() {
    let g = training_graph();
    let cfg = TflmsConfig { trigger: SwapInTrigger::Time, lb: 3, ..TflmsConfig::default() };
    // The smallest device arena a time-triggered plan reaches, below the graph's own.
    let arena = |n| footprint(&rewrite(&g, &TflmsConfig { n_tensors: Some(n), ..cfg.clone() }).expect("rewrites").0);
    let budget = (1..=8).map(|n| arena(n).device.arena_bytes).min().expect("plans");
    assert!(budget < footprint(&g).device.arena_bytes, "the fixture must make the case");
    let plan = fit(&g, &cfg, FreeKnobs::ALL, Budget { device: budget, host: u64::MAX })
        .expect("fits")
        .plan
        .expect("rewritten");
    assert_eq!(plan.config.lb, 3, "lb is not searched");
    assert!(plan.report.tensors.iter().all(|t| t.swap_ins.iter().all(|s| s.trigger != Trigger::Consumer)));
}

/// The SGD training graph of a model under `fixtures/models`.
fn fixture_training_graph(model: &str, batch: usize) -> Graph {
    use crate::frontend::{self, FrontendOptions};
    use crate::train::{self, Loss, Optimizer, TrainOptions};
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/models").join(model);
    let model = frontend::load(&path, &FrontendOptions { batch: Some(batch), ..Default::default() }).unwrap();
    let options =
        TrainOptions { loss: Loss::SoftmaxCrossEntropy, optimizer: Optimizer::Sgd { lr: 0.1 }, ..Default::default() };
    train::build(&model.graph, &options).unwrap()
}

#[test]
fn the_sweep_gives_the_peaks_of_the_applied_rewrite() {
    let graphs = [
        ("chain".to_string(), training_graph()),
        ("cnn_residual".into(), fixture_training_graph("cnn_residual.onnx", 8)),
        ("tiny_gpt".into(), fixture_training_graph("tiny_gpt.onnx", 4)),
    ];
    let slow_link = profile_with_link(1e6);
    let variants = [(false, CtrldStrategy::ChainRule, false), (true, CtrldStrategy::DirectOrder, true)];
    for ((name, g), (fuse_swapins, strategy, swap_branches)) in graphs.iter().flat_map(|g| variants.map(|v| (g, v))) {
        let base = TflmsConfig { swap_branches, ..TflmsConfig::default() };
        let analysis = super::Analysis::new(g, &base).unwrap();
        let sweep = super::peaks::Sweep::new(g, &analysis.order);
        let total = analysis.candidates.len();
        assert!(total > 0, "{name}: no candidates");
        for trigger in [SwapInTrigger::Count, SwapInTrigger::Time] {
            for lb in 1..=super::MAX_LB {
                for n_tensors in 1..=total {
                    let cfg = TflmsConfig {
                        n_tensors: Some(n_tensors),
                        lb,
                        trigger,
                        fuse_swapins,
                        ctrld_strategy: strategy,
                        profile: slow_link.clone().into(),
                        ..base.clone()
                    };
                    let (rewritten, _) = analysis.rewrite(&cfg).unwrap();
                    let simulated = memory::simulate(&rewritten, &order::schedule(&rewritten).unwrap());
                    let swept = analysis.peaks(&sweep, &cfg);
                    let at = format!(
                        "{name}, {trigger:?}, fuse {fuse_swapins}, branches {swap_branches}, lb {lb}, n {n_tensors}"
                    );
                    assert_eq!(swept.device, simulated.peak_bytes, "device peak: {at}");
                    assert_eq!(swept.host, simulated.host_peak_bytes, "host peak: {at}");
                }
            }
        }
    }
}
