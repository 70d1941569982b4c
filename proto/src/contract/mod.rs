//! The compiler–runtime contract: what a valid `.lms` file is, and the rules both sides
//! share. The compiler (its `.lms` reader, simulator and dtype sizes) and the runtime call
//! this module; nothing here is defined a second time elsewhere.
//!
//! - [`Program`] ([`program`]): decoding and validation of a `.lms` file, in the order
//!   [`tensors`], [`nodes`], [`edges`], [`schedule`], [`plan`], [`outputs`] (each ONNX
//!   node's declared output types against its op's shape rule); errors are one
//!   [`ContractError`] line naming the file and the tensor or node.
//! - [`dtype`]: element sizes and names, checked and capped tensor byte counts.
//! - [`ops`]: the lms op names and domain, and what each kind of node does.
//! - [`release`]: pools and the release rule of memory accounting, and [`Liveness`].
//! - [`placement`]: the static offset of every tensor in its pool's arena.

pub mod describe;
pub mod dtype;
pub mod edges;
pub mod error;
pub mod nodes;
pub mod ops;
pub mod outputs;
pub mod placement;
pub mod plan;
pub mod program;
pub mod release;
pub mod schedule;
pub mod tensors;

pub use dtype::{dtype_name, element_bytes, tensor_bytes, MAX_TENSOR_BYTES};
pub use edges::Update;
pub use error::ContractError;
pub use ops::{
    NodeKind, BATCH_NORM_APPLY_OP, BATCH_NORM_GRAD_DATA_OP, BATCH_NORM_GRAD_MERGE_OP, BATCH_NORM_GRAD_SUMS_OP,
    BATCH_NORM_MERGE_OP, BATCH_NORM_STATISTICS_OP, INPUT_OP, LMS_DOMAIN, LMS_DOMAIN_VERSION, OVERLAP_ADD_OP,
    SPLIT_PART_OP, SPLIT_WINDOW_OP, SWAP_IN_OP, SWAP_OUT_OP, VARIABLE_OP,
};
pub use program::Program;
pub use release::{output_pool, release_after, tensor_uses, Liveness, Pool, TensorUse};
pub use tensors::TensorType;
