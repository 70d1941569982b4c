//! Host tensors: a shape and a typed, contiguous, row-major buffer.

use crate::error::{KernelError, Result};
use lms_proto::lms::DType;
use std::fmt::Debug;

/// Element storage of a host tensor, one variant per supported dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum Buffer {
    /// 32-bit floats.
    F32(Vec<f32>),
    /// 64-bit floats.
    F64(Vec<f64>),
    /// 64-bit signed integers.
    I64(Vec<i64>),
    /// 32-bit signed integers.
    I32(Vec<i32>),
    /// Booleans, one byte each when serialized.
    Bool(Vec<bool>),
    /// 8-bit unsigned integers.
    U8(Vec<u8>),
    /// 8-bit signed integers.
    I8(Vec<i8>),
}

/// A Rust element type that a [`Buffer`] variant stores.
pub trait Elem: Copy + Default + PartialOrd + Debug + Send + Sync + 'static {
    /// The matching lms dtype.
    const DTYPE: DType;
    /// Whether the type is a floating-point type.
    const IS_FLOAT: bool;
    /// The elements of `b` when it holds this type.
    fn slice(b: &Buffer) -> Option<&[Self]>;
    /// The elements of `b`, mutably, when it holds this type.
    fn slice_mut(b: &mut Buffer) -> Option<&mut [Self]>;
    /// The vector of `b` when it holds this type, else `b` back.
    fn take_vec(b: Buffer) -> std::result::Result<Vec<Self>, Buffer>;
    /// Wraps a vector into its buffer variant.
    fn wrap(v: Vec<Self>) -> Buffer;
    /// Decodes one element from exactly `size_of::<Self>()` little-endian bytes.
    fn decode_le(bytes: &[u8]) -> Self;
    /// Appends the little-endian bytes of `self`.
    fn encode_le(self, out: &mut Vec<u8>);
    /// Writes the little-endian bytes of `self` into exactly `size_of::<Self>()` bytes.
    fn write_le(self, out: &mut [u8]);
    /// Numeric value as f64 (true is 1).
    fn to_f64(self) -> f64;
    /// Converts from f64 like a C cast (saturating for integers, non-zero is true).
    fn from_f64(v: f64) -> Self;
    /// Numeric value as i64, truncating floats toward zero.
    fn to_i64(self) -> i64;
    /// Converts from i64, wrapping for narrower integers (non-zero is true).
    fn from_i64(v: i64) -> Self;
}

