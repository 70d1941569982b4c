//! `lms profile`: the CPU backend measured quickly into a profile file that
//! the time model loads and `lms simulate` predicts with; the same command on
//! the CUDA backend, run on the emulated device (its plumbing only: the
//! emulated device's figures are not a GPU's).

use lms_compiler::analysis::profile::{DeviceProfile, FORMAT_VERSION};
use lms_runtime::backend::cuda::loader;
use lms_tests::{lms_bin, lms_ok, repo_root, scratch_path};
use std::process::Command;

/// Checks what every measured profile holds and returns it.
fn measured(path: &std::path::Path, name: &str) -> DeviceProfile {
    let profile = DeviceProfile::load(path.to_str().unwrap()).unwrap();
    assert_eq!((profile.format_version, profile.name.as_str()), (FORMAT_VERSION, name));
    let rates = profile.kernel_rates.as_ref().expect("a measured profile has kernel rates");
    for points in [&rates.matmul, &rates.conv, &rates.elementwise, &rates.reduction] {
        assert_eq!(points.len(), 2, "--quick measures two sizes per class: {points:?}");
    }
    assert!(profile.launch_seconds > 0.0 && profile.launch_seconds < 1.0, "{}", profile.launch_seconds);
    profile
}

#[test]
fn a_quick_cpu_profile_loads_and_predicts() {
    let out = scratch_path("cli-profile", "cpu.json");
    let line = lms_ok(&["profile", "--device", "cpu", "--quick", "--name", "cpu-here", "-o", out.to_str().unwrap()]);
    assert!(line.starts_with(&format!("wrote {}: per-op overhead ", out.display())), "{line}");
    let profile = measured(&out, "cpu-here");
    assert!(!profile.copies_overlap_compute, "the CPU backend copies in line with its kernels");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("\"description\": \"lms's CPU reference backend ("), "{text}");
    assert!(text.contains("measured by `lms profile --device cpu --quick`"), "{text}");

    let lms = scratch_path("cli-profile", "mlp.lms");
    let (lms_s, profile_s) = (lms.to_str().unwrap(), out.to_str().unwrap());
    lms_ok(&["compile", "fixtures/models/mlp.onnx", "--batch", "8", "--device-profile", profile_s, "-o", lms_s, "-q"]);
    let report: serde_json::Value = serde_json::from_str(&lms_ok(&["simulate", lms_s, "--json"])).unwrap();
    let step = report["predicted_step_seconds"].as_f64().unwrap();
    assert!(step > 0.0 && step < 1.0, "{report}");

    // The same machine runs the graph: the prediction is within a loose factor of the
    // measured step's CPU time (the figure a loaded machine does not inflate). Not a
    // speed check: a model that lost its per-op overhead or its rates misses by far more.
    let run: serde_json::Value = serde_json::from_str(&lms_ok(&["run", lms_s, "--steps", "6", "--json"])).unwrap();
    let mut measured: Vec<f64> =
        run["step_cpu_seconds"].as_array().unwrap()[1..].iter().map(|s| s.as_f64().unwrap()).collect();
    measured.sort_by(f64::total_cmp);
    let median = measured[measured.len() / 2];
    assert!(step > median / 3.0 && step < median * 3.0, "predicted {step} s, measured {median} s");
}

#[test]
fn the_cuda_profile_runs_on_the_emulated_device() {
    let out = scratch_path("cli-profile", "cuda.json");
    let run = Command::new(lms_bin())
        .args(["profile", "--device", "cuda", "--quick", "-o", out.to_str().unwrap()])
        .current_dir(repo_root())
        .env(loader::EMULATOR_VAR, "1")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let profile = measured(&out, "cuda-measured");
    assert!(profile.copies_overlap_compute, "the CUDA backend's copies run on their own streams");
    assert!(profile.description.starts_with("lms's CUDA backend"), "{}", profile.description);
}
