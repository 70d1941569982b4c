//! lms as a library: the `Compile` builder, the build-script example crate
//! (`compiler/examples/build-script`), the snapshot-testing helper, and the
//! provenance written into `.lms` metadata.

use lms_compiler::passes::tflms::{self, SwapInTrigger, TflmsConfig};
use lms_compiler::{builder, emit, frontend, Compile};
use lms_proto::Message;
use lms_tests::{fixture, lms_bin, repo_root};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch folder for this test binary.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lms-library-api-{}", std::process::id())).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The metadata of a `.lms` file as (key, value) pairs.
fn metadata(path: &Path) -> Vec<(String, String)> {
    let graph = lms_proto::lms::Graph::decode(std::fs::read(path).unwrap().as_slice()).unwrap();
    graph.metadata.into_iter().map(|m| (m.key, m.value)).collect()
}

fn value<'a>(metadata: &'a [(String, String)], key: &str) -> &'a str {
    metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("no {key}"))
}

/// The build script of the example crate ran in this build (the README's
/// test command builds the workspace first): it told Cargo to rerun when the
/// model changes, and its program carries the model's provenance.
#[test]
fn build_script_example_reruns_on_its_model_and_embeds_the_program() {
    let exe = std::env::current_exe().unwrap();
    let build_dir = exe.parent().and_then(Path::parent).unwrap().join("build");
    let runs: Vec<PathBuf> = lms_tests::list(&build_dir, |p| {
        p.file_name().unwrap().to_string_lossy().starts_with("lms-example-build-script-")
            && p.join("out/tiny_gpt.lms").exists()
    });
    assert!(
        !runs.is_empty(),
        "no build of lms-example-build-script in {}: run `cargo build --release --workspace`",
        build_dir.display()
    );
    let model = fixture("models/tiny_gpt.onnx").canonicalize().unwrap();
    for run in runs {
        let output = std::fs::read_to_string(run.join("output")).unwrap();
        let reruns: Vec<PathBuf> = output
            .lines()
            .filter_map(|l| l.strip_prefix("cargo:rerun-if-changed="))
            .map(|p| Path::new(p).canonicalize().unwrap())
            .collect();
        assert_eq!(reruns, vec![model.clone()], "{}", run.display());
        let facts = metadata(&run.join("out/tiny_gpt.lms"));
        assert_eq!(value(&facts, "model.file"), "tiny_gpt.onnx");
        assert_eq!(value(&facts, "strategy"), "tflms");
        assert_eq!(value(&facts, "budget.device_bytes"), (2200 << 10).to_string());
    }
}

#[test]
fn rerun_lines_name_the_model_and_its_external_data() {
    let dir = scratch("external");
    let mut model = frontend::read_model(&fixture("models/mlp.onnx")).unwrap();
    let init = &mut model.graph.as_mut().unwrap().initializer[0];
    init.data_location = 1;
    init.external_data =
        vec![lms_proto::onnx::StringStringEntryProto { key: "location".into(), value: "w.bin".into() }];
    let path = dir.join("m.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    assert_eq!(
        builder::rerun_if_changed(&path),
        vec![
            format!("cargo:rerun-if-changed={}", path.display()),
            format!("cargo:rerun-if-changed={}", dir.join("w.bin").display())
        ]
    );
    let missing = dir.join("missing.onnx");
    assert_eq!(builder::rerun_if_changed(&missing), vec![format!("cargo:rerun-if-changed={}", missing.display())]);
}

/// The builder follows the command's rules: a budget needs a strategy (it
/// never picks one), a host budget or force needs a budget, sizes and splits
/// are checked.
#[test]
fn builder_budgets_need_a_strategy_and_bad_values_are_errors() {
    let options = Compile::new("m.onnx").batch(4).auto().budget("2MiB").host_budget("1GiB").options("m.lms").unwrap();
    assert_eq!(options.frontend.batch, Some(4));
    assert_eq!(options.strategy, lms_compiler::compile::Strategy::Auto);
    let budget = options.budget.unwrap();
    assert_eq!((budget.device, budget.host, options.force), (2 << 20, 1 << 30, false));
    let unplanned = Compile::new("m.onnx").batch(4).budget("2MiB").options("m.lms").unwrap();
    assert_eq!(unplanned.strategy, lms_compiler::compile::Strategy::None, "a budget selects no strategy");
    let out = scratch("rules").join("m.lms");
    let err = Compile::new(fixture("models/mlp.onnx")).batch(4).budget("2MiB").write(&out).unwrap_err();
    assert_eq!(err.to_string(), "--budget needs a memory strategy (--strategy tflms or auto)");
    let err = Compile::new("m.onnx").budget("lots").options("m.lms").unwrap_err().to_string();
    assert!(err.starts_with("budget: ") && err.contains("'lots'"), "{err}");
    let err = Compile::new("m.onnx").host_budget("1GiB").options("m.lms").unwrap_err().to_string();
    assert_eq!(err, "host budget has no effect without a budget");
    let err = Compile::new("m.onnx").force().options("m.lms").unwrap_err().to_string();
    assert_eq!(err, "force has no effect without a budget");
    let split = Compile::new("m.onnx").split("op=stem,dim=batch,parts=2").options("m.lms").unwrap();
    assert_eq!(split.split.len(), 1);
    let err = Compile::new("m.onnx").split("op=stem,dim=batch,parts=1").options("m.lms").unwrap_err().to_string();
    assert!(err.contains("parts '1'"), "{err}");
}

