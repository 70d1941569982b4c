//! Outputs of the compiler: the stable text form of a graph, the serialized
//! `.lms` graph, the ONNX export for graph viewers, and the original model
//! with trained weights, each written safely ([`output`]).

pub mod onnx;
pub mod output;
pub mod serialize;
pub mod text;
#[cfg(feature = "cli")]
pub mod trained_onnx;
