//! `lms verify` against tampered rewritten files: a node whose declared outputs its op's
//! shape rule no longer gives (a Constant without its value, a Concat given another axis)
//! is refused as the file is read (exit 2, naming the node), before anything is proven,
//! even where the terms would not see the change.

use lms_proto::lms as pb;
use lms_proto::Message;
use lms_tests::{fixture, lms, scratch_path};
use std::process::Output;

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

/// The tiny GPT (batch 2) compiled as is and with TFLMS into `name`'s scratch files, then
/// `lms verify` of the original against the rewritten file after `tamper`.
fn verify_tampered(name: &str, tamper: impl FnOnce(&mut pb::Graph)) -> Output {
    let original = scratch_path("verify-tampered", &format!("{name}-original.lms"));
    let rewritten = scratch_path("verify-tampered", &format!("{name}-rewritten.lms"));
    let model = fixture("models/tiny_gpt.onnx");
    for (out, flags) in [(&original, &[][..]), (&rewritten, &["--strategy", "tflms"][..])] {
        let mut args = vec!["compile", s(&model), "--batch", "2", "-o", s(out)];
        args.extend(flags);
        let run = lms(&args);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    }
    let ok = lms(&["verify", s(&original), s(&rewritten)]);
    assert!(ok.status.success(), "untampered: {}", String::from_utf8_lossy(&ok.stderr));
    let mut graph = pb::Graph::decode(&*std::fs::read(&rewritten).unwrap()).unwrap();
    tamper(&mut graph);
    let tampered = scratch_path("verify-tampered", &format!("{name}-tampered.lms"));
    std::fs::write(&tampered, graph.encode_to_vec()).unwrap();
    lms(&["verify", s(&original), s(&tampered)])
}

fn node<'a>(g: &'a mut pb::Graph, name: &str) -> &'a mut pb::Node {
    let at = find(g, name);
    &mut g.nodes[at]
}

/// Asserts `out` failed as bad input (exit 2) with one stderr line holding `needle`.
fn refused(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
}

#[test]
fn a_constant_without_its_value_is_refused_and_named() {
    let out = verify_tampered("valueless", |g| node(g, "attn.scale").attributes.clear());
    refused(&out, "-tampered.lms: node 'attn.scale' (Constant): ");
}

#[test]
fn a_dead_constant_without_a_value_is_refused() {
    // A Constant nothing reads never reaches the terms; the contract's check of each
    // node's outputs refuses it all the same.
    let out = verify_tampered("dead-constant", |g| {
        let (node, tensor) = (g.nodes.len() as u32, g.tensors.len() as u32);
        let mut constant = node_copy(g, "attn.scale");
        constant.name = "dead".into();
        constant.attributes.clear();
        constant.outputs = vec![tensor];
        let mut output = g.tensors[g.nodes[find(g, "attn.scale")].outputs[0] as usize].clone();
        output.name = "dead".into();
        output.data.clear();
        output.producer = node;
        g.nodes.push(constant);
        g.tensors.push(output);
        g.schedule.insert(0, node);
    });
    refused(&out, "-tampered.lms: node 'dead' (Constant): ");
}

#[test]
fn a_changed_concat_axis_is_refused() {
    let out = verify_tampered("concat", |g| {
        let axis = node(g, "attn.merged_shape").attributes.iter_mut().find(|a| a.name == "axis").expect("an axis");
        axis.value = Some(pb::attribute::Value::Int(1));
    });
    // The shape's value is known to the e-graph, so only the node's own check sees it.
    refused(&out, "-tampered.lms: node 'attn.merged_shape' (Concat): axis 1 is out");
}

fn find(g: &pb::Graph, name: &str) -> usize {
    g.nodes.iter().position(|n| n.name == name).unwrap_or_else(|| panic!("no node '{name}'"))
}

fn node_copy(g: &pb::Graph, name: &str) -> pb::Node {
    g.nodes[find(g, name)].clone()
}
