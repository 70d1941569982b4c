//! The axes map against the CPU kernels: wherever an op's map says it is independent
//! along an output axis, the op run on two parts of its inputs (sliced where the map
//! slices them, the other inputs whole) and concatenated equals the op run whole (each
//! output; a loss's parts told the whole op's count, as the split pass tells them). One
//! case or more per kind of map (every family the split pass and the e-graph take their
//! legality from).

use lms_proto::lms::attribute::Value as AttrValue;
use lms_proto::lms::DType;
use lms_proto::lms::{Attribute, Ints};
use lms_proto::ops::axes::{self, OutputAxis};
use lms_proto::ops::{registry, split};
use lms_proto::types::Attr;
use lms_runtime::attrs::Attrs;
use lms_runtime::cpu::kernels;
use lms_runtime::{HostTensor, KernelContext};

fn int(name: &str, v: i64) -> Attribute {
    Attribute { name: name.into(), value: Some(AttrValue::Int(v)) }
}

fn ints(name: &str, v: &[i64]) -> Attribute {
    Attribute { name: name.into(), value: Some(AttrValue::Ints(Ints { values: v.to_vec() })) }
}

fn string(name: &str, v: &str) -> Attribute {
    Attribute { name: name.into(), value: Some(AttrValue::String(v.into())) }
}

fn float(name: &str, v: f32) -> Attribute {
    Attribute { name: name.into(), value: Some(AttrValue::Float(v)) }
}

/// Deterministic values in [-1, 1) (bools alternate in runs of 3).
fn tensor(dtype: DType, shape: &[usize], seed: u64) -> HostTensor {
    let n: usize = shape.iter().product();
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
    };
    match dtype {
        DType::DtypeF32 => HostTensor::from_vec(shape.to_vec(), (0..n).map(|_| next() as f32).collect()).unwrap(),
        DType::DtypeBool => HostTensor::from_vec(shape.to_vec(), (0..n).map(|i| (i / 3) % 2 == 0).collect()).unwrap(),
        other => panic!("no test values of {other:?}"),
    }
}

/// One op on given inputs: its attributes, inputs, outputs' dtypes and shapes.
struct Case {
    op: &'static str,
    attrs: Vec<Attribute>,
    inputs: Vec<HostTensor>,
    outputs: Vec<(DType, Vec<usize>)>,
}

impl Case {
    /// The case with one more input.
    fn with(mut self, input: HostTensor) -> Case {
        self.inputs.push(input);
        self
    }

    /// The case with one more input: the int64 vector `values` (such as axes).
    fn ints(self, values: &[i64]) -> Case {
        self.with(HostTensor::from_vec(vec![values.len()], values.to_vec()).unwrap())
    }
}

/// `op` on deterministic inputs of the given dtypes and shapes.
fn case(op: &'static str, attrs: Vec<Attribute>, inputs: &[(DType, &[usize])], output: (DType, &[usize])) -> Case {
    cases(op, attrs, inputs, &[output])
}

fn cases(op: &'static str, attrs: Vec<Attribute>, inputs: &[(DType, &[usize])], outputs: &[(DType, &[usize])]) -> Case {
    let inputs = inputs.iter().enumerate().map(|(i, (d, s))| tensor(*d, s, i as u64 + 1)).collect();
    Case { op, attrs, inputs, outputs: outputs.iter().map(|(d, s)| (*d, s.to_vec())).collect() }
}

/// The ONNX opset the cases run at.
const OPSET: i64 = 17;

/// Runs `op`'s CPU kernel (of its own domain).
fn run(op: &str, attrs: &[Attribute], inputs: &[&HostTensor], outputs: &[(DType, Vec<usize>)]) -> Vec<HostTensor> {
    let id = registry::by_name(op).unwrap();
    let inputs: Vec<Option<&HostTensor>> = inputs.iter().copied().map(Some).collect();
    let attrs = Attrs::new(attrs);
    let outs = if id.def().is_onnx() {
        kernels::forward(op, OPSET, &attrs, &inputs, outputs)
    } else {
        kernels::lms(op, &attrs, &inputs, outputs, &KernelContext::default())
    };
    outs.unwrap_or_else(|e| panic!("{op}: {e}"))
}

