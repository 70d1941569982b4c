//! The `.lms` file: the IR to and from `lms.proto`, the contract with the
//! runtime.
//!
//! Writing is deterministic: nodes and tensors are numbered densely in IR
//! order, edges are sorted, and the schedule is the default one (or the one
//! given), so the same graph always gives the same bytes. Files are written
//! to a temporary sibling and renamed, so a failed write never leaves a
//! half-written file behind.

use crate::analysis::order;
use crate::error::{Error, Result};
use crate::ir::{Action, Attr, Attrs, DType, Device, Graph, Node, NodeId, Phase, TensorData, TensorId, TensorType};
use lms_proto::lms as pb;
use lms_proto::{Message, LMS_FORMAT_VERSION};
use std::collections::HashMap;
use std::path::Path;

/// Encodes `g` with its schedule (the default schedule when `None`) and
/// metadata (key/value facts such as the source file and flags).
pub fn to_proto(g: &Graph, schedule: Option<&[NodeId]>, metadata: &[(String, String)]) -> Result<pb::Graph> {
    let default;
    let schedule = match schedule {
        Some(s) => s,
        None => {
            default = order::schedule(g)?;
            &default
        }
    };
    let node_ids: HashMap<NodeId, u32> = g.node_ids().enumerate().map(|(i, id)| (id, i as u32)).collect();
    let tensor_ids: HashMap<TensorId, u32> = g
        .tensors()
        .filter(|(_, t)| node_ids.contains_key(&t.producer.0))
        .enumerate()
        .map(|(i, (id, _))| (id, i as u32))
        .collect();
    let tid = |t: TensorId| tensor_ids[&t];
    let tensors = g
        .tensors()
        .filter(|(id, _)| tensor_ids.contains_key(id))
        .map(|(_, t)| pb::Tensor {
            name: t.name.clone(),
            dtype: t.ty.dtype.code(),
            shape: t.ty.shape.iter().map(|&d| d as u64).collect(),
            bytes: t.ty.bytes(),
            data: t.data.as_ref().map_or_else(Vec::new, |d| d.bytes.to_vec()),
            producer: node_ids[&t.producer.0],
            producer_output: t.producer.1 as u32,
        })
        .collect();
    let nodes = g
        .node_ids()
        .map(|id| {
            let n = g.node(id);
            pb::Node {
                name: n.name.clone(),
                op: n.op.clone(),
                domain: n.domain.clone(),
                attributes: n.attrs.iter().map(|(k, v)| attr_to_proto(k, v)).collect(),
                parameterized: n.parameterized,
                phase: phase_to_proto(n.phase) as i32,
                device: device_to_proto(n.device) as i32,
                inputs: n
                    .inputs
                    .iter()
                    .map(|t| pb::Slot {
                        value: Some(t.map_or(pb::slot::Value::Missing(true), |t| pb::slot::Value::Tensor(tid(t)))),
                    })
                    .collect(),
                outputs: n.outputs.iter().map(|&t| tid(t)).collect(),
            }
        })
        .collect();
    let mut edges: Vec<pb::Edge> = g
        .edges()
        .map(|(src, dst, e)| pb::Edge {
            producer: node_ids[&src],
            producer_output: e.src_slot as u32,
            consumer: node_ids[&dst],
            consumer_input: e.dst_slot as u32,
            action: action_to_proto(e.action) as i32,
            tensor: e.tensor.map(tid),
        })
        .collect();
    edges.sort_by_key(|e| (e.consumer, e.consumer_input, e.action, e.producer, e.producer_output));
    Ok(pb::Graph {
        format_version: LMS_FORMAT_VERSION,
        name: g.name.clone(),
        tensors,
        nodes,
        edges,
        inputs: g.inputs.iter().map(|&t| tid(t)).collect(),
        outputs: g.outputs.iter().map(|&t| tid(t)).collect(),
        variables: g.node_ids().filter(|&id| g.node(id).parameterized).map(|id| node_ids[&id]).collect(),
        schedule: schedule.iter().map(|id| node_ids[id]).collect(),
        plan: None,
        metadata: metadata.iter().map(|(k, v)| pb::Metadata { key: k.clone(), value: v.clone() }).collect(),
        opset: g.opset,
    })
}

