//! The error type of kernels and host tensors.

/// Why a kernel, a tensor constructor or an attribute lookup failed; one-line messages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// The op has no CPU kernel.
    #[error("no CPU kernel for op `{0}`")]
    UnknownOp(String),
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

/// Result of kernels and tensor helpers.
pub type Result<T, E = KernelError> = std::result::Result<T, E>;
