//! Converting ONNX `AttributeProto`s into IR attributes.

use super::tensor;
use crate::ir::{Attr, Attrs};
use lms_proto::onnx::attribute_proto::AttributeType;
use lms_proto::onnx::AttributeProto;

/// Converts a node's attributes. Errors are short reasons naming the
/// attribute; the caller adds the node.
pub fn convert(protos: &[AttributeProto]) -> Result<Attrs, String> {
    let mut attrs = Attrs::new();
    for p in protos {
        if !p.ref_attr_name.is_empty() {
            return Err(format!("attribute '{}' refers to a function attribute, which lms does not support", p.name));
        }
        if attrs.has(&p.name) {
            return Err(format!("attribute '{}' is given twice", p.name));
        }
        attrs.set(p.name.clone(), value(p)?);
    }
    Ok(attrs)
}

fn value(p: &AttributeProto) -> Result<Attr, String> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let kind = AttributeType::try_from(p.r#type).unwrap_or(AttributeType::Undefined);
    let kind = if kind == AttributeType::Undefined { guess_kind(p)? } else { kind };
    Ok(match kind {
        AttributeType::Float => Attr::Float(p.f),
        AttributeType::Int => Attr::Int(p.i),
        AttributeType::String => Attr::String(text(&p.s)),
        AttributeType::Floats => Attr::Floats(p.floats.clone()),
        AttributeType::Ints => Attr::Ints(p.ints.clone()),
        AttributeType::Strings => Attr::Strings(p.strings.iter().map(|s| text(s)).collect()),
        AttributeType::Tensor => {
            let t = p.t.as_ref().ok_or_else(|| format!("attribute '{}' has no tensor", p.name))?;
            Attr::Tensor(tensor::decode(t, None).map_err(|e| format!("attribute '{}': {e}", p.name))?)
        }
        other => {
            return Err(format!(
                "attribute '{}' has type {}, which lms does not support",
                p.name,
                other.as_str_name().to_lowercase()
            ))
        }
    })
}

/// Old files leave `type` unset; the field that holds a value tells.
fn guess_kind(p: &AttributeProto) -> Result<AttributeType, String> {
    Ok(if !p.ints.is_empty() {
        AttributeType::Ints
    } else if !p.floats.is_empty() {
        AttributeType::Floats
    } else if !p.strings.is_empty() {
        AttributeType::Strings
    } else if p.t.is_some() {
        AttributeType::Tensor
    } else if p.g.is_some() || !p.graphs.is_empty() {
        AttributeType::Graph
    } else if !p.s.is_empty() {
        AttributeType::String
    } else if p.f != 0.0 {
        AttributeType::Float
    } else if p.i != 0 {
        AttributeType::Int
    } else {
        return Err(format!("attribute '{}' has no type and no value", p.name));
    })
}
