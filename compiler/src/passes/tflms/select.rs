//! Which tensors TFLMS swaps (TFLMS §4.1, §5.1), and which of their
//! consumers share a swap-in (§4.2.3).

use super::{Order, TflmsConfig};
use crate::error::{Error, Result};
use crate::flags;
use crate::ir::{Action, Graph, Node, NodeId, Phase, TensorId};
use std::collections::BTreeSet;

/// A tensor that qualifies for swapping.
pub(super) struct SwapCandidate {
    pub tensor: TensorId,
    pub producer: NodeId,
    /// The distinct consumers over qualifying edges, in schedule order
    /// (never empty).
    pub consumers: Vec<NodeId>,
}

/// Every tensor that qualifies under `cfg` (of at least `min_bytes`), in breadth-first order from the
/// start ops (within one depth, in schedule order of the producers; a
/// producer's outputs in slot order).
pub(super) fn candidates(g: &Graph, order: &Order, cfg: &TflmsConfig) -> Result<Vec<SwapCandidate>> {
    let mut is_output = vec![false; g.tensor_count()];
    for &t in &g.outputs {
        is_output[t.index()] = true;
    }
    let mut found = Vec::new();
    for producer in breadth_first(g, order, start_ops(g, order, cfg)?) {
        let node = g.node(producer);
        if node.parameterized || node.phase != Phase::Forward || !eligible(node, cfg) {
            continue;
        }
        for &tensor in &node.outputs {
            let ty = &g.tensor(tensor).ty;
            if !ty.dtype.is_float() || ty.bytes() < cfg.min_bytes || is_output[tensor.index()] {
                continue;
            }
            let mut consumers: Vec<NodeId> =
                g.readers(tensor).map(|(r, _)| r).filter(|&r| qualifies(g, order, cfg, producer, r)).collect();
            consumers.sort_by_key(|&c| order.position(c));
            consumers.dedup();
            if !consumers.is_empty() {
                found.push(SwapCandidate { tensor, producer, consumers });
            }
        }
    }
    Ok(found)
}

/// Checks knobs given by a user against `g`: `lb` at most `ub`, and every op
/// type, scope and op name given matches something in `g` (errors name the
/// flag and the closest names that exist).
pub fn check_knobs(g: &Graph, cfg: &TflmsConfig) -> Result<()> {
    if cfg.lb > cfg.ub {
        return Err(Error::Usage(format!("--lb {} is above --ub {}", cfg.lb, cfg.ub)));
    }
    let types = || g.node_ids().map(|id| g.node(id).op.as_str()).collect::<BTreeSet<_>>();
    for (flag, list) in [("--incl-types", &cfg.incl_types), ("--excl-types", &cfg.excl_types)] {
        if let Some(t) = list.iter().find(|t| !g.node_ids().any(|id| g.node(id).op == **t)) {
            return Err(flags::no_match(
                flag,
                t,
                "op type of the training graph",
                &flags::close_candidates(t, types()),
            ));
        }
    }
    let scopes = || {
        let mut all = BTreeSet::new();
        for id in g.node_ids() {
            let name = g.node(id).name.as_str();
            all.extend(name.match_indices('/').map(|(i, _)| &name[..i]));
            all.insert(name);
        }
        all
    };
    let starting = cfg.starting_scope.iter().map(|s| ("--starting-scope", s));
    let listed = [("--incl-scopes", &cfg.incl_scopes), ("--excl-scopes", &cfg.excl_scopes)]
        .into_iter()
        .flat_map(|(flag, list)| list.iter().map(move |s| (flag, s)));
    for (flag, scope) in listed.chain(starting) {
        if !g.node_ids().any(|id| in_scope(&g.node(id).name, scope)) {
            let close = flags::close_candidates(scope, scopes());
            return Err(flags::no_match(flag, scope, "scope of the training graph", &close));
        }
    }
    if let Some(name) = cfg.starting_op_names.iter().find(|n| !g.node_ids().any(|id| g.node(id).name == **n)) {
        let names = g.node_ids().map(|id| g.node(id).name.as_str());
        let close = flags::close_candidates(name, names);
        return Err(flags::no_match("--starting-op-names", name, "op of the training graph", &close));
    }
    Ok(())
}