/// The builder's device profile lands in the plan and places time-triggered
/// swap-ins; an unknown one is an error naming it.
#[test]
fn builder_device_profile_is_recorded_and_checked() {
    let out = scratch("profile").join("m.lms");
    let time = TflmsConfig { trigger: SwapInTrigger::Time, ..TflmsConfig::default() };
    let model = fixture("models/mlp.onnx");
    Compile::new(&model).batch(2).tflms(time.clone()).device_profile("a100").write(&out).unwrap();
    let (graph, _) = emit::serialize::read(&out).unwrap();
    assert_eq!(graph.plan.device_profile, "a100");
    assert!(graph.plan.swaps.iter().all(|s| s.swap_ins.iter().all(|i| i.trigger.is_some())));
    let err = Compile::new(&model).tflms(time).device_profile("a200").write(&out).unwrap_err().to_string();
    assert!(err.starts_with("unknown device profile 'a200'"), "{err}");
}

/// The testing helper gives the text form of exactly the rewrite TFLMS makes.
#[test]
fn rewrite_text_is_the_stable_text_of_the_rewrite() {
    let model = fixture("models/mlp.onnx");
    let text =
        lms_compiler::testing::rewrite_text(Compile::new(&model).batch(2).tflms(TflmsConfig::default())).unwrap();
    let training = lms_tests::training::sgd_graph(&model, 2);
    let (rewritten, _) = tflms::rewrite(&training, &TflmsConfig::default()).unwrap();
    assert_eq!(text, emit::text::to_text(&rewritten).unwrap());
    let err = lms_compiler::testing::rewrite_text(Compile::new(fixture("models/none.onnx"))).unwrap_err();
    assert!(err.to_string().contains("none.onnx: cannot read"), "{err}");
}

/// `lms compile` of the same model named three ways writes the same bytes,
/// and the metadata holds structured facts, not debug strings or paths.
#[test]
fn provenance_is_structured_and_independent_of_the_path_as_typed() {
    let dir = scratch("provenance");
    let models = repo_root().join("fixtures/models");
    let absolute = models.join("tiny_gpt.onnx");
    let mut outputs = Vec::new();
    for (i, model) in ["tiny_gpt.onnx", "./tiny_gpt.onnx", absolute.to_str().unwrap()].into_iter().enumerate() {
        let out = dir.join(format!("m{i}.lms"));
        let run = Command::new(lms_bin())
            .args(["compile", model, "--batch", "32", "--train", "momentum", "--lr", "0.05", "-o"])
            .arg(&out)
            .args(["--strategy", "tflms", "--budget", "2200KiB", "--host-budget", "1GiB", "--quiet"])
            .current_dir(&models)
            .output()
            .unwrap();
        assert!(run.status.success(), "{model}: {}", String::from_utf8_lossy(&run.stderr));
        outputs.push(std::fs::read(&out).unwrap());
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]), "the path as typed changed the bytes");
    let facts = metadata(&dir.join("m0.lms"));
    let sha = lms_compiler::provenance::sha256_hex(&std::fs::read(&absolute).unwrap());
    for (key, want) in [
        ("lms.version", env!("CARGO_PKG_VERSION")),
        ("model.file", "tiny_gpt.onnx"),
        ("model.sha256", sha.as_str()),
        ("batch", "32"),
        ("loss", "softmax-xent"),
        ("optimizer", "momentum"),
        ("optimizer.lr", "0.05"),
        ("optimizer.momentum", "0.9"),
        ("strategy", "tflms"),
        ("tflms.ctrld_strategy", "chain-rule"),
        ("budget.device_bytes", "2252800"),
        ("budget.host_bytes", "1073741824"),
    ] {
        assert_eq!(value(&facts, key), want, "{key}");
    }
    for (key, v) in &facts {
        assert!(!v.contains(['{', '/', '\\']), "{key} = {v}: a debug string or a path");
    }
}
