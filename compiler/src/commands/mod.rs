//! The `lms` commands and what they report: each module is one command (or
//! the library face of one, [`builder`]) over the compiler's layers below
//! (`frontend`, `train`, `passes`, `analysis`, `emit`), which never import
//! this module.

pub mod builder;
#[cfg(feature = "cli")]
pub mod cli;
pub mod compile;
pub mod compile_pipeline;
#[cfg(feature = "cli")]
pub mod dataset;
pub mod inspect;
pub mod max_batch;
#[cfg(feature = "cli")]
pub mod op_times;
pub mod plan_curve;
pub mod process;
#[cfg(feature = "cli")]
pub mod profile;
pub mod provenance;
#[cfg(feature = "cli")]
pub mod run;
pub mod setup;
pub mod show;
pub mod simulate;
