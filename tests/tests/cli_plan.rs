//! The plan in the .lms file end to end: `lms compile --budget` records the
//! strategy and budgets, `lms simulate` reads them back and says whether
//! the graph fits, compiles are byte-identical, and the pipeline stops and
//! dumps where it is told.

use lms_tests::lms;
use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    lms_tests::scratch_path("cli-plan", name)
}

fn ok(args: &[&str]) -> String {
    lms_tests::lms_ok(args)
}

/// Compiles tiny_gpt at batch 32 with Adam and TFLMS, plus `extra` flags.
fn compile_tiny_gpt(out: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "compile",
        "fixtures/models/tiny_gpt.onnx",
        "--batch",
        "32",
        "--train",
        "adam",
        "--strategy",
        "tflms",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    ok(&args)
}

#[test]
fn simulate_reads_the_budgets_and_strategy_from_the_file() {
    let graph = scratch("budget.lms");
    let report = compile_tiny_gpt(&graph, &["--budget", "2200KiB", "--host-budget", "1GiB"]);
    assert!(report.contains("n_tensors and lb chosen by the budget search"), "{report}");
    // Every summary states the batch, optimizer, strategy and budgets.
    let setup = "batch 32, adam (lr 0.001), strategy tflms, budget 2.15 MiB device and 1.00 GiB host";
    assert!(report.contains(&format!("setup           {setup}\n")), "{report}");
    let text = ok(&["simulate", graph.to_str().unwrap()]);
    assert!(text.contains(&format!("setup        {setup}\n")), "{text}");
    let run_text = ok(&["run", graph.to_str().unwrap(), "--steps", "1"]);
    assert!(run_text.contains(&format!("setup: {setup}\n")), "{run_text}");
    let max_batch = ok(&["max-batch", "fixtures/models/tiny_gpt.onnx", "--budget", "2200KiB", "--limit", "4"]);
    let searched = "setup        sgd (lr 0.01), budget 2.15 MiB device and 64.00 GiB host, batch searched from 1 to 4";
    assert!(max_batch.starts_with(searched), "{max_batch}");
    let sim: serde_json::Value = serde_json::from_str(&ok(&["simulate", graph.to_str().unwrap(), "--json"])).unwrap();
    assert_eq!(sim["budget_device_bytes"], 2252800);
    assert_eq!(sim["budget_host_bytes"], 1u64 << 30);
    assert_eq!(sim["strategy"], "tflms");
    assert_eq!((sim["batch"].as_u64(), sim["optimizer"].as_str()), (Some(32), Some("adam (lr 0.001)")));
    assert_eq!(sim["fits"], true);
    // Fits by the placed arena, which the margin is measured from.
    let (peak, arena) = (sim["peak_device_bytes"].as_i64().unwrap(), sim["arena_device_bytes"].as_i64().unwrap());
    assert!(peak <= arena && arena <= 2252800, "{sim}");
    assert_eq!(sim["device_margin_bytes"].as_i64().unwrap(), 2252800 - arena);
    // `lms run` takes the planned device budget as its limit.
    let run: serde_json::Value =
        serde_json::from_str(&ok(&["run", graph.to_str().unwrap(), "--steps", "1", "--json"])).unwrap();
    assert_eq!(run["peak_device_bytes"].as_i64().unwrap(), peak);
    assert_eq!(run["setup"]["batch"], 32);
    assert_eq!(run["setup"]["budget_host_bytes"], 1u64 << 30);
}

#[test]
fn a_graph_without_a_budget_has_no_verdict() {
    let graph = scratch("plain.lms");
    ok(&["compile", "fixtures/models/mlp.onnx", "--batch", "4", "-o", graph.to_str().unwrap()]);
    let sim: serde_json::Value = serde_json::from_str(&ok(&["simulate", graph.to_str().unwrap(), "--json"])).unwrap();
    assert_eq!(sim["strategy"], "none");
    assert!(sim["budget_device_bytes"].is_null() && sim["fits"].is_null(), "{sim}");
}

#[test]
fn compiles_are_byte_identical_with_and_without_a_budget() {
    for extra in [&[][..], &["--budget", "2200KiB"][..]] {
        let (a, b) = (scratch("a.lms"), scratch("b.lms"));
        compile_tiny_gpt(&a, extra);
        compile_tiny_gpt(&b, extra);
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), "flags {extra:?}");
    }
}

#[test]
fn a_given_knob_is_kept_and_the_report_says_which_were_chosen() {
    let graph = scratch("lb.lms");
    let report = compile_tiny_gpt(&graph, &["--budget", "2200KiB", "--lb", "2"]);
    assert!(report.contains("lb 2; n_tensors chosen by the budget search"), "{report}");
}

