//! Structure-aware mutation of protobuf inputs: byte-level edits (bit flips, interesting
//! bytes, truncation, deletion, insertion, duplication, splices with another seed) and
//! field edits on the decoded message (ids, shapes, enum values, names, schedules), which
//! reach the checks behind the decoder.

use lms_proto::lms::{attribute, slot, Graph, Plan, Slot, SwapDecision, SwapInDecision};
use lms_proto::onnx::{tensor_shape_proto::dimension, type_proto, ModelProto};
use lms_proto::Message;

/// Deterministic xorshift generator: the same seed gives the same inputs.
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (any value; 0 is replaced).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// A value that breaks things: edges of ranges, huge and negative numbers.
    pub fn interesting(&mut self) -> i64 {
        const VALUES: [i64; 12] = [0, 1, 2, 3, -1, -2, 7, 255, 1 << 31, 1 << 48, 1 << 62, i64::MAX];
        if self.one_in(3) {
            self.next_u64() as i64
        } else {
            VALUES[self.below(VALUES.len())]
        }
    }

    /// A small number or an interesting one.
    pub fn number(&mut self, scale: usize) -> i64 {
        if self.one_in(4) {
            self.interesting()
        } else {
            self.below(scale + 2) as i64
        }
    }
}

/// One byte-level edit of `data`; `other` is a seed to splice from.
pub fn mutate_bytes(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8]) {
    if data.is_empty() {
        data.push(rng.next_u64() as u8);
        return;
    }
    let len = data.len();
    let at = rng.below(len);
    match rng.below(8) {
        0 => data[at] ^= 1 << rng.below(8),
        1 => data[at] = [0, 1, 0x7f, 0x80, 0xff][rng.below(5)],
        2 => data.truncate(at),
        3 => {
            let n = rng.below(64).min(len - at);
            data.drain(at..at + n);
        }
        4 => {
            let bytes: Vec<u8> = (0..1 + rng.below(16)).map(|_| rng.next_u64() as u8).collect();
            data.splice(at..at, bytes);
        }
        5 => {
            let n = rng.below(256).min(len - at);
            let copy = data[at..at + n].to_vec();
            let to = rng.below(len);
            data.splice(to..to, copy);
        }
        6 if !other.is_empty() => {
            data.truncate(at);
            data.extend_from_slice(&other[rng.below(other.len())..]);
        }
        _ => {
            // A varint that decodes to a huge value.
            let n = 1 + rng.below(9);
            data.splice(at..at, std::iter::repeat_n(0xff, n).chain([0x01]));
        }
    }
}

/// Mutates a seed message: one to three field edits on the decoded message (three times in
/// four), then byte edits (every other time, and always when the fields were left alone).
fn mutate_message<M: Message + Default>(
    rng: &mut Rng,
    seed: &[u8],
    seeds: &[Vec<u8>],
    edit: fn(&mut Rng, &mut M),
) -> Vec<u8> {
    let mut bytes = match M::decode(seed) {
        Ok(mut message) if !rng.one_in(4) => {
            for _ in 0..1 + rng.below(3) {
                edit(rng, &mut message);
            }
            message.encode_to_vec()
        }
        _ => seed.to_vec(),
    };
    if rng.one_in(2) || bytes == seed {
        for _ in 0..1 + rng.below(3) {
            let other = &seeds[rng.below(seeds.len())];
            mutate_bytes(rng, &mut bytes, other);
        }
    }
    bytes
}

/// Mutates a seed `.lms` file.
pub fn mutate_lms(rng: &mut Rng, seed: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
    mutate_message::<Graph>(rng, seed, seeds, edit_graph)
}

