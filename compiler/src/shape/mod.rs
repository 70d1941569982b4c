//! Shape and dtype inference, cost and split rules: the op definition layer
//! (`lms_proto::ops`), which the runtime reads too, and the compiler's check
//! that a graph's nodes declare the output types their inputs give.

pub mod declared;

pub use lms_proto::ops::*;
