//! Element types: their sizes and names, and the checked byte count of a tensor.

use crate::lms::DType;

/// The largest tensor a `.lms` file may declare, in bytes (2^48, 256 TiB).
pub const MAX_TENSOR_BYTES: u64 = 1 << 48;

/// Bytes per element of a dtype; `None` for `DTYPE_UNDEFINED`.
pub fn element_bytes(dtype: DType) -> Option<u64> {
    match dtype {
        DType::DtypeUndefined => None,
        DType::DtypeBool | DType::DtypeU8 | DType::DtypeI8 => Some(1),
        DType::DtypeU16 | DType::DtypeI16 | DType::DtypeF16 | DType::DtypeBf16 => Some(2),
        DType::DtypeF32 | DType::DtypeI32 | DType::DtypeU32 => Some(4),
        DType::DtypeF64 | DType::DtypeI64 | DType::DtypeU64 => Some(8),
    }
}

/// Short name of a dtype for messages and the text form (`f32`, `i64`, ...).
pub fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::DtypeUndefined => "undefined",
        DType::DtypeF32 => "f32",
        DType::DtypeU8 => "u8",
        DType::DtypeI8 => "i8",
        DType::DtypeU16 => "u16",
        DType::DtypeI16 => "i16",
        DType::DtypeI32 => "i32",
        DType::DtypeI64 => "i64",
        DType::DtypeBool => "bool",
        DType::DtypeF16 => "f16",
        DType::DtypeF64 => "f64",
        DType::DtypeU32 => "u32",
        DType::DtypeU64 => "u64",
        DType::DtypeBf16 => "bf16",
    }
}

/// The dtype with lms.proto code `code`, known and defined; `Err` says which it is not.
pub fn known_dtype(code: i32) -> Result<DType, String> {
    match DType::try_from(code) {
        Ok(DType::DtypeUndefined) => Err("dtype is undefined".into()),
        Ok(dtype) => Ok(dtype),
        Err(_) => Err(format!("unknown dtype {code}")),
    }
}

/// Bytes of a `dtype` tensor of `shape`, computed with checked arithmetic. Rejects a shape
/// whose non-zero dimensions multiply to more than [`MAX_TENSOR_BYTES`], even when another
/// dimension is zero, so that any product of its dimensions fits in memory arithmetic.
pub fn tensor_bytes(dtype: DType, shape: &[u64]) -> Result<u64, String> {
    let size = element_bytes(dtype).ok_or("dtype is undefined")?;
    let bound = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(size, |acc, &d| acc.checked_mul(d).filter(|&b| b <= MAX_TENSOR_BYTES))
        .ok_or_else(|| format!("shape {shape:?} of {} takes more than 2^48 bytes", dtype_name(dtype)))?;
    Ok(if shape.contains(&0) { 0 } else { bound })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_are_checked_and_capped() {
        assert_eq!(tensor_bytes(DType::DtypeF32, &[2, 3]), Ok(24));
        assert_eq!(tensor_bytes(DType::DtypeI64, &[]), Ok(8));
        assert_eq!(tensor_bytes(DType::DtypeF16, &[0, 1 << 40]), Ok(0));
        assert_eq!(tensor_bytes(DType::DtypeU8, &[1 << 48]), Ok(1 << 48));
        assert!(tensor_bytes(DType::DtypeU8, &[(1 << 48) + 1]).is_err());
        assert!(tensor_bytes(DType::DtypeF32, &[1 << 62, 8]).unwrap_err().contains("2^48"));
        assert!(tensor_bytes(DType::DtypeF32, &[u64::MAX, u64::MAX, 0]).is_err());
        assert!(tensor_bytes(DType::DtypeUndefined, &[1]).is_err());
    }

    #[test]
    fn only_defined_known_dtypes_are_accepted() {
        assert_eq!(known_dtype(1), Ok(DType::DtypeF32));
        assert!(known_dtype(0).is_err());
        assert!(known_dtype(8).unwrap_err().contains("unknown dtype 8"));
    }
}
