//! The split pass (TSPLIT §III-IV): an op, or a run of consecutive ops, runs
//! as p micro-ops on parts of its tensors along one dimension, with `SplitPart`
//! ops (`proto/OPS.md`) where a tensor enters the run and ONNX `Concat` where
//! the parts are merged, only where the partition changes.
//!
//! The dimension's axis and the inputs the parts slice come from the op
//! family's split rule (`shape::split`); how far the split travels and
//! whether it is legal come from the e-graph (`egraph::propagate`), so every
//! emitted split is one `lms verify` proves. Splits of batch and output
//! channels are bit-identical to the original on the same backend. An op
//! that reduces over the split dimension (weight gradients over the batch, a
//! contraction over its reduced channels) runs alone, its partial results
//! added up as they are made (within `shape::split::SUM_TOLERANCE`). Batch
//! normalization and its gradient split along the batch by their statistics,
//! merged across the parts (`batch_norm`, within the same tolerance). Ops
//! run in parts are emitted depth-first (`blocks`); the budget planner's
//! split of the batch is `batch`.

mod batch;
mod batch_norm;
mod blocks;
mod emit;
mod halo;
#[cfg(test)]
mod tests;

pub use batch::{batch_patch, BatchSplit, BatchSplitReport};

use crate::egraph::rules::split::MAX_PARTS;
use crate::error::{Error, Result};
use crate::flags;
use crate::ir::{Graph, NodeId};
use crate::pipeline::Patch;
use crate::shape::split::Dim;
use serde::Serialize;
use std::collections::HashSet;

/// The pass's name in the pipeline.
pub const PASS: &str = "split";

/// A forced split (`--split op=NAME,dim=D,parts=P[,depth=K]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SplitRequest {
    /// The op's node name.
    pub op: String,
    /// The dimension.
    pub dim: Dim,
    /// Number of parts, 2 to [`MAX_PARTS`].
    pub parts: usize,
    /// How many read edges after the op the split may travel before its
    /// parts are merged (0: the op alone).
    pub depth: usize,
}

impl SplitRequest {
    /// Parses the flag's value; the error names the flag and what is wrong.
    pub fn parse(text: &str) -> std::result::Result<SplitRequest, String> {
        let (mut op, mut dim, mut parts, mut depth) = (None, None, None, 0);
        for field in text.split(',') {
            let Some((key, value)) = field.split_once('=') else {
                return Err(format!("'{field}' is not KEY=VALUE (op=NAME,dim=DIM,parts=P[,depth=K])"));
            };
            match key {
                "op" if !value.is_empty() => op = Some(value.to_string()),
                "dim" => {
                    let names: Vec<&str> = Dim::ALL.iter().map(|d| d.name()).collect();
                    dim = Some(Dim::parse(value).ok_or(format!("dim '{value}' is not one of {}", names.join(", ")))?)
                }
                "parts" => match value.parse::<usize>() {
                    Ok(p) if (2..=MAX_PARTS).contains(&p) => parts = Some(p),
                    _ => return Err(format!("parts '{value}' is not a whole number from 2 to {MAX_PARTS}")),
                },
                "depth" => depth = value.parse().map_err(|_| format!("depth '{value}' is not a whole number"))?,
                _ => return Err(format!("unknown or empty field '{field}' (op=NAME,dim=DIM,parts=P[,depth=K])")),
            }
        }
        match (op, dim, parts) {
            (Some(op), Some(dim), Some(parts)) => Ok(SplitRequest { op, dim, parts, depth }),
            _ => Err("needs op=NAME, dim=DIM and parts=P".into()),
        }
    }
}

/// What one split did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SplitReport {
    /// The request.
    pub request: SplitRequest,
    /// How the parts' outputs are merged: concatenated along an axis, or
    /// summed (partial results).
    pub merge: String,
    /// The ops run in parts, the requested op first.
    pub covered: Vec<String>,
    /// The tensors split into parts before the run.
    pub splits: Vec<String>,
    /// The tensors concatenated back.
    pub merges: Vec<String>,
}

/// The patch carrying out `requests` on `g`, and what each did. Fails naming
/// the op when it is unknown, has no rule along the dimension, or the
/// e-graph does not derive its split; or when two requests' runs touch.
pub fn patch(g: &Graph, requests: &[SplitRequest]) -> Result<(Patch, Vec<SplitReport>)> {
    let mut runs = Vec::with_capacity(requests.len());
    for request in requests {
        let node = g.node_ids().find(|&n| g.node(n).name == request.op && !g.node(n).parameterized);
        let Some(node) = node else {
            let names = g.node_ids().filter(|&n| !g.node(n).parameterized).map(|n| g.node(n).name.as_str());
            let close = flags::close_candidates(&request.op, names);
            return Err(flags::no_match("--split op", &request.op, "op of the training graph", &close));
        };
        runs.push(emit::Run::plan(g, node, request)?);
    }
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            if a.touches(g, b) {
                return Err(Error::Usage(format!(
                    "--split: the runs of '{}' and '{}' overlap or feed each other; split them in one run (depth)",
                    a.request.op, b.request.op
                )));
            }
        }
    }
    let mut patch = Patch::new(PASS);
    let mut removed: HashSet<NodeId> = runs.iter().flat_map(|r| r.covered.iter().map(|c| c.node)).collect();
    let in_blocks: Vec<emit::Covered> =
        runs.iter().filter(|r| r.emits_itself().is_none()).flat_map(|r| r.covered.iter().cloned()).collect();
    emit::remove_dead_shapes(g, &in_blocks, &mut removed, &mut patch);
    let emitted = blocks::emit(g, &in_blocks, &removed, &mut patch);
    let mut reports = Vec::with_capacity(runs.len());
    for run in &runs {
        reports.push(match run.emits_itself() {
            Some(emit::OwnEmission::Halo(halo)) => halo.emit(g, run.request, run.covered[0].node, &removed, &mut patch),
            Some(emit::OwnEmission::Statistics) => batch_norm::emit(run, g, &removed, &mut patch),
            None => run.report(g, &emitted),
        });
    }
    Ok((patch, reports))
}
