//! The CPU reference backend: deterministic, single-threaded kernels on host tensors.

pub mod kernels;
