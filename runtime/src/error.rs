//! The error type of kernels and host tensors.

use lms_proto::escape::Escaped;

/// Why a kernel, a tensor constructor or an attribute lookup failed; one-line messages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// The op has no CPU kernel.
    #[error("no CPU kernel for op `{}`", Escaped(.0))]
    UnknownOp(String),
    /// The op (or this form of it) has no kernel on the CUDA backend.
    #[error("op `{}` has no CUDA kernel yet", Escaped(.0))]
    NoCudaKernel(String),
    /// A required input slot is absent.
    #[error("input {0} is missing")]
    MissingInput(String),
    /// A tensor (input, output, attribute) has the wrong element type.
    #[error("{what}: expected {expected}, found {found}")]
    Dtype {
        /// The tensor, e.g. `input X`.
        what: String,
        /// The dtype(s) accepted.
        expected: String,
        /// The dtype seen.
        found: String,
    },
    /// A tensor has a shape the kernel cannot accept.
    #[error("{what}: {msg}")]
    Shape {
        /// The tensor, e.g. `input W`.
        what: String,
        /// What is wrong with it.
        msg: String,
    },
    /// An attribute is missing, of the wrong kind or out of range.
    #[error("attribute `{name}`: {msg}")]
    Attribute {
        /// The attribute's name.
        name: String,
        /// What is wrong with it.
        msg: String,
    },
    /// A legal case the CPU reference backend does not implement.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Input values the op rejects (index out of bounds, division by zero, ...).
    #[error("{0}")]
    Invalid(String),
    /// An error inside a kernel, with the op it happened in.
    #[error("{op}: {error}")]
    Op {
        /// The op type.
        op: String,
        /// The underlying error.
        error: Box<KernelError>,
    },
}

impl KernelError {
    /// A shape error about `what`.
    pub fn shape(what: impl Into<String>, msg: impl Into<String>) -> Self {
        KernelError::Shape { what: what.into(), msg: msg.into() }
    }

    /// An attribute error about `name`.
    pub fn attr(name: impl Into<String>, msg: impl Into<String>) -> Self {
        KernelError::Attribute { name: name.into(), msg: msg.into() }
    }

    /// A rejected input value.
    pub fn invalid(msg: impl Into<String>) -> Self {
        KernelError::Invalid(msg.into())
    }

    /// An unimplemented case.
    pub fn unsupported(msg: impl Into<String>) -> Self {
        KernelError::Unsupported(msg.into())
    }
}

impl From<lms_proto::ops::ShapeError> for KernelError {
    /// An op rule of the contract refusing the node (its window, say).
    fn from(e: lms_proto::ops::ShapeError) -> Self {
        match e {
            lms_proto::ops::ShapeError::UnsupportedAttr { name, value } => {
                KernelError::attr(name, format!("unsupported value {value}"))
            }
            other => KernelError::Invalid(other.to_string()),
        }
    }
}

/// Result of kernels and tensor helpers.
pub type Result<T, E = KernelError> = std::result::Result<T, E>;

/// Why loading or running an lms program failed; one-line messages that name the file,
/// node or tensor at fault.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    /// The `.lms` file could not be read, or breaks the contract.
    #[error(transparent)]
    Contract(#[from] lms_proto::contract::ContractError),
    /// An allocation would exceed a memory pool's budget.
    #[error("{0}")]
    OutOfMemory(Box<crate::memory::OutOfMemory>),
    /// The memory a backend takes beside the plan's arena whatever the program (its fixed
    /// device buffers) exceeds the pool's budget by itself.
    #[error(
        "the {pool} limit of {} ({budget} B) is below the backend's fixed reserve of {} ({reserve} B)",
        crate::memory::format_bytes(*.budget),
        crate::memory::format_bytes(*.reserve)
    )]
    ReserveOverLimit {
        /// The pool.
        pool: crate::memory::Pool,
        /// The backend's fixed bytes in that pool.
        reserve: u64,
        /// The pool's budget.
        budget: u64,
    },
    /// The system refused memory that a pool's budget allowed
    /// ([`crate::memory::check_allocatable`]).
    #[error("cannot allocate {} for {what}: the system refused that much memory", crate::memory::format_bytes(*.bytes))]
    Allocation {
        /// What the memory was for: a node and its op, or a copy.
        what: String,
        /// The bytes asked for.
        bytes: u64,
    },
    /// A kernel failed on a node.
    #[error("node '{}': {source}", Escaped(.node))]
    Kernel {
        /// The node's name.
        node: String,
        /// The kernel's error (it names the op).
        source: KernelError,
    },
    /// A variable or an input could not be given its initial value.
    #[error("initialising '{}': {message}", Escaped(.node))]
    Init {
        /// The variable or input node.
        node: String,
        /// What is wrong.
        message: String,
    },
    /// The backend failed (a device error, or work issued before the events it needs).
    #[error("{backend} backend: {message}")]
    Backend {
        /// The backend's name.
        backend: String,
        /// What failed.
        message: String,
    },
    /// A library needs more scratch memory than the plan gives the node (the plan's
    /// scratch rule, `lms_proto::ops::scratch`, is below what this device's library
    /// takes): the node does not fit its plan.
    #[error(
        "node '{}' ({}): {what} needs {needed} bytes, the plan gives it {planned} bytes; compile with a device \
         profile that records this device's convolution workspaces",
        Escaped(.node),
        Escaped(.op)
    )]
    ScratchTooSmall {
        /// The node's name.
        node: String,
        /// Its op type.
        op: String,
        /// What needs the memory, e.g. "cuDNN forward algorithm 1's workspace".
        what: String,
        /// Bytes the library needs.
        needed: u64,
        /// Bytes the plan gives it.
        planned: u64,
    },
    /// An invariant of the executor does not hold: a bug in the runtime, not bad input.
    #[error("internal error: {0}")]
    Internal(String),
}
