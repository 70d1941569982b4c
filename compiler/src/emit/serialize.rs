//! The `.lms` file: the IR to `lms.proto`, and back from a program the
//! contract (`lms_proto::contract`) has decoded and validated.
//!
//! Writing is deterministic: nodes and tensors are numbered densely in IR
//! order, edges are sorted, the schedule is the graph's own (made
//! topological where a builder left it otherwise, [`order::schedule`]) and
//! the plan is written with it, so the same graph always gives the same
//! bytes. Files are written through
//! [`write_atomically`](super::output::write_atomically), so a failed write never leaves a
//! half-written file behind.

use super::output::write_atomically;
use crate::analysis::footprint::Footprint;
use crate::analysis::memory::{self, Pool};
use crate::analysis::order;
use crate::error::{Error, Result};
use crate::ir::{
    Action, Attr, Attrs, DType, Device, Graph, Node, NodeId, Phase, Plan, RecomputeDecision, SwapDecision,
    SwapInDecision, TensorData, TensorId, TensorType,
};
use lms_proto::contract::Program;
use lms_proto::lms as pb;
use lms_proto::ops::scratch::conv_algorithm;
use lms_proto::{Message, LMS_FORMAT_VERSION};
use std::collections::HashMap;
use std::path::Path;

/// Encodes `g` with its schedule, its plan (with the arenas of the static
/// placement) and metadata (key/value facts such as the source file and flags).
pub fn to_proto(g: &Graph, metadata: &[(String, String)]) -> Result<pb::Graph> {
    let schedule = order::schedule(g)?;
    let arena = |pool| memory::placement(g, &schedule, pool).arena_bytes;
    let arenas = Arenas { device: arena(Pool::Device), host: arena(Pool::Host) };
    encode(g, &schedule, arenas, metadata)
}

/// The arenas' sizes the plan records, in bytes.
#[derive(Clone, Copy, Debug)]
pub struct Arenas {
    pub device: u64,
    pub host: u64,
}

impl From<&Footprint> for Arenas {
    fn from(f: &Footprint) -> Arenas {
        Arenas { device: f.device.arena_bytes, host: f.host.arena_bytes }
    }
}

/// [`to_proto`] with the arenas of `g` over its own schedule already placed
/// (`lms compile` places them once for its report and the file).
pub fn to_proto_placed(g: &Graph, arenas: Arenas, metadata: &[(String, String)]) -> Result<pb::Graph> {
    encode(g, &order::schedule(g)?, arenas, metadata)
}

fn encode(g: &Graph, schedule: &[NodeId], arenas: Arenas, metadata: &[(String, String)]) -> Result<pb::Graph> {
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
        plan: Some(pb::Plan {
            arena_device_bytes: Some(arenas.device),
            arena_host_bytes: Some(arenas.host),
            conv_algorithms: conv_algorithms(g),
            ..plan_to_proto(&g.plan, &|id| node_ids[&id], &tid)
        }),
        metadata: metadata.iter().map(|(k, v)| pb::Metadata { key: k.clone(), value: v.clone() }).collect(),
        opset: g.opset,
    })
}

/// Writes `g`, whose arenas are `arenas`, as a `.lms` file through a
/// temporary sibling and a rename.
pub fn write(path: &Path, g: &Graph, arenas: Arenas, metadata: &[(String, String)]) -> Result<()> {
    let bytes = to_proto_placed(g, arenas, metadata)?.encode_to_vec();
    write_atomically(path, &bytes)
}

/// Reads a `.lms` file back into the IR, with its schedule: the contract
/// ([`lms_proto::contract::Program`]) decodes and validates it, then it is rebuilt.
pub fn read(path: &Path) -> Result<(Graph, Vec<NodeId>)> {
    let program = Program::load(path)?;
    from_program(&program).map_err(|e| e.in_file(path))
}

