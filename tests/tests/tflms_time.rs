//! TFLMS's time trigger on real models: it never predicts more stall than
//! the count rule, and the device profile it plans with travels through
//! `lms compile`, the plan, `lms simulate` and `lms max-batch`.

use lms_compiler::analysis::profile::DeviceProfile;
use lms_compiler::analysis::timeline;
use lms_compiler::ir::Graph;
use lms_compiler::passes::tflms::{self, SwapInTrigger, TflmsConfig};
use lms_proto::Message;
use lms_tests::training::sgd_graph;
use lms_tests::{fixture, list, lms, lms_ok, onnx_data, scratch_path};
use std::path::Path;

/// Predicted stall and the number of swapped tensors of `g` rewritten by
/// TFLMS (every forward→backward tensor) with `trigger`, on `profile`.
fn stall(g: &Graph, trigger: SwapInTrigger, profile: &DeviceProfile) -> (f64, usize) {
    let cfg = TflmsConfig { trigger, profile: profile.clone().into(), ..TflmsConfig::default() };
    let (rewritten, report) = tflms::rewrite(g, &cfg).unwrap();
    (timeline::simulate(&rewritten, rewritten.schedule(), profile).stall_seconds, report.tensors.len())
}

#[test]
fn the_time_trigger_never_stalls_more_than_the_count_rule() {
    let onnx = |p: &Path| p.extension().is_some_and(|e| e == "onnx");
    let mut models = list(&onnx_data("light"), onnx);
    models.extend(list(&fixture("models"), onnx));
    assert_eq!(models.len(), 9 + 5, "the nine light models and the fixture models");
    let profile = DeviceProfile::load("h100-sxm").unwrap();
    for path in models {
        let g = sgd_graph(&path, 16);
        let (count, swapped) = stall(&g, SwapInTrigger::Count, &profile);
        let (time, same) = stall(&g, SwapInTrigger::Time, &profile);
        let name = path.file_name().unwrap().to_string_lossy();
        println!("{name}: {swapped} tensors swapped; stall count {count:.6} s, time {time:.6} s");
        assert!(swapped > 0 && same == swapped, "{name}: TFLMS swaps");
        assert!(time <= count, "{name}: time trigger stalls {time} s, count {count} s");
    }
}

