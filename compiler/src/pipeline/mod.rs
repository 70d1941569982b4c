//! The compile pipeline: a list of named passes run by a pass manager.
//!
//! A pass reads the [`Context`] and returns a [`Step`] and its typed report
//! (the caller's report type, one variant per pass): a memory pass returns
//! a [`Patch`] (nodes added at schedule positions, rewired inputs, control
//! edges, removed nodes), which the manager applies to a copy of the graph
//! and keeps only when the invariants ([`invariants::check`]) hold; a
//! construction pass (import, autodiff, optimizer) builds the graph in place
//! and the manager settles its schedule into a topological order before
//! checking the same invariants. `--dump-after PASS` writes the stable text
//! form after that pass; `--stop-after PASS` ends the pipeline there.

pub mod invariants;
pub mod patch;

pub use patch::{apply, Applied, NewNode, NodeRef, Patch, Position, TensorRef};

use crate::analysis::order;
use crate::emit;
use crate::error::{Error, Result};
use crate::ir::{Graph, TensorId};
use std::path::PathBuf;

/// What the passes of one compile share.
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// The graph being compiled.
    pub graph: Graph,
    /// Each trained variable and its gradient, in training order (set by
    /// autodiff, read by the optimizer).
    pub gradients: Vec<(TensorId, TensorId)>,
    /// The training graph before the first memory pass changed it: what
    /// verify proves the result equal to. `None` while nothing rewrote it.
    pub reference: Option<Graph>,
}

impl Context {
    /// Keeps the current graph as the reference verify proves against,
    /// unless an earlier memory pass already did.
    pub fn keep_reference(&mut self) {
        if self.reference.is_none() {
            self.reference = Some(self.graph.clone());
        }
    }
}

/// What a pass did.
#[derive(Debug)]
pub enum Step {
    /// Changes for the manager to apply (memory and analysis passes).
    Patch(Patch),
    /// The pass built or extended `Context::graph` itself (construction passes).
    Built,
}

/// One named step of a compile, reporting an `R`.
pub trait Pass<R> {
    /// The name `--dump-after` and `--stop-after` use.
    fn name(&self) -> &'static str;
    /// Runs the pass on the context: what to change, and what it did.
    fn run(&mut self, cx: &mut Context) -> Result<(Step, R)>;
}

/// Where the manager stops and what it writes on the way.
#[derive(Clone, Debug, Default)]
pub struct PassOptions {
    /// Write the text form after the pass of this name to the file.
    pub dump_after: Option<(String, PathBuf)>,
    /// End the pipeline after the pass of this name.
    pub stop_after: Option<String>,
}

/// How far a pipeline ran, and what its passes reported.
#[derive(Debug)]
pub struct Ran<R> {
    /// Names of the passes run, in order.
    pub passes: Vec<&'static str>,
    /// The report of each pass run, in the same order.
    pub reports: Vec<R>,
    /// True when `stop_after` ended it early.
    pub stopped: bool,
}

/// Applies `patch` to a copy of `g` and checks the invariants on it: the
/// patched graph and the ids of the added nodes, or an error naming the
/// patch's pass (and `g` is untouched either way).
pub fn apply_checked(g: &Graph, patch: &Patch) -> Result<(Graph, Applied)> {
    let (next, applied) = apply_unchecked(g, patch)?;
    check_patched(&next, patch)?;
    Ok((next, applied))
}

/// [`apply_checked`] without the invariants check, for a candidate a search
/// may drop unused: [`check_patched`] before it is kept.
pub fn apply_unchecked(g: &Graph, patch: &Patch) -> Result<(Graph, Applied)> {
    let mut next = g.clone();
    let applied = apply(&mut next, patch)?;
    Ok((next, applied))
}

/// The invariants check of [`apply_checked`] on a graph `patch` made.
pub fn check_patched(patched: &Graph, patch: &Patch) -> Result<()> {
    invariants::check(patched).map_err(|problem| Error::Patch { pass: patch.pass.clone(), problem })
}

/// Runs `passes` in order on `cx` (module doc). Fails before running any
/// pass when `options` names a pass not in the list.
pub fn run<R>(passes: &mut [Box<dyn Pass<R>>], cx: &mut Context, options: &PassOptions) -> Result<Ran<R>> {
    let names: Vec<&'static str> = passes.iter().map(|p| p.name()).collect();
    let named = options.dump_after.as_ref().map(|(n, _)| n).into_iter().chain(&options.stop_after);
    for wanted in named {
        if !names.contains(&wanted.as_str()) {
            return Err(Error::Usage(format!(
                "no pass named '{wanted}' in this compile (passes: {})",
                names.join(", ")
            )));
        }
    }
    let mut ran = Ran { passes: Vec::new(), reports: Vec::new(), stopped: false };
    for pass in passes.iter_mut() {
        let name = pass.name();
        let (step, report) = pass.run(cx)?;
        match step {
            Step::Patch(patch) => {
                if !patch.is_empty() {
                    cx.graph = apply_checked(&cx.graph, &patch)?.0;
                }
            }
            Step::Built => {
                order::settle(&mut cx.graph)?;
                invariants::check(&cx.graph).map_err(|problem| Error::Patch { pass: name.to_string(), problem })?;
            }
        }
        ran.passes.push(name);
        ran.reports.push(report);
        if let Some((_, path)) = options.dump_after.as_ref().filter(|(n, _)| n == name) {
            let text = emit::text::to_text(&cx.graph)?;
            emit::output::write_atomically(path, text.as_bytes())?;
        }
        if options.stop_after.as_deref() == Some(name) {
            ran.stopped = true;
            break;
        }
    }
    Ok(ran)
}

#[cfg(test)]
mod tests;
