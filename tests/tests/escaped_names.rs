//! Names from input files never reach the terminal raw: a node, tensor or op-type name
//! holding a newline and an ESC sequence gives exactly one error line on stderr, with the
//! control characters written as escapes — from the ONNX frontend, from the `.lms`
//! contract, and from the runtime's out-of-memory report.

use lms_proto::lms as pb;
use lms_proto::onnx::ModelProto;
use lms_proto::Message;
use lms_tests::{fixture, lms, scratch_path};
use std::process::Output;

/// A name that would split the error line and clear the user's terminal.
const EVIL: &str = "evil\n\x1b[2J\x1b]0;owned\x07";

/// The name as the error line shows it.
const SHOWN: &str = "evil\\n\\x1b[2J\\x1b]0;owned\\x07";

/// Asserts `out` failed with `code` and exactly one stderr line, holding no control
/// character and showing `needle`.
fn one_clean_line(out: &Output, code: i32, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(stderr.ends_with('\n'), "{stderr:?}");
    let line = &stderr[..stderr.len() - 1];
    assert!(line.starts_with("lms: error: "), "{stderr:?}");
    assert!(!line.chars().any(char::is_control), "a control character in {line:?}");
    assert!(line.contains(needle), "{needle:?} not in {line:?}");
}

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn an_onnx_node_and_op_type_with_control_characters_give_one_escaped_line() {
    let mut model = ModelProto::decode(&*std::fs::read(fixture("models/mlp.onnx")).unwrap()).unwrap();
    let graph = model.graph.as_mut().unwrap();
    let node = &mut graph.node[0];
    node.name = EVIL.into();
    node.op_type = format!("Cos{EVIL}");
    let path = scratch_path("escaped-names", "evil.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let out = lms(&["inspect", s(&path), "--batch", "1"]);
    one_clean_line(&out, 2, &format!("node '{SHOWN}' (Cos{SHOWN})"));
}

#[test]
fn an_lms_node_with_control_characters_gives_one_escaped_line() {
    let graph_path = scratch_path("escaped-names", "mlp.lms");
    let out = lms(&["compile", s(&fixture("models/mlp.onnx")), "--batch", "2", "-o", s(&graph_path)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let graph = pb::Graph::decode(&*std::fs::read(&graph_path).unwrap()).unwrap();
    // The contract refuses a node of unknown phase, naming it; the runtime a node whose
    // op has no kernel.
    let mut unknown_phase = graph.clone();
    unknown_phase.nodes[0].name = EVIL.into();
    unknown_phase.nodes[0].phase = 99;
    let mut unknown_op = graph;
    let node = unknown_op.nodes.iter_mut().find(|n| !n.domain.is_empty()).expect("an lms-domain node");
    node.name = EVIL.into();
    node.op = format!("NoSuchOp{EVIL}");
    for (name, graph, command, needle) in [
        ("phase.lms", unknown_phase, "simulate", format!("node '{SHOWN}' (")),
        ("op.lms", unknown_op, "run", format!("node '{SHOWN}': no CPU kernel for op `NoSuchOp{SHOWN}`")),
    ] {
        let evil = scratch_path("escaped-names", name);
        std::fs::write(&evil, graph.encode_to_vec()).unwrap();
        one_clean_line(&lms(&[command, s(&evil)]), 2, &needle);
    }
}

#[test]
fn an_out_of_memory_report_names_tensors_escaped_on_one_line() {
    let graph_path = scratch_path("escaped-names", "oom.lms");
    let out = lms(&["compile", s(&fixture("models/mlp.onnx")), "--batch", "2", "-o", s(&graph_path)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut graph = pb::Graph::decode(&*std::fs::read(&graph_path).unwrap()).unwrap();
    for (i, node) in graph.nodes.iter_mut().enumerate() {
        node.name = format!("{EVIL}{i}");
    }
    for (i, tensor) in graph.tensors.iter_mut().enumerate() {
        tensor.name = format!("{EVIL}t{i}");
    }
    let evil = scratch_path("escaped-names", "evil-oom.lms");
    std::fs::write(&evil, graph.encode_to_vec()).unwrap();
    let out = lms(&["run", s(&evil), "--steps", "1", "--device-memory", "1KiB"]);
    one_clean_line(&out, 3, &format!("out of device memory at node '{SHOWN}"));
}
