//! `lms inspect`: what a model holds and how much memory it needs: op
//! histogram, parameter and activation bytes, tensor lifetimes, the peak
//! live bytes of the forward graph under the default order, and the largest
//! tensors with the ops that make them.

use crate::analysis::classify::{classify, TensorClass};
use crate::analysis::{lifetime, memory, order};
use crate::frontend::Model;
use crate::ir::{Graph, TensorId};
use crate::units::format_bytes;
use crate::Result;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// How many of the largest tensors a report lists.
const LARGEST: usize = 10;

/// The facts `lms inspect` prints; serialized as its `--json` output.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct InspectReport {
    pub graph: String,
    pub opset: i64,
    pub ir_version: i64,
    pub producer: String,
    pub inputs: Vec<TensorSummary>,
    pub outputs: Vec<TensorSummary>,
    /// Number of operations (variables and inputs excluded).
    pub nodes: usize,
    /// Operations per op type.
    pub ops: BTreeMap<String, usize>,
    pub parameter_count: usize,
    pub parameter_bytes: u64,
    pub activation_count: usize,
    /// Bytes of all float tensors that depend on a data input.
    pub activation_bytes: u64,
    /// Peak live bytes of the forward graph under the default order.
    pub peak_bytes: u64,
    /// The op running at the peak.
    pub peak_op: String,
    /// Of the peak, the bytes resident for the whole run (initializers, inputs).
    pub resident_bytes: u64,
    pub lifetimes: LifetimeStats,
    /// The largest tensors, largest first.
    pub largest_tensors: Vec<TensorSummary>,
}

/// One tensor: name, type, size and the node that makes it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TensorSummary {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    pub bytes: u64,
    pub node: String,
    pub op: String,
}

/// Lifetimes (max γ of the readers − γ of the producer) of activations.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LifetimeStats {
    pub count: usize,
    pub min: u32,
    pub median: u32,
    pub mean: f64,
    pub max: u32,
    /// Counts of lifetimes in [1], [2,3], [4,7], [8,15], ...: key is the bucket's lower bound.
    pub histogram: BTreeMap<u32, usize>,
}

impl InspectReport {
    /// Analyses a model.
    pub fn new(model: &Model) -> Result<InspectReport> {
        let g = &model.graph;
        let schedule = order::schedule(g)?;
        let gamma = order::gamma(g, &schedule);
        let classes = classify(g, &schedule);
        let profile = memory::simulate(g, &schedule);
        let classes = &classes;
        let of_class = |class: TensorClass| g.tensors().filter(move |(t, _)| classes[t.index()] == class);
        let mut ops = BTreeMap::new();
        for id in g.node_ids().filter(|&id| !g.node(id).parameterized) {
            *ops.entry(g.node(id).op.clone()).or_insert(0) += 1;
        }
        let lifetimes = lifetime::lifetimes(g, &gamma);
        let activation_lifetimes: Vec<u32> =
            of_class(TensorClass::Activation).filter_map(|(t, _)| lifetimes[t.index()]).collect();
        let mut largest: Vec<TensorId> =
            g.tensors().filter(|(t, _)| classes[t.index()] != TensorClass::Constant).map(|(t, _)| t).collect();
        largest.sort_by_key(|&t| (std::cmp::Reverse(g.tensor(t).ty.bytes()), t));
        largest.truncate(LARGEST);
        Ok(InspectReport {
            graph: g.name.clone(),
            opset: g.opset,
            ir_version: model.ir_version,
            producer: model.producer.clone(),
            inputs: g.inputs.iter().map(|&t| summary(g, t)).collect(),
            outputs: g.outputs.iter().map(|&t| summary(g, t)).collect(),
            nodes: ops.values().sum(),
            ops,
            parameter_count: of_class(TensorClass::Parameter).count(),
            parameter_bytes: of_class(TensorClass::Parameter).map(|(_, t)| t.ty.bytes()).sum(),
            activation_count: of_class(TensorClass::Activation).count(),
            activation_bytes: of_class(TensorClass::Activation).map(|(_, t)| t.ty.bytes()).sum(),
            peak_bytes: profile.peak_bytes,
            peak_op: schedule.get(profile.peak_step).map_or_else(String::new, |&id| g.node(id).name.clone()),
            resident_bytes: profile.resident_bytes,
            lifetimes: LifetimeStats::new(activation_lifetimes),
            largest_tensors: largest.into_iter().map(|t| summary(g, t)).collect(),
        })
    }

