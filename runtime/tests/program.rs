//! Invalid programs are errors that name the file and the node or tensor, never panics.

mod common;

use common::{training_graph, Builder};
use lms_proto::lms::{slot, Action, Device, Edge, Slot};
use lms_runtime::{Program, RuntimeError};

fn error(b: &Builder) -> String {
    let err = Program::new(b.graph.clone(), "bad.lms").unwrap_err();
    assert!(matches!(err, RuntimeError::Invalid { .. }), "{err:?}");
    err.to_string()
}

#[test]
fn a_valid_graph_gets_a_topological_order() {
    let program = Program::new(training_graph(true).graph, "ok.lms").unwrap();
    assert_eq!(program.order(), (0..14).collect::<Vec<_>>());
    assert_eq!(program.outputs(), &[8]);
    assert_eq!(program.updates().len(), 1);
}

#[test]
fn wrong_format_version() {
    let mut b = training_graph(false);
    b.graph.format_version = 99;
    assert_eq!(error(&b), "bad.lms: format version 99 is not supported (this runtime reads version 1)");
}

#[test]
fn bad_ids() {
    let mut b = training_graph(false);
    b.graph.nodes[5].inputs[1] = Slot { value: Some(slot::Value::Tensor(400)) };
    assert_eq!(error(&b), "bad.lms: node 'y' (MatMul): input 1 names tensor id 400, but the graph has 12 tensors");

    let mut b = training_graph(false);
    b.graph.tensors[3].producer = 77;
    assert_eq!(error(&b), "bad.lms: tensor 'ones_row': producer is node id 77, but the graph has 12 nodes");

    let mut b = training_graph(false);
    b.graph.outputs.push(12);
    assert_eq!(error(&b), "bad.lms: graph output names tensor id 12, but the graph has 12 tensors");

    let mut b = training_graph(false);
    b.graph.edges.push(Edge { producer: 0, consumer: 50, action: Action::Control as i32, ..Edge::default() });
    assert_eq!(error(&b), "bad.lms: edge 15 connects node ids 0 → 50, but the graph has 12 nodes");

    let mut b = training_graph(false);
    b.graph.nodes[6].inputs[0] = Slot { value: None };
    assert_eq!(error(&b), "bad.lms: node 'r' (Relu): input slot 0 is empty (neither a tensor nor missing)");
}

#[test]
fn wrong_byte_counts() {
    let mut b = training_graph(false);
    b.graph.tensors[0].bytes = 60;
    assert_eq!(error(&b), "bad.lms: tensor 'W': 60 bytes declared, but f32 [4, 4] takes 64");

    let mut b = training_graph(false);
    b.graph.tensors[0].data.pop();
    assert_eq!(error(&b), "bad.lms: tensor 'W': data holds 63 bytes, the type takes 64");

    let mut b = training_graph(false);
    b.graph.tensors[0].dtype = 0;
    assert_eq!(error(&b), "bad.lms: tensor 'W': dtype is undefined");

    let mut b = training_graph(false);
    b.graph.tensors[0].shape = vec![u64::MAX, 4];
    b.graph.tensors[0].data.clear();
    assert!(error(&b).starts_with("bad.lms: tensor 'W': "));
}

#[test]
fn schedules_must_respect_edges() {
    let mut b = training_graph(false);
    b.graph.schedule = vec![0, 1, 2, 3, 4, 6, 5, 7, 8, 9, 10, 11];
    assert_eq!(error(&b), "bad.lms: schedule runs node 'r' (Relu) before node 'y' (MatMul), which it depends on");

    // The control edge loss → Wn is respected too.
    let mut b = training_graph(false);
    b.graph.schedule = vec![0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 7, 8];
    assert_eq!(error(&b), "bad.lms: schedule runs node 'Wn' (Sub) before node 'loss' (MatMul), which it depends on");

    let mut b = training_graph(false);
    b.graph.schedule = vec![0, 1, 2];
    assert_eq!(error(&b), "bad.lms: schedule has 3 entries for 12 nodes");

    let mut b = training_graph(false);
    b.graph.schedule = vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10];
    assert_eq!(error(&b), "bad.lms: schedule names node 's' (Mul) twice");
}

