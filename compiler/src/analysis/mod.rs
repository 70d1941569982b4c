//! Analyses over the IR: execution ordering (γ of TFLMS Definition 2 and
//! the default schedule), the scheduled view (positions and tensor releases, built once per
//! schedule), tensor classification, lifetimes, memory, footprints (live peaks, placed arenas and the
//! budgets they fit), and the
//! time model (device profiles, per-op cost, the three-stream timeline).

pub mod classify;
pub mod cost;
pub mod footprint;
pub mod gemm;
pub mod lifetime;
pub mod memory;
pub mod order;
pub mod profile;
pub mod scheduled;
pub mod timeline;
