//! lms runtime: executes serialized lms graphs on a CPU reference backend or on CUDA.
//! Loading and validating a `.lms` file ([`Program`]) and the release rules are
//! `lms_proto::contract`'s.
//!
//! - [`tensor`]: host tensors (shape + typed buffer).
//! - [`attrs`]: typed access to a node's attributes.
//! - [`cpu::kernels`]: the kernels of the CPU reference backend and their dispatchers,
//!   [`cpu::kernels::forward`] (ONNX ops) and [`cpu::kernels::lms`] (the `lms` domain:
//!   training-mode forward ops, losses, gradients, optimizers).
//! - [`geometry`]: window and layout geometry shared by the CPU and CUDA kernels.
//! - [`memory`]: memory pools with a hard budget (device arena, host pool).
//! - [`backend`]: the backend trait (buffers, three queues, events), the CPU backend and
//!   the CUDA backend ([`backend::cuda`]: cuBLAS, cuDNN, NVRTC kernels; dynamic loading).
//! - [`cpu_time`]: the calling thread's CPU time (steps and traced nodes measure it).
//! - [`init`]: initial values of variables and synthetic inputs from a seed.
//! - [`executor`]: runs one training step with memory accounting and a report.
//! - [`session`]: a training run: [`Session::new`], [`Session::step`].

pub mod attrs;
pub mod backend;
pub mod cpu;
pub mod cpu_time;
pub mod error;
pub mod executor;
pub(crate) mod geometry;
pub mod init;
pub mod memory;
pub mod session;
pub mod tensor;

pub use backend::cpu::CpuBackend;
pub use backend::cuda::{CudaBackend, CudaOptions};
pub use backend::{Backend, KernelContext, Queue};
pub use error::{KernelError, RuntimeError};
pub use executor::{OpTime, StepReport};
pub use lms_proto::contract::Program;
pub use memory::{Arena, Pool};
pub use session::{RunOptions, Session, Step};
pub use tensor::{Buffer, HostTensor};