/// Writes `g` as a `.lms` file through a temporary sibling and a rename.
pub fn write(path: &Path, g: &Graph, schedule: Option<&[NodeId]>, metadata: &[(String, String)]) -> Result<()> {
    let bytes = to_proto(g, schedule, metadata)?.encode_to_vec();
    write_atomically(path, &bytes).map_err(|e| Error::from(e).in_file(path))
}

/// Writes bytes to `path` through `path.tmp` and a rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Reads a `.lms` file back into the IR, with its schedule.
pub fn read(path: &Path) -> Result<(Graph, Vec<NodeId>)> {
    let load = || -> Result<(Graph, Vec<NodeId>)> {
        if path.is_dir() {
            return Err(Error::IsDirectory);
        }
        let bytes = std::fs::read(path)?;
        if bytes.is_empty() {
            return Err(Error::Empty);
        }
        from_proto(&pb::Graph::decode(&*bytes).map_err(|e| Error::Usage(format!("not a valid .lms file: {e}")))?)
    };
    load().map_err(|e| e.in_file(path))
}

/// Rebuilds the IR from its serialized form, checking every id.
pub fn from_proto(p: &pb::Graph) -> Result<(Graph, Vec<NodeId>)> {
    let bad = |what: String| Error::Usage(format!("malformed .lms graph: {what}"));
    if p.format_version != LMS_FORMAT_VERSION {
        return Err(bad(format!("format version {} (this lms reads {LMS_FORMAT_VERSION})", p.format_version)));
    }
    let mut g = Graph::new(p.name.clone(), p.opset);
    let mut produced: Vec<Option<TensorId>> = vec![None; p.tensors.len()];
    let mut ids: Vec<NodeId> = Vec::with_capacity(p.nodes.len());
    // Nodes are added in an order where producers come first (the schedule
    // must be topological for data edges).
    let order: Vec<u32> =
        if p.schedule.len() == p.nodes.len() { p.schedule.clone() } else { (0..p.nodes.len() as u32).collect() };
    let mut by_proto: Vec<Option<NodeId>> = vec![None; p.nodes.len()];
    for &pi in &order {
        let pn = p.nodes.get(pi as usize).ok_or_else(|| bad(format!("schedule names node {pi}")))?;
        let mut inputs = Vec::with_capacity(pn.inputs.len());
        for slot in &pn.inputs {
            inputs.push(match slot.value {
                Some(pb::slot::Value::Tensor(t)) => Some(
                    produced
                        .get(t as usize)
                        .copied()
                        .flatten()
                        .ok_or_else(|| bad(format!("node '{}' reads tensor {t} before it is produced", pn.name)))?,
                ),
                _ => None,
            });
        }
        let mut outputs = Vec::with_capacity(pn.outputs.len());
        for &t in &pn.outputs {
            let pt = p.tensors.get(t as usize).ok_or_else(|| bad(format!("node '{}' makes tensor {t}", pn.name)))?;
            let dtype = DType::from_code(pt.dtype)
                .ok_or_else(|| bad(format!("tensor '{}' has dtype {}", pt.name, pt.dtype)))?;
            outputs.push((pt.name.clone(), TensorType::new(dtype, pt.shape.iter().map(|&d| d as usize).collect())));
        }
        let mut attrs = Attrs::new();
        for a in &pn.attributes {
            attrs.set(a.name.clone(), attr_from_proto(a).map_err(|e| bad(format!("node '{}': {e}", pn.name)))?);
        }
        let node = Node {
            name: pn.name.clone(),
            op: pn.op.clone(),
            domain: pn.domain.clone(),
            attrs,
            parameterized: pn.parameterized,
            phase: phase_from_proto(pn.phase),
            device: device_from_proto(pn.device),
            inputs,
            outputs: vec![],
        };
        let types: Vec<TensorType> = outputs.iter().map(|(_, ty)| ty.clone()).collect();
        let id = g.add_node(node, outputs);
        for (slot, &t) in pn.outputs.iter().enumerate() {
            let out = g.node(id).outputs[slot];
            let pt = &p.tensors[t as usize];
            if !pt.data.is_empty() {
                let data = TensorData::from_bytes(types[slot].clone(), pt.data.clone())
                    .ok_or_else(|| bad(format!("tensor '{}' data does not match its type", pt.name)))?;
                g.tensor_mut(out).data = Some(data);
            }
            produced[t as usize] = Some(out);
        }
        by_proto[pi as usize] = Some(id);
        ids.push(id);
    }
    let node = |i: u32| by_proto.get(i as usize).copied().flatten().ok_or_else(|| bad(format!("edge names node {i}")));
    for e in &p.edges {
        match action_from_proto(e.action) {
            Action::Control => {
                g.add_control_edge(node(e.producer)?, node(e.consumer)?);
            }
            Action::Update => {
                let t = e
                    .tensor
                    .and_then(|t| produced.get(t as usize).copied().flatten())
                    .ok_or_else(|| bad("update edge without a tensor".into()))?;
                g.add_update_edge(t, node(e.consumer)?);
            }
            Action::Read => {} // rebuilt from the input slots
        }
    }
    let tensor =
        |t: u32| produced.get(t as usize).copied().flatten().ok_or_else(|| bad(format!("graph names tensor {t}")));
    g.inputs = p.inputs.iter().map(|&t| tensor(t)).collect::<Result<_>>()?;
    g.outputs = p.outputs.iter().map(|&t| tensor(t)).collect::<Result<_>>()?;
    g.verify().map_err(|e| bad(e.to_string()))?;
    Ok((g, ids))
}

