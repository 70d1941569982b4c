//! The split pass end to end on the CPU: forced splits of the small CNN and
//! the tiny GPT are proven equal to the unsplit graphs by `lms verify`, train
//! 3 steps with losses bit-identical to the unsplit graph's (batch and
//! channel splits do not reorder sums; weight gradients summed over batch
//! parts, spatial splits of gradients with halos, batch normalization by
//! statistics merged across batch parts and the loss's partial losses are
//! within the stated tolerance), and run at the simulated peak. A VGG-19 conv split along
//! height compiles and is proven.

use lms_compiler::shape::split::SUM_TOLERANCE;
use lms_tests::{lms, lms_ok, scratch_path};

/// One compiled graph's 3-step run inside arenas of exactly the placed sizes (the
/// compile report's): losses and device peak; and the compile report's simulated peak.
struct Trained {
    losses: Vec<f64>,
    run_peak: u64,
    simulated_peak: u64,
    report: serde_json::Value,
    file: String,
}

fn train(model: &str, name: &str, extra: &[&str]) -> Trained {
    let out = scratch_path("split-runtime", &format!("{name}.lms"));
    let report = scratch_path("split-runtime", &format!("{name}.json"));
    let (out_s, report_s) = (out.to_str().unwrap(), report.to_str().unwrap());
    let mut args = vec!["compile", model, "--batch", "8", "--train", "sgd", "-o", out_s, "--report", report_s, "-q"];
    args.extend(extra);
    lms_ok(&args);
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    // The run's limits are the arenas the compile placed, exactly; the run uses all of them.
    let (device, host) = (report["arena_device_bytes"].to_string(), report["arena_host_bytes"].to_string());
    let limits = ["--device-memory", device.as_str(), "--host-memory", host.as_str()];
    let run: serde_json::Value =
        serde_json::from_str(&lms_ok(&[&["run", out_s, "--steps", "3", "--json"][..], &limits].concat())).unwrap();
    assert_eq!((run["arena_device_bytes"].to_string(), run["arena_host_bytes"].to_string()), (device, host));
    Trained {
        losses: run["losses"].as_array().unwrap().iter().map(|l| l.as_f64().unwrap()).collect(),
        run_peak: run["peak_device_bytes"].as_u64().unwrap(),
        simulated_peak: report["peak_device_bytes_after"].as_u64().unwrap(),
        report,
        file: out_s.to_string(),
    }
}

/// Splits `model` as `splits` (ops run in parts per split: `covered`) and
/// checks it against the unsplit graph: proven, the same losses (within
/// `tolerance` relative; 0: bit-identical), runtime peak = simulated peak.
fn check(model: &str, name: &str, splits: &[&str], covered: &[usize], tolerance: f64) {
    let base = train(model, &format!("{name}-base"), &[]);
    let mut extra = Vec::new();
    for s in splits {
        extra.extend(["--split", s]);
    }
    let split = train(model, name, &extra);
    let proof = lms_ok(&["verify", &base.file, &split.file]);
    assert!(proof.contains("proven"), "{proof}");
    let reports = split.report["splits"].as_array().unwrap();
    let counts: Vec<usize> = reports.iter().map(|r| r["covered"].as_array().unwrap().len()).collect();
    assert_eq!(counts, covered, "ops run in parts per split");
    assert!(split.report["verified"].as_u64().unwrap() > 0);
    assert_eq!(split.losses.len(), 3);
    for (s, b) in split.losses.iter().zip(&base.losses) {
        let err = (s - b).abs() / b.abs();
        assert!(err <= tolerance, "losses {:?} vs unsplit {:?}", split.losses, base.losses);
    }
    assert_eq!(split.run_peak, split.simulated_peak, "runtime peak equals the simulated peak");
}

#[test]
fn a_split_cnn_trains_bit_identically_at_its_simulated_peak() {
    check(
        "fixtures/models/cnn_residual.onnx",
        "cnn",
        &["op=stem,dim=batch,parts=4", "op=pool,dim=channel,parts=2,depth=2"],
        &[1, 1],
        0.0,
    );
}

#[test]
fn weight_gradients_summed_over_batch_parts_train_within_the_sum_tolerance() {
    check(
        "fixtures/models/cnn_residual.onnx",
        "cnn-sum",
        &["op=conv3/grad/weight,dim=batch,parts=4", "op=block.conv2/grad/weight,dim=batch,parts=3"],
        &[1, 1],
        SUM_TOLERANCE,
    );
}

#[test]
fn forward_halo_splits_of_a_conv_and_a_pool_train_bit_identically() {
    check(
        "fixtures/models/cnn_residual.onnx",
        "cnn-halo-forward",
        &["op=block.conv1,dim=height,parts=2", "op=stem,dim=width,parts=3", "op=pool,dim=height,parts=4"],
        &[1, 1, 1],
        0.0,
    );
}

