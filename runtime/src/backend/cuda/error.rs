//! The CUDA backend's errors: the libraries' own errors wrapped with `#[from]`, and the
//! backend's conditions (a library that cannot be loaded, a full or fragmented arena).

use crate::error::{KernelError, RuntimeError};
use cudarc::cublas::result::CublasError;
use cudarc::cudnn::result::CudnnError;
use cudarc::driver::DriverError;

/// Why a CUDA call failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CudaError {
    /// A shared library of CUDA could not be loaded.
    #[error("{0}")]
    Library(String),
    /// The CUDA driver API failed.
    #[error("CUDA driver: {0}")]
    Driver(#[from] DriverError),
    /// cuBLAS failed.
    #[error("cuBLAS: {0}")]
    Cublas(#[from] CublasError),
    /// cuDNN failed.
    #[error("cuDNN: {0}")]
    Cudnn(#[from] CudnnError),
    /// NVRTC could not compile a kernel source.
    #[error("NVRTC compiling {source_name}: {message}")]
    Compile {
        /// The kernel source file.
        source_name: &'static str,
        /// NVRTC's error, with its log.
        message: String,
    },
    /// The kernels loaded have no function of this name (a bug in the backend).
    #[error("no kernel function `{0}` in the compiled sources")]
    MissingFunction(String),
    /// A kernel launched with arguments that do not match its parameters (a bug in the
    /// backend, caught before the launch).
    #[error("kernel `{kernel}` takes {expected}, launched with {given}")]
    Signature {
        /// The kernel.
        kernel: &'static str,
        /// Its parameters.
        expected: String,
        /// The arguments given.
        given: String,
    },
    /// An allocation does not fit in the device arena (the budget's physical memory).
    #[error("device arena cannot place {wanted} bytes: {stats}")]
    ArenaFull {
        /// Bytes asked for.
        wanted: u64,
        /// The arena's state at the failure.
        stats: super::arena::ArenaStats,
    },
    /// A host block does not lie inside the pinned host arena.
    #[error("pinned host arena of {arena} bytes cannot hold {wanted} bytes at offset {offset}")]
    HostArenaFull {
        /// The block's offset.
        offset: u64,
        /// Its bytes.
        wanted: u64,
        /// The arena's bytes.
        arena: u64,
    },
    /// Pinned host memory could not be allocated.
    #[error("cannot pin {0} bytes of host memory")]
    HostMemory(u64),
    /// A value does not fit the integer type a CUDA library takes.
    #[error("{0} does not fit the sizes CUDA libraries accept")]
    TooLarge(String),
}

impl From<CudaError> for RuntimeError {
    fn from(error: CudaError) -> RuntimeError {
        RuntimeError::Backend { backend: "cuda".to_string(), message: error.to_string() }
    }
}

/// Why one op failed on the CUDA backend: a problem with the node (its attributes,
/// shapes or dtypes, or an op without a kernel), or a failure of CUDA itself.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum OpError {
    /// The node is not valid here, or has no CUDA kernel.
    Kernel(KernelError),
    /// A CUDA call failed.
    Cuda(CudaError),
    /// A library needs more scratch memory than the plan gives the node.
    ScratchTooSmall {
        /// What needs it.
        what: String,
        /// Bytes it needs.
        needed: u64,
        /// Bytes the plan gives it.
        planned: u64,
    },
}

impl From<KernelError> for OpError {
    fn from(error: KernelError) -> OpError {
        OpError::Kernel(error)
    }
}

impl From<CudaError> for OpError {
    fn from(error: CudaError) -> OpError {
        OpError::Cuda(error)
    }
}

impl From<DriverError> for OpError {
    fn from(error: DriverError) -> OpError {
        OpError::Cuda(error.into())
    }
}

impl From<CublasError> for OpError {
    fn from(error: CublasError) -> OpError {
        OpError::Cuda(error.into())
    }
}

impl From<CudnnError> for OpError {
    fn from(error: CudnnError) -> OpError {
        OpError::Cuda(error.into())
    }
}

/// Result of the ops of the CUDA backend.
pub(crate) type OpResult<T> = Result<T, OpError>;
