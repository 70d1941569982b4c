//! A stable-Rust fuzz harness: structure-aware mutation ([`mutate`]) of seeds from the
//! fixtures, two targets ([`targets`]: ONNX import; `.lms` load, validate, simulate,
//! verify, run one step), the `.npz` inputs of `lms run` ([`npz`]) and a runner ([`runner`]) that reports panics, slow inputs and executions
//! holding more than 1 GiB ([`alloc`]). [`surface`] adds the command line and
//! external-data layouts as targets. The `lms-fuzz` binary runs long campaigns; the
//! `fuzz_bounded` test runs a few seconds of each target.

pub mod alloc;
pub mod mutate;
pub mod npz;
pub mod runner;
pub mod surface;
pub mod targets;