#[test]
fn the_pipeline_stops_and_dumps_after_a_named_pass() {
    let (graph, dump) = (scratch("stopped.lms"), scratch("autodiff.txt"));
    let report =
        compile_tiny_gpt(&graph, &["--dump-after", "autodiff", dump.to_str().unwrap(), "--stop-after", "optimizer"]);
    assert!(report.contains("peak device"), "{report}");
    let text = std::fs::read_to_string(&dump).unwrap();
    assert!(text.contains("/grad/") && !text.contains("AdamUpdate"), "autodiff's output has gradients, no updates");
    let stopped = ok(&["simulate", graph.to_str().unwrap()]);
    assert!(stopped.contains(", strategy none, no budget"), "stopped before tflms: {stopped}");
    let out = lms(&[
        "compile",
        "fixtures/models/mlp.onnx",
        "--batch",
        "1",
        "--stop-after",
        "tflms",
        "-o",
        graph.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim(),
        "lms: error: no pass named 'tflms' in this compile (passes: import, autodiff, optimizer, verify)"
    );
}

/// Knobs nobody gave or chose are called defaults; a graph of another batch
/// is refused as `--before`, and `verify` says the batches differ.
#[test]
fn knobs_say_where_they_came_from_and_graphs_of_other_batches_are_named() {
    let at = |batch: &str, name: &str, extra: &[&str]| -> (PathBuf, String) {
        let out = scratch(name);
        let args = ["compile", "fixtures/models/mlp.onnx", "--batch", batch, "-o", out.to_str().unwrap()];
        let text = ok(&[&args[..], extra].concat());
        (out, text)
    };
    let (swapped, text) = at("4", "mlp4-tflms.lms", &["--strategy", "tflms"]);
    assert!(text.contains("(n_tensors all, lb 1; defaults)"), "{text}");
    let (_, text) = at("4", "mlp4-n2.lms", &["--strategy", "tflms", "--n-tensors", "2"]);
    assert!(text.contains("(n_tensors 2, lb 1; n_tensors given, lb default)"), "{text}");
    let (other, _) = at("8", "mlp8.lms", &[]);
    let run = lms(&["simulate", swapped.to_str().unwrap(), "--before", other.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(
        err.trim_end().ends_with(
            "mlp8.lms: --before is not this graph before a rewrite: input 'x' is f32[8,64] in --before and f32[4,64] \
             in the graph: they were compiled at batch 8 and 4"
        ),
        "{err}"
    );
    let run = lms(&["verify", other.to_str().unwrap(), swapped.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(4), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("they were compiled at batch 8 and 4"), "{err}");
}

/// `lms show` (and `lms inspect` of a .lms) tells what a compiled file holds:
/// provenance, setup, device profile, arenas, decisions and predicted step,
/// equal to what compile and simulate say of it.
#[test]
fn show_tells_what_a_compiled_file_holds() {
    let (graph, report) = (scratch("show.lms"), scratch("show.json"));
    compile_tiny_gpt(&graph, &["--budget", "2200KiB", "--report", report.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let graph = graph.to_str().unwrap();
    let shown: serde_json::Value = serde_json::from_str(&ok(&["show", graph, "--json"])).unwrap();
    let sim: serde_json::Value = serde_json::from_str(&ok(&["simulate", graph, "--json"])).unwrap();
    assert_eq!(shown["setup"]["batch"], 32);
    assert_eq!(shown["setup"]["optimizer"], "adam (lr 0.001)");
    assert_eq!(shown["setup"]["strategy"], "tflms");
    assert_eq!(shown["setup"]["budget_device_bytes"], 2252800);
    assert_eq!(shown["device_profile"], "h100-sxm");
    assert_eq!(shown["arena_device_bytes"], report["arena_device_bytes"]);
    assert_eq!(shown["arena_host_bytes"], sim["arena_host_bytes"]);
    assert_eq!(shown["predicted_step_seconds"], sim["predicted_step_seconds"]);
    assert_eq!(shown["decisions"][0]["kind"], "swap");
    assert_eq!(shown["decisions"][0]["tensors"], report["swapped_tensors"]);
    assert_eq!(shown["decisions"][0]["bytes"], report["swapped_bytes"]);
    let facts = shown["provenance"].as_array().unwrap();
    let fact = |key: &str| facts.iter().find(|f| f["key"] == key).map(|f| f["value"].clone());
    assert_eq!(fact("model.file"), Some("tiny_gpt.onnx".into()));
    assert_eq!(fact("chosen.n_tensors"), Some(report["n_tensors"].to_string().into()));
    let text = ok(&["show", graph]);
    assert!(
        text.contains("setup           batch 32, adam (lr 0.001), strategy tflms, budget 2.15 MiB device"),
        "{text}"
    );
    assert!(text.contains("\n  model.file              tiny_gpt.onnx\n"), "{text}");
    assert_eq!(ok(&["inspect", graph, "--json"]), ok(&["show", graph, "--json"]));
    let run = lms(&["inspect", graph, "--ir"]);
    assert_eq!(run.status.code(), Some(2));
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(err.trim_end(), "lms: error: --ir has no effect on a .lms file (its shapes are compiled in)");
}