#[test]
fn cycles_are_errors() {
    let mut b = training_graph(false);
    let (y, loss) = (b.graph.nodes[5].outputs[0], b.graph.nodes[8].outputs[0]);
    b.control(loss, y);
    assert_eq!(error(&b), "bad.lms: the graph has a cycle through node 'y' (MatMul)");
}

#[test]
fn edges_must_match_slots() {
    let mut b = training_graph(false);
    let i = b.graph.edges.iter().position(|e| e.consumer == 6).unwrap();
    b.graph.edges.remove(i);
    assert_eq!(error(&b), "bad.lms: node 'r' (Relu): read edges do not match its input slots");

    let mut b = training_graph(false);
    let i = b.graph.edges.iter().position(|e| e.consumer == 6).unwrap();
    b.graph.edges[i].tensor = Some(0);
    assert_eq!(
        error(&b),
        "bad.lms: edge 2 carries tensor 'W' from node 'y' (MatMul) output 0, which does not produce it"
    );
}

#[test]
fn updates_must_write_variables_last() {
    let mut b = training_graph(false);
    let (r, x) = (b.graph.nodes[6].outputs[0], b.graph.inputs[0]);
    b.update(r, x);
    assert_eq!(error(&b), "bad.lms: update edge 15 writes node 'x' (Input), which is not a variable");

    let mut b = training_graph(false);
    let (y, w) = (b.graph.nodes[5].outputs[0], b.graph.nodes[0].outputs[0]);
    b.update(y, w);
    assert_eq!(error(&b), "bad.lms: update edge 15: tensor 'y' does not have the type of variable node 'W' (Variable)");

    // A reader of W scheduled after the update that writes W.
    let mut b = training_graph(false);
    let (w, wn) = (b.graph.nodes[0].outputs[0], b.graph.nodes[11].outputs[0]);
    let late = b.op("late", "Relu", &[w], &[4, 4], vec![]);
    b.control(wn, late);
    assert_eq!(
        error(&b),
        "bad.lms: node 'late' (Relu) reads variable node 'W' (Variable) after node 'Wn' (Sub) updates it"
    );
}

#[test]
fn pools_and_devices_must_agree() {
    let mut b = training_graph(false);
    b.graph.nodes[6].device = Device::Cpu as i32;
    assert_eq!(error(&b), "bad.lms: node 'r' (Relu): only SwapOut and SwapIn run on the CPU device");

    let mut b = training_graph(false);
    let r = b.graph.nodes[6].outputs[0];
    b.op("back", "SwapIn", &[r], &[2, 4], vec![]);
    assert_eq!(
        error(&b),
        "bad.lms: node 'back' (SwapIn) reads tensor 'r' from host memory, but it lives in device memory"
    );

    let mut b = training_graph(true);
    let rh = b.graph.nodes[9].outputs[0];
    b.op("use_host", "Relu", &[rh], &[2, 4], vec![]);
    assert_eq!(
        error(&b),
        "bad.lms: node 'use_host' (Relu) reads tensor 'rh' from device memory, but it lives in host memory"
    );
}

#[test]
fn onnx_ops_need_an_opset_and_known_domains() {
    let mut b = training_graph(false);
    b.graph.opset = 0;
    assert_eq!(error(&b), "bad.lms: node 'y' (MatMul) is an ONNX op, but the graph's opset is 0");

    let mut b = training_graph(false);
    b.graph.nodes[6].domain = "com.example".into();
    assert_eq!(error(&b), "bad.lms: node 'r' (Relu): unknown domain 'com.example'");
}

#[test]
fn corrupted_files_never_panic() {
    use lms_proto::Message;
    use lms_runtime::{CpuBackend, RunOptions, Session};
    let bytes = training_graph(true).graph.encode_to_vec();
    let mut loaded = 0;
    for i in 0..bytes.len() {
        for v in [0u8, 1, 2, 0x7f, 0xff] {
            let mut b = bytes.clone();
            b[i] = v;
            let Ok(program) = Program::decode(&b, "fuzz.lms") else {
                continue;
            };
            loaded += 1;
            let options = RunOptions { device_memory: 1 << 20, host_memory: 1 << 20, seed: 0 };
            if let Ok(mut s) = Session::new(program, CpuBackend::new(), options) {
                let _ = s.step();
            }
        }
    }
    assert!(loaded > 0);
}
