//! Decoding within bounds, measured by a counting allocator: a file of empty messages is
//! refused before anything is allocated for them, what prost holds while decoding never
//! exceeds what the wire walk counted, and what a file may take decoded is at most its
//! format's expansion times its size plus 1 MiB. Every real model still decodes.

use lms_compiler::frontend::{self, FrontendOptions};
use lms_proto::bounded::{self, Bounded, DecodeError, LMS_EXPANSION, ONNX_EXPANSION, SLACK_BYTES};
use lms_proto::contract::Program;
use lms_proto::lms::{attribute, Attribute, Graph, Node, Slot, Strings, Tensor, TensorValue};
use lms_proto::onnx::{
    tensor_shape_proto::{dimension, Dimension},
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use lms_proto::Message;
use lms_tests::fuzz::alloc::{self, CountingAlloc};
use std::path::PathBuf;
use std::sync::Mutex;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// The allocator's counters are per process: one test at a time.
static MEASURING: Mutex<()> = Mutex::new(());

/// A scratch folder of this test process.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lms-decode-bounds-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// 20 MB of one empty message, repeated in field `field` of the top-level message.
fn empty_messages(field: u8) -> Vec<u8> {
    [field << 3 | 2, 0].repeat(10_000_000)
}

#[test]
fn files_of_empty_messages_are_refused_before_they_are_allocated() {
    let _one = MEASURING.lock().unwrap();
    let dir = scratch("empty");
    // 10 million empty tensors (field 3 of lms.Graph).
    let lms = dir.join("tensors.lms");
    std::fs::write(&lms, empty_messages(3)).unwrap();
    let (result, held) = alloc::held(|| Program::load(&lms));
    let message = result.unwrap_err().to_string();
    assert!(message.contains("would take more than") && message.contains("lms.Graph"), "{message}");
    assert!(held <= 21_000_000, "held {held} bytes for a 20 MB file");
    // An ONNX graph of 10 million empty nodes: field 7 of the model holds the graph.
    let nodes = empty_messages(1);
    let mut model = vec![7 << 3 | 2];
    prost::encoding::encode_varint(nodes.len() as u64, &mut model);
    model.extend_from_slice(&nodes);
    let onnx = dir.join("nodes.onnx");
    std::fs::write(&onnx, &model).unwrap();
    let (result, held) = alloc::held(|| frontend::load(&onnx, &FrontendOptions::default()));
    let message = result.unwrap_err().to_string();
    assert!(message.contains("would take more than") && message.contains("onnx.GraphProto"), "{message}");
    assert!(held <= 21_000_000, "held {held} bytes for a 20 MB file");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Decodes `bytes` as `M` with prost alone and through the bound; checks that prost held at
/// most what the walk counted, and that the bounded decode either refused or held at most
/// `expansion` times the size plus [`SLACK_BYTES`]. Returns whether it was refused.
fn check<M: Bounded>(label: &str, bytes: &[u8], expansion: u64) -> bool {
    let counted = bounded::decoded_bytes(bytes, M::layout(), u64::MAX).unwrap();
    let (decoded, held) = alloc::held(|| M::decode(bytes));
    decoded.unwrap_or_else(|e| panic!("{label}: {e}"));
    assert!(held as u64 <= counted, "{label}: prost held {held} bytes, the walk counted {counted}");
    let (decoded, held) = alloc::held(|| bounded::decode::<M>(bytes, expansion));
    let limit = expansion * bytes.len() as u64 + SLACK_BYTES;
    assert!(held as u64 <= limit, "{label}: held {held} bytes, over {limit}");
    match decoded {
        Ok(_) => false,
        Err(DecodeError::TooLarge { .. }) => true,
        Err(e) => panic!("{label}: {e}"),
    }
}

/// A string field that comes again, longer each time: prost regrows one buffer.
fn growing_names(times: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    for i in 0..times {
        let name = "n".repeat(8 << (i % 18));
        Graph { name, ..Default::default() }.encode(&mut bytes).unwrap();
    }
    bytes
}

#[test]
fn prost_holds_at_most_what_the_walk_counts() {
    let _one = MEASURING.lock().unwrap();
    let n = 200_000;
    let lms_cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty tensors", Graph { tensors: vec![Tensor::default(); n], ..Default::default() }.encode_to_vec()),
        (
            "tensors with short names",
            Graph {
                tensors: (0..n).map(|i| Tensor { name: format!("t{i}"), dtype: 1, ..Default::default() }).collect(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "nodes of empty slots",
            Graph {
                nodes: vec![
                    Node { inputs: vec![Slot::default(); 64], outputs: vec![0; 64], ..Default::default() };
                    n / 64
                ],
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "a packed shape",
            Graph { tensors: vec![Tensor { shape: vec![0; n], ..Default::default() }], ..Default::default() }
                .encode_to_vec(),
        ),
        (
            "attributes of empty strings and data",
            Graph {
                nodes: vec![
                    Node {
                        attributes: vec![
                            Attribute {
                                value: Some(attribute::Value::Strings(Strings { values: vec![String::new(); n] })),
                                ..Default::default()
                            },
                            Attribute {
                                value: Some(attribute::Value::Tensor(TensorValue {
                                    data: vec![7; n],
                                    ..Default::default()
                                })),
                                ..Default::default()
                            },
                        ],
                        ..Default::default()
                    };
                    2
                ],
                schedule: vec![1; n],
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        ("a name that grows", growing_names(40)),
        (
            "tensor data",
            Graph { tensors: vec![Tensor { data: vec![1; 1 << 20], ..Default::default() }; 4], ..Default::default() }
                .encode_to_vec(),
        ),
    ];
    let mut refused = 0;
    for (label, bytes) in &lms_cases {
        refused += usize::from(check::<Graph>(label, bytes, LMS_EXPANSION));
    }
    assert!(refused > 0 && refused < lms_cases.len(), "{refused} of {} .lms cases refused", lms_cases.len());

    let dim = |v| Dimension { value: Some(dimension::Value::DimValue(v)), ..Default::default() };
    let annotated = ValueInfoProto {
        name: "x".into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: 1,
                shape: Some(TensorShapeProto { dim: vec![dim(1), dim(2), dim(3), dim(4)] }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    let attribute = AttributeProto {
        name: "a".into(),
        i: 1,
        t: Some(Box::new(TensorProto { int64_data: vec![0; 4], ..Default::default() })),
        g: Some(Box::new(GraphProto { node: vec![NodeProto::default(); 2], ..Default::default() })),
        strings: vec![Vec::new(); 4],
        ..Default::default()
    };
    let graph = |g: GraphProto| ModelProto { graph: Some(g), ..Default::default() }.encode_to_vec();
    let onnx_cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty nodes", graph(GraphProto { node: vec![NodeProto::default(); n], ..Default::default() })),
        (
            "nodes of one attribute",
            graph(GraphProto {
                node: vec![NodeProto { attribute: vec![AttributeProto::default()], ..Default::default() }; n / 4],
                ..Default::default()
            }),
        ),
        (
            "attributes holding everything",
            graph(GraphProto {
                node: vec![NodeProto { attribute: vec![attribute; 8], ..Default::default() }; n / 64],
                ..Default::default()
            }),
        ),
        ("shape annotations", graph(GraphProto { value_info: vec![annotated; n / 8], ..Default::default() })),
        (
            "raw and typed data",
            graph(GraphProto {
                initializer: vec![
                    TensorProto {
                        raw_data: vec![1; 1 << 20],
                        float_data: vec![0.0; n],
                        int64_data: vec![0; n],
                        ..Default::default()
                    };
                    2
                ],
                ..Default::default()
            }),
        ),
    ];
    let mut refused = 0;
    for (label, bytes) in &onnx_cases {
        refused += usize::from(check::<ModelProto>(label, bytes, ONNX_EXPANSION));
    }
    assert!(refused > 0 && refused < onnx_cases.len(), "{refused} of {} ONNX cases refused", onnx_cases.len());
}

/// What real files take decoded, per byte, as the walk counts it: every fixture model large
/// enough for the expansion to matter (over 64 KiB) is well inside its format's bound, as
/// is its training graph, with and without its weights' data.
#[test]
fn real_models_are_well_inside_the_bounds() {
    let _one = MEASURING.lock().unwrap();
    let ratio =
        |bytes: &[u8], layout| bounded::decoded_bytes(bytes, layout, u64::MAX).unwrap() as f64 / bytes.len() as f64;
    let onnx = |p: &std::path::Path| p.extension().is_some_and(|e| e == "onnx");
    let mut models = lms_tests::list(&lms_tests::fixture("models"), onnx);
    models.extend(lms_tests::list(&lms_tests::onnx_data("light"), onnx));
    let (mut onnx_worst, mut lms_worst) = (0.0f64, 0.0f64);
    for path in &models {
        let bytes = std::fs::read(path).unwrap();
        if bytes.len() > 64 << 10 {
            onnx_worst = onnx_worst.max(ratio(&bytes, ModelProto::layout()));
        }
        let model = frontend::load(path, &FrontendOptions { batch: Some(2), ..Default::default() })
            .unwrap_or_else(|e| panic!("{e}"));
        let graph = lms_compiler::train::build(&model.graph, &Default::default()).unwrap_or_else(|e| panic!("{e}"));
        let mut program = lms_compiler::emit::serialize::to_proto(&graph, &[]).unwrap_or_else(|e| panic!("{e}"));
        let bytes = program.encode_to_vec();
        Program::decode(&bytes, "m.lms").unwrap_or_else(|e| panic!("{e}"));
        lms_worst = lms_worst.max(ratio(&bytes, Graph::layout()));
        program.tensors.iter_mut().for_each(|t| t.data.clear());
        let bytes = program.encode_to_vec();
        if bytes.len() > 64 << 10 {
            lms_worst = lms_worst.max(ratio(&bytes, Graph::layout()));
        }
    }
    eprintln!("worst counted per byte: ONNX {onnx_worst:.1}, .lms {lms_worst:.1}");
    assert!(onnx_worst > 10.0 && onnx_worst * 1.5 < ONNX_EXPANSION as f64, "ONNX: {onnx_worst:.1}");
    assert!(lms_worst > 5.0 && lms_worst * 1.5 < LMS_EXPANSION as f64, ".lms: {lms_worst:.1}");
}
