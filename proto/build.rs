//! The Rust code of the schemas is committed (`src/generated/`, made by
//! `examples/regenerate.rs`, checked by `tests/generated.rs`), so building lms needs no
//! protobuf compiler. This script only
//! refuses to build code made from other schemas than those in `schema/`, saying how to
//! make it again.

mod build_fingerprint;

fn main() {
    for file in ["schema/onnx.proto", "schema/lms.proto", "src/generated/fingerprint"] {
        println!("cargo:rerun-if-changed={file}");
    }
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let made_from = std::fs::read_to_string(root.join("src/generated/fingerprint")).unwrap_or_default();
    if made_from.trim() != build_fingerprint::of_schemas(&root).to_string() {
        panic!(
            "proto/schema/ changed since proto/src/generated/ was made from it: run \
             `cargo run -p lms-proto --example regenerate` and commit the result"
        );
    }
}
