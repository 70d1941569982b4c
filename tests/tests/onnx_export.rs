//! The `--onnx` export of every fixture and light model, as built and
//! rewritten by TFLMS, passes `onnx.checker` (with full shape checking) from
//! the fixtures' onnx install, and draws every control edge as a marker input.

use lms_compiler::passes::tflms::TflmsConfig;
use lms_compiler::Compile;
use lms_tests::{fixture, list, onnx_data};
use std::path::PathBuf;
use std::process::Command;

#[test]
fn every_export_passes_the_onnx_checker() {
    let dir = std::env::temp_dir().join(format!("lms-onnx-export-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut models = list(&fixture("models"), |p| p.extension().is_some_and(|e| e == "onnx"));
    let light = list(&onnx_data("light"), |p| p.extension().is_some_and(|e| e == "onnx"));
    assert_eq!(light.len(), 9, "the 9 light models");
    models.extend(light);
    let mut exports: Vec<PathBuf> = Vec::new();
    for model in &models {
        let stem = model.file_stem().unwrap().to_string_lossy().into_owned();
        for rewrite in [false, true] {
            let export = dir.join(format!("{stem}-{}.onnx", if rewrite { "tflms" } else { "none" }));
            let mut compile = Compile::new(model).batch(2).verify(false).onnx(&export);
            if rewrite {
                compile = compile.tflms(TflmsConfig::default());
            }
            compile.write(export.with_extension("lms")).unwrap_or_else(|e| panic!("{e}"));
            exports.push(export);
        }
    }
    let python = fixture(".venv/bin/python");
    assert!(python.exists(), "{} is missing: run `bash fixtures/fetch-onnx-testdata.sh`", python.display());
    let script = r#"
import sys, onnx
failed = 0
for path in sys.argv[1:]:
    model = onnx.load(path)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:
        failed += 1
        print(f"{path}: {e}".splitlines()[0])
    markers = sum(i.endswith(":control") for n in model.graph.node for i in n.input)
    after = sum(len(p.value.split(",")) for n in model.graph.node for p in n.metadata_props if p.key == "lms.after")
    if markers != after:
        failed += 1
        print(f"{path}: {after} control edges, {markers} drawn")
sys.exit(1 if failed else 0)
"#;
    let out = Command::new(&python).arg("-c").arg(script).args(&exports).output().unwrap();
    assert!(
        out.status.success(),
        "onnx.checker rejected exports:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
