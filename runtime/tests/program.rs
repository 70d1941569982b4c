//! Invalid programs are errors that name the file and the node or tensor, never panics.

mod common;

use common::{training_graph, Builder};
use lms_proto::contract::{placement, Pool};
use lms_proto::lms::{slot, Action, DType, Device, Edge, Slot};
use lms_proto::lms::{Plan, RecomputeDecision, SwapDecision, SwapInDecision};
use lms_runtime::Program;

fn error(b: &Builder) -> String {
    let err = Program::new(b.graph.clone(), "bad.lms").unwrap_err();
    let text = err.to_string();
    assert!(!text.contains('\n'), "one line: {text}");
    text
}

#[test]
fn a_valid_graph_runs_its_schedule_as_written() {
    let mut b = training_graph(true);
    // x before W: another valid order, kept as it is.
    b.graph.schedule.swap(0, 1);
    let program = Program::new(b.graph, "ok.lms").unwrap();
    let mut expected: Vec<usize> = (0..14).collect();
    expected.swap(0, 1);
    assert_eq!(program.order(), expected);
    assert_eq!(program.outputs(), &[8]);
    assert_eq!(program.updates().len(), 1);
}

#[test]
fn wrong_format_version() {
    let mut b = training_graph(false);
    b.graph.format_version = 99;
    assert_eq!(error(&b), "bad.lms: format version 99 is not supported (this lms reads version 1)");
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
fn cycles_cannot_be_scheduled() {
    let mut b = training_graph(false);
    let (y, loss) = (b.graph.nodes[5].outputs[0], b.graph.nodes[8].outputs[0]);
    b.control(loss, y);
    assert_eq!(error(&b), "bad.lms: schedule runs node 'y' (MatMul) before node 'loss' (MatMul), which it depends on");
}

#[test]
fn a_schedule_is_required() {
    let mut b = training_graph(false);
    b.graph.schedule.clear();
    assert_eq!(error(&b), "bad.lms: schedule has 0 entries for 12 nodes");
}

#[test]
fn unknown_enum_values_are_errors() {
    let mut b = training_graph(false);
    b.graph.tensors[6].dtype = 99;
    assert_eq!(error(&b), "bad.lms: tensor 'r': unknown dtype 99");

    let mut b = training_graph(false);
    b.graph.nodes[6].phase = 7;
    assert_eq!(error(&b), "bad.lms: node 'r' (Relu): unknown phase 7");

    let mut b = training_graph(false);
    b.graph.nodes[6].device = 3;
    assert_eq!(error(&b), "bad.lms: node 'r' (Relu): unknown device 3");

    let mut b = training_graph(false);
    let i = b.graph.edges.iter().position(|e| e.consumer == 6).unwrap();
    b.graph.edges[i].action = 5;
    assert_eq!(error(&b), "bad.lms: edge 2 (node 'y' (MatMul) → node 'r' (Relu)): unknown action 5");
}

#[test]
fn huge_shapes_are_rejected_before_any_arithmetic_overflows() {
    let mut b = training_graph(false);
    b.graph.tensors[6].shape = vec![1 << 62, 8];
    assert_eq!(error(&b), "bad.lms: tensor 'r': shape [4611686018427387904, 8] of f32 takes more than 2^48 bytes");

    let mut b = training_graph(false);
    b.graph.nodes[6].attributes.push(lms_proto::lms::Attribute {
        name: "value".into(),
        value: Some(lms_proto::lms::attribute::Value::Tensor(lms_proto::lms::TensorValue {
            dtype: 1,
            shape: vec![3],
            data: vec![0; 8],
        })),
    });
    assert_eq!(error(&b), "bad.lms: node 'r' (Relu): attribute 'value': data holds 8 bytes, f32 [3] takes 12");
}

#[test]
fn names_with_line_breaks_stay_on_one_line() {
    let mut b = training_graph(false);
    b.graph.tensors[6].name = "r\nsecond line".into();
    b.graph.tensors[6].bytes = 1;
    assert_eq!(error(&b), "bad.lms: tensor 'r\\nsecond line': 1 bytes declared, but f32 [2, 4] takes 32");
}

/// The swap of `r` in `training_graph(true)`: swap-out node 9, swap-in node 10 triggered
/// by `rs` (node 7) through a control edge.
fn swap_plan(b: &mut Builder) -> Plan {
    let (rs, r2) = (b.graph.nodes[7].outputs[0], b.graph.nodes[10].outputs[0]);
    b.control(rs, r2);
    let swap_in = SwapInDecision { node: 10, trigger: Some(7) };
    Plan {
        strategy: "tflms".into(),
        swaps: vec![SwapDecision { tensor: 6, swap_out: 9, swap_ins: vec![swap_in] }],
        ..Plan::default()
    }
}

#[test]
fn plans_name_what_they_say() {
    let mut b = training_graph(true);
    b.graph.plan = Some(swap_plan(&mut b));
    Program::new(b.graph.clone(), "ok.lms").unwrap();

    let mut bad = b.clone();
    bad.graph.plan.as_mut().unwrap().strategy = "magic".into();
    assert_eq!(error(&bad), "bad.lms: plan: unknown strategy 'magic'");

    let mut carried = b.clone();
    carried.graph.plan.as_mut().unwrap().device_profile_json = "{}".repeat(4 << 20);
    Program::new(carried.graph.clone(), "ok.lms").unwrap();
    carried.graph.plan.as_mut().unwrap().device_profile_json.push(' ');
    assert_eq!(
        error(&carried),
        "bad.lms: plan: the device profile it carries is 8388609 bytes, over the 8388608 a profile may have"
    );

    let mut bad = b.clone();
    bad.graph.plan.as_mut().unwrap().swaps[0].tensor = 99;
    assert_eq!(error(&bad), "bad.lms: plan: swap 0 names tensor id 99, but the graph has 14 tensors");

    let mut bad = b.clone();
    bad.graph.plan.as_mut().unwrap().swaps[0].swap_out = 8;
    assert_eq!(error(&bad), "bad.lms: plan: the swap-out of tensor 'r' is node 'loss' (MatMul), not a SwapOut of it");

    let mut bad = b.clone();
    bad.graph.plan.as_mut().unwrap().swaps[0].swap_ins[0].node = 40;
    assert_eq!(error(&bad), "bad.lms: plan: a swap-in of tensor 'r' names node id 40, but the graph has 14 nodes");

    let mut bad = b.clone();
    bad.graph.plan.as_mut().unwrap().swaps[0].swap_ins[0].trigger = Some(5);
    assert_eq!(
        error(&bad),
        "bad.lms: plan: node 'y' (MatMul) triggers node 'r2' (SwapIn), but no control edge orders them"
    );
}

/// `training_graph(false)` with `r` recomputed: the clone `r_again` (node 12) re-made from
/// `y` after the loss, and the gradient `g` (node 9) reading it.
fn recompute_plan() -> Builder {
    let mut b = training_graph(false);
    let y = b.graph.nodes[5].outputs[0];
    let again = b.op("r_again", "Relu", &[y], &[2, 4], vec![]);
    let r = b.graph.nodes[6].outputs[0];
    b.graph.nodes[9].inputs[1] = Slot { value: Some(slot::Value::Tensor(again)) };
    let edge = b.graph.edges.iter().position(|e| e.consumer == 9 && e.tensor == Some(r)).unwrap();
    b.graph.edges[edge].producer = 12;
    b.graph.edges[edge].tensor = Some(again);
    // The clone runs right after the loss, before the gradient.
    let order = &mut b.graph.schedule;
    order.retain(|&n| n != 12);
    order.insert(order.iter().position(|&n| n == 9).unwrap(), 12);
    b.graph.plan = Some(Plan {
        strategy: "auto".into(),
        recomputes: vec![RecomputeDecision { tensor: r, chain: vec![12], before: 9 }],
        ..Plan::default()
    });
    b
}

#[test]
fn recompute_decisions_name_what_they_say() {
    let b = recompute_plan();
    Program::new(b.graph.clone(), "ok.lms").unwrap();
    let edit = |f: &dyn Fn(&mut RecomputeDecision)| {
        let mut bad = b.clone();
        f(&mut bad.graph.plan.as_mut().unwrap().recomputes[0]);
        error(&bad)
    };
    assert_eq!(edit(&|r| r.tensor = 99), "bad.lms: plan: recompute 0 names tensor id 99, but the graph has 13 tensors");
    assert_eq!(edit(&|r| r.chain.clear()), "bad.lms: plan: the recompute of tensor 'r' has an empty chain");
    assert_eq!(
        edit(&|r| r.chain = vec![0, 12]),
        "bad.lms: plan: the recompute chain of tensor 'r' holds node 'W' (Variable), not a kernel run before node 'g' (Gemm)"
    );
    assert_eq!(
        edit(&|r| r.before = 10),
        "bad.lms: plan: node 's' (Mul) does not read a copy of tensor 'r' made by node 'r_again' (Relu)"
    );
    assert_eq!(
        edit(&|r| r.before = 40),
        "bad.lms: plan: the reader of the recomputed tensor 'r' names node id 40, but the graph has 13 nodes"
    );
}

#[test]
fn recorded_arena_sizes_must_match_the_static_placement() {
    let mut b = training_graph(true);
    b.graph.plan = Some(swap_plan(&mut b));
    let program = Program::new(b.graph.clone(), "ok.lms").unwrap();
    let (device, host) = (placement::of_program(&program, Pool::Device), placement::of_program(&program, Pool::Host));
    assert!(device.arena_bytes > 0 && host.arena_bytes > 0, "the swap puts a tensor in host memory");
    for t in 0..program.tensor_count() {
        let pool = if program.pool(t) == Pool::Device { &device } else { &host };
        assert!(pool.offsets[t].is_some(), "every tensor has an offset in its own pool");
    }
    let plan = b.graph.plan.as_mut().unwrap();
    (plan.arena_device_bytes, plan.arena_host_bytes) = (Some(device.arena_bytes), Some(host.arena_bytes));
    Program::new(b.graph.clone(), "ok.lms").unwrap();

    let mut bad = b.clone();
    bad.graph.plan.as_mut().unwrap().arena_device_bytes = Some(device.arena_bytes + 256);
    assert_eq!(
        error(&bad),
        format!(
            "bad.lms: plan: the device arena is recorded as {} bytes, but this program's static placement needs {}",
            device.arena_bytes + 256,
            device.arena_bytes
        )
    );
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

/// A node whose declared outputs are not what its op's shape rule gives is refused at load,
/// so no kernel sees them: an activation transposed (the same bytes, another shape) or
/// retyped (another dtype of the same size), an attribute that no longer fits.
#[test]
fn onnx_nodes_declare_the_output_types_of_their_shape_rule() {
    let r = |b: &Builder| b.graph.tensors.iter().position(|t| t.name == "r").unwrap();
    let mut b = training_graph(false);
    let t = r(&b);
    b.graph.tensors[t].shape = vec![4, 2];
    assert_eq!(error(&b), "bad.lms: node 'r' (Relu): declares outputs [f32[4,2]] but its inputs give [f32[2,4]]");

    let mut b = training_graph(false);
    let t = r(&b);
    b.graph.tensors[t].dtype = DType::DtypeI32 as i32;
    assert_eq!(error(&b), "bad.lms: node 'r' (Relu): declares outputs [i32[2,4]] but its inputs give [f32[2,4]]");

    let mut b = training_graph(false);
    let g = b.graph.nodes.iter().position(|n| n.name == "g").unwrap();
    b.graph.nodes[g].attributes.clear();
    assert_eq!(error(&b), "bad.lms: node 'g' (Gemm): inner dimensions differ: [2,4] x [2,4]");

    let mut b = training_graph(false);
    b.graph.nodes[6].name = "r\nx".into();
    let t = r(&b);
    b.graph.tensors[t].shape = vec![8];
    assert!(error(&b).starts_with("bad.lms: node 'r\\nx' (Relu): declares outputs [f32[8]]"), "{}", error(&b));
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
