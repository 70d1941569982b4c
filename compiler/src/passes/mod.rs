//! Memory passes: rewrites of a training graph that lower its device memory.
//!
//! - [`tflms`]: TFLMS (TFLMS §4-5): swap-out/swap-in identity ops on the
//!   CPU with control edges that time the swap-ins, and a budget mode that
//!   searches its knobs with the memory simulator.
//! - [`recompute`]: the producer chain that re-makes a dropped forward tensor.
//! - [`planner`]: `--strategy auto`, the budget planner that chooses swap or
//!   recompute per tensor by extra time per byte removed from the peak.
//! - [`split`]: ops run as micro-ops on parts of their tensors (TSPLIT §III).
//! - [`stages`]: the passes `lms compile` runs, construction and memory
//!   passes alike, as [`Pass`](crate::pipeline::Pass)es of the pipeline.

pub mod planner;
pub mod recompute;
pub mod split;
pub mod stages;
pub mod tflms;
