//! The rewritten plans on the emulated CUDA device (`LMS_CUDA_EMULATOR=1`: the CUDA
//! backend's kernels, cuBLAS and cuDNN calls run on the CPU behind fake CUDA libraries),
//! from the command line: TFLMS's swap plan, the budget planner's swap-and-recompute plan
//! and its batch split of the small CNN and the GPT block each train 3 steps with
//! `--device cuda` with the CPU backend's losses (within 1e-5 relative: the emulated cuBLAS
//! and cuDNN sum in other orders than the CPU's), inside arenas of exactly the compiled
//! sizes, at the peaks `lms simulate` gives; and the swap and recompute plans train bit for
//! bit like the unrewritten graph on the same device. The streams run in an adversarial
//! order with hazard checks there, so these runs also show that no copy or kernel touches
//! memory another stream's work may still be using; a swap-out whose wait is dropped
//! (a test-only switch) is reported as a hazard. Every run on the emulated device counts
//! the driver's allocating calls: the only ones are the device arena (the plan's, with the
//! fixed reserve of cuBLAS's workspace and the Div flag inside it) and the pinned host
//! arena, each once.

use lms_runtime::backend::cuda::{self, loader};
use lms_tests::{lms_bin, repo_root, scratch_path};
use std::process::Command;

/// One compiled plan: its file, the arenas the compile placed, `simulate`'s peaks.
#[derive(Clone)]
struct Plan {
    file: String,
    arenas: [String; 2],
    simulated: (u64, u64),
    report: serde_json::Value,
}

/// A 3-step run: its losses and its device and host peaks.
#[derive(Debug)]
struct Run {
    losses: Vec<f64>,
    peaks: (u64, u64),
    /// The device and host arenas the run used.
    arenas: (u64, u64),
    /// The backend's fixed device reserve beside the device arena.
    fixed: u64,
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(bytes)))
}

/// `lms ARGS` from the repository root, with `LMS_CUDA_EMULATOR=1` when `emulated`.
fn lms_run(args: &[&str], emulated: bool) -> Command {
    let mut command = Command::new(lms_bin());
    command.args(args).current_dir(repo_root());
    if emulated {
        command.env(loader::EMULATOR_VAR, "1");
    }
    command
}

