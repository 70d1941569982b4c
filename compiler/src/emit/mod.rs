//! Outputs of the compiler: the stable text form of a graph, the serialized
//! `.lms` graph, and the ONNX export for graph viewers.

pub mod onnx;
pub mod serialize;
pub mod text;