#[test]
fn halo_splits_of_gradients_train_within_the_sum_tolerance() {
    check(
        "fixtures/models/cnn_residual.onnx",
        "cnn-halo-grad",
        &[
            "op=block.conv1/grad/data,dim=width,parts=4",
            "op=stem/grad/weight,dim=height,parts=2",
            "op=pool/grad/maxpool,dim=height,parts=2",
            "op=conv3,dim=width,parts=2",
        ],
        &[1, 1, 1, 1],
        lms_compiler::shape::split::SUM_TOLERANCE,
    );
}

/// The text form of halo splits of a conv (height), its input gradient
/// (width), its weight gradient (height) and a pool's gradient, pinned.
#[test]
fn halo_split_rewrites_are_pinned() {
    let out = scratch_path("split-runtime", "halo-snapshot.lms");
    let text = scratch_path("split-runtime", "halo-snapshot.txt");
    let mut args = vec!["compile", "fixtures/models/cnn_residual.onnx", "--batch", "2", "--train", "sgd", "-q"];
    args.extend(["-o", out.to_str().unwrap(), "--text", text.to_str().unwrap()]);
    for split in [
        "op=block.conv1,dim=height,parts=2",
        "op=block.conv1/grad/data,dim=width,parts=3",
        "op=block.conv2/grad/weight,dim=height,parts=2",
        "op=pool/grad/maxpool,dim=height,parts=2",
    ] {
        args.extend(["--split", split]);
    }
    lms_ok(&args);
    insta::assert_snapshot!("halo_splits@cnn_residual", std::fs::read_to_string(&text).unwrap());
}

/// TFLMS after a split: the split's removed ops leave no tensors behind in
/// the file, even where TFLMS's new swap ops reuse their node indices.
#[test]
fn split_graphs_swapped_by_tflms_train_like_the_unsplit_graph_at_their_simulated_peak() {
    let model = "fixtures/models/cnn_residual.onnx";
    let base = train(model, "tflms-base", &[]);
    for (name, split) in [("tflms-batch", "op=stem,dim=batch,parts=2"), ("tflms-halo", "op=stem,dim=width,parts=2")] {
        let swapped = train(model, name, &["--split", split, "--strategy", "tflms"]);
        assert_eq!(swapped.losses, base.losses, "{split}");
        assert_eq!(swapped.run_peak, swapped.simulated_peak, "{split}");
    }
}

#[test]
fn batch_norm_and_its_gradient_split_along_the_batch_train_within_the_sum_tolerance() {
    check(
        "fixtures/models/cnn_residual.onnx",
        "cnn-bn",
        &["op=stem.bn,dim=batch,parts=3", "op=block.conv2.bn/grad/batchnorm,dim=batch,parts=3"],
        &[1, 1],
        lms_compiler::shape::split::SUM_TOLERANCE,
    );
}

#[test]
fn a_vgg19_conv_and_its_gradients_split_along_height_are_proven() {
    let model = lms_tests::onnx_data("light/light_vgg19.onnx");
    let out = scratch_path("split-runtime", "vgg19-halo.lms");
    let (model, out) = (model.to_str().unwrap(), out.to_str().unwrap());
    let splits = [
        "op=n2,dim=height,parts=4",
        "op=n2/grad/data,dim=height,parts=4",
        "op=n2/grad/weight,dim=height,parts=2",
        "op=n2/grad/bias,dim=height,parts=3",
    ];
    let mut args = vec!["compile", model, "--batch", "64", "-o", out, "-q"];
    for s in &splits {
        args.extend(["--split", s]);
    }
    lms_ok(&args);
    let base = scratch_path("split-runtime", "vgg19-base.lms");
    lms_ok(&["compile", model, "--batch", "64", "-o", base.to_str().unwrap(), "-q"]);
    let proof = lms_ok(&["verify", base.to_str().unwrap(), out]);
    assert!(proof.contains("proven equal: 39 of 39"), "{proof}");
}

#[test]
fn a_split_gpt_run_of_ten_ops_trains_bit_identically_at_its_simulated_peak() {
    check(
        "fixtures/models/tiny_gpt.onnx",
        "gpt",
        &["op=mlp.fc.matmul,dim=batch,parts=2,depth=8", "op=attn.qkv.matmul,dim=batch,parts=4,depth=2"],
        &[10, 2],
        0.0,
    );
}

/// The loss's parts add up partial losses divided by the whole batch's
/// positions (within the sum tolerance); its gradient's parts are its
/// slices (bit-identical).
#[test]
fn the_loss_and_its_gradient_split_along_the_batch_train_within_the_sum_tolerance() {
    check(
        "fixtures/models/tiny_gpt.onnx",
        "gpt-loss",
        &["op=loss,dim=batch,parts=3", "op=loss/grad/loss,dim=batch,parts=2"],
        &[1, 1],
        SUM_TOLERANCE,
    );
}

