//! The CPU backend runs every kind of plan inside arenas of exactly the planned sizes:
//! whole, TFLMS, recompute-only and split (batch and spatial) plans of the fixture models,
//! compiled by `lms compile`, train two steps in one device and one host buffer of
//! `lms simulate`'s `arena_device_bytes` and `arena_host_bytes`, with guards on (no node,
//! copy or update writes a byte outside its blocks), with the losses of the unrewritten
//! graph bit for bit; each step's arena peaks equal `simulate`'s to the byte, and a limit
//! one byte below an arena refuses the run, naming the node whose block ends past it.

use lms_runtime::{CpuBackend, Program, RunOptions, RuntimeError, Session};
use lms_tests::{lms_ok, scratch_path};

/// A compiled plan's arenas as `lms simulate --json` reports them: (device, host).
fn simulated_arenas(file: &str) -> (u64, u64) {
    let sim: serde_json::Value = serde_json::from_str(&lms_ok(&["simulate", file, "--json"])).unwrap();
    (sim["arena_device_bytes"].as_u64().unwrap(), sim["arena_host_bytes"].as_u64().unwrap())
}

/// Compiles `model` at batch 4 with SGD and `extra` flags into `name`.lms; returns its path
/// and the compile report.
fn compile(model: &str, name: &str, extra: &[&str]) -> (String, serde_json::Value) {
    let out = scratch_path("arena-runtime", &format!("{name}.lms"));
    let report = scratch_path("arena-runtime", &format!("{name}.json"));
    let (out_s, report_s) = (out.to_str().unwrap(), report.to_str().unwrap());
    let args = ["compile", model, "--batch", "4", "--train", "sgd", "-o", out_s, "--report", report_s, "-q"];
    lms_ok(&[&args[..], extra].concat());
    let report = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    (out_s.to_string(), report)
}

/// A guarded CPU session on `file` whose device and host limits are `limits`.
fn session(file: &str, limits: (u64, u64)) -> Result<Session<CpuBackend>, RuntimeError> {
    let program = Program::load(std::path::Path::new(file))?;
    let options = RunOptions { device_memory: limits.0, host_memory: limits.1, seed: 0 };
    Session::new(program, CpuBackend::new().with_guards(), options)
}

/// Two guarded steps of `file` inside its simulated arenas, exactly: the losses as bits.
fn train_in_arenas(file: &str) -> Vec<u32> {
    let arenas = simulated_arenas(file);
    let mut s = session(file, arenas).unwrap_or_else(|e| panic!("{file}: {e}"));
    (0..2)
        .map(|_| {
            let step = s.step().unwrap_or_else(|e| panic!("{file}: {e}"));
            let used = (step.report.arena_device_bytes, step.report.arena_host_bytes);
            assert_eq!(used, arenas, "{file}: the arenas a step used vs simulate's");
            step.loss.unwrap().to_bits()
        })
        .collect()
}

/// A limit one byte below an arena refuses the run, naming the node whose output's
/// block ends past it.
fn refused_one_byte_below(file: &str) {
    let (device, host) = simulated_arenas(file);
    let mut tight = vec![(device - 1, host, "device")];
    if host > 0 {
        tight.push((device, host - 1, "host"));
    }
    for (d, h, pool) in tight {
        match session(file, (d, h)) {
            Err(e @ RuntimeError::OutOfMemory(_)) => {
                let text = e.to_string();
                assert!(text.starts_with(&format!("out of {pool} memory at node '")), "{text}");
                assert!(text.contains("arena is") && !text.contains('\n'), "{text}");
            }
            other => panic!("{file}: a {pool} limit one byte below the arena ran: {:?}", other.err()),
        }
    }
}

/// A plan: its name, its compile flags (`BUDGET`: 3/4 of the whole graph's peak) and the
/// compile report's field that says it rewrote something (a count above 0, or a list).
type Plan<'a> = (&'a str, &'a [&'a str], &'a str);

/// Every plan of `model` trains like its whole graph inside its arenas.
fn check(model: &str, name: &str, plans: &[Plan]) {
    let (whole, report) = compile(model, &format!("{name}-whole"), &[]);
    let expected = train_in_arenas(&whole);
    refused_one_byte_below(&whole);
    let peak = report["peak_device_bytes_after"].as_u64().unwrap();
    for &(plan, flags, rewrote) in plans {
        let budget = (peak * 3 / 4).to_string();
        let flags: Vec<&str> = flags.iter().map(|&f| if f == "BUDGET" { budget.as_str() } else { f }).collect();
        let (file, report) = compile(model, &format!("{name}-{plan}"), &flags);
        let made = &report[rewrote];
        assert!(made.as_u64().unwrap_or(0) > 0 || made.as_array().is_some_and(|a| !a.is_empty()), "{name} {plan}");
        assert_eq!(train_in_arenas(&file), expected, "{name} {plan}: losses vs the whole graph's");
        refused_one_byte_below(&file);
    }
}

#[test]
fn plans_of_the_cnn_train_inside_their_arenas() {
    check(
        "fixtures/models/cnn_residual.onnx",
        "cnn",
        &[
            ("tflms", &["--strategy", "tflms"], "swapped_tensors"),
            ("recompute", &["--strategy", "auto", "--budget", "BUDGET", "--host-budget", "0"], "recomputed_tensors"),
            ("swap", &["--strategy", "auto", "--budget", "BUDGET"], "swapped_tensors"),
            ("split-batch", &["--split", "op=stem,dim=batch,parts=4"], "splits"),
            (
                "split-height",
                &["--split", "op=block.conv1,dim=height,parts=2", "--split", "op=pool,dim=height,parts=4"],
                "splits",
            ),
        ],
    );
}

#[test]
fn plans_of_the_gpt_train_inside_their_arenas() {
    check(
        "fixtures/models/tiny_gpt.onnx",
        "gpt",
        &[
            ("tflms", &["--strategy", "tflms"], "swapped_tensors"),
            ("recompute", &["--strategy", "auto", "--budget", "BUDGET", "--host-budget", "0"], "recomputed_tensors"),
            ("split-batch", &["--split", "op=mlp.fc.matmul,dim=batch,parts=2,depth=8"], "splits"),
        ],
    );
}
