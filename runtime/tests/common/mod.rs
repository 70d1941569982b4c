//! Builds small lms graphs by hand for the runtime's tests.

#![allow(dead_code)] // each test file uses a different part of the builder

use lms_proto::lms::attribute::Value;
use lms_proto::lms::{slot, Action, Attribute, DType, Device, Edge, Graph, Node, Slot, Tensor};
use lms_proto::LMS_FORMAT_VERSION;

/// A graph under construction; tensor and node ids are returned as `u32`.
#[derive(Clone)]
pub struct Builder {
    pub graph: Graph,
}

pub fn int(name: &str, v: i64) -> Attribute {
    Attribute { name: name.into(), value: Some(Value::Int(v)) }
}

pub fn string(name: &str, v: &str) -> Attribute {
    Attribute { name: name.into(), value: Some(Value::String(v.into())) }
}

pub fn float(name: &str, v: f32) -> Attribute {
    Attribute { name: name.into(), value: Some(Value::Float(v)) }
}

pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

impl Builder {
    /// An empty graph of the current format, ONNX opset 17.
    pub fn new(name: &str) -> Builder {
        let graph = Graph { format_version: LMS_FORMAT_VERSION, name: name.into(), opset: 17, ..Graph::default() };
        Builder { graph }
    }

    /// Adds a node with its output tensors and a read edge per present input, scheduled after
    /// the nodes added before it; returns the node id and its output tensor ids.
    pub fn node(
        &mut self,
        name: &str,
        op: &str,
        inputs: &[Option<u32>],
        outputs: &[(&str, DType, &[u64])],
        attributes: Vec<Attribute>,
    ) -> (u32, Vec<u32>) {
        let id = self.graph.nodes.len() as u32;
        let mut outs = Vec::new();
        for (slot, (tname, dtype, shape)) in outputs.iter().enumerate() {
            let t = self.graph.tensors.len() as u32;
            self.graph.tensors.push(Tensor {
                name: tname.to_string(),
                dtype: *dtype as i32,
                shape: shape.to_vec(),
                bytes: lms_proto::contract::tensor_bytes(*dtype, shape).expect("a test tensor of known dtype"),
                data: Vec::new(),
                producer: id,
                producer_output: slot as u32,
            });
            outs.push(t);
        }
        for (i, input) in inputs.iter().enumerate() {
            if let Some(t) = *input {
                let tensor = &self.graph.tensors[t as usize];
                self.graph.edges.push(Edge {
                    producer: tensor.producer,
                    producer_output: tensor.producer_output,
                    consumer: id,
                    consumer_input: i as u32,
                    action: Action::Read as i32,
                    tensor: Some(t),
                });
            }
        }
        let slots = inputs
            .iter()
            .map(|i| Slot { value: Some(i.map_or(slot::Value::Missing(true), slot::Value::Tensor)) })
            .collect();
        let domain = if matches!(op, "SwapOut" | "SwapIn") { "lms" } else { "" };
        let device = if op == "SwapOut" || op == "SwapIn" { Device::Cpu } else { Device::Gpu };
        self.graph.nodes.push(Node {
            name: name.into(),
            op: op.into(),
            domain: domain.into(),
            attributes,
            parameterized: matches!(op, "Variable" | "Input"),
            phase: 0,
            device: device as i32,
            inputs: slots,
            outputs: outs.clone(),
        });
        if matches!(op, "Variable" | "Input") {
            self.graph.variables.push(id);
        }
        self.graph.schedule.push(id);
        (id, outs)
    }

    /// A one-input, one-output f32 op.
    pub fn op(&mut self, name: &str, op: &str, inputs: &[u32], shape: &[u64], attributes: Vec<Attribute>) -> u32 {
        let ins: Vec<Option<u32>> = inputs.iter().map(|&t| Some(t)).collect();
        self.node(name, op, &ins, &[(name, DType::DtypeF32, shape)], attributes).1[0]
    }

    /// A node `name` of op `op` with no inputs and one output tensor, also named `name`.
    fn source(&mut self, name: &str, op: &str, dtype: DType, shape: &[u64], attributes: Vec<Attribute>) -> u32 {
        self.node(name, op, &[], &[(name, dtype, shape)], attributes).1[0]
    }

    /// An f32 variable initialised from `data`.
    pub fn variable(&mut self, name: &str, shape: &[u64], data: &[f32]) -> u32 {
        let init = vec![string("init", "data")];
        let t = self.source(name, "Variable", DType::DtypeF32, shape, init);
        self.graph.tensors[t as usize].data = f32_bytes(data);
        t
    }