/// Part `index` of two of `x` along `axis` (the lms `SplitPart` kernel).
fn part(x: &HostTensor, axis: usize, index: i64) -> HostTensor {
    let mut shape = x.shape.clone();
    let len = shape[axis];
    shape[axis] = if index == 0 { len.div_ceil(2) } else { len / 2 };
    let attrs = [int("axis", axis as i64), int("index", index), int("parts", 2)];
    run("SplitPart", &attrs, &[x], &[(x.dtype(), shape)]).remove(0)
}

/// The values of a tensor as f64 (bools as 0 and 1).
fn values(t: &HostTensor) -> Vec<f64> {
    match t.dtype() {
        DType::DtypeF32 => t.as_f32("t").unwrap().iter().map(|&v| v as f64).collect(),
        DType::DtypeF64 => t.view::<f64>("t").unwrap().to_vec(),
        DType::DtypeBool => t.as_bool("t").unwrap().iter().map(|&v| v as u8 as f64).collect(),
        other => panic!("no comparison of {other:?}"),
    }
}

/// Checks `c` along every output axis its map says it is independent along; returns how
/// many axes it checked.
fn check(c: &Case) -> usize {
    let map = registry::by_name(c.op).and_then(|id| id.def().axes).unwrap_or_else(|| panic!("{}: no axes map", c.op));
    let inputs = &c.inputs;
    let refs: Vec<&HostTensor> = inputs.iter().collect();
    let whole = run(c.op, &c.attrs, &refs, &c.outputs);
    let shapes: Vec<Option<&[usize]>> = inputs.iter().map(|t| Some(&t.shape[..])).collect();
    let attrs: lms_proto::types::Attrs =
        lms_proto::types::Attrs(c.attrs.iter().map(|a| (a.name.clone(), Attr::from_proto(a).unwrap())).collect());
    // Parts told the whole op's count where the split pass tells them (the losses).
    let mut part_attrs = c.attrs.clone();
    if let Some(told) = split::whole_count_attrs(c.op, &attrs, &inputs[0].shape) {
        part_attrs.push(int("positions", told.int("positions", 0).unwrap()));
    }
    let out = &c.outputs[0].1;
    let node = axes::Node { inputs: &shapes, outputs: c.outputs.len(), out, attrs: &attrs, opset: OPSET };
    let mut checked = 0;
    for axis in 0..out.len() {
        let OutputAxis::Independent(slots) = map.output_axis(&node, axis) else { continue };
        let parts: Vec<Vec<HostTensor>> = (0..2)
            .map(|index| {
                let ins: Vec<HostTensor> = inputs
                    .iter()
                    .zip(&slots)
                    .map(|(x, slot)| match slot {
                        Some(a) => part(x, *a, index),
                        None => x.clone(),
                    })
                    .collect();
                let outputs: Vec<(DType, Vec<usize>)> = c
                    .outputs
                    .iter()
                    .map(|(dtype, shape)| {
                        let mut shape = shape.clone();
                        shape[axis] = if index == 0 { shape[axis].div_ceil(2) } else { shape[axis] / 2 };
                        (*dtype, shape)
                    })
                    .collect();
                run(c.op, &part_attrs, &ins.iter().collect::<Vec<_>>(), &outputs)
            })
            .collect();
        for (o, whole) in whole.iter().enumerate() {
            let concat = [int("axis", axis as i64)];
            let joined = run("Concat", &concat, &[&parts[0][o], &parts[1][o]], &c.outputs[o..=o]).remove(0);
            let (a, b) = (values(whole), values(&joined));
            let scale = a.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
            assert!(worst <= 1e-6 * scale, "{} output {o} split along axis {axis} ({map:?}) differs by {worst}", c.op);
        }
        checked += 1;
    }
    checked
}

const F: DType = DType::DtypeF32;
const B: DType = DType::DtypeBool;

