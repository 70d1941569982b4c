//! Writes `src/generated/` from the schemas: run after changing `schema/*.proto`
//! (`cargo run -p lms-proto --example regenerate`), then commit the result.

#[path = "../codegen.rs"]
mod codegen;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    codegen::generate(root, &root.join("src/generated"))?;
    println!("wrote {} in {}", codegen::FILES.join(", "), root.join("src/generated").display());
    Ok(())
}
