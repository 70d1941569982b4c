//! Checks of `Graph.plan`, the typed memory plan: a known strategy, swap decisions whose
//! ids are in range and name what they say (a swap-out of the tensor, swap-ins of that copy,
//! triggers ordered before their swap-ins by a control edge), recompute decisions whose
//! chain is kernels run before the reader they name, the last making a tensor of the
//! recomputed tensor's type that the reader reads, arena sizes that match the program's
//! static placement, and convolution algorithms that are the ones the rule gives each
//! convolution node; a device profile it carries is at most 8 MiB.

use super::describe;
use super::ops::NodeKind;
use super::placement;
use super::program::Program;
use super::release::Pool;
use crate::escape::Escaped;
use crate::lms::ConvAlgorithmDecision;
use crate::ops::scratch;

/// The strategies a plan may name: no rewrite, TFLMS swapping, the automatic planner.
pub const STRATEGIES: [&str; 3] = ["none", "tflms", "auto"];

/// Largest device profile a plan carries (and a profile file lms reads): 8 MiB.
pub const MAX_DEVICE_PROFILE_BYTES: u64 = 8 << 20;

/// Checks the plan of `program`, if it has one.
pub fn check_plan(program: &Program) -> Result<(), String> {
    let Some(plan) = &program.graph().plan else {
        return Ok(());
    };
    if !STRATEGIES.contains(&plan.strategy.as_str()) {
        return Err(format!("plan: unknown strategy '{}'", Escaped(&plan.strategy)));
    }
    if plan.device_profile_json.len() as u64 > MAX_DEVICE_PROFILE_BYTES {
        return Err(format!(
            "plan: the device profile it carries is {} bytes, over the {MAX_DEVICE_PROFILE_BYTES} a profile may have",
            plan.device_profile_json.len()
        ));
    }
    let graph = program.graph();
    let (nodes, tensors) = (program.node_count(), program.tensor_count());
    let node = |what: &str, id: u32| {
        let id = id as usize;
        (id < nodes)
            .then_some(id)
            .ok_or_else(|| format!("plan: {what} names node id {id}, but the graph has {nodes} nodes"))
    };
    for (i, swap) in plan.swaps.iter().enumerate() {
        let tensor = swap.tensor as usize;
        if tensor >= tensors {
            return Err(format!("plan: swap {i} names tensor id {tensor}, but the graph has {tensors} tensors"));
        }
        let what = describe::tensor(graph, tensor);
        let out = node(&format!("the swap-out of {what}"), swap.swap_out)?;
        if program.kind(out) != NodeKind::SwapOut || program.node_inputs(out) != [Some(tensor)] {
            return Err(format!("plan: the swap-out of {what} is {}, not a SwapOut of it", describe::node(graph, out)));
        }
        let copy = program.node_outputs(out)[0];
        for s in &swap.swap_ins {
            let into = node(&format!("a swap-in of {what}"), s.node)?;
            if program.kind(into) != NodeKind::SwapIn || program.node_inputs(into) != [Some(copy)] {
                return Err(format!(
                    "plan: a swap-in of {what} is {}, not a SwapIn of its host copy",
                    describe::node(graph, into)
                ));
            }
            if let Some(trigger) = s.trigger {
                let trigger = node(&format!("the trigger of a swap-in of {what}"), trigger)?;
                if !program.control_predecessors(into).contains(&trigger) {
                    return Err(format!(
                        "plan: {} triggers {}, but no control edge orders them",
                        describe::node(graph, trigger),
                        describe::node(graph, into)
                    ));
                }
            }
        }
    }
    for (i, r) in plan.recomputes.iter().enumerate() {
        let tensor = r.tensor as usize;
        if tensor >= tensors {
            return Err(format!("plan: recompute {i} names tensor id {tensor}, but the graph has {tensors} tensors"));
        }
        let what = describe::tensor(graph, tensor);
        let before = node(&format!("the reader of the recomputed {what}"), r.before)?;
        let Some((&last, _)) = r.chain.split_last() else {
            return Err(format!("plan: the recompute of {what} has an empty chain"));
        };
        for &n in &r.chain {
            let n = node(&format!("the recompute chain of {what}"), n)?;
            if program.kind(n) != NodeKind::Kernel || program.position(n) >= program.position(before) {
                return Err(format!(
                    "plan: the recompute chain of {what} holds {}, not a kernel run before {}",
                    describe::node(graph, n),
                    describe::node(graph, before)
                ));
            }
        }
        let ty = program.tensor_type(tensor);
        let reads = |t: usize| program.tensor_type(t) == ty && program.node_inputs(before).contains(&Some(t));
        if !program.node_outputs(last as usize).iter().any(|&t| reads(t)) {
            return Err(format!(
                "plan: {} does not read a copy of {what} made by {}",
                describe::node(graph, before),
                describe::node(graph, last as usize)
            ));
        }
    }
    check_conv_algorithms(program, &plan.conv_algorithms)?;
    for (pool, recorded) in [(Pool::Device, plan.arena_device_bytes), (Pool::Host, plan.arena_host_bytes)] {
        let Some(recorded) = recorded else { continue };
        let computed = placement::of_program(program, pool).arena_bytes;
        if recorded != computed {
            return Err(format!(
                "plan: the {pool} arena is recorded as {recorded} bytes, but this program's static placement needs {computed}"
            ));
        }
    }
    Ok(())
}

/// Checks the convolution algorithms a plan records (none: the rule applies): by ascending
/// node id, one for every convolution node and none for another node, each the algorithm
/// and workspace the rule gives the node's geometry and direction
/// ([`scratch::conv_algorithm_of_node`]).
fn check_conv_algorithms(program: &Program, recorded: &[ConvAlgorithmDecision]) -> Result<(), String> {
    if recorded.is_empty() {
        return Ok(());
    }
    let (graph, nodes) = (program.graph(), program.node_count());
    for pair in recorded.windows(2) {
        if pair[0].node >= pair[1].node {
            return Err(format!(
                "plan: the convolution algorithms are not by ascending node id ({} before {})",
                pair[0].node, pair[1].node
            ));
        }
    }
    if let Some(r) = recorded.iter().find(|r| r.node as usize >= nodes) {
        return Err(format!("plan: a convolution algorithm names node id {}, but the graph has {nodes} nodes", r.node));
    }
    let mut records = recorded.iter().peekable();
    for n in 0..nodes {
        let record = records.next_if(|r| r.node as usize == n);
        match (scratch::conv_algorithm_of_node(program, n), record) {
            (None, None) => {}
            (Some(rule), Some(r)) if (r.algorithm, r.workspace_bytes) == (rule.algorithm, rule.workspace_bytes) => {}
            (Some(rule), Some(r)) => {
                return Err(format!(
                    "plan: {} records cuDNN {} algorithm {} with {} workspace bytes, but its geometry gives \
                     algorithm {} with {}",
                    describe::node(graph, n),
                    rule.direction.name(),
                    r.algorithm,
                    r.workspace_bytes,
                    rule.algorithm,
                    rule.workspace_bytes
                ))
            }
            (Some(_), None) => {
                return Err(format!("plan: convolution {} has no algorithm recorded", describe::node(graph, n)))
            }
            (None, Some(_)) => {
                return Err(format!(
                    "plan: {} records a convolution algorithm, but is no convolution",
                    describe::node(graph, n)
                ))
            }
        }
    }
    Ok(())
}
