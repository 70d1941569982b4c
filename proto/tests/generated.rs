//! The committed code in `src/generated/` is what the schemas generate; after a schema
//! changes, `cargo run -p lms-proto --example regenerate` makes it again.

#[path = "../codegen.rs"]
mod codegen;

#[test]
fn committed_code_is_generated_from_the_schemas() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let scratch = tempfile::tempdir().expect("a scratch folder");
    codegen::generate(root, scratch.path()).expect("the schemas generate");
    for file in codegen::FILES {
        let want = std::fs::read_to_string(scratch.path().join(file)).unwrap();
        let have = std::fs::read_to_string(root.join("src/generated").join(file)).unwrap_or_default();
        assert!(
            want == have,
            "proto/src/generated/{file} is not what the schemas generate: \
             run `cargo run -p lms-proto --example regenerate` and commit the result"
        );
    }
}