fn scratch(name: &str) -> String {
    scratch_path("tflms-time", name).to_str().unwrap().to_string()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Runs `lms` and returns its exit status and the first line of stderr.
fn fails(args: &[&str]) -> (Option<i32>, String) {
    let out = lms(args);
    let err = String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or_default().to_string();
    (out.status.code(), err)
}

#[test]
fn the_plan_records_the_profile_and_simulate_defaults_to_it() {
    let model = fixture("models/cnn_residual.onnx");
    let model = model.to_str().unwrap();
    let (out, report) = (scratch("pcie.lms"), scratch("pcie.json"));
    let args =
        ["compile", model, "--batch", "1", "--strategy", "tflms", "--trigger", "time", "--min-bytes", "1KiB", "-q"];
    lms_ok(&[&args[..], &["--device-profile", "h100-pcie", "-o", &out, "--report", &report]].concat());
    let report = json(&std::fs::read_to_string(&report).unwrap());
    assert_eq!((report["trigger"].as_str(), report["min_bytes"].as_u64()), (Some("time"), Some(1024)));
    assert_eq!(report["device_profile"], "h100-pcie");
    assert!(report["swaps"].as_array().unwrap().iter().all(|s| s["bytes"].as_u64().unwrap() >= 1024));
    assert!(report["lb"].is_null(), "the time trigger has no lb");
    let sim = json(&lms_ok(&["simulate", &out, "--json"]));
    assert_eq!(sim["device_profile"], "h100-pcie");
    let sim = json(&lms_ok(&["simulate", &out, "--json", "--device-profile", "a100"]));
    assert_eq!(sim["device_profile"], "a100");
    // A profile file: recorded by its path, which simulate loads again.
    let file = scratch("slow-link.json");
    let mut profile: serde_json::Value = json(lms_compiler::analysis::profile::SHIPPED[0].1);
    profile["name"] = "slow-link".into();
    profile["host_to_device_bytes_per_second"] = 1e9.into();
    std::fs::write(&file, profile.to_string()).unwrap();
    let from_file = scratch("file.lms");
    lms_ok(&[
        "compile",
        model,
        "--batch",
        "1",
        "--strategy",
        "tflms",
        "--trigger",
        "time",
        "--device-profile",
        &file,
        "-o",
        &from_file,
        "-q",
    ]);
    let simulated = json(&lms_ok(&["simulate", &from_file, "--json"]));
    assert_eq!(simulated["device_profile"], "slow-link");
    // The file is carried by content: moving it changes nothing.
    std::fs::remove_file(&file).unwrap();
    assert_eq!(json(&lms_ok(&["simulate", &from_file, "--json"])), simulated);
    assert_eq!(json(&lms_ok(&["show", &from_file, "--json"]))["device_profile_carried"], true);
    // An older file names the profile file by its path: read while the file is there, else
    // refused with a clear message.
    let older = scratch("older.lms");
    let mut program = lms_proto::lms::Graph::decode(&*std::fs::read(&from_file).unwrap()).unwrap();
    let plan = program.plan.as_mut().unwrap();
    (plan.device_profile, plan.device_profile_json) = (file.clone(), String::new());
    std::fs::write(&older, program.encode_to_vec()).unwrap();
    let (code, err) = fails(&["simulate", &older]);
    assert_eq!(code, Some(2));
    assert!(err.contains("the plan's device profile: unknown device profile") && err.contains(&file), "{err}");
    assert!(err.ends_with("; give --device-profile"), "{err}");
    std::fs::write(&file, profile.to_string()).unwrap();
    assert_eq!(json(&lms_ok(&["simulate", &older, "--json"]))["device_profile"], "slow-link");
    std::fs::remove_file(&file).unwrap();
    // A carried profile that is not one is refused, naming the file.
    let broken = scratch("broken-profile.lms");
    program.plan.as_mut().unwrap().device_profile_json = "{".into();
    std::fs::write(&broken, program.encode_to_vec()).unwrap();
    let (code, err) = fails(&["show", &broken]);
    assert_eq!(code, Some(2));
    assert!(
        err.starts_with(&format!("lms: error: {broken}: the plan's device profile: not a device profile")),
        "{err}"
    );
}

#[test]
fn bad_profiles_and_flags_are_refused() {
    let model = fixture("models/mlp.onnx");
    let model = model.to_str().unwrap();
    let out = scratch("bad.lms");
    let (code, err) = fails(&["compile", model, "--batch", "1", "--device-profile", "h100-sxn", "-o", &out]);
    assert_eq!(code, Some(2));
    assert!(err.starts_with("lms: error: unknown device profile 'h100-sxn': not a file and not one of"), "{err}");
    let broken = scratch("broken.json");
    std::fs::write(&broken, "{\"name\": 3}").unwrap();
    let (code, err) = fails(&["max-batch", model, "--budget", "1MiB", "--device-profile", &broken]);
    assert_eq!(code, Some(2));
    assert!(err.contains(&broken) && err.contains("not a device profile"), "{err}");
    let (code, err) =
        fails(&["compile", model, "--batch", "1", "--strategy", "tflms", "--trigger", "time", "--lb", "2", "-o", &out]);
    assert_eq!((code, err.as_str()), (Some(2), "lms: error: --lb has no effect without --trigger count"));
    let (code, err) = fails(&["compile", model, "--batch", "1", "--trigger", "time", "-o", &out]);
    assert_eq!((code, err.as_str()), (Some(2), "lms: error: --trigger has no effect without --strategy tflms"));
    assert!(!Path::new(&out).exists(), "nothing written");
}

#[test]
fn max_batch_predicts_the_step_on_the_profile() {
    let model = fixture("models/cnn_residual.onnx");
    let args = ["max-batch", model.to_str().unwrap(), "--budget", "64MiB", "--limit", "64", "--json"];
    let fast = json(&lms_ok(&[&args[..], &["--device-profile", "h200"]].concat()));
    let slow = json(&lms_ok(&[&args[..], &["--device-profile", "cpu"]].concat()));
    assert_eq!((fast["device_profile"].as_str(), slow["device_profile"].as_str()), (Some("h200"), Some("cpu")));
    for key in ["none", "tflms"] {
        assert_eq!(fast[key]["batch"], slow[key]["batch"], "the profile does not change what fits");
        let (f, s) = (
            fast[key]["predicted_step_seconds"].as_f64().unwrap(),
            slow[key]["predicted_step_seconds"].as_f64().unwrap(),
        );
        assert!(0.0 < f && f < s, "{key}: h200 {f} s, cpu {s} s");
    }
}