/// Splits a tensor's consumers (schedule order) into the groups that share
/// a swap-in: one consumer per group, or with `fuse_swapins` every consumer
/// whose γ is within the fusing distance of its group's first consumer.
/// Every group is non-empty.
pub(super) fn group_consumers(consumers: &[NodeId], order: &Order, cfg: &TflmsConfig) -> Vec<Vec<NodeId>> {
    let mut groups: Vec<Vec<NodeId>> = Vec::new();
    for &c in consumers {
        match groups.last_mut() {
            Some(group)
                if cfg.fuse_swapins && order.gamma(c).abs_diff(order.gamma(group[0])) <= cfg.fuse_distance() =>
            {
                group.push(c)
            }
            _ => groups.push(vec![c]),
        }
    }
    groups
}

/// True when `scope` holds the node named `name`: the scope is `name` or a
/// prefix of it ending just before a `/`. The empty scope holds every node.
pub(super) fn in_scope(name: &str, scope: &str) -> bool {
    let scope = scope.trim_end_matches('/');
    scope.is_empty() || name.strip_prefix(scope).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The edge from `producer` (a forward op) to `consumer` qualifies: the
/// consumer is a backward op, or with `swap_branches` a forward op more than
/// `branch_threshold` later in γ.
fn qualifies(g: &Graph, order: &Order, cfg: &TflmsConfig, producer: NodeId, consumer: NodeId) -> bool {
    match g.node(consumer).phase {
        Phase::Backward => true,
        Phase::Forward => {
            cfg.swap_branches && order.gamma(consumer).saturating_sub(order.gamma(producer)) > cfg.branch_threshold
        }
        Phase::Update => false,
    }
}

/// The producer passes the inclusion and exclusion filters: it matches an
/// included type or scope (when any is given) and no excluded one.
fn eligible(node: &Node, cfg: &TflmsConfig) -> bool {
    let included = (cfg.incl_types.is_empty() && cfg.incl_scopes.is_empty())
        || cfg.incl_types.contains(&node.op)
        || cfg.incl_scopes.iter().any(|s| in_scope(&node.name, s));
    let excluded = cfg.excl_types.contains(&node.op) || cfg.excl_scopes.iter().any(|s| in_scope(&node.name, s));
    included && !excluded
}

/// Where the breadth-first search starts: the ops in `starting_scope` and
/// those named in `starting_op_names`, or, when neither is given, every
/// parameterized vertex (variables and inputs).
fn start_ops(g: &Graph, order: &Order, cfg: &TflmsConfig) -> Result<Vec<NodeId>> {
    if cfg.starting_scope.is_none() && cfg.starting_op_names.is_empty() {
        return Ok(order.view.schedule.iter().copied().filter(|&id| g.node(id).parameterized).collect());
    }
    let mut start = Vec::new();
    if let Some(scope) = &cfg.starting_scope {
        let before = start.len();
        start.extend(order.view.schedule.iter().copied().filter(|&id| in_scope(&g.node(id).name, scope)));
        if start.len() == before {
            return Err(Error::Usage(format!("TFLMS starting scope '{scope}' holds no op")));
        }
    }
    for name in &cfg.starting_op_names {
        let id = order
            .view
            .schedule
            .iter()
            .copied()
            .find(|&id| g.node(id).name == *name)
            .ok_or_else(|| Error::Usage(format!("TFLMS starting op '{name}' is not in the graph")))?;
        start.push(id);
    }
    Ok(start)
}

/// Nodes reachable over read edges from `start`, in breadth-first order;
/// each depth in schedule order.
fn breadth_first(g: &Graph, order: &Order, start: Vec<NodeId>) -> Vec<NodeId> {
    let mut seen = vec![false; g.node_bound()];
    let mut level: Vec<NodeId> =
        start.into_iter().filter(|id| !std::mem::replace(&mut seen[id.index()], true)).collect();
    let mut visited = Vec::with_capacity(g.node_count());
    while !level.is_empty() {
        level.sort_by_key(|&id| order.position(id));
        let mut next = Vec::new();
        for &id in &level {
            for (dst, e) in g.out_edges(id) {
                if e.action == Action::Read && !std::mem::replace(&mut seen[dst.index()], true) {
                    next.push(dst);
                }
            }
        }
        visited.append(&mut level);
        level = next;
    }
    visited
}
