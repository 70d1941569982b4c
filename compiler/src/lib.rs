//! lms compiler: reads ONNX models into the lms IR, infers shapes, analyses
//! memory, and (in later stages) rewrites training graphs to fit a budget.

pub mod analysis;
pub mod compile;
pub mod egraph;
pub mod emit;
mod error;
pub mod flags;
pub mod frontend;
pub mod glob;
pub mod inspect;
pub mod ir;
pub mod max_batch;
pub mod passes;
pub mod pipeline;
pub mod process;
pub mod run;
pub mod shape;
pub mod simulate;
pub mod train;
pub mod units;

pub use error::{exit, Error, Result};
