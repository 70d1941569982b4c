//! The values ops are defined over, shared by the compiler's IR and the runtime's checks:
//! element types, tensor types and constant tensors, and node attributes.

mod attr;
mod dtype;
mod tensor;

pub use attr::{Attr, AttrError, Attrs};
pub use dtype::DType;
pub use tensor::{f16_to_f32, numel, Shape, TensorData, TensorType};
