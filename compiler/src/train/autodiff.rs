//! Reverse-mode differentiation of the training-mode forward graph.
//!
//! Walking the schedule backwards from the loss, each op on a path from a
//! trainable variable to the loss gets its gradient rule ([`super::grad`]);
//! gradients reaching one tensor from several readers are summed with `Sum`
//! in reader order, so the graph is deterministic.

use super::builder::Builder;
use super::grad;
use crate::analysis::order;
use crate::error::Result;
use crate::ir::{Attrs, Phase, TensorId};
use std::collections::HashMap;

/// Adds the backward phase; returns the gradient of each of `wrt` that the
/// loss depends on.
pub fn differentiate(b: &mut Builder, loss: TensorId, wrt: &[TensorId]) -> Result<HashMap<TensorId, TensorId>> {
    let g = &b.graph;
    let schedule = order::schedule(g)?;
    // Float tensors whose value depends on a variable being trained.
    let mut requires = vec![false; g.tensor_count()];
    for &t in wrt {
        requires[t.index()] = true;
    }
    for &id in &schedule {
        let node = g.node(id);
        if !node.parameterized && node.inputs.iter().flatten().any(|t| requires[t.index()]) {
            for &t in &node.outputs {
                requires[t.index()] = g.tensor(t).ty.dtype.is_float();
            }
        }
    }
    // Nodes the loss depends on.
    let mut feeds_loss = vec![false; g.node_bound()];
    feeds_loss[g.tensor(loss).producer.0.index()] = true;
    for &id in schedule.iter().rev() {
        if feeds_loss[id.index()] {
            for &t in g.node(id).inputs.iter().flatten() {
                feeds_loss[g.tensor(t).producer.0.index()] = true;
            }
        }
    }

    b.phase = Phase::Backward;
    let mut pending: HashMap<TensorId, Vec<TensorId>> = HashMap::new();
    for &id in schedule.iter().rev() {
        let node = b.graph.node(id).clone();
        if node.parameterized || !feeds_loss[id.index()] {
            continue;
        }
        let needs: Vec<bool> = node.inputs.iter().map(|t| t.is_some_and(|t| requires[t.index()])).collect();
        if !needs.contains(&true) {
            continue;
        }
        let is_loss = node.outputs.contains(&loss);
        let mut dys = Vec::with_capacity(node.outputs.len());
        for &t in &node.outputs {
            dys.push(match pending.remove(&t) {
                Some(parts) => Some(sum(b, t, parts)?),
                None => None,
            });
        }
        if !is_loss && dys.iter().all(Option::is_none) {
            continue;
        }
        let dxs = grad::rule(b, &node, &dys, &needs)?;
        for ((input, dx), need) in node.inputs.iter().zip(dxs).zip(needs) {
            if let (Some(t), Some(dx), true) = (input, dx, need) {
                pending.entry(*t).or_default().push(dx);
            }
        }
    }
    let mut grads = HashMap::new();
    for &w in wrt {
        if let Some(parts) = pending.remove(&w) {
            grads.insert(w, sum(b, w, parts)?);
        }
    }
    Ok(grads)
}

/// One gradient from the contributions of several readers.
fn sum(b: &mut Builder, t: TensorId, parts: Vec<TensorId>) -> Result<TensorId> {
    if parts.len() == 1 {
        return Ok(parts[0]);
    }
    let name = format!("{}/grad_sum", b.graph.tensor(t).name);
    b.onnx1(&name, "Sum", Attrs::new(), &parts)
}
