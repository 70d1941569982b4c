//! Makes the Rust code of the schemas that `src/generated/` holds: prost types (through
//! protox, pure Rust, no system protoc), the wire layout of every message (`layouts.rs`:
//! field numbers, kinds and the size of the decoded struct) that `lms_proto::bounded` walks
//! before prost decodes, and the schemas' fingerprint that `build.rs` checks. Used by
//! `examples/regenerate.rs` (writes `src/generated/`) and `tests/generated.rs` (checks it).

use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FileDescriptorSet};
use std::fmt::Write;
use std::path::Path;

#[path = "build_fingerprint.rs"]
mod build_fingerprint;

/// The files `generate` writes.
pub const FILES: [&str; 4] = ["onnx.rs", "lms.rs", "layouts.rs", "fingerprint"];

/// Writes [`FILES`] for the schemas under `root` (the crate's folder) into `out`.
pub fn generate(root: &Path, out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let schemas = ["schema/onnx.proto", "schema/lms.proto"].map(|s| root.join(s));
    let descriptors = protox::compile(schemas, [root.join("schema")])?;
    check_boxing(&descriptors)?;
    std::fs::write(out.join("layouts.rs"), layouts(&descriptors)?)?;
    let mut config = prost_build::Config::new();
    config.btree_map(["."]);
    config.out_dir(out);
    for field in BOXED {
        config.boxed(field);
    }
    config.compile_fds(descriptors)?;
    std::fs::write(out.join("fingerprint"), format!("{}\n", build_fingerprint::of_schemas(root)))?;
    Ok(())
}

/// Singular message fields decoded into a `Box` (the rest are inline in their parent).
/// An attribute's tensor and graph: inline they would make every attribute, most of which
/// hold one number, 720 bytes in memory instead of 248.
const BOXED: [&str; 2] = [".onnx.AttributeProto.t", ".onnx.AttributeProto.g"];

/// Refuses schemas where prost would box a field on its own (a cycle of singular message
/// fields), which the layouts would count as inline.
fn check_boxing(set: &FileDescriptorSet) -> Result<(), String> {
    let mut singular: Vec<(String, String)> = Vec::new();
    fn edges(out: &mut Vec<(String, String)>, prefix: &str, message: &DescriptorProto) {
        let name = format!("{prefix}.{}", message.name());
        for field in &message.field {
            let fq = format!("{name}.{}", field.name());
            if field.r#type() == Type::Message && field.label() != Label::Repeated && !BOXED.contains(&fq.as_str()) {
                out.push((name.clone(), field.type_name().to_string()));
            }
        }
        for nested in &message.nested_type {
            edges(out, &name, nested);
        }
    }
    for file in &set.file {
        for message in &file.message_type {
            edges(&mut singular, &format!(".{}", file.package()), message);
        }
    }
    for (from, to) in &singular {
        let mut reached = vec![to.clone()];
        let mut i = 0;
        while i < reached.len() {
            if &reached[i] == from {
                return Err(format!("{from} contains itself through singular message fields: add the field to BOXED"));
            }
            for (a, b) in &singular {
                if *a == reached[i] && !reached.contains(b) {
                    reached.push(b.clone());
                }
            }
            i += 1;
        }
    }
    Ok(())
}

/// One `static` [`Layout`] per message and its [`Bounded`] implementation.
fn layouts(set: &FileDescriptorSet) -> Result<String, String> {
    let mut out = String::from("// Generated from the schemas by proto/codegen.rs: one wire layout per message.\n");
    for file in &set.file {
        let package = file.package();
        for message in &file.message_type {
            layout(&mut out, package, &[], message)?;
        }
    }
    Ok(out)
}

/// Writes the layout of `message`, nested in the messages `outer`, and of its nested messages.
fn layout(out: &mut String, package: &str, outer: &[&str], message: &DescriptorProto) -> Result<(), String> {
    let name = message.name();
    let mut path: Vec<&str> = outer.to_vec();
    path.push(name);
    let rust_type = std::iter::once(package.to_string())
        .chain(outer.iter().map(|o| snake(o)))
        .chain(std::iter::once(name.to_string()))
        .collect::<Vec<_>>()
        .join("::");
    let mut fields = String::new();
    for field in &message.field {
        let repeated = field.label() == Label::Repeated;
        let kind = match field.r#type() {
            Type::Message => {
                let fq = format!(".{package}.{}.{}", path.join("."), field.name());
                let boxed = BOXED.contains(&fq.as_str());
                format!("Kind::Message {{ layout: &{}, boxed: {boxed} }}", static_name(field.type_name()))
            }
            Type::String => "Kind::String".into(),
            Type::Bytes => "Kind::Bytes".into(),
            Type::Double | Type::Fixed64 | Type::Sfixed64 => "Kind::Fixed { width: 8, size: 8 }".into(),
            Type::Float | Type::Fixed32 | Type::Sfixed32 => "Kind::Fixed { width: 4, size: 4 }".into(),
            Type::Int64 | Type::Uint64 | Type::Sint64 => "Kind::Varint { size: 8 }".into(),
            Type::Int32 | Type::Uint32 | Type::Sint32 | Type::Enum => "Kind::Varint { size: 4 }".into(),
            Type::Bool => "Kind::Varint { size: 1 }".into(),
            Type::Group => return Err(format!("{}.{}: groups are not supported", path.join("."), field.name())),
        };
        writeln!(fields, "        Field {{ number: {}, repeated: {repeated}, kind: {kind} }},", field.number())
            .expect("write to a string");
    }
    let fq = format!(".{package}.{}", path.join("."));
    writeln!(
        out,
        "/// Wire layout of `{}`.\npub static {}: Layout = Layout {{\n    name: \"{}\",\n    size: std::mem::size_of::<crate::{rust_type}>(),\n    fields: &[\n{fields}    ],\n}};\nimpl Bounded for crate::{rust_type} {{\n    fn layout() -> &'static Layout {{\n        &{}\n    }}\n}}",
        &fq[1..],
        static_name(&fq),
        &fq[1..],
        static_name(&fq)
    )
    .expect("write to a string");
    for nested in &message.nested_type {
        layout(out, package, &path, nested)?;
    }
    Ok(())
}

/// The static holding the layout of the message with fully qualified name `fq` (`.onnx.TypeProto.Tensor`).
fn static_name(fq: &str) -> String {
    fq.trim_start_matches('.').split('.').map(|part| snake(part).to_uppercase()).collect::<Vec<_>>().join("_")
}

/// `TensorShapeProto` as prost names its module: `tensor_shape_proto`.
fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}