macro_rules! numeric_elem {
    ($t:ty, $variant:ident, $dtype:ident, $float:literal) => {
        impl Elem for $t {
            const DTYPE: DType = DType::$dtype;
            const IS_FLOAT: bool = $float;
            fn slice(b: &Buffer) -> Option<&[Self]> {
                match b {
                    Buffer::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn slice_mut(b: &mut Buffer) -> Option<&mut [Self]> {
                match b {
                    Buffer::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn take_vec(b: Buffer) -> std::result::Result<Vec<Self>, Buffer> {
                match b {
                    Buffer::$variant(v) => Ok(v),
                    other => Err(other),
                }
            }
            fn wrap(v: Vec<Self>) -> Buffer {
                Buffer::$variant(v)
            }
            fn decode_le(bytes: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(bytes);
                <$t>::from_le_bytes(a)
            }
            fn encode_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn write_le(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
        }
    };
}

numeric_elem!(f32, F32, DtypeF32, true);
numeric_elem!(f64, F64, DtypeF64, true);
numeric_elem!(i64, I64, DtypeI64, false);
numeric_elem!(i32, I32, DtypeI32, false);
numeric_elem!(u8, U8, DtypeU8, false);
numeric_elem!(i8, I8, DtypeI8, false);

impl Elem for bool {
    const DTYPE: DType = DType::DtypeBool;
    const IS_FLOAT: bool = false;
    fn slice(b: &Buffer) -> Option<&[Self]> {
        match b {
            Buffer::Bool(v) => Some(v),
            _ => None,
        }
    }
    fn slice_mut(b: &mut Buffer) -> Option<&mut [Self]> {
        match b {
            Buffer::Bool(v) => Some(v),
            _ => None,
        }
    }
    fn take_vec(b: Buffer) -> std::result::Result<Vec<Self>, Buffer> {
        match b {
            Buffer::Bool(v) => Ok(v),
            other => Err(other),
        }
    }
    fn wrap(v: Vec<Self>) -> Buffer {
        Buffer::Bool(v)
    }
    fn decode_le(bytes: &[u8]) -> Self {
        bytes.first().is_some_and(|&b| b != 0)
    }
    fn encode_le(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
    fn write_le(self, out: &mut [u8]) {
        out[0] = u8::from(self);
    }
    fn to_f64(self) -> f64 {
        f64::from(u8::from(self))
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    fn to_i64(self) -> i64 {
        i64::from(self)
    }
    fn from_i64(v: i64) -> Self {
        v != 0
    }
}

/// Evaluates `$body` with `$T` bound to the Rust element type of `$dtype` among the listed
/// `DType` variants (or `numeric`), or else `$other` with the dtype bound to `$found`: the
/// shared core of the dtype-dispatch macros ([`dispatch`] and the CPU kernels' ones).
macro_rules! dispatch_among {
    // `numeric`: the numeric (non-bool) element types, then those listed after `+`.
    ($dtype:expr, $T:ident => $body:expr,
     numeric $(+ [$($extra:tt)*])?, $found:ident => $other:expr) => {
        $crate::tensor::dispatch_among!(
            $dtype, $T => $body,
            [
                DtypeF32 => f32,
                DtypeF64 => f64,
                DtypeI64 => i64,
                DtypeI32 => i32,
                DtypeU8 => u8,
                DtypeI8 => i8,
                $($($extra)*)?
            ],
            $found => $other
        )
    };
    ($dtype:expr, $T:ident => $body:expr,
     [$($variant:ident => $ty:ty),+ $(,)?], $found:ident => $other:expr) => {{
        match $dtype {
            $(lms_proto::lms::DType::$variant => {
                type $T = $ty;
                $body
            })+
            $found => $other,
        }
    }};
}
pub(crate) use dispatch_among;

/// Evaluates `$body` (a `Result`) with `$T` bound to the element type of `$dtype`.
macro_rules! dispatch {
    ($dtype:expr, $T:ident => $body:expr) => {
        $crate::tensor::dispatch_among!(
            $dtype, $T => $body,
            numeric + [DtypeBool => bool],
            other => Err($crate::error::KernelError::unsupported(format!(
                "dtype {} on the CPU backend",
                $crate::tensor::dtype_name(other)
            )))
        )
    };
}
pub(crate) use dispatch;

pub use lms_proto::contract::dtype_name;

/// Bytes per element of a dtype with a host buffer, `None` otherwise.
pub fn dtype_size(dtype: DType) -> Option<usize> {
    let buffered = matches!(
        dtype,
        DType::DtypeF64
            | DType::DtypeI64
            | DType::DtypeF32
            | DType::DtypeI32
            | DType::DtypeBool
            | DType::DtypeU8
            | DType::DtypeI8
    );
    buffered.then(|| lms_proto::contract::element_bytes(dtype)).flatten().map(|b| b as usize)
}

impl Buffer {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            Buffer::F32(_) => DType::DtypeF32,
            Buffer::F64(_) => DType::DtypeF64,
            Buffer::I64(_) => DType::DtypeI64,
            Buffer::I32(_) => DType::DtypeI32,
            Buffer::Bool(_) => DType::DtypeBool,
            Buffer::U8(_) => DType::DtypeU8,
            Buffer::I8(_) => DType::DtypeI8,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Buffer::F32(v) => v.len(),
            Buffer::F64(v) => v.len(),
            Buffer::I64(v) => v.len(),
            Buffer::I32(v) => v.len(),
            Buffer::Bool(v) => v.len(),
            Buffer::U8(v) => v.len(),
            Buffer::I8(v) => v.len(),
        }
    }

    /// Whether the buffer has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A tensor in host memory: row-major `data` of `shape` (`[]` is a scalar).
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Elements in row-major order; `data.len()` is the product of `shape`.
    pub data: Buffer,
}

/// Number of elements of a shape.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

impl HostTensor {
    /// A tensor of `shape` over `data`, checking the element count.
    pub fn new(shape: Vec<usize>, data: Buffer) -> Result<Self> {
        if data.len() != numel(&shape) {
            return Err(KernelError::shape("tensor", format!("{} elements do not fill shape {shape:?}", data.len())));
        }
        Ok(HostTensor { shape, data })
    }

    /// A tensor of `shape` over a typed vector, checking the element count.
    pub fn from_vec<T: Elem>(shape: Vec<usize>, data: Vec<T>) -> Result<Self> {
        Self::new(shape, T::wrap(data))
    }

    /// A rank-0 tensor holding `value`.
    pub fn scalar<T: Elem>(value: T) -> Self {
        HostTensor { shape: Vec::new(), data: T::wrap(vec![value]) }
    }

    /// A tensor of zeros (false for bool).
    pub fn zeros(dtype: DType, shape: &[usize]) -> Result<Self> {
        let n = numel(shape);
        let data = dispatch!(dtype, T => Ok(T::wrap(vec![T::default(); n])))?;
        Ok(HostTensor { shape: shape.to_vec(), data })
    }

    /// Decodes little-endian bytes, as stored in a graph's constants (bool: one byte each).
    pub fn from_le_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Self> {
        let n = numel(shape);
        let data = dispatch!(dtype, T => {
            let size = std::mem::size_of::<T>();
            if bytes.len() != n * size {
                return Err(KernelError::shape(
                    "constant",
                    format!("{} bytes for {n} {} elements of shape {shape:?}", bytes.len(), dtype_name(dtype)),
                ));
            }
            Ok(T::wrap(bytes.chunks_exact(size).map(T::decode_le).collect()))
        })?;
        Ok(HostTensor { shape: shape.to_vec(), data })
    }

    /// The elements as little-endian bytes (bool: one byte each).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        fn encode<T: Elem>(v: &[T]) -> Vec<u8> {
            let mut out = Vec::with_capacity(std::mem::size_of_val(v));
            v.iter().for_each(|x| x.encode_le(&mut out));
            out
        }
        match &self.data {
            Buffer::F32(v) => encode(v),
            Buffer::F64(v) => encode(v),
            Buffer::I64(v) => encode(v),
            Buffer::I32(v) => encode(v),
            Buffer::Bool(v) => encode(v),
            Buffer::U8(v) => encode(v),
            Buffer::I8(v) => encode(v),
        }
    }

    /// Writes the elements as little-endian bytes (bool: one byte each) into `out`, which
    /// must hold exactly [`HostTensor::byte_size`] bytes.
    pub fn write_le_bytes(&self, out: &mut [u8]) -> Result<()> {
        fn write<T: Elem>(v: &[T], out: &mut [u8]) {
            let size = std::mem::size_of::<T>();
            out.chunks_exact_mut(size).zip(v).for_each(|(chunk, &x)| x.write_le(chunk));
        }
        if out.len() != self.byte_size() {
            return Err(KernelError::shape(
                "tensor",
                format!("{} bytes do not hold {} bytes of elements", out.len(), self.byte_size()),
            ));
        }
        match &self.data {
            Buffer::F32(v) => write(v, out),
            Buffer::F64(v) => write(v, out),
            Buffer::I64(v) => write(v, out),
            Buffer::I32(v) => write(v, out),
            Buffer::Bool(v) => write(v, out),
            Buffer::U8(v) => write(v, out),
            Buffer::I8(v) => write(v, out),
        }
        Ok(())
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Size of the elements in bytes.
    pub fn byte_size(&self) -> usize {
        dtype_size(self.dtype()).map_or(0, |s| s * self.numel())
    }

    /// The elements as `T`, or a dtype error naming `what`.
    pub fn view<T: Elem>(&self, what: &str) -> Result<&[T]> {
        T::slice(&self.data).ok_or_else(|| self.dtype_error::<T>(what))
    }

    /// The elements as `T`, mutably, or a dtype error naming `what`.
    pub fn view_mut<T: Elem>(&mut self, what: &str) -> Result<&mut [T]> {
        let found = self.dtype();
        T::slice_mut(&mut self.data).ok_or_else(|| KernelError::Dtype {
            what: what.to_string(),
            expected: dtype_name(T::DTYPE).to_string(),
            found: dtype_name(found).to_string(),
        })
    }

    /// The element vector as `T`, or a dtype error naming `what`.
    pub fn into_vec<T: Elem>(self, what: &str) -> Result<Vec<T>> {
        let found = self.dtype();
        T::take_vec(self.data).map_err(|_| KernelError::Dtype {
            what: what.to_string(),
            expected: dtype_name(T::DTYPE).to_string(),
            found: dtype_name(found).to_string(),
        })
    }

    /// The elements as f32.
    pub fn as_f32(&self, what: &str) -> Result<&[f32]> {
        self.view(what)
    }

    /// The elements as i64.
    pub fn as_i64(&self, what: &str) -> Result<&[i64]> {
        self.view(what)
    }

    /// The elements as bool.
    pub fn as_bool(&self, what: &str) -> Result<&[bool]> {
        self.view(what)
    }

    /// Index-like values (i64 or i32 tensors) widened to i64.
    pub fn to_i64s(&self, what: &str) -> Result<Vec<i64>> {
        match &self.data {
            Buffer::I64(v) => Ok(v.clone()),
            Buffer::I32(v) => Ok(v.iter().map(|&x| i64::from(x)).collect()),
            other => Err(KernelError::Dtype {
                what: what.to_string(),
                expected: "i64 or i32".to_string(),
                found: dtype_name(other.dtype()).to_string(),
            }),
        }
    }

    fn dtype_error<T: Elem>(&self, what: &str) -> KernelError {
        KernelError::Dtype {
            what: what.to_string(),
            expected: dtype_name(T::DTYPE).to_string(),
            found: dtype_name(self.dtype()).to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn le_bytes_round_trip() {
        let t = HostTensor::from_vec(vec![2, 2], vec![1.5f32, -2.0, 0.0, 3.25]).unwrap();
        let back = HostTensor::from_le_bytes(DType::DtypeF32, &[2, 2], &t.to_le_bytes()).unwrap();
        assert_eq!(t, back);
        let mut written = [0u8; 16];
        t.write_le_bytes(&mut written).unwrap();
        assert_eq!(written.to_vec(), t.to_le_bytes());
        assert!(t.write_le_bytes(&mut [0u8; 20]).is_err(), "one element too many");
        let b = HostTensor::from_le_bytes(DType::DtypeBool, &[3], &[1, 0, 2]).unwrap();
        assert_eq!(b.as_bool("b").unwrap(), &[true, false, true]);
        assert_eq!(b.byte_size(), 3);
    }

    #[test]
    fn wrong_sizes_and_dtypes_are_errors() {
        assert!(HostTensor::from_le_bytes(DType::DtypeI64, &[2], &[0; 12]).is_err());
        assert!(HostTensor::zeros(DType::DtypeF16, &[2]).is_err());
        let t = HostTensor::zeros(DType::DtypeI32, &[2, 3]).unwrap();
        assert_eq!(t.to_i64s("t").unwrap(), vec![0; 6]);
        let err = t.as_f32("input X").unwrap_err();
        assert_eq!(err.to_string(), "input X: expected f32, found i32");
        assert!(HostTensor::from_vec(vec![4], vec![1i64; 3]).is_err());
    }
}
