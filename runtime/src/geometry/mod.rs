//! Geometry shared by the CPU and CUDA kernels, written once: what an op's attributes
//! and input shapes say about the positions it reads and writes.

pub(crate) mod layout;
pub(crate) mod matmul;
pub(crate) mod slice;
pub(crate) mod softmax;
pub(crate) mod triangle;
pub(crate) mod window;