/// Rebuilds the IR from a validated program, adding nodes in schedule order.
pub fn from_program(program: &Program) -> Result<(Graph, Vec<NodeId>)> {
    let p = program.graph();
    let mut g = Graph::new(p.name.clone(), p.opset);
    let mut produced: Vec<Option<TensorId>> = vec![None; program.tensor_count()];
    let mut by_proto: Vec<Option<NodeId>> = vec![None; program.node_count()];
    let mut ids: Vec<NodeId> = Vec::with_capacity(program.node_count());
    let unproduced = |t: usize| Error::Usage(format!("malformed .lms graph: tensor #{t} is read before it is made"));
    for &pi in program.order() {
        let pn = program.node(pi);
        let inputs = program
            .node_inputs(pi)
            .iter()
            .map(|t| t.map(|t| produced[t].ok_or_else(|| unproduced(t))).transpose())
            .collect::<Result<Vec<_>>>()?;
        let mut outputs = Vec::with_capacity(pn.outputs.len());
        for &t in program.node_outputs(pi) {
            let ty = program.tensor_type(t);
            let dtype = DType::from_code(ty.dtype as i32).expect("the contract admits only defined dtypes");
            outputs.push((program.tensor_name(t).to_string(), TensorType::new(dtype, ty.shape.clone())));
        }
        let mut attrs = Attrs::new();
        for a in &pn.attributes {
            attrs.set(a.name.clone(), Attr::from_proto(a).expect("the contract admits only attributes with a value"));
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
        let id = g.add_node(node, outputs);
        for (slot, &t) in program.node_outputs(pi).iter().enumerate() {
            let out = g.node(id).outputs[slot];
            let data = &p.tensors[t].data;
            if !data.is_empty() {
                g.tensor_mut(out).data = TensorData::from_bytes(g.tensor(out).ty.clone(), data.clone());
            }
            produced[t] = Some(out);
        }
        by_proto[pi] = Some(id);
        ids.push(id);
    }
    let node = |n: usize| by_proto[n].expect("the schedule names every node");
    let tensor = |t: usize| produced[t].expect("every tensor has a scheduled producer");
    for (n, preds) in (0..program.node_count()).map(|n| (n, program.control_predecessors(n))) {
        for &before in preds {
            g.add_control_edge(node(before), node(n));
        }
    }
    for u in program.updates() {
        g.add_update_edge(tensor(u.tensor), node(u.variable));
    }
    g.inputs = p.inputs.iter().map(|&t| tensor(t as usize)).collect();
    g.outputs = program.outputs().iter().map(|&t| tensor(t)).collect();
    if let Some(plan) = &p.plan {
        g.plan = plan_from_proto(plan, &|n| node(n as usize), &|t| tensor(t as usize));
    }
    g.verify().map_err(|e| Error::Usage(format!("malformed .lms graph: {e}")))?;
    Ok((g, ids))
}

/// The cuDNN algorithm and workspace of every convolution node of `g`, by file node id (the
/// graph's nodes in IR order): what its geometry and direction give
/// ([`conv_algorithm`]), the same for an original node and its rewritten copies.
fn conv_algorithms(g: &Graph) -> Vec<pb::ConvAlgorithmDecision> {
    (g.node_ids().enumerate())
        .filter_map(|(i, id)| {
            let node = g.node(id);
            let inputs: Vec<Option<&[usize]>> =
                node.inputs.iter().map(|t| t.map(|t| &g.tensor(t).ty.shape[..])).collect();
            let outputs: Vec<&[usize]> = node.outputs.iter().map(|&t| &g.tensor(t).ty.shape[..]).collect();
            let chosen = conv_algorithm(&node.domain, &node.op, &node.attrs, &inputs, &outputs)?;
            Some(pb::ConvAlgorithmDecision {
                node: i as u32,
                algorithm: chosen.algorithm,
                workspace_bytes: chosen.workspace_bytes,
            })
        })
        .collect()
}

/// The plan with graph ids mapped to file ids.
fn plan_to_proto(plan: &Plan, node: &dyn Fn(NodeId) -> u32, tensor: &dyn Fn(TensorId) -> u32) -> pb::Plan {
    pb::Plan {
        strategy: plan.strategy.clone(),
        budget_device_bytes: plan.budget_device_bytes,
        budget_host_bytes: plan.budget_host_bytes,
        device_profile: plan.device_profile.clone(),
        device_profile_json: plan.device_profile_json.clone().unwrap_or_default(),
        arena_device_bytes: None,
        arena_host_bytes: None,
        conv_algorithms: Vec::new(),
        swaps: plan
            .swaps
            .iter()
            .map(|s| pb::SwapDecision {
                tensor: tensor(s.tensor),
                swap_out: node(s.swap_out),
                swap_ins: s
                    .swap_ins
                    .iter()
                    .map(|i| pb::SwapInDecision { node: node(i.node), trigger: i.trigger.map(node) })
                    .collect(),
            })
            .collect(),
        recomputes: plan
            .recomputes
            .iter()
            .map(|r| pb::RecomputeDecision {
                tensor: tensor(r.tensor),
                chain: r.chain.iter().map(|&n| node(n)).collect(),
                before: node(r.before),
            })
            .collect(),
    }
}

/// The plan with file ids (checked by the contract) mapped to graph ids.
fn plan_from_proto(plan: &pb::Plan, node: &dyn Fn(u32) -> NodeId, tensor: &dyn Fn(u32) -> TensorId) -> Plan {
    let swaps = plan
        .swaps
        .iter()
        .map(|s| SwapDecision {
            tensor: tensor(s.tensor),
            swap_out: node(s.swap_out),
            swap_ins: s
                .swap_ins
                .iter()
                .map(|i| SwapInDecision { node: node(i.node), trigger: i.trigger.map(node) })
                .collect(),
        })
        .collect();
    let recomputes = plan
        .recomputes
        .iter()
        .map(|r| RecomputeDecision {
            tensor: tensor(r.tensor),
            chain: r.chain.iter().map(|&n| node(n)).collect(),
            before: node(r.before),
        })
        .collect();
    Plan {
        strategy: plan.strategy.clone(),
        budget_device_bytes: plan.budget_device_bytes,
        budget_host_bytes: plan.budget_host_bytes,
        device_profile: plan.device_profile.clone(),
        device_profile_json: Some(plan.device_profile_json.clone()).filter(|json| !json.is_empty()),
        swaps,
        recomputes,
    }
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
