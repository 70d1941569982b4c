//! The ONNX frontend: `ModelProto` → IR.
//!
//! Initializers become variables (parameterized vertices holding their
//! values); graph inputs without an initializer become inputs (older IR
//! versions list every initializer as an input too); every node becomes a
//! vertex whose output types come from shape inference, in a topological
//! order of the file's nodes. `--batch` sets the leading dimension of the
//! data inputs and `--dim NAME=N` any other symbolic dimension.

mod attr;
mod einsum;
mod import;
pub mod tensor;

use crate::error::{Error, Result};
use crate::ir::Graph;
use lms_proto::onnx::ModelProto;
use std::collections::BTreeMap;
use std::path::Path;

pub use import::import;

/// Opsets of the ONNX default domain lms reads. Opsets 22 and 23 change no
/// op lms runs except to widen its type constraints (bfloat16, 4-bit and
/// 8-bit floats and integers, which lms refuses by type wherever they
/// appear); the ops they add (`Attention`, `RotaryEmbedding`,
/// `RMSNormalization`) are refused by name like any op lms does not run.
pub const OPSETS: std::ops::RangeInclusive<i64> = 6..=23;

/// How to make a model's symbolic dimensions concrete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrontendOptions {
    /// Leading dimension of every data input; `None` keeps the model's (a
    /// symbolic one is then an error asking for `--batch`, unless `dims`
    /// names it).
    pub batch: Option<usize>,
    /// Values for named symbolic dimensions (`dim_param`).
    pub dims: BTreeMap<String, usize>,
}

/// A model read from a file: its graph and what the file says about it.
#[derive(Clone, Debug)]
pub struct Model {
    pub graph: Graph,
    pub ir_version: i64,
    pub producer: String,
}

/// Reads, decodes and imports an ONNX model file. Errors name the file.
pub fn load(path: &Path, options: &FrontendOptions) -> Result<Model> {
    read_model(path).and_then(|proto| import(&proto, path.parent(), options)).map_err(|e| e.in_file(path))
}

/// The external data files a model's initializers name, resolved against
/// `base_dir` (the model's folder), sorted and without repeats: with the
/// model itself, what a build system must watch (depfiles).
pub fn external_files(model: &ModelProto, base_dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<std::path::PathBuf> = model
        .graph
        .iter()
        .flat_map(|g| &g.initializer)
        .filter(|t| t.data_location == 1)
        .flat_map(|t| t.external_data.iter().filter(|e| e.key == "location").map(|e| base_dir.join(&e.value)))
        .collect();
    files.sort();
    files.dedup();
    files
}

/// Reads and decodes a `ModelProto` without importing it: a regular file of
/// at most [`MAX_PROTO_FILE_BYTES`](lms_proto::input::MAX_PROTO_FILE_BYTES).
pub fn read_model(path: &Path) -> Result<ModelProto> {
    decode_model(&read_model_bytes(path)?)
}

/// The bytes of a model file: a regular file of at most
/// [`MAX_PROTO_FILE_BYTES`](lms_proto::input::MAX_PROTO_FILE_BYTES).
pub fn read_model_bytes(path: &Path) -> Result<Vec<u8>> {
    Ok(lms_proto::input::read_regular(path, lms_proto::input::MAX_PROTO_FILE_BYTES)?)
}

/// Decodes a `ModelProto` from bytes, refusing bytes whose decoded form would take more
/// than [`ONNX_EXPANSION`](lms_proto::bounded::ONNX_EXPANSION) times their size (plus 1 MiB).
pub fn decode_model(bytes: &[u8]) -> Result<ModelProto> {
    if bytes.is_empty() {
        return Err(Error::Empty);
    }
    Ok(lms_proto::bounded::decode::<ModelProto>(bytes, lms_proto::bounded::ONNX_EXPANSION)?)
}