/// One field edit of an lms graph.
fn edit_graph(rng: &mut Rng, g: &mut Graph) {
    let (nodes, tensors) = (g.nodes.len().max(1), g.tensors.len().max(1));
    let id = |rng: &mut Rng, n: usize| if rng.one_in(8) { rng.interesting() as u32 } else { rng.below(n + 1) as u32 };
    match rng.below(12) {
        0 if !g.tensors.is_empty() => {
            let t = rng.below(g.tensors.len());
            let tensor = &mut g.tensors[t];
            match rng.below(6) {
                0 if !tensor.shape.is_empty() => {
                    let d = rng.below(tensor.shape.len());
                    tensor.shape[d] = rng.interesting() as u64;
                }
                1 => tensor.shape.push(rng.number(8) as u64),
                2 => tensor.dtype = rng.number(17) as i32,
                3 => tensor.bytes = rng.interesting() as u64,
                4 => tensor.producer = id(rng, nodes),
                _ => tensor.data.truncate(rng.below(tensor.data.len() + 1)),
            }
        }
        1 | 2 if !g.nodes.is_empty() => {
            let n = rng.below(g.nodes.len());
            let op = g.nodes[rng.below(g.nodes.len())].op.clone();
            let node = &mut g.nodes[n];
            match rng.below(8) {
                0 => node.op = op,
                1 => node.domain = ["", "lms", "ai.onnx", "x"][rng.below(4)].into(),
                2 => node.device = rng.number(2) as i32,
                3 => node.phase = rng.number(3) as i32,
                4 if !node.inputs.is_empty() => {
                    let s = rng.below(node.inputs.len());
                    let value =
                        if rng.one_in(4) { slot::Value::Missing(true) } else { slot::Value::Tensor(id(rng, tensors)) };
                    node.inputs[s] = Slot { value: Some(value) };
                }
                5 if !node.outputs.is_empty() => {
                    let s = rng.below(node.outputs.len());
                    node.outputs[s] = id(rng, tensors);
                }
                6 => node.parameterized = !node.parameterized,
                _ if !node.attributes.is_empty() => {
                    let a = rng.below(node.attributes.len());
                    match &mut node.attributes[a].value {
                        Some(attribute::Value::Int(v)) => *v = rng.interesting(),
                        Some(attribute::Value::Ints(v)) if !v.values.is_empty() => {
                            let i = rng.below(v.values.len());
                            v.values[i] = rng.interesting();
                        }
                        Some(attribute::Value::Float(v)) => {
                            *v = [0.0, -1.0, f32::NAN, f32::INFINITY, 1e30][rng.below(5)]
                        }
                        Some(attribute::Value::Tensor(t)) => t.shape.push(rng.number(4) as u64),
                        _ => {
                            node.attributes.remove(a);
                        }
                    }
                }
                _ => {}
            }
        }
        3 | 4 if !g.edges.is_empty() => {
            let e = rng.below(g.edges.len());
            match rng.below(6) {
                0 => g.edges[e].producer = id(rng, nodes),
                1 => g.edges[e].consumer = id(rng, nodes),
                2 => g.edges[e].action = rng.number(3) as i32,
                3 => g.edges[e].tensor = if rng.one_in(3) { None } else { Some(id(rng, tensors)) },
                4 => {
                    g.edges.remove(e);
                }
                _ => {
                    let copy = g.edges[e];
                    g.edges.push(copy);
                }
            }
        }
        5..=7 if !g.schedule.is_empty() => {
            let (a, b) = (rng.below(g.schedule.len()), rng.below(g.schedule.len()));
            match rng.below(4) {
                0 => g.schedule.swap(a, b),
                1 => {
                    let moved = g.schedule.remove(a);
                    g.schedule.insert(b.min(g.schedule.len()), moved);
                }
                2 => g.schedule[a] = id(rng, nodes),
                _ => {
                    g.schedule.remove(a);
                }
            }
        }
        8 => match rng.below(4) {
            0 => g.outputs.push(id(rng, tensors)),
            1 => g.inputs.push(id(rng, tensors)),
            2 => g.variables.push(id(rng, nodes)),
            _ => g.outputs.clear(),
        },
        9 => {
            let swap_ins = (0..rng.below(3))
                .map(|_| SwapInDecision { node: id(rng, nodes), trigger: rng.one_in(2).then(|| id(rng, nodes)) })
                .collect();
            let swap = SwapDecision { tensor: id(rng, tensors), swap_out: id(rng, nodes), swap_ins };
            let strategy = ["none", "tflms", "auto", "x"][rng.below(4)].into();
            g.plan = Some(Plan { strategy, swaps: vec![swap], ..Plan::default() });
        }
        10 => g.opset = rng.number(21),
        _ => g.format_version = rng.number(2) as u32,
    }
}