fn attr_to_proto(name: &str, value: &Attr) -> pb::Attribute {
    use pb::attribute::Value as V;
    let value = match value {
        Attr::Int(v) => V::Int(*v),
        Attr::Float(v) => V::Float(*v),
        Attr::String(v) => V::String(v.clone()),
        Attr::Ints(v) => V::Ints(pb::Ints { values: v.clone() }),
        Attr::Floats(v) => V::Floats(pb::Floats { values: v.clone() }),
        Attr::Strings(v) => V::Strings(pb::Strings { values: v.clone() }),
        Attr::Tensor(t) => V::Tensor(pb::TensorValue {
            dtype: t.ty.dtype.code(),
            shape: t.ty.shape.iter().map(|&d| d as u64).collect(),
            data: t.bytes.to_vec(),
        }),
    };
    pb::Attribute { name: name.to_string(), value: Some(value) }
}

fn attr_from_proto(a: &pb::Attribute) -> std::result::Result<Attr, String> {
    use pb::attribute::Value as V;
    Ok(match a.value.as_ref().ok_or_else(|| format!("attribute '{}' has no value", a.name))? {
        V::Int(v) => Attr::Int(*v),
        V::Float(v) => Attr::Float(*v),
        V::String(v) => Attr::String(v.clone()),
        V::Ints(v) => Attr::Ints(v.values.clone()),
        V::Floats(v) => Attr::Floats(v.values.clone()),
        V::Strings(v) => Attr::Strings(v.values.clone()),
        V::Tensor(t) => {
            let dtype =
                DType::from_code(t.dtype).ok_or_else(|| format!("attribute '{}' has dtype {}", a.name, t.dtype))?;
            let ty = TensorType::new(dtype, t.shape.iter().map(|&d| d as usize).collect());
            Attr::Tensor(
                TensorData::from_bytes(ty, t.data.clone())
                    .ok_or_else(|| format!("attribute '{}' data does not match its type", a.name))?,
            )
        }
    })
}

fn phase_to_proto(p: Phase) -> pb::Phase {
    match p {
        Phase::Forward => pb::Phase::Forward,
        Phase::Backward => pb::Phase::Backward,
        Phase::Update => pb::Phase::Update,
    }
}

fn phase_from_proto(p: i32) -> Phase {
    match pb::Phase::try_from(p) {
        Ok(pb::Phase::Backward) => Phase::Backward,
        Ok(pb::Phase::Update) => Phase::Update,
        _ => Phase::Forward,
    }
}

fn device_to_proto(d: Device) -> pb::Device {
    match d {
        Device::Gpu => pb::Device::Gpu,
        Device::Cpu => pb::Device::Cpu,
    }
}

fn device_from_proto(d: i32) -> Device {
    match pb::Device::try_from(d) {
        Ok(pb::Device::Cpu) => Device::Cpu,
        _ => Device::Gpu,
    }
}

fn action_to_proto(a: Action) -> pb::Action {
    match a {
        Action::Read => pb::Action::Read,
        Action::Update => pb::Action::Update,
        Action::Control => pb::Action::Control,
    }
}

fn action_from_proto(a: i32) -> Action {
    match pb::Action::try_from(a) {
        Ok(pb::Action::Update) => Action::Update,
        Ok(pb::Action::Control) => Action::Control,
        _ => Action::Read,
    }
}