    /// A variable initialised by its attributes only.
    pub fn variable_init(&mut self, name: &str, dtype: DType, shape: &[u64], attributes: Vec<Attribute>) -> u32 {
        self.source(name, "Variable", dtype, shape, attributes)
    }

    /// An input listed in `Graph.inputs`.
    pub fn input(&mut self, name: &str, dtype: DType, shape: &[u64], attributes: Vec<Attribute>) -> u32 {
        let t = self.source(name, "Input", dtype, shape, attributes);
        self.graph.inputs.push(t);
        t
    }

    /// An update edge: `tensor` writes the variable node producing `variable`.
    pub fn update(&mut self, tensor: u32, variable: u32) {
        let t = &self.graph.tensors[tensor as usize];
        let var_node = self.graph.tensors[variable as usize].producer;
        self.graph.edges.push(Edge {
            producer: t.producer,
            producer_output: t.producer_output,
            consumer: var_node,
            consumer_input: 0,
            action: Action::Update as i32,
            tensor: Some(tensor),
        });
    }

    /// A control edge between the producers of two tensors.
    pub fn control(&mut self, before: u32, after: u32) {
        let (b, a) = (self.graph.tensors[before as usize].producer, self.graph.tensors[after as usize].producer);
        self.graph.edges.push(Edge { producer: b, consumer: a, action: Action::Control as i32, ..Edge::default() });
    }

    /// The node producing tensor `t`.
    pub fn producer(&self, t: u32) -> u32 {
        self.graph.tensors[t as usize].producer
    }
}

/// W's initial value in the training graphs below.
pub const W0: [f32; 16] = [0.1, -0.2, 0.3, 0.05, -0.4, 0.5, 0.2, -0.1, 0.3, 0.1, -0.3, 0.2, 0.05, 0.4, 0.1, -0.25];

/// A small training graph on ONNX ops only (node ids in brackets, bytes in parentheses):
///
/// ```text
/// [0] W  Variable [4,4] (64)    [1] x Input [2,4] (32)    [2] lr Variable [] (4)
/// [3] ones_row Variable ones [1,2] (8)                    [4] ones_col Variable ones [4,1] (16)
/// [5] y = MatMul(x, W) [2,4] (32)          [6] r = Relu(y) [2,4] (32)
/// [7] rs = MatMul(ones_row, r) [1,4] (16)  [8] loss = MatMul(rs, ones_col) [1,1] (4)   output 0
/// [9] g = Gemm(x, r, transA) [4,4] (64)    [10] s = Mul(g, lr) (64)   [11] Wn = Sub(W, s) (64)
/// update Wn → W; control loss → Wn.
/// ```
///
/// With `swap`, r goes out to the host after `rs` and comes back before `g`:
/// `[9] rh = SwapOut(r)`, `[10] r2 = SwapIn(rh)`, and g, s, Wn become nodes 11..13.
pub fn training_graph(swap: bool) -> Builder {
    let mut b = Builder::new(if swap { "train_swap" } else { "train" });
    let w = b.variable("W", &[4, 4], &W0);
    let x = b.input("x", DType::DtypeF32, &[2, 4], vec![]);
    let lr = b.variable("lr", &[], &[0.1]);
    let ones_row = b.variable_init("ones_row", DType::DtypeF32, &[1, 2], vec![string("init", "ones")]);
    let ones_col = b.variable_init("ones_col", DType::DtypeF32, &[4, 1], vec![string("init", "ones")]);
    let y = b.op("y", "MatMul", &[x, w], &[2, 4], vec![]);
    let r = b.op("r", "Relu", &[y], &[2, 4], vec![]);
    let rs = b.op("rs", "MatMul", &[ones_row, r], &[1, 4], vec![]);
    let loss = b.op("loss", "MatMul", &[rs, ones_col], &[1, 1], vec![]);
    let r_for_g = if swap {
        let rh = b.op("rh", "SwapOut", &[r], &[2, 4], vec![]);
        b.op("r2", "SwapIn", &[rh], &[2, 4], vec![])
    } else {
        r
    };
    let g = b.op("g", "Gemm", &[x, r_for_g], &[4, 4], vec![int("transA", 1)]);
    let s = b.op("s", "Mul", &[g, lr], &[4, 4], vec![]);
    let wn = b.op("Wn", "Sub", &[w, s], &[4, 4], vec![]);
    b.update(wn, w);
    b.control(loss, wn);
    b.graph.outputs.push(loss);
    b
}
