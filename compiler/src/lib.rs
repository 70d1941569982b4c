//! lms compiler: reads ONNX models into the lms IR, infers shapes, builds
//! training graphs, rewrites them to fit a memory budget, proves the rewrite
//! and writes `.lms` files.
//!
//! As a library (a `build.rs`, a test): [`Compile`] is `lms compile` as a
//! builder and [`testing`] gives a rewrite's stable text form for snapshot
//! tests. The `cli` feature (on by default) adds the `lms` command and the
//! runtime behind `lms run`; `default-features = false` compiles graphs
//! without them.

pub mod analysis;
pub mod budget;
pub mod commands;
pub mod egraph;
pub mod emit;
mod error;
pub mod flags;
pub mod frontend;
pub mod glob;
pub mod ir;
#[cfg(feature = "cli")]
pub mod npz;
pub mod passes;
pub mod pipeline;
pub mod shape;
pub mod testing;
pub mod train;
pub mod units;

pub use commands::builder::Compile;
pub use commands::{builder, compile, provenance};
pub use error::{exit, Error, Result};
