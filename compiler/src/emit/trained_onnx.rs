//! The original forward ONNX model with trained weights: what `lms run
//! --save-onnx` writes, for onnxruntime or any other ONNX consumer.
//!
//! Each initializer named like a variable of the run takes its value
//! (trained weights, updated BatchNorm running statistics; frozen buffers
//! come back unchanged); a weight the model only described by a
//! `ConstantOfShape` becomes an initializer in place of that node. Optimizer
//! slots, which the model does not have, are left out. Every value is stored
//! inline, external data included, so the file stands alone.

use super::output::write_atomically;
use crate::error::{Error, Result};
use crate::frontend;
use lms_proto::onnx::TensorProto;
use lms_proto::Message;
use lms_runtime::tensor::dtype_name;
use lms_runtime::HostTensor;
use std::collections::BTreeMap;
use std::path::Path;

/// Writes the model at `model` with `variables` (by name) in place of its
/// weights to `out`; returns how many weights were replaced.
pub fn write(model: &Path, variables: &[(String, HostTensor)], out: &Path) -> Result<usize> {
    let in_model = |e: Error| e.in_file(model);
    let mut proto = frontend::read_model(model).map_err(in_model)?;
    let base_dir = model.parent().unwrap_or(Path::new("."));
    let graph = proto.graph.as_mut().ok_or(Error::NoGraph).map_err(in_model)?;
    let mut values: BTreeMap<&str, &HostTensor> = variables.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut replaced = 0;
    for init in &mut graph.initializer {
        if let Some(value) = values.remove(init.name.as_str()) {
            let dims: Vec<usize> = init.dims.iter().map(|&d| d as usize).collect();
            if dims != value.shape || init.data_type != value.dtype() as i32 {
                return Err(in_model(Error::Tensor {
                    tensor: init.name.clone(),
                    reason: format!(
                        "the trained value is {} {:?}, the model's initializer has type {} and shape {dims:?}",
                        dtype_name(value.dtype()),
                        value.shape,
                        init.data_type
                    ),
                }));
            }
            set_values(init, value.to_le_bytes());
            replaced += 1;
        } else if !init.external_data.is_empty() {
            let data = frontend::tensor::decode(init, Some(base_dir))
                .map_err(|reason| in_model(Error::Tensor { tensor: init.name.clone(), reason }))?;
            set_values(init, data.bytes.to_vec());
        }
    }
    // Weights described by a single-output node (ConstantOfShape) become initializers.
    for (name, value) in values {
        let Some(i) = graph.node.iter().position(|n| n.output.len() == 1 && n.output[0] == name) else { continue };
        graph.node.remove(i);
        let mut init = TensorProto {
            name: name.to_string(),
            dims: value.shape.iter().map(|&d| d as i64).collect(),
            data_type: value.dtype() as i32,
            ..Default::default()
        };
        set_values(&mut init, value.to_le_bytes());
        graph.initializer.push(init);
        replaced += 1;
    }
    write_atomically(out, &proto.encode_to_vec())?;
    Ok(replaced)
}

/// Stores `bytes` (little-endian) as the tensor's only values.
fn set_values(t: &mut TensorProto, bytes: Vec<u8>) {
    t.raw_data = bytes;
    t.float_data.clear();
    t.int32_data.clear();
    t.string_data.clear();
    t.int64_data.clear();
    t.double_data.clear();
    t.uint64_data.clear();
    t.external_data.clear();
    t.data_location = 0;
}