    /// The report for people.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let tensors = |list: &[TensorSummary]| {
            list.iter().map(|t| format!("{}: {}{:?}", t.name, t.dtype, t.shape)).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(
            s,
            "graph        {:?} (opset {}, IR version {}, producer {:?})",
            self.graph, self.opset, self.ir_version, self.producer
        );
        let _ = writeln!(s, "inputs       {}", tensors(&self.inputs));
        let _ = writeln!(s, "outputs      {}", tensors(&self.outputs));
        let mut ops: Vec<(&String, &usize)> = self.ops.iter().collect();
        ops.sort_by_key(|&(op, n)| (std::cmp::Reverse(*n), op));
        let hist: Vec<String> = ops.iter().map(|(op, n)| format!("{op} {n}")).collect();
        let _ = writeln!(s, "ops          {} ({})", self.nodes, hist.join(", "));
        let _ = writeln!(s, "parameters   {} in {} tensors", format_bytes(self.parameter_bytes), self.parameter_count);
        let _ =
            writeln!(s, "activations  {} in {} tensors", format_bytes(self.activation_bytes), self.activation_count);
        let _ = writeln!(
            s,
            "peak         {} at '{}' (forward, default order; {} resident)",
            format_bytes(self.peak_bytes),
            self.peak_op,
            format_bytes(self.resident_bytes)
        );
        let l = &self.lifetimes;
        let _ = writeln!(
            s,
            "lifetimes    activations live min {} / median {} / mean {:.1} / max {} ops (γ distance)",
            l.min, l.median, l.mean, l.max
        );
        let hist: Vec<String> = l.histogram.iter().map(|(lo, n)| format!("≥{lo}: {n}")).collect();
        let _ = writeln!(s, "             {}", hist.join(", "));
        let _ = writeln!(s, "largest tensors");
        for t in &self.largest_tensors {
            let _ = writeln!(
                s,
                "  {:>12}  {}: {}{:?}  made by '{}' ({})",
                format_bytes(t.bytes),
                t.name,
                t.dtype,
                t.shape,
                t.node,
                t.op
            );
        }
        s
    }
}

impl LifetimeStats {
    fn new(mut lifetimes: Vec<u32>) -> LifetimeStats {
        if lifetimes.is_empty() {
            return LifetimeStats::default();
        }
        lifetimes.sort_unstable();
        let mut histogram = BTreeMap::new();
        for &l in &lifetimes {
            let bucket = if l == 0 { 0 } else { 1 << (31 - l.leading_zeros()) };
            *histogram.entry(bucket).or_insert(0) += 1;
        }
        LifetimeStats {
            count: lifetimes.len(),
            min: lifetimes[0],
            median: lifetimes[lifetimes.len() / 2],
            mean: lifetimes.iter().map(|&l| l as f64).sum::<f64>() / lifetimes.len() as f64,
            max: lifetimes[lifetimes.len() - 1],
            histogram,
        }
    }
}

fn summary(g: &Graph, t: TensorId) -> TensorSummary {
    let tensor = g.tensor(t);
    let node = g.node(tensor.producer.0);
    TensorSummary {
        name: tensor.name.clone(),
        dtype: tensor.ty.dtype.name().to_string(),
        shape: tensor.ty.shape.clone(),
        bytes: tensor.ty.bytes(),
        node: node.name.clone(),
        op: node.op.clone(),
    }
}