#[test]
fn ops_split_where_their_axes_map_says_equal_the_whole_op() {
    let x = [4usize, 6, 5];
    let img = [4usize, 6, 6, 6];
    let pool = || vec![ints("kernel_shape", &[2, 2]), ints("pads", &[0, 0, 0, 0]), ints("strides", &[1, 1])];
    let conv = || {
        vec![
            int("group", 1),
            ints("pads", &[1, 0, 0, 1]),
            ints("strides", &[1, 1]),
            ints("dilations", &[1, 1]),
            ints("kernel_shape", &[3, 3]),
        ]
    };
    let slice_grad = vec![ints("starts", &[1]), ints("ends", &[5]), ints("axes", &[1]), ints("steps", &[2])];
    // Indices of an axis of length `len` of the given shape, negative ones too.
    let indices = |shape: &[usize], len: i64| {
        let n: usize = shape.iter().product();
        HostTensor::from_vec(shape.to_vec(), (0..n as i64).map(|i| (i * 7) % (2 * len) - len).collect()).unwrap()
    };
    let classes = |shape: &[usize], k: i64| {
        let n: usize = shape.iter().product();
        HostTensor::from_vec(shape.to_vec(), (0..n as i64).map(|i| (i * 3) % k).collect()).unwrap()
    };
    let variance = |n: usize| HostTensor::from_vec(vec![n], (0..n).map(|i| 0.5 + i as f32 / 4.0).collect()).unwrap();
    let cases = [
        case("Relu", vec![], &[(F, &x)], (F, &x)),
        case("Add", vec![], &[(F, &x), (F, &[6, 1])], (F, &x)),
        case("Div", vec![], &[(F, &x), (F, &x)], (F, &x)),
        case("Where", vec![], &[(B, &[4, 1, 5]), (F, &x), (F, &[5])], (F, &x)),
        case("Less", vec![], &[(F, &x), (F, &[1, 6, 1])], (B, &x)),
        case("Sum", vec![], &[(F, &x), (F, &[5]), (F, &x)], (F, &x)),
        case("Cast", vec![int("to", 11)], &[(F, &x)], (DType::DtypeF64, &x)),
        case("Identity", vec![], &[(F, &x)], (F, &x)),
        case("UnaryGrad", vec![string("op", "Tanh")], &[(F, &x), (F, &x)], (F, &x)),
        case("DropoutGrad", vec![float("ratio", 0.5)], &[(F, &x), (B, &x)], (F, &x)),
        case("SgdUpdate", vec![float("lr", 0.1)], &[(F, &x), (F, &x)], (F, &x)),
        case("MaxPool", pool(), &[(F, &img)], (F, &[4, 6, 5, 5])),
        case("AveragePool", pool(), &[(F, &img)], (F, &[4, 6, 5, 5])),
        case("GlobalAveragePool", vec![], &[(F, &img)], (F, &[4, 6, 1, 1])),
        case("LRN", vec![int("size", 3)], &[(F, &img)], (F, &img)),
        case("Conv", conv(), &[(F, &img), (F, &[5, 6, 3, 3]), (F, &[5])], (F, &[4, 5, 5, 5])),
        case("ConvGradData", conv(), &[(F, &[4, 5, 5, 5]), (F, &[5, 6, 3, 3])], (F, &img)),
        case("ConvGradWeight", conv(), &[(F, &[4, 5, 5, 5]), (F, &img)], (F, &[5, 6, 3, 3])),
        case("MaxPoolGrad", pool(), &[(F, &[4, 6, 5, 5]), (F, &img)], (F, &img)),
        case("AveragePoolGrad", pool(), &[(F, &[4, 6, 5, 5])], (F, &img)),
        case("LRNGrad", vec![int("size", 3)], &[(F, &img), (F, &img)], (F, &img)),
        case("Softmax", vec![], &[(F, &x)], (F, &x)),
        case("LogSoftmax", vec![int("axis", 1)], &[(F, &x)], (F, &x)),
        case("SoftmaxGrad", vec![int("axis", 1), int("coerce", 1)], &[(F, &x), (F, &x)], (F, &x)),
        case("LayerNormalization", vec![int("axis", -1)], &[(F, &x), (F, &[5]), (F, &[5])], (F, &x)),
        case("MatMul", vec![], &[(F, &[2, 4, 6]), (F, &[6, 5])], (F, &[2, 4, 5])),
        case("MatMul", vec![], &[(F, &[2, 4, 6]), (F, &[1, 6, 5])], (F, &[2, 4, 5])),
        case("Gemm", vec![int("transA", 1)], &[(F, &[6, 4]), (F, &[6, 5]), (F, &[4, 5])], (F, &[4, 5])),
        case("Transpose", vec![ints("perm", &[2, 0, 1])], &[(F, &x)], (F, &[5, 4, 6])),
        case("Flatten", vec![int("axis", 1)], &[(F, &x)], (F, &[4, 30])),
        case("ReshapeTo", vec![], &[(F, &x)], (F, &[4, 5, 6])),
        case("Trilu", vec![int("upper", 0)], &[(F, &x)], (F, &x)),
        cases("Split", vec![int("axis", 1), ints("split", &[2, 4])], &[(F, &x)], &[(F, &[4, 2, 5]), (F, &[4, 4, 5])]),
        case("Unsqueeze", vec![], &[(F, &x)], (F, &[1, 4, 6, 1, 5])).ints(&[0, -2]),
        case("Squeeze", vec![], &[(F, &[1, 4, 1, 6, 5])], (F, &[4, 1, 6, 5])).ints(&[0]),
        case("Expand", vec![], &[(F, &[4, 1, 5])], (F, &[4, 6, 5])).ints(&[6, 1]),
        case("ReduceMean", vec![ints("axes", &[1]), int("keepdims", 0)], &[(F, &x)], (F, &[4, 5])),
        case("ReduceSum", vec![], &[(F, &x)], (F, &[4, 1, 5])).ints(&[1]),
        case("ReduceMax", vec![ints("axes", &[-1])], &[(F, &x)], (F, &[4, 6, 1])),
        case("ReduceMin", vec![ints("axes", &[0, 2]), int("keepdims", 0)], &[(F, &x)], (F, &[6])),
        case("ReduceGrad", vec![ints("axes", &[1]), int("keepdims", 0), int("mean", 1)], &[(F, &[4, 5])], (F, &x)),
        case("Slice", vec![], &[(F, &x)], (F, &[3, 6, 5])).ints(&[1]).ints(&[4]),
        case("Slice", vec![ints("starts", &[0]), ints("ends", &[4]), ints("axes", &[2])], &[(F, &x)], (F, &[4, 6, 4])),
        case("SliceGrad", slice_grad, &[(F, &[4, 2, 5])], (F, &x)),
        case("Pad", vec![string("mode", "reflect"), ints("pads", &[0, 1, 0, 0, 2, 0])], &[(F, &x)], (F, &[4, 9, 5])),
        cases("ConcatGrad", vec![int("axis", 1)], &[(F, &x)], &[(F, &[4, 2, 5]), (F, &[4, 4, 5])]),
        case("Gather", vec![int("axis", 1)], &[(F, &x)], (F, &[4, 2, 2, 5])).with(indices(&[2, 2], 6)),
        case("GatherElements", vec![int("axis", 1)], &[(F, &x)], (F, &[4, 3, 5])).with(indices(&[4, 3, 5], 6)),
        case("BatchNormalization", vec![], &[(F, &img), (F, &[6]), (F, &[6]), (F, &[6])], (F, &img)).with(variance(6)),
        case("SoftmaxCrossEntropyGrad", vec![], &[(F, &x)], (F, &x)).with(classes(&[4, 6], 5)),
        case("InstanceNormalization", vec![], &[(F, &img), (F, &[6]), (F, &[6])], (F, &img)),
    ];
    let mut kinds = Vec::new();
    for c in &cases {
        assert!(check(c) > 0, "{}: its map says it is independent along no axis", c.op);
        let map = registry::by_name(c.op).unwrap().def().axes.unwrap();
        kinds.push(std::mem::discriminant(&map));
    }
    // Every kind of map an op of the registry has is checked here.
    for id in registry::all() {
        if let Some(map) = id.def().axes {
            assert!(
                kinds.contains(&std::mem::discriminant(&map)),
                "{}: no case checks its kind of axes map ({map:?})",
                id.name()
            );
        }
    }
}
