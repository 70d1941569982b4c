//! Decoding ONNX `TensorProto` constants: typed fields, `raw_data`, and
//! external data files.

use crate::ir::{DType, Shape, TensorData, TensorType};
use lms_proto::escape::Escaped;
use lms_proto::onnx::TensorProto;
use std::path::Path;

/// Largest constant lms decodes (4 GiB); anything larger is refused rather
/// than allocated.
const MAX_CONSTANT_BYTES: u64 = 4 << 30;

/// Decodes a tensor constant. External data is read relative to `base_dir`
/// (the model file's folder). Errors are short reasons without the tensor's
/// name, which the caller adds.
pub fn decode(proto: &TensorProto, base_dir: Option<&Path>) -> Result<TensorData, String> {
    let dtype =
        DType::from_code(proto.data_type).ok_or_else(|| format!("unsupported data type {}", proto.data_type))?;
    let shape = dims(&proto.dims)?;
    let ty = TensorType::new(dtype, shape);
    let numel = checked_numel(&ty.shape)?;
    let bytes = numel
        .checked_mul(dtype.size() as u64)
        .filter(|&b| b <= MAX_CONSTANT_BYTES)
        .ok_or_else(|| format!("shape {} is too large", ty))?;
    let data = if proto.data_location == 1 {
        read_external(proto, base_dir, bytes)?
    } else if !proto.raw_data.is_empty() || numel == 0 {
        proto.raw_data.clone()
    } else {
        typed_fields(proto, dtype)?
    };
    let len = data.len() as u64;
    TensorData::from_bytes(ty.clone(), data).ok_or_else(|| format!("holds {len} bytes of data, but {ty} needs {bytes}"))
}

/// A shape from ONNX dims, refusing negative ones.
pub fn dims(dims: &[i64]) -> Result<Shape, String> {
    dims.iter().map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension {d}"))).collect()
}

fn checked_numel(shape: &[usize]) -> Result<u64, String> {
    shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64)).ok_or_else(|| "shape overflows".to_string())
}

/// The little-endian bytes of the typed repeated fields.
fn typed_fields(p: &TensorProto, dtype: DType) -> Result<Vec<u8>, String> {
    Ok(match dtype {
        DType::F32 => p.float_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F64 => p.double_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::I64 => p.int64_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::U64 => p.uint64_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::U32 => p.uint64_data.iter().flat_map(|&v| (v as u32).to_le_bytes()).collect(),
        DType::I32 => p.int32_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        // 16-bit types (including f16/bf16 bit patterns) travel in int32_data.
        DType::I16 | DType::U16 | DType::F16 | DType::BF16 => {
            p.int32_data.iter().flat_map(|&v| (v as u16).to_le_bytes()).collect()
        }
        DType::I8 | DType::U8 | DType::Bool => p.int32_data.iter().map(|&v| v as u8).collect(),
    })
}

/// Reads `bytes` bytes of external data named by the `location`, `offset`
/// and `length` entries.
fn read_external(p: &TensorProto, base_dir: Option<&Path>, bytes: u64) -> Result<Vec<u8>, String> {
    let entry = |key: &str| p.external_data.iter().find(|e| e.key == key).map(|e| e.value.as_str());
    let location = entry("location").ok_or("external data without a location")?;
    let number = |key: &str| -> Result<Option<u64>, String> {
        entry(key)
            .map(|v| v.parse::<u64>().map_err(|_| format!("external data {key} '{v}' is not a number")))
            .transpose()
    };
    let offset = number("offset")?.unwrap_or(0);
    let length = number("length")?.unwrap_or(bytes);
    if length != bytes {
        return Err(format!("external data length {length} does not match the {bytes} bytes of its shape"));
    }
    let path = inside(base_dir.unwrap_or(Path::new(".")), location)?;
    lms_proto::input::read_range(&path, offset, length)
        .map_err(|e| format!("external data '{}' {e}", Escaped(&path.to_string_lossy())))
}

/// The file `location` names, relative to the model's folder `base_dir`,
/// with every link followed; refused unless it lies inside that folder.
fn inside(base_dir: &Path, location: &str) -> Result<std::path::PathBuf, String> {
    let outside = || format!("external data location '{}' must stay inside the model's folder", Escaped(location));
    let rel = Path::new(location);
    if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(outside());
    }
    let joined = base_dir.join(rel);
    let cannot = |e: std::io::Error| format!("cannot read external data '{}': {e}", Escaped(&joined.to_string_lossy()));
    let folder = base_dir.canonicalize().map_err(cannot)?;
    let path = joined.canonicalize().map_err(cannot)?;
    if !path.starts_with(&folder) {
        return Err(outside());
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_typed_and_raw_fields() {
        let p = TensorProto { dims: vec![2], data_type: 1, float_data: vec![1.0, -2.5], ..Default::default() };
        assert_eq!(decode(&p, None).unwrap().to_f64(), vec![1.0, -2.5]);
        let p = TensorProto {
            dims: vec![3],
            data_type: 7,
            raw_data: [1i64, 2, -3].iter().flat_map(|v| v.to_le_bytes()).collect(),
            ..Default::default()
        };
        assert_eq!(decode(&p, None).unwrap().to_i64().unwrap(), vec![1, 2, -3]);
        let p = TensorProto { dims: vec![], data_type: 9, int32_data: vec![1], ..Default::default() };
        assert_eq!(decode(&p, None).unwrap().to_i64().unwrap(), vec![1]);
    }

    #[test]
    fn rejects_bad_tensors() {
        let p = TensorProto { dims: vec![3], data_type: 1, float_data: vec![1.0], ..Default::default() };
        assert!(decode(&p, None).unwrap_err().contains("needs 12"));
        let p = TensorProto { dims: vec![-1], data_type: 1, ..Default::default() };
        assert!(decode(&p, None).unwrap_err().contains("negative"));
        let p = TensorProto { dims: vec![1 << 40, 1 << 40], data_type: 1, ..Default::default() };
        assert!(decode(&p, None).is_err());
        let p = TensorProto { dims: vec![1], data_type: 8, ..Default::default() };
        assert!(decode(&p, None).unwrap_err().contains("unsupported data type 8"));
    }
}
