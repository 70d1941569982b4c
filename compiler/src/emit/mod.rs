//! Outputs of the compiler: the stable text form of a graph, the serialized
//! `.lms` graph, and reports.

pub mod text;
pub mod serialize;
