//! Element types of tensors.

use std::fmt;

/// Element type of a tensor. Discriminants equal ONNX's `TensorProto.DataType`
/// and lms.proto's `DType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32 = 1,
    U8 = 2,
    I8 = 3,
    U16 = 4,
    I16 = 5,
    I32 = 6,
    I64 = 7,
    Bool = 9,
    F16 = 10,
    F64 = 11,
    U32 = 12,
    U64 = 13,
    BF16 = 16,
}

impl DType {
    /// The type for an ONNX / lms.proto data-type code, if lms supports it.
    pub fn from_code(code: i32) -> Option<DType> {
        Some(match code {
            1 => DType::F32,
            2 => DType::U8,
            3 => DType::I8,
            4 => DType::U16,
            5 => DType::I16,
            6 => DType::I32,
            7 => DType::I64,
            9 => DType::Bool,
            10 => DType::F16,
            11 => DType::F64,
            12 => DType::U32,
            13 => DType::U64,
            16 => DType::BF16,
            _ => return None,
        })
    }

    /// The ONNX / lms.proto data-type code.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// Bytes per element (the contract's table, `crate::contract::element_bytes`).
    pub fn size(self) -> usize {
        let dtype = crate::lms::DType::try_from(self.code()).expect("every DType has an lms.proto code");
        crate::contract::element_bytes(dtype).expect("every DType is defined") as usize
    }

    /// True for floating-point types (the ones that carry activations and gradients).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// True for integer types (bool excluded).
    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::U8 | DType::I8 | DType::U16 | DType::I16 | DType::I32 | DType::I64 | DType::U32 | DType::U64
        )
    }

    /// Short lower-case name used in the text form: `f32`, `i64`, ...
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::U16 => "u16",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
            DType::F16 => "f16",
            DType::F64 => "f64",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::BF16 => "bf16",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
