//! lms runtime: executes serialized lms graphs on a CPU reference backend or on CUDA.
//!
//! - [`tensor`]: host tensors (shape + typed buffer).
//! - [`attrs`]: typed access to a node's attributes.
//! - [`cpu::kernels`]: the kernels of the CPU reference backend and their dispatchers,
//!   [`cpu::kernels::forward`] (ONNX ops) and [`cpu::kernels::lms`] (the `lms` domain:
//!   training-mode forward ops, losses, gradients, optimizers).
//! - [`program`]: a `.lms` file loaded and validated, with its execution order.
//! - [`memory`]: memory pools with a hard budget (device arena, host pool).
//! - [`liveness`]: when each tensor is released (the memory-accounting rules of `OPS.md`).
//! - [`backend`]: the backend trait (buffers, three queues, events), the CPU backend and
//!   the CUDA backend ([`backend::cuda`]: cuBLAS, cuDNN, NVRTC kernels; dynamic loading).
//! - [`init`]: initial values of variables and synthetic inputs from a seed.
//! - [`executor`]: runs one training step with memory accounting and a report.
//! - [`session`]: a training run: [`Session::new`], [`Session::step`].

pub mod attrs;
pub mod backend;
pub mod cpu;
pub mod error;
pub mod executor;
pub mod init;
pub mod liveness;
pub mod memory;
pub mod program;
pub mod session;
pub mod tensor;

pub use backend::cpu::CpuBackend;
pub use backend::cuda::{CudaBackend, CudaOptions};
pub use backend::{Backend, KernelContext, Queue};
pub use error::{KernelError, RuntimeError};
pub use executor::{OpTime, StepReport};
pub use memory::{Arena, Pool};
pub use program::Program;
pub use session::{RunOptions, Session, Step};
pub use tensor::{Buffer, HostTensor};
