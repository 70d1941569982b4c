//! The contract from the command line: a `.lms` file crafted from a valid one to break it
//! makes `lms simulate`, `lms verify` and `lms run` each exit 2 with one line naming the
//! file and the tensor or node, never a panic, never "proven"; a node whose declared
//! outputs its op's shape rule (an lms op's output rule) does not give is refused so on both
//! backends.

use lms_proto::lms::{slot, DType, Graph, Slot};
use lms_proto::Message;
use lms_runtime::backend::cuda::loader;
use lms_tests::{lms, lms_bin, repo_root};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch folder for the test `test` of this test binary.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lms-contract-cli-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Compiles the MLP fixture (SGD, batch 4) to `dir/valid.lms`; checks it simulates.
fn valid_file(dir: &Path) -> PathBuf {
    let path = dir.join("valid.lms");
    let out = lms(&["compile", "fixtures/models/mlp.onnx", "--batch", "4", "-o", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = lms(&["simulate", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    path
}

/// The first non-parameterized node in the schedule that another node reads, and that
/// reader: (producer, consumer) node ids.
fn producer_and_consumer(g: &Graph) -> (usize, usize) {
    for &p in &g.schedule {
        let node = &g.nodes[p as usize];
        if node.parameterized || node.outputs.is_empty() {
            continue;
        }
        let made = node.outputs[0];
        let reads = |n: &lms_proto::lms::Node| n.inputs.iter().any(|s| s.value == Some(slot::Value::Tensor(made)));
        if let Some(c) = g.nodes.iter().position(reads) {
            return (p as usize, c);
        }
    }
    panic!("no node reads another's output");
}

/// Runs each command on `bad` (`lms run` on the CPU and on the emulated CUDA device) and
/// checks the one-line error names the file and `names`.
fn rejected_everywhere(valid: &Path, bad: &Path, names: &str) {
    let (valid, bad) = (valid.to_str().unwrap(), bad.to_str().unwrap());
    let commands: [Vec<&str>; 4] = [
        vec!["simulate", bad],
        vec!["verify", valid, bad],
        vec!["run", bad, "--steps", "1", "--device", "cpu"],
        vec!["run", bad, "--steps", "1", "--device", "cuda"],
    ];
    for args in commands {
        let out = Command::new(lms_bin())
            .args(&args)
            .current_dir(repo_root())
            .env(loader::EMULATOR_VAR, "1")
            .output()
            .expect("run lms");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let what = format!("lms {}: stdout {stdout} stderr {stderr}", args.join(" "));
        assert_eq!(out.status.code(), Some(2), "{what}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "not one line: {what}");
        assert!(stderr.starts_with(&format!("lms: error: {bad}: ")), "{what}");
        assert!(stderr.contains(names), "does not name {names}: {what}");
        assert!(!stderr.contains("panicked") && !stdout.contains("proven"), "{what}");
    }
}

/// Writes `graph` edited by `edit` as `dir/name`.
fn craft(dir: &Path, graph: &Graph, name: &str, edit: impl FnOnce(&mut Graph)) -> PathBuf {
    let mut g = graph.clone();
    edit(&mut g);
    let path = dir.join(name);
    std::fs::write(&path, g.encode_to_vec()).unwrap();
    path
}

#[test]
fn crafted_files_are_rejected_by_simulate_verify_and_run() {
    let dir = scratch("crafted");
    let valid = valid_file(&dir);
    let graph = Graph::decode(&*std::fs::read(&valid).unwrap()).unwrap();
    let (p, c) = producer_and_consumer(&graph);
    let made = graph.nodes[p].outputs[0] as usize;
    let tensor_name = format!("tensor '{}'", graph.tensors[made].name);
    let (producer_name, consumer_name) = (&graph.nodes[p].name, &graph.nodes[c].name);

    let huge = craft(&dir, &graph, "huge.lms", |g| g.tensors[made].shape = vec![1 << 62, 8]);
    rejected_everywhere(&valid, &huge, &format!("{tensor_name}: shape [4611686018427387904, 8] of f32 takes more"));

    let out_of_range = craft(&dir, &graph, "out_of_range.lms", |g| {
        let id = g.tensors.len() as u32 + 5;
        g.nodes[c].inputs[0] = Slot { value: Some(slot::Value::Tensor(id)) };
    });
    rejected_everywhere(&valid, &out_of_range, &format!("node '{consumer_name}' ("));

    let unknown_dtype = craft(&dir, &graph, "unknown_dtype.lms", |g| g.tensors[made].dtype = 99);
    rejected_everywhere(&valid, &unknown_dtype, &format!("{tensor_name}: unknown dtype 99"));
    let unknown_device = craft(&dir, &graph, "unknown_device.lms", |g| g.nodes[c].device = 7);
    rejected_everywhere(&valid, &unknown_device, &format!("node '{consumer_name}' ("));

    let consumer_first = craft(&dir, &graph, "consumer_first.lms", |g| {
        let at = |n: usize| g.schedule.iter().position(|&s| s as usize == n).unwrap();
        let (from, to) = (at(c), at(p));
        let moved = g.schedule.remove(from);
        g.schedule.insert(to, moved);
    });
    rejected_everywhere(&valid, &consumer_first, &format!("schedule runs node '{consumer_name}' ("));

    // An activation transposed (the same bytes, another shape) or retyped (i32 for f32).
    let shape = graph.tensors[made].shape.clone();
    let transposed: Vec<u64> = shape.iter().rev().copied().collect();
    assert_ne!(transposed, shape, "the activation is not transposable");
    let (op, declared) = (&graph.nodes[p].op, |s: &[u64]| format!("{s:?}").replace(' ', ""));
    let swapped = craft(&dir, &graph, "transposed.lms", |g| g.tensors[made].shape = transposed.clone());
    let why = format!("declares outputs [f32{}] but its inputs give [f32{}]", declared(&transposed), declared(&shape));
    rejected_everywhere(&valid, &swapped, &format!("node '{producer_name}' ({op}): {why}"));
    let retyped = craft(&dir, &graph, "retyped.lms", |g| g.tensors[made].dtype = DType::DtypeI32 as i32);
    let why = format!("declares outputs [i32{}] but its inputs give [f32{}]", declared(&shape), declared(&shape));
    rejected_everywhere(&valid, &retyped, &format!("node '{producer_name}' ({op}): {why}"));
    let text = String::from_utf8(lms(&["simulate", consumer_first.to_str().unwrap()]).stderr).unwrap();
    assert!(text.contains(&format!("before node '{producer_name}' (")), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An lms op's declared outputs are held to its output rule as an ONNX op's are to its shape
/// rule: a gradient transposed (the same bytes, another shape) or retyped is refused at load.
#[test]
fn lms_ops_declare_the_output_types_of_their_output_rule() {
    let dir = scratch("lms-ops");
    let valid = valid_file(&dir);
    let graph = Graph::decode(&*std::fs::read(&valid).unwrap()).unwrap();
    let n = graph.nodes.iter().position(|n| n.domain == "lms" && n.op == "UnaryGrad").expect("the MLP has a UnaryGrad");
    let (name, made) = (&graph.nodes[n].name, graph.nodes[n].outputs[0] as usize);
    let shape = graph.tensors[made].shape.clone();
    let transposed: Vec<u64> = shape.iter().rev().copied().collect();
    assert_ne!(transposed, shape, "the gradient is not transposable");
    let declared = |s: &[u64]| format!("{s:?}").replace(' ', "");

    let swapped = craft(&dir, &graph, "transposed.lms", |g| g.tensors[made].shape = transposed.clone());
    let why = format!("declares outputs [f32{}] but its inputs give [f32{}]", declared(&transposed), declared(&shape));
    rejected_everywhere(&valid, &swapped, &format!("node '{name}' (UnaryGrad): {why}"));
    let retyped = craft(&dir, &graph, "retyped.lms", |g| g.tensors[made].dtype = DType::DtypeI32 as i32);
    let why = format!("declares outputs [i32{}] but its inputs give [f32{}]", declared(&shape), declared(&shape));
    rejected_everywhere(&valid, &retyped, &format!("node '{name}' (UnaryGrad): {why}"));
    std::fs::remove_dir_all(&dir).unwrap();
}