/// Mutates a seed ONNX model.
pub fn mutate_onnx(rng: &mut Rng, seed: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
    mutate_message::<ModelProto>(rng, seed, seeds, edit_model)
}

/// One field edit of an ONNX model.
fn edit_model(rng: &mut Rng, m: &mut ModelProto) {
    if rng.one_in(10) {
        match m.opset_import.first_mut() {
            Some(o) => o.version = rng.number(22),
            None => m.ir_version = rng.number(10),
        }
        return;
    }
    let Some(g) = m.graph.as_mut() else {
        return;
    };
    let names: Vec<String> = g.node.iter().flat_map(|n| n.input.iter().chain(&n.output)).cloned().collect();
    let name = |rng: &mut Rng| names.get(rng.below(names.len())).cloned().unwrap_or_default();
    match rng.below(6) {
        0 | 1 if !g.node.is_empty() => {
            let n = rng.below(g.node.len());
            let op = g.node[rng.below(g.node.len())].op_type.clone();
            let node = &mut g.node[n];
            match rng.below(6) {
                0 => node.op_type = op,
                1 if !node.input.is_empty() => {
                    let i = rng.below(node.input.len());
                    node.input[i] = if rng.one_in(4) { String::new() } else { name(rng) };
                }
                2 if !node.output.is_empty() => {
                    let i = rng.below(node.output.len());
                    node.output[i] = name(rng);
                }
                3 => {
                    let removed = g.node.remove(n);
                    if rng.one_in(2) {
                        g.node.insert(rng.below(g.node.len() + 1), removed);
                    }
                }
                _ if !node.attribute.is_empty() => {
                    let a = rng.below(node.attribute.len());
                    let attr = &mut node.attribute[a];
                    match rng.below(5) {
                        0 => attr.i = rng.interesting(),
                        1 if !attr.ints.is_empty() => {
                            let i = rng.below(attr.ints.len());
                            attr.ints[i] = rng.interesting();
                        }
                        2 => attr.ints.push(rng.number(4)),
                        3 => attr.f = [0.0, -1.0, f32::NAN, 1e30][rng.below(4)],
                        _ => {
                            node.attribute.remove(a);
                        }
                    }
                }
                _ => {}
            }
        }
        2 | 3 if !g.initializer.is_empty() => {
            let i = rng.below(g.initializer.len());
            let t = &mut g.initializer[i];
            match rng.below(5) {
                0 if !t.dims.is_empty() => {
                    let d = rng.below(t.dims.len());
                    t.dims[d] = rng.interesting();
                }
                1 => t.dims.push(rng.number(4)),
                2 => t.data_type = rng.number(16) as i32,
                3 => t.raw_data.truncate(rng.below(t.raw_data.len() + 1)),
                _ => t.float_data.truncate(rng.below(t.float_data.len() + 1)),
            }
        }
        _ if !g.input.is_empty() => {
            let i = rng.below(g.input.len());
            let Some(type_proto::Value::TensorType(tensor)) = g.input[i].r#type.as_mut().and_then(|t| t.value.as_mut())
            else {
                return;
            };
            match (rng.below(3), tensor.shape.as_mut()) {
                (0, _) => tensor.elem_type = rng.number(16) as i32,
                (1, Some(shape)) if !shape.dim.is_empty() => {
                    let d = rng.below(shape.dim.len());
                    shape.dim[d].value = Some(dimension::Value::DimValue(rng.interesting()));
                }
                (_, Some(shape)) => shape.dim.truncate(rng.below(shape.dim.len() + 1)),
                _ => {}
            }
        }
        _ => {}
    }
}