/// [`lms_run`]'s standard output, after checking that it succeeded.
fn lms(args: &[&str], emulated: bool) -> Vec<u8> {
    let out = lms_run(args, emulated).output().expect("run lms");
    assert!(out.status.success(), "lms {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn compile(model: &str, name: &str, extra: &[&str]) -> Plan {
    let out = scratch_path("emulated-cuda", &format!("{name}.lms"));
    let report = scratch_path("emulated-cuda", &format!("{name}.json"));
    let (file, report_s) = (out.to_str().unwrap().to_string(), report.to_str().unwrap());
    let mut args = vec!["compile", model, "--batch", "8", "--train", "sgd", "-o", &file, "--report", report_s, "-q"];
    args.extend(extra);
    lms(&args, false);
    let report = json(&std::fs::read(&report).unwrap());
    let sim = json(&lms(&["simulate", &file, "--json"], false));
    let simulated = (sim["peak_device_bytes"].as_u64().unwrap(), sim["peak_host_bytes"].as_u64().unwrap());
    let arenas = [report["arena_device_bytes"].to_string(), report["arena_host_bytes"].to_string()];
    Plan { file, arenas, simulated, report }
}

/// The allocating driver calls in `log` (lines `ENTRY_POINT BYTES`, in order) that are not
/// the run's two arenas, each once: the device arena of `device_bytes` (the plan's arena
/// with the fixed reserve) and the pinned host arena of `host_bytes` (none when 0).
fn allocations_beside_the_arenas(log: &str, device_bytes: u64, host_bytes: u64) -> Vec<String> {
    let mut expected = vec![format!("cuMemAlloc_v2 {device_bytes}")];
    if host_bytes > 0 {
        expected.push(format!("cuMemHostAlloc {host_bytes}"));
    }
    let mut others = Vec::new();
    for line in log.lines() {
        match expected.iter().position(|e| e == line) {
            Some(i) => _ = expected.remove(i),
            None => others.push(line.to_string()),
        }
    }
    others.extend(expected.into_iter().map(|e| format!("missing: {e}")));
    others
}

fn run(plan: &Plan, device: &str) -> Run {
    let args = ["run", &plan.file, "--device", device, "--steps", "3", "--json"];
    // Limits far above the plan's arenas: the allocations are the arenas, not the limits.
    let limits = ["--device-memory", "64GiB", "--host-memory", "64GiB"];
    let log = std::path::PathBuf::from(format!("{}.{device}-allocations", plan.file));
    _ = std::fs::remove_file(&log);
    let mut command = lms_run(&[&args[..], &limits].concat(), device == "cuda");
    let out = command.env(loader::ALLOCATIONS_VAR, &log).output().expect("run lms");
    assert!(out.status.success(), "lms run {}: {}", plan.file, String::from_utf8_lossy(&out.stderr));
    let r = json(&out.stdout);
    if device == "cuda" {
        let arena: u64 = plan.arenas[0].parse().unwrap();
        let device_bytes = arena.next_multiple_of(cuda::arena::ALIGNMENT) + cuda::fixed_device_bytes();
        let host_bytes: u64 = plan.arenas[1].parse().unwrap();
        let log_text = std::fs::read_to_string(&log).unwrap_or_default();
        let others = allocations_beside_the_arenas(&log_text, device_bytes, host_bytes);
        assert!(others.is_empty(), "{}: allocations beside the two arenas: {others:?}", plan.file);
    }
    Run {
        losses: r["losses"].as_array().unwrap().iter().map(|l| l.as_f64().unwrap()).collect(),
        peaks: (r["peak_device_bytes"].as_u64().unwrap(), r["peak_host_bytes"].as_u64().unwrap()),
        arenas: (r["arena_device_bytes"].as_u64().unwrap(), r["arena_host_bytes"].as_u64().unwrap()),
        fixed: r["fixed_device_bytes"].as_u64().unwrap(),
    }
}

/// TFLMS's plan of `model` and the planner's at the budgets `planned` (swaps and recomputes:
/// between the smallest peak it reaches and the graph's) and `split` (below the largest op's
/// working set: a batch split first), each trained 3 steps on the CPU and on the emulated
/// device.
fn check_plans(model: &str, name: &str, planned: &str, split: &str) {
    let base = compile(model, &format!("{name}-base"), &[]);
    let on_device = run(&base, "cuda");
    let plans = [
        ("tflms", vec!["--strategy", "tflms"], true),
        ("auto", vec!["--strategy", "auto", "--budget", planned], true),
        ("split", vec!["--strategy", "auto", "--budget", split], false),
    ];
    for (strategy, flags, bit_for_bit) in plans {
        let plan = compile(model, &format!("{name}-{strategy}"), &flags);
        assert!(plan.report["added_ops"].as_u64() > Some(0), "{name} {strategy}: nothing rewritten: {}", plan.report);
        assert_eq!(plan.report["auto_split"].is_object(), strategy == "split", "{name} {strategy}");
        let (cpu, cuda) = (run(&plan, "cpu"), run(&plan, "cuda"));
        println!("{name} {strategy}: cpu {cpu:?}, emulated cuda {cuda:?}, simulated {:?}", plan.simulated);
        assert_eq!(cuda.losses.len(), 3);
        for (g, c) in cuda.losses.iter().zip(&cpu.losses) {
            assert!((g - c).abs() <= 1e-5 * c.abs().max(1.0), "{name} {strategy}: {cuda:?} vs cpu {cpu:?}");
        }
        assert_eq!(cuda.peaks, plan.simulated, "{name} {strategy}: emulated device's peaks vs simulate's");
        assert_eq!(cpu.peaks, plan.simulated, "{name} {strategy}: CPU's peaks vs simulate's");
        let arenas =
            (plan.report["arena_device_bytes"].as_u64().unwrap(), plan.report["arena_host_bytes"].as_u64().unwrap());
        assert_eq!(cuda.arenas, arenas, "{name} {strategy}: emulated device's arenas vs the plan's");
        // Nothing but the fixed reserve is allocated beside the plan's device arena,
        // whatever the limit.
        assert_eq!((cuda.fixed, cpu.fixed), (cuda::fixed_device_bytes(), 0), "{name} {strategy}");
        if bit_for_bit {
            assert_eq!(cuda.losses, on_device.losses, "{name} {strategy}: differs from the unrewritten graph");
        }
    }
}

#[test]
fn plans_of_the_small_cnn_train_on_the_emulated_device_like_the_cpu_at_the_simulated_peaks() {
    check_plans("fixtures/models/cnn_residual.onnx", "cnn", "2500KiB", "480KiB");
}

#[test]
fn plans_of_the_gpt_block_train_on_the_emulated_device_like_the_cpu_at_the_simulated_peaks() {
    check_plans("fixtures/models/tiny_gpt.onnx", "gpt", "400KiB", "140KiB");
}

/// Spatial splits: halo parts of a convolution have asymmetric pads, so the CUDA backend
/// pads their input into the node's planned scratch block; the plan trains like the CPU's
/// at the simulated peaks.
#[test]
fn a_spatially_split_plan_uses_its_planned_scratch_on_the_emulated_device() {
    let splits = ["--split", "op=block.conv1,dim=height,parts=2", "--split", "op=stem,dim=width,parts=3"];
    let plan = compile("fixtures/models/cnn_residual.onnx", "cnn-spatial", &splits);
    let (cpu, cuda) = (run(&plan, "cpu"), run(&plan, "cuda"));
    for (g, c) in cuda.losses.iter().zip(&cpu.losses) {
        assert!((g - c).abs() <= 1e-5 * c.abs().max(1.0), "{cuda:?} vs cpu {cpu:?}");
    }
    assert_eq!(cuda.peaks, plan.simulated, "emulated device's peaks vs simulate's");
    let sim = json(&lms(&["simulate", &plan.file, "--json"], false));
    assert!(sim["scratch_device_bytes"].is_u64(), "{sim}");
}

/// The allocation check reports a call beside the arenas (as a kernel allocating its own
/// buffer would make), a second arena, a pinned allocation for an empty host arena, and an
/// arena that was never allocated.
#[test]
fn an_allocation_beside_the_arenas_is_reported() {
    let arenas = "cuMemAlloc_v2 1024\ncuMemHostAlloc 4096\n";
    assert!(allocations_beside_the_arenas(arenas, 1024, 4096).is_empty());
    assert!(allocations_beside_the_arenas("cuMemAlloc_v2 1024\n", 1024, 0).is_empty(), "no host arena, no pinned call");
    assert_eq!(allocations_beside_the_arenas("cuMemHostAlloc 1\ncuMemAlloc_v2 1024\n", 1024, 0), ["cuMemHostAlloc 1"]);
    let kernel = format!("{arenas}cuMemAllocAsync 256\n");
    assert_eq!(allocations_beside_the_arenas(&kernel, 1024, 4096), ["cuMemAllocAsync 256"]);
    let twice = format!("{arenas}cuMemHostAlloc 4096\n");
    assert_eq!(allocations_beside_the_arenas(&twice, 1024, 4096), ["cuMemHostAlloc 4096"]);
    let larger = "cuMemAlloc_v2 2048\ncuMemHostAlloc 4096\n";
    assert_eq!(
        allocations_beside_the_arenas(larger, 1024, 4096),
        ["cuMemAlloc_v2 2048", "missing: cuMemAlloc_v2 1024"]
    );
}

#[test]
fn doctor_names_the_emulated_device_and_its_cudnn() {
    let out = String::from_utf8(lms(&["doctor"], true)).unwrap();
    let reserve = format!("per run: the plan's device arena + a fixed reserve of {} B", cuda::fixed_device_bytes());
    let facts =
        ["emulated device (no GPU): LMS_CUDA_EMULATOR=1", "libcudnn   9.", "GPU 0: emulated device (no GPU)", &reserve];
    for fact in facts {
        assert!(out.contains(fact), "no '{fact}' in:\n{out}");
    }
}

/// Without the wait of its copy queue for the compute queue, a swap-out's copy is ordered
/// after nothing the compute queue did: the first such race is reported as a hazard naming
/// both accesses (the copy and the compute work on the same bytes), and the run fails on it.
#[test]
fn a_swap_out_without_its_wait_is_reported_as_a_hazard() {
    let plan = compile("fixtures/models/cnn_residual.onnx", "cnn-hazard", &["--strategy", "tflms"]);
    let out = lms_run(&["run", &plan.file, "--device", "cuda", "--steps", "1"], true)
        .env(loader::SKIP_SWAP_OUT_WAITS_VAR, "1")
        .output()
        .expect("run lms");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let error = stderr.lines().find(|l| l.starts_with("lms: error: ")).unwrap_or_else(|| panic!("{stderr}"));
    // Which of the two unordered accesses the adversarial order runs first decides which
    // one is reported as the hazard; the message names both.
    assert!(error.contains("hazard: ") && error.contains("cuMemcpyDtoHAsync of "), "{error}");
    assert!(error.contains(" on stream ") && error.contains("with no event wait ordering that before it"), "{error}");
}

/// A convolution runs the algorithm its plan fixes, with the planned workspace and no
/// fallback: when the library needs more workspace than the plan gives (the emulated
/// cuDNN's test-only `LMS_CUDA_EMULATOR_WORKSPACE_EXTRA` adds bytes to every algorithm's
/// need), the node fails naming itself and the bytes, exit 3 (does not fit).
#[test]
fn a_convolution_needing_more_workspace_than_planned_does_not_fit() {
    let plan = compile("fixtures/models/cnn_residual.onnx", "cnn-workspace", &[]);
    let out = lms_run(&["run", &plan.file, "--device", "cuda", "--steps", "1"], true)
        .env("LMS_CUDA_EMULATOR_WORKSPACE_EXTRA", "256")
        .output()
        .expect("run lms");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let error = stderr.lines().find(|l| l.starts_with("lms: error: ")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(error.contains("(Conv): cuDNN's Forward algorithm 0 workspace needs 256 bytes"), "{error}");
    assert!(error.contains("the plan gives it 0 bytes"), "{error}");
}

/// The run's host limit holds on the CUDA backend before anything runs: a limit one byte
/// under the plan's host arena is refused with exit 3, naming the limit and the arena.
#[test]
fn a_host_limit_under_the_host_arena_does_not_fit_on_the_emulated_device() {
    let plan = compile("fixtures/models/cnn_residual.onnx", "cnn-host-limit", &["--strategy", "tflms"]);
    let host: u64 = plan.arenas[1].parse().unwrap();
    let limit = (host - 1).to_string();
    let args = ["run", &plan.file, "--device", "cuda", "--steps", "1", "--host-memory", &limit];
    let out = lms_run(&args, true).output().expect("run lms");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("out of host memory") && stderr.contains(&format!("({limit} B) limit")), "{stderr}");
    assert!(stderr.contains("the plan's host arena is") && stderr.contains(&format!("({host} B)")), "{stderr}");
}

/// The device limit counts the backend's fixed reserve beside the plan's device arena: a
/// limit of exactly the (small) arena runs on the CPU (no reserve) but is refused on the
/// emulated device as below the reserve; a limit one byte under the arena plus the reserve
/// is refused naming the node whose block crosses it, the limit, the reserve and the arena
/// with and without it, exit 3 both, before anything runs; the arena plus the reserve runs, and
/// so does a plan whose budget (its limit without `--device-memory`) is below the reserve.
#[test]
fn a_device_limit_of_the_arena_without_the_reserve_does_not_fit_on_the_emulated_device() {
    let plan = compile("fixtures/models/cnn_residual.onnx", "cnn-device-limit", &["--strategy", "tflms"]);
    let arena: u64 = plan.arenas[0].parse().unwrap();
    let reserve = cuda::fixed_device_bytes();
    let run_at = |device: &str, limit: u64| {
        let limit = limit.to_string();
        let args = ["run", &plan.file, "--device", device, "--steps", "1", "--device-memory", &limit];
        lms_run(&args, device == "cuda").output().expect("run lms")
    };
    let refused = |limit: u64| {
        let out = run_at("cuda", limit);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        stderr.lines().find(|l| l.starts_with("lms: error: ")).unwrap_or_else(|| panic!("{stderr}")).to_string()
    };
    let cpu = run_at("cpu", arena);
    assert!(cpu.status.success(), "{}", String::from_utf8_lossy(&cpu.stderr));
    let below = refused(arena);
    assert!(
        below.contains(&format!("({arena} B) is below the backend's fixed reserve of 32.00 MiB ({reserve} B)")),
        "{below}"
    );
    let limit = arena + reserve - 1;
    let crossing = refused(limit);
    for fact in [
        "out of device memory at node '".to_string(),
        format!("({limit} B) limit less the backend's fixed reserve of 32.00 MiB ({reserve} B)"),
        "the plan's device arena is ".to_string(),
        format!("({arena} B), "),
        format!("({} B) with the reserve", arena + reserve),
    ] {
        assert!(crossing.contains(&fact), "no '{fact}' in: {crossing}");
    }
    let fits = run_at("cuda", arena + reserve);
    assert!(fits.status.success(), "{}", String::from_utf8_lossy(&fits.stderr));
    // Without --device-memory the plan's budget bounds the arena and the reserve comes on top:
    // a budget far below the reserve runs.
    let tight =
        compile("fixtures/models/cnn_residual.onnx", "cnn-budget-limit", &["--strategy", "tflms", "--budget", "8MiB"]);
    let run = lms(&["run", &tight.file, "--device", "cuda", "--steps", "1", "--json"], true);
    let report = json(&run);
    assert_eq!(report["device_memory_limit"], (8u64 << 20) + reserve, "{report}");
    assert_eq!(report["device_memory_limit_from"], "the plan's budget and the backend's fixed reserve", "{report}");
}

/// The plan records each convolution node's cuDNN algorithm and workspace, which `lms show`
/// counts by direction (the conservative defaults: forward 0, backward data and filter 1,
/// only backward filter with a workspace); the device runs exactly the recorded ones, so a
/// record other than the one the node's geometry gives is refused when the file loads
/// (exit 2, naming the node), and a file that records none (older) runs the rule's, bit for
/// bit like the recorded plan.
#[test]
fn the_plan_records_each_convolutions_algorithm_and_the_device_runs_it() {
    use lms_proto::Message;
    let plan = compile("fixtures/models/cnn_residual.onnx", "cnn-algorithms", &[]);
    let shown = json(&lms(&["show", &plan.file, "--json"], false));
    let counts = shown["conv_algorithms"].as_array().unwrap();
    let directions: Vec<(&str, i64)> =
        counts.iter().map(|c| (c["direction"].as_str().unwrap(), c["algorithm"].as_i64().unwrap())).collect();
    assert!(directions.contains(&("forward", 0)) && directions.contains(&("backward filter", 1)), "{shown}");
    for c in counts {
        let filter = c["direction"] == "backward filter";
        assert_eq!(c["algorithm"], if c["direction"] == "forward" { 0 } else { 1 }, "{c}");
        assert_eq!(c["largest_workspace_bytes"].as_u64().unwrap() > 0, filter, "{c}");
    }
    let text = String::from_utf8(lms(&["show", &plan.file], false)).unwrap();
    assert!(
        text.contains("\nconvolutions    ") && text.contains(" forward algorithm 0 (workspace up to 0 B)"),
        "{text}"
    );
    let graph = lms_proto::lms::Graph::decode(&*std::fs::read(&plan.file).unwrap()).unwrap();
    let recorded = graph.plan.as_ref().unwrap().conv_algorithms.len() as u64;
    assert_eq!(recorded, counts.iter().map(|c| c["nodes"].as_u64().unwrap()).sum::<u64>());
    let variant = |name: &str, change: &dyn Fn(&mut Vec<lms_proto::lms::ConvAlgorithmDecision>)| {
        let mut changed = graph.clone();
        change(&mut changed.plan.as_mut().unwrap().conv_algorithms);
        let file = scratch_path("emulated-cuda", name);
        std::fs::write(&file, changed.encode_to_vec()).unwrap();
        Plan { file: file.to_str().unwrap().to_string(), ..plan.clone() }
    };
    let tampered = variant("cnn-algorithms-tampered.lms", &|records| records[0].algorithm = 6);
    let out = lms_run(&["run", &tampered.file, "--device", "cuda", "--steps", "1"], true).output().expect("run lms");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("records cuDNN ") && stderr.contains("algorithm 6 with "), "{stderr}");
    assert!(stderr.contains("but its geometry gives algorithm "), "{stderr}");
    let older = variant("cnn-algorithms-older.lms", &|records| records.clear());
    assert_eq!(run(&older, "cuda").losses, run(&plan, "cuda").losses, "the rule's algorithms are the recorded ones");
}
