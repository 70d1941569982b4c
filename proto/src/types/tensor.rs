//! Tensor types and constant tensor values.

use super::DType;
use std::fmt;
use std::sync::Arc;

/// A concrete tensor shape: every dimension is known.
pub type Shape = Vec<usize>;

/// Number of elements of a shape (1 for a scalar).
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Element type and concrete shape of a tensor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
}

impl TensorType {
    /// A tensor type.
    pub fn new(dtype: DType, shape: Shape) -> TensorType {
        TensorType { dtype, shape }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.numel() as u64 * self.dtype.size() as u64
    }

    /// Rank (number of dimensions).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// A constant tensor: its type and its elements, little endian.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorData {
    pub ty: TensorType,
    /// `ty.bytes()` bytes, little endian, row major.
    pub bytes: Arc<[u8]>,
}

impl TensorData {
    /// A constant from raw little-endian bytes; `None` if the length does not
    /// match the type.
    pub fn from_bytes(ty: TensorType, bytes: Vec<u8>) -> Option<TensorData> {
        (bytes.len() as u64 == ty.bytes()).then(|| TensorData { ty, bytes: bytes.into() })
    }

    /// An i64 tensor.
    pub fn from_i64(shape: Shape, values: &[i64]) -> TensorData {
        debug_assert_eq!(numel(&shape), values.len());
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        TensorData { ty: TensorType::new(DType::I64, shape), bytes: bytes.into() }
    }

    /// An f32 tensor.
    pub fn from_f32(shape: Shape, values: &[f32]) -> TensorData {
        debug_assert_eq!(numel(&shape), values.len());
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        TensorData { ty: TensorType::new(DType::F32, shape), bytes: bytes.into() }
    }

    /// Elements as i64, for integer and bool tensors (shape arithmetic);
    /// `None` for float types.
    pub fn to_i64(&self) -> Option<Vec<i64>> {
        let b = &self.bytes[..];
        Some(match self.ty.dtype {
            DType::I64 => b.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect(),
            DType::U64 => b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap()) as i64).collect(),
            DType::I32 => b.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64).collect(),
            DType::U32 => b.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap()) as i64).collect(),
            DType::I16 => b.chunks_exact(2).map(|c| i16::from_le_bytes(c.try_into().unwrap()) as i64).collect(),
            DType::U16 => b.chunks_exact(2).map(|c| u16::from_le_bytes(c.try_into().unwrap()) as i64).collect(),
            DType::I8 => b.iter().map(|&x| x as i8 as i64).collect(),
            DType::U8 | DType::Bool => b.iter().map(|&x| x as i64).collect(),
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 => return None,
        })
    }

    /// Elements as f64, for any numeric type (f16/bf16 converted).
    pub fn to_f64(&self) -> Vec<f64> {
        let b = &self.bytes[..];
        match self.ty.dtype {
            DType::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            DType::F64 => b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
            DType::F16 => b.chunks_exact(2).map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])) as f64).collect(),
            DType::BF16 => b
                .chunks_exact(2)
                .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16) as f64)
                .collect(),
            _ => self.to_i64().unwrap_or_default().into_iter().map(|v| v as f64).collect(),
        }
    }
}

/// Converts IEEE half-precision bits to f32.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let frac = (h & 0x3ff) as u32;
    let bits = match (exp, frac) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: normalise.
            let mut e = 127 - 15 + 1;
            let mut f = frac;
            while f & 0x400 == 0 {
                f <<= 1;
                e -= 1;
            }
            sign | (e << 23) | ((f & 0x3ff) << 13)
        }
        (0x1f, _) => sign | 0x7f80_0000 | (frac << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (frac << 13),
    };
    f32::from_bits(bits)
}
