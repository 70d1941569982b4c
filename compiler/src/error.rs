//! The compiler's error type: one line, naming the file and the node or
//! tensor at fault.

use crate::ir::{AttrError, CycleError, VerifyError};
use crate::units::{format_bytes, format_bytes_pair};
use lms_proto::escape::Escaped;
use lms_proto::input::InputError;
use lms_proto::ops::ShapeError;
#[cfg(feature = "cli")]
use lms_runtime::RuntimeError;
use std::path::PathBuf;

/// Everything that can go wrong reading, analysing or writing a graph.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Context: the file the rest of the error is about.
    #[error("{}: {source}", Escaped(&.path.to_string_lossy()))]
    InFile { path: PathBuf, source: Box<Error> },
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    /// An input file refused before or while reading it (not a regular file,
    /// too large, unreadable).
    #[error(transparent)]
    Refused(#[from] InputError),
    /// An output file that could not be written.
    #[error("cannot write: {0}")]
    Write(std::io::Error),
    /// Standard output could not be written (a full disk, a descriptor
    /// not open for writing); a closed pipe ends lms by SIGPIPE instead.
    #[error("cannot write to standard output: {0}")]
    Stdout(std::io::Error),
    /// A run stopped by SIGINT after `done` of its `total` steps, having
    /// written what it was asked to keep.
    #[error("interrupted by SIGINT after step {done} of {total}")]
    Interrupted { done: usize, total: usize },
    #[error("file is empty")]
    Empty,
    #[error("not a valid ONNX model: {0}")]
    Decode(#[from] lms_proto::bounded::DecodeError),
    #[error("model has no graph")]
    NoGraph,
    #[error("model imports no opset of the default ONNX domain")]
    NoOpset,
    #[error("opset {0} of the default domain is not supported (lms reads opsets 6 to 23)")]
    UnsupportedOpset(i64),
    #[error("tensor '{}': {reason}", Escaped(.tensor))]
    Tensor { tensor: String, reason: String },
    #[error("input '{}': {reason}", Escaped(.input))]
    Input { input: String, reason: String },
    #[error("node '{}' ({}): {reason}", Escaped(.node), Escaped(.op))]
    Node { node: String, op: String, reason: String },
    #[error("node '{}' ({}): {source}", Escaped(.node), Escaped(.op))]
    Shape { node: String, op: String, source: ShapeError },
    #[error("node '{}' ({}): {source}", Escaped(.node), Escaped(.op))]
    Attr { node: String, op: String, source: AttrError },
    #[error(
        "node '{}' ({}) reads tensor '{}', which no node, initializer or input produces",
        Escaped(.node),
        Escaped(.op),
        Escaped(.tensor)
    )]
    Dangling { node: String, op: String, tensor: String },
    #[error("tensor '{}' is produced twice: by '{}' and by '{}'", Escaped(.tensor), Escaped(.first), Escaped(.second))]
    Duplicate { tensor: String, first: String, second: String },
    #[error("graph output '{}' is not produced by any node, initializer or input", Escaped(.0))]
    UnknownOutput(String),
    #[error(transparent)]
    Cycle(#[from] CycleError),
    /// A graph whose edges and slots disagree (a pass's output is checked).
    #[error(transparent)]
    Malformed(#[from] VerifyError),
    /// A pass's patch that names something not in the graph, or whose
    /// result breaks an invariant of the pass manager: a bug in lms (exit 1).
    #[error("pass '{pass}': {problem}")]
    Patch { pass: String, problem: String },
    /// A plan whose placed arena of `pool` ("device" or "host") exceeds its
    /// budget: `arena` bytes placed, `peak` bytes live at most, at `op`.
    #[error(
        "does not fit in {pool} memory: the plan needs {} placed (live peak {} at op '{}'), {} over the budget of {}",
        format_bytes(*.arena),
        format_bytes(*.peak),
        Escaped(.op),
        format_bytes(.arena.saturating_sub(*.budget)),
        format_bytes(*.budget)
    )]
    OverBudget { pool: &'static str, arena: u64, peak: u64, budget: u64, op: String },
    /// The budget planner finds no plan whose placed arena of `pool`
    /// ("device" or "host") is within its budget: `why` names the op whose
    /// own working set exceeds it, the op where the best plan peaks, or the
    /// best plan's arena; `smallest` is the smallest live peak of the pool
    /// any plan reaches.
    #[error(
        "does not fit in {} of {pool} memory: {why}; the smallest peak any plan reaches is {}",
        format_bytes_pair(*.budget, *.smallest).0,
        format_bytes_pair(*.budget, *.smallest).1
    )]
    NoPlan { pool: &'static str, why: String, smallest: u64, budget: u64 },
    /// A rewritten graph not proven to compute what its original does;
    /// `what` names the first output or variable update at fault.
    #[error("rewrite not proven equivalent: {what} {reason}")]
    Unproven { what: String, reason: String },
    /// Even batch 1 does not fit the device budget, with or without a rewrite.
    #[error("batch 1 does not fit in a device budget of {}, with or without TFLMS", format_bytes(*.0))]
    NoBatchFits(u64),
    /// Running a compiled graph failed (out of memory among others).
    #[cfg(feature = "cli")]
    #[error(transparent)]
    Run(#[from] RuntimeError),
    #[error("{0}")]
    Usage(String),
    /// An error with advice on what to try instead.
    #[error("{source}; {hint}")]
    Hinted { source: Box<Error>, hint: String },
    /// A `.lms` file that breaks the contract (the error names the file).
    #[error(transparent)]
    Contract(#[from] lms_proto::contract::ContractError),
}

/// The exit status of `lms` for each kind of outcome (documented in `--help`
/// and the README).
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// An internal error: a bug in lms, not in its input.
    pub const INTERNAL: u8 = 1;
    /// A usage error or bad input (file, flag or path).
    pub const USAGE: u8 = 2;
    /// The graph does not fit its memory budget (compile, max-batch, run).
    pub const DOES_NOT_FIT: u8 = 3;
    /// A rewrite is not proven equivalent to its original.
    pub const NOT_PROVEN: u8 = 4;
    /// Stopped by SIGINT (128 + its number, as shells report it).
    pub const INTERRUPTED: u8 = 130;
}

impl Error {
    /// The exit status this error ends `lms` with (see [`exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::InFile { source, .. } | Error::Hinted { source, .. } => source.exit_code(),
            Error::OverBudget { .. } | Error::NoPlan { .. } | Error::NoBatchFits(_) => exit::DOES_NOT_FIT,
            #[cfg(feature = "cli")]
            Error::Run(
                RuntimeError::OutOfMemory(_)
                | RuntimeError::ReserveOverLimit { .. }
                | RuntimeError::Allocation { .. }
                | RuntimeError::ScratchTooSmall { .. },
            ) => exit::DOES_NOT_FIT,
            Error::Unproven { .. } => exit::NOT_PROVEN,
            Error::Interrupted { .. } => exit::INTERRUPTED,
            Error::Malformed(_) | Error::Patch { .. } => exit::INTERNAL,
            #[cfg(feature = "cli")]
            Error::Run(RuntimeError::Internal(_)) => exit::INTERNAL,
            _ => exit::USAGE,
        }
    }

    /// Attaches the file the error is about (once; an error that already
    /// names a file keeps it).
    pub fn in_file(self, path: impl Into<PathBuf>) -> Error {
        match self {
            Error::InFile { .. } | Error::Contract(_) => self,
            other => Error::InFile { path: path.into(), source: Box::new(other) },
        }
    }
}

/// Result with the compiler's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_and_a_peak_that_round_alike_are_told_apart() {
        let e = Error::NoPlan { pool: "device", why: "x".into(), smallest: 2252801, budget: 2252800 };
        assert_eq!(
            e.to_string(),
            "does not fit in 2.15 MiB (2252800 B) of device memory: x; the smallest peak any plan reaches is 2.15 MiB (2252801 B)"
        );
        let hinted = Error::Hinted { source: Box::new(e), hint: "try this".into() };
        assert!(hinted.to_string().ends_with("; try this"));
        assert_eq!(hinted.exit_code(), exit::DOES_NOT_FIT);
    }

    #[test]
    fn a_pass_that_emits_a_malformed_graph_is_an_internal_error_not_bad_input() {
        let e = Error::Patch { pass: "split".into(), problem: "node 'a' input 0 reads a removed producer".into() };
        assert_eq!(e.in_file("model.onnx").exit_code(), exit::INTERNAL);
    }
}
