//! Compiles the .proto schemas with protox (pure Rust, no system protoc) and
//! generates prost types for them.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let schemas = ["schema/onnx.proto", "schema/lms.proto"];
    for schema in schemas {
        println!("cargo:rerun-if-changed={schema}");
    }
    let descriptors = protox::compile(schemas, ["schema"])?;
    prost_build::Config::new().btree_map(["."]).compile_fds(descriptors)?;
    Ok(())
}