/// A Reshape whose shape names the batch (from a constant with 0 first, or
/// from `Shape` of a whole tensor) runs its parts as `ReshapeTo`s; an ONNX
/// Split along the features runs per batch part: bit-identical.
#[test]
fn batch_carrying_reshapes_and_a_split_of_the_features_train_bit_identically() {
    let model = "fixtures/models/tiny_gpt.onnx";
    check(
        model,
        "gpt-reshape",
        &["op=attn.q.heads,dim=batch,parts=2", "op=attn.merged,dim=batch,parts=4"],
        &[1, 1],
        0.0,
    );
    check(model, "gpt-split", &["op=attn.q,dim=batch,parts=3"], &[1], 0.0);
    // The parts do not read the shape `attn.merged` computed from `Shape` of
    // the whole embedding; that computation goes too.
    let (out, text) =
        (scratch_path("split-runtime", "gpt-dead-shape.lms"), scratch_path("split-runtime", "gpt-dead-shape.txt"));
    let split = ["--split", "op=attn.merged,dim=batch,parts=2"];
    lms_ok(&[&["compile", model, "--batch", "8", "-q", "-o", out.to_str().unwrap(), "--text", text.to_str().unwrap()][..], &split].concat());
    let text = std::fs::read_to_string(&text).unwrap();
    assert!(text.contains("attn.merged.part1") && !text.contains("Shape(%emb)"), "{text}");
}

/// Where no swap-and-recompute plan fits, `--strategy auto` runs ops in
/// parts along the batch first: proven, trained within the sum tolerance of
/// the unsplit graph (weight gradients are added up over the parts), at its
/// simulated peak, within the budget.
#[test]
fn the_planner_splits_the_batch_where_no_plan_fits_and_trains_at_its_simulated_peak() {
    // Budgets below the working set of each model's largest op (its inputs,
    // outputs and the resident variables), which no swap-and-recompute plan
    // of the whole ops can reach. cnn_residual's convolution weight gradients
    // take copies of X, dY and dW as cuDNN's workspace: its smallest split
    // peak is 410.54 KiB.
    for (model, name, budget, bytes) in [
        ("fixtures/models/cnn_residual.onnx", "cnn-auto", "480KiB", 480 << 10),
        ("fixtures/models/tiny_gpt.onnx", "gpt-auto", "140KiB", 140 << 10),
    ] {
        let base = train(model, &format!("{name}-base"), &[]);
        let split = train(model, name, &["--strategy", "auto", "--budget", budget]);
        let chosen = &split.report["auto_split"];
        assert!(chosen["report"]["ops"].as_u64().unwrap() > 0, "{name}: {}", split.report);
        assert!(split.report["verified"].as_u64().unwrap() > 0);
        assert!(lms_ok(&["verify", &base.file, &split.file]).contains("proven"));
        for (s, b) in split.losses.iter().zip(&base.losses) {
            let err = (s - b).abs() / b.abs();
            assert!(err <= SUM_TOLERANCE, "{name}: losses {:?} vs unsplit {:?}", split.losses, base.losses);
        }
        assert_eq!(split.run_peak, split.simulated_peak, "{name}: runtime peak equals the simulated peak");
        assert!(split.run_peak <= bytes, "{name}: {} over the budget", split.run_peak);
        let arena = split.report["arena_device_bytes"].as_u64().unwrap();
        assert!(arena <= bytes, "{name}: the arena it ran in, {arena}, is over the budget");
    }
}

#[test]
fn bad_split_flags_are_one_line_usage_errors() {
    let out = scratch_path("split-runtime", "bad.lms");
    let model = "fixtures/models/cnn_residual.onnx";
    for (flag, wanted) in [
        ("op=stem,dim=batch,parts=1", "parts '1' is not a whole number from 2 to 8"),
        ("op=stm,dim=batch,parts=2", "--split op 'stm' matches no op of the training graph (close: 'stem'"),
        ("op=gap,dim=height,parts=2", "node 'gap' (GlobalAveragePool): GlobalAveragePool on inputs [1,32,16,16] cannot be split along height (only channel)"),
        // A batch of 1 has nothing to split along.
        (
            "op=stem.bn,dim=batch,parts=2",
            "BatchNormTrain on inputs [1,16,32,32], [16], [16], [16], [16] cannot be split",
        ),
    ] {
        let run = lms(&["compile", model, "--batch", "1", "--train", "sgd", "--split", flag, "-o", out.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{flag}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(wanted), "{flag}: {err}");
        assert!(!out.exists());
    }
}
