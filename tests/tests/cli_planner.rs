//! The budget planner from the command line: `compile --strategy auto`
//! needs a budget and, when nothing fits, fails with exit 3 naming the op
//! and the smallest peak; `max-batch --strategy auto` reports an `auto`
//! batch (recompute only with no host memory); `plan-curve` writes its
//! table, JSON and SVG.

use lms_tests::{lms, lms_ok, scratch_path};

fn scratch(name: &str) -> String {
    scratch_path("cli-planner", name).to_str().unwrap().to_string()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn auto_needs_a_budget_and_says_when_nothing_fits() {
    let model = "fixtures/models/cnn_residual.onnx";
    let out = scratch("auto.lms");
    let missing = lms(&["compile", model, "--batch", "4", "--strategy", "auto", "-o", &out]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("--strategy auto needs --budget"), "{}", stderr(&missing));
    let tiny = lms(&["compile", model, "--batch", "4", "--strategy", "auto", "--budget", "200KiB", "-o", &out]);
    assert_eq!(tiny.status.code(), Some(3), "{}", stderr(&tiny));
    let message = stderr(&tiny);
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(message.contains("cnn_residual.onnx: does not fit in 200.00 KiB of device memory: op '"), "{message}");
    assert!(message.contains("alone needs") && message.contains("the smallest peak any plan reaches is"), "{message}");
    assert!(!std::path::Path::new(&out).exists(), "no output is written when nothing fits");
}

/// VGG-19 at batch 64: its first convolutions' own working sets exceed a
/// 2 GiB device, so no swap-and-recompute plan fits; the planner splits the
/// batch, plans the micro-tensors, and the result is proven.
#[test]
fn vgg19_at_batch_64_fits_2_gib_by_splitting_the_batch() {
    let model = lms_tests::onnx_data("light/light_vgg19.onnx");
    let (out, report) = (scratch("vgg19.lms"), scratch("vgg19.json"));
    let args = ["--batch", "64", "--strategy", "auto", "--budget", "2GiB", "-o", &out, "--report", &report, "-q"];
    lms_ok(&[&["compile", model.to_str().unwrap()][..], &args].concat());
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(r["auto_split"]["report"]["ops"].as_u64().unwrap() > 0, "{r}");
    assert!(r["peak_device_bytes_after"].as_u64().unwrap() <= 2 << 30, "{r}");
    assert!(r["verified"].as_u64().unwrap() > 0, "{r}");
}

/// ResNet-50 at 16 times its unrewritten largest batch under 16 GiB (138):
/// split into micro-batches whose micro-tensors are swapped to a 64 GiB host
/// or recomputed, each gap between two uses on its own, and proven.
#[test]
fn resnet50_at_16_times_its_largest_unrewritten_batch_fits_16_gib() {
    let model = lms_tests::onnx_data("light/light_resnet50.onnx");
    let (out, report) = (scratch("resnet50.lms"), scratch("resnet50.json"));
    let args = ["--batch", "2208", "--strategy", "auto", "--budget", "16GiB", "--host-budget", "64GiB"];
    lms_ok(&[&["compile", model.to_str().unwrap()][..], &args, &["-o", &out, "--report", &report, "-q"]].concat());
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(r["auto_split"]["report"]["ops"].as_u64().unwrap() > 0, "{r}");
    assert!(r["peak_device_bytes_after"].as_u64().unwrap() <= 16 << 30, "{r}");
    assert_eq!(r["verified"].as_u64(), Some(268), "every output and update proven: {r}");
}

#[test]
fn max_batch_reports_the_planners_batch() {
    let json = |host: &str| -> serde_json::Value {
        let args = ["max-batch", "fixtures/models/tiny_gpt.onnx", "--budget", "2200KiB", "--limit", "256"];
        let out = lms_ok(&[&args[..], &["--strategy", "auto", "--host-budget", host, "--json"]].concat());
        serde_json::from_str(&out).unwrap()
    };
    let batch = |v: &serde_json::Value, key: &str| v[key]["batch"].as_u64().unwrap_or(0);
    let with_host = json("64GiB");
    assert!(batch(&with_host, "auto") > batch(&with_host, "none"), "{with_host}");
    let recompute_only = json("0");
    assert_eq!(recompute_only["host_budget_bytes"], 0);
    assert_eq!(recompute_only["auto"]["peak_host_bytes"], 0, "{recompute_only}");
    assert!(batch(&recompute_only, "auto") > batch(&recompute_only, "none"), "{recompute_only}");
    let default =
        lms_ok(&["max-batch", "fixtures/models/tiny_gpt.onnx", "--budget", "2200KiB", "--limit", "64", "--json"]);
    let default: serde_json::Value = serde_json::from_str(&default).unwrap();
    assert!(default.get("auto").is_none(), "auto is searched only with --strategy auto");
}

#[test]
fn plan_curve_writes_a_table_json_and_svg() {
    let (json, svg) = (scratch("curve.json"), scratch("curve.svg"));
    let args = ["plan-curve", "fixtures/models/cnn_residual.onnx", "--batch", "4", "--budget-steps", "3"];
    let table = lms_ok(&[&args[..], &["--json", &json, "--svg", &svg]].concat());
    assert_eq!(table.lines().count(), 5, "title, header and one row per budget:\n{table}");
    let curve: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let points = curve["points"].as_array().unwrap();
    assert_eq!(points.len(), 3);
    let budgets: Vec<u64> = points.iter().map(|p| p["budget_bytes"].as_u64().unwrap()).collect();
    assert!(budgets.windows(2).all(|w| w[0] < w[1]), "{budgets:?}");
    assert_eq!(budgets[2], curve["unrewritten_peak_bytes"].as_u64().unwrap(), "the curve ends at no limit");
    let first = &points[0]["auto"];
    assert!(first["device_peak_bytes"].as_u64().unwrap() <= budgets[0], "the smallest budget fits: {first}");
    assert!(first["overhead"].as_f64().unwrap() >= 1.0, "{first}");
    for strategy in ["auto", "tflms"] {
        assert_eq!(points[2][strategy]["overhead"], 1.0, "{strategy} at no limit rewrites nothing");
    }
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg") && picture.contains("polyline"), "{picture}");
}
