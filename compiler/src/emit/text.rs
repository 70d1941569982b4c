//! The stable text form of a graph: one line per op in schedule order, for
//! snapshot tests and diffs.
//!
//! ```text
//! graph "mlp" opset 13
//! input %x: f32[2,64]
//! %fc1.weight: f32[128,64] = Variable  # fc1.weight γ0 param fwd gpu
//! %h: f32[2,128] = Gemm(%x, %fc1.weight, %fc1.bias) {transB=1}  # Gemm_0 γ1 fwd gpu
//! output %logits
//! ```
//!
//! Tensors are named, never numbered, so the text does not change when
//! unrelated nodes are added or removed. Control edges print as
//! `after(node, ...)` and update edges as `updates(variable)`, both sorted.

use crate::analysis::order;
use crate::ir::CycleError;
use crate::ir::{Action, Graph, TensorId};
use std::fmt::Write;

/// Prints `g` in the stable text form. Fails only on a cyclic graph.
pub fn to_text(g: &Graph) -> Result<String, CycleError> {
    let schedule = order::schedule(g)?;
    let gamma = order::gamma(g, &schedule);
    let mut out = String::new();
    let name = |t: TensorId| format!("%{}", quote(&g.tensor(t).name));
    let typed = |t: TensorId| format!("{}: {}", name(t), g.tensor(t).ty);
    // `write!` into a String cannot fail.
    let _ = writeln!(out, "graph {:?} opset {}", g.name, g.opset);
    for &t in &g.inputs {
        let _ = writeln!(out, "input {}", typed(t));
    }
    for &id in &schedule {
        let node = g.node(id);
        let outs: Vec<String> = node.outputs.iter().map(|&t| typed(t)).collect();
        let _ = write!(out, "{} = {}", outs.join(", "), op_name(&node.domain, &node.op));
        if !node.parameterized || !node.inputs.is_empty() {
            let ins: Vec<String> = node.inputs.iter().map(|t| t.map_or("_".to_string(), name)).collect();
            let _ = write!(out, "({})", ins.join(", "));
        }
        if node.attrs.iter().next().is_some() {
            let attrs: Vec<String> = node.attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = write!(out, " {{{}}}", attrs.join(", "));
        }
        let mut after: Vec<&str> = Vec::new();
        let mut updates: Vec<&str> = Vec::new();
        for (src, e) in g.in_edges(id) {
            if e.action == Action::Control {
                after.push(&g.node(src).name);
            }
        }
        for (dst, e) in g.out_edges(id) {
            if e.action == Action::Update {
                updates.push(&g.node(dst).name);
            }
        }
        after.sort_unstable();
        updates.sort_unstable();
        if !after.is_empty() {
            let _ = write!(out, " after({})", after.join(", "));
        }
        if !updates.is_empty() {
            let _ = write!(out, " updates({})", updates.join(", "));
        }
        let param = if node.parameterized { " param" } else { "" };
        let _ = writeln!(out, "  # {} γ{}{} {} {}", node.name, gamma[id.index()], param, node.phase, node.device);
    }
    for &t in &g.outputs {
        let _ = writeln!(out, "output {}", name(t));
    }
    Ok(out)
}

fn op_name(domain: &str, op: &str) -> String {
    if domain.is_empty() {
        op.to_string()
    } else {
        format!("{domain}::{op}")
    }
}

/// Names made only of letters, digits and `_./:-` print bare; others quoted.
fn quote(name: &str) -> String {
    let bare = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "_./:-".contains(c));
    if bare {
        name.to_string()
    } else {
        format!("{name:?}")
    }
}
