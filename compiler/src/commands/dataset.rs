//! A user's training data: the arrays of an `.npz` file keyed by the graph's
//! input names (the model's data inputs, and `labels` or `target` for the
//! loss), each with the samples along its first axis. Step `i` of an epoch
//! trains on samples `[i·B, (i+1)·B)`, B being the graph's batch; samples
//! after the last whole batch are left out.

use crate::error::{Error, Result};
use lms_proto::contract::{NodeKind, TensorType, INPUT_OP};
use lms_proto::lms::DType;
use lms_proto::units::default_host_memory;
use lms_runtime::tensor::dtype_name;
use lms_runtime::{HostTensor, Program};
use std::collections::BTreeMap;
use std::path::Path;

/// The arrays of one `.npz` file, checked against a graph's inputs.
pub struct Dataset {
    /// Per graph input: its name, the array's bytes and one sample's bytes.
    arrays: Vec<Column>,
    /// The graph's batch (first dimension of every input).
    batch: usize,
    /// Samples in every array.
    samples: usize,
}

struct Column {
    name: String,
    dtype: lms_proto::lms::DType,
    /// The shape of one batch.
    shape: Vec<usize>,
    bytes: Vec<u8>,
    sample_bytes: usize,
}

impl Dataset {
    /// Reads `path` and checks it against `program`'s inputs: one array per
    /// input, named like it, of its element type, with its shape after the
    /// first axis, and the same number of samples (at least one batch) in all.
    /// The data is held in memory: at most half the machine's memory
    /// ([`default_host_memory`]) of values is read.
    pub fn open(path: &Path, program: &Program) -> Result<Dataset> {
        let fail = |message: String| Error::Usage(message).in_file(path);
        let inputs: Vec<usize> = (0..program.node_count())
            .filter(|&n| program.kind(n) == NodeKind::Parameter && program.node(n).op == INPUT_OP)
            .collect();
        let names: Vec<&str> = inputs.iter().map(|&n| program.node(n).name.as_str()).collect();
        let types: BTreeMap<&str, &TensorType> = inputs
            .iter()
            .zip(&names)
            .map(|(&n, &name)| (name, program.tensor_type(program.node_outputs(n)[0])))
            .collect();
        let wanted = |ty: &TensorType| format!("{} [samples{}]", dtype_name(ty.dtype), rest(&ty.shape));
        let check = |name: &str, dtype: DType, shape: &[usize]| {
            let ty = types
                .get(name)
                .ok_or_else(|| format!("is not an input of the graph (its inputs are {})", names.join(", ")))?;
            if dtype != ty.dtype || shape.get(1..) != ty.shape.get(1..) || ty.shape.is_empty() {
                let got = format!("{} {shape:?}", dtype_name(dtype));
                return Err(format!("is {got}, the graph's input '{name}' wants {}", wanted(ty)));
            }
            Ok(())
        };
        let mut given: BTreeMap<String, HostTensor> =
            crate::npz::read(path, default_host_memory(), check)?.into_iter().collect();
        let mut arrays = Vec::with_capacity(inputs.len());
        let mut samples: Option<(usize, &str)> = None;
        let mut batch = 0;
        for &name in &names {
            let ty = types[name];
            let array = given.remove(name).ok_or_else(|| {
                fail(format!("no array '{name}' (the graph's inputs are {}; wanted {})", names.join(", "), wanted(ty)))
            })?;
            let n = array.shape[0];
            match samples {
                Some((m, first)) if m != n => {
                    return Err(fail(format!("array '{name}' has {n} samples, array '{first}' has {m}")))
                }
                _ => samples = Some((n, name)),
            }
            batch = ty.shape[0];
            if n < batch {
                return Err(fail(format!("array '{name}' has {n} samples, fewer than one batch of {batch}")));
            }
            let sample_bytes = array.byte_size() / n.max(1);
            arrays.push(Column {
                name: name.to_string(),
                dtype: ty.dtype,
                shape: ty.shape.clone(),
                bytes: array.to_le_bytes(),
                sample_bytes,
            });
        }
        Ok(Dataset { arrays, batch, samples: samples.map_or(0, |(n, _)| n) })
    }

    /// Whole batches in one pass over the data.
    pub fn batches(&self) -> usize {
        self.samples.checked_div(self.batch).unwrap_or(0)
    }

    /// Samples left out of every pass (after the last whole batch).
    pub fn left_out(&self) -> usize {
        self.samples - self.batches() * self.batch
    }

    /// Batch `i` of a pass: each input's samples `[i·B, (i+1)·B)`, by input name.
    pub fn batch(&self, i: usize) -> Result<BTreeMap<String, HostTensor>> {
        self.arrays
            .iter()
            .map(|c| {
                let len = c.sample_bytes * self.batch;
                let bytes = &c.bytes[i * len..(i + 1) * len];
                let t = HostTensor::from_le_bytes(c.dtype, &c.shape, bytes)
                    .map_err(|e| Error::Usage(format!("array '{}': {e}", c.name)))?;
                Ok((c.name.clone(), t))
            })
            .collect()
    }
}

/// `,d1,d2` for the dimensions after the first.
fn rest(shape: &[usize]) -> String {
    shape.iter().skip(1).map(|d| format!(",{d}")).collect()
}
