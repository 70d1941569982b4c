//! Outputs of the compiler: the stable text form of a graph, the serialized
//! `.lms` graph, the ONNX export for graph viewers, the original model with
//! trained weights, and the chart primitives of the reports' pictures
//! ([`chart`]), each written safely ([`output`]).

pub mod chart;
pub mod onnx;
pub mod output;
pub mod serialize;
pub mod text;
#[cfg(feature = "cli")]
pub mod trained_onnx;
