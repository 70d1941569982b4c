//! Outputs of the compiler: the stable text form of a graph, the serialized
//! `.lms` graph, the ONNX export for graph viewers, the original model with
//! trained weights, and the SVG picture and HTML report of a simulated step,
//! each written safely ([`output`]).

pub mod chart;
pub mod html;
pub mod onnx;
pub mod output;
pub mod serialize;
pub mod svg;
pub mod text;
#[cfg(feature = "cli")]
pub mod trained_onnx;
