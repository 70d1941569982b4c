//! Geometry shared by the CPU and CUDA kernels, written once: what an op's attributes
//! and input shapes say about the positions it reads and writes.

pub(crate) mod window;
