//! Equality saturation with egg: a graph's meaning as terms, rewrite rules
//! that are equations of the graph semantics, and two uses of them.
//!
//! - [`verify`] proves that a rewritten graph computes the same outputs and
//!   variable updates as its original (`lms verify`, and after every
//!   rewrite in `lms compile`), with [`values`] comparing the bytes of
//!   variables and constants, which terms do not see.
//! - [`propagate`] finds how far a split of an op into micro-ops travels
//!   through the ops after it before its parts must be merged, extracting the
//!   cheapest form with a cost function.
//!
//! [`lang`] defines the terms; [`rules`] holds the rules, one file per
//! family. Every run is bounded by [`Limits`], counts sized from the terms
//! (never the clock, so a verdict does not depend on the machine), and
//! reports why it stopped ([`Stop`]).

pub mod lang;
pub mod propagate;
pub mod rules;
mod saturate;
mod terms;
#[cfg(test)]
pub(crate) mod testing;
pub mod values;
pub mod verify;

pub use propagate::{propagate, AxisSplit, Merge, SplitPlan};
pub use saturate::{Limits, Stop};
pub use terms::TermBuilder;
pub use verify::{check, verify, Item, Status, VerifyReport, What};
