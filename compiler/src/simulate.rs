//! `lms simulate`: memory over the schedule of a compiled graph, with the
//! runtime's accounting rules (proto/OPS.md), and no GPU.

use crate::analysis::memory;
use crate::ir::{Graph, NodeId};
use crate::units::format_bytes;
use serde::Serialize;
use std::fmt::Write;

/// What `lms simulate` reports; serialized as its `--json` output.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SimulateReport {
    pub graph: String,
    pub nodes: usize,
    pub peak_device_bytes: u64,
    /// The op running at the peak.
    pub peak_op: String,
    /// Bytes resident for the whole run (variables, inputs).
    pub resident_bytes: u64,
    /// Tensors live at the peak, largest first.
    pub live_at_peak: Vec<LiveTensor>,
    /// Device bytes live at each step of the schedule.
    pub timeline: Vec<u64>,
}

/// A tensor live at the peak.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LiveTensor {
    pub name: String,
    pub bytes: u64,
    pub producer: String,
}

impl SimulateReport {
    /// Simulates `g` over `schedule`.
    pub fn new(g: &Graph, schedule: &[NodeId]) -> SimulateReport {
        let profile = memory::simulate(g, schedule);
        SimulateReport {
            graph: g.name.clone(),
            nodes: schedule.len(),
            peak_device_bytes: profile.peak_bytes,
            peak_op: schedule.get(profile.peak_step).map_or_else(String::new, |&id| g.node(id).name.clone()),
            resident_bytes: profile.resident_bytes,
            live_at_peak: profile
                .live_at_peak
                .iter()
                .map(|&t| {
                    let tensor = g.tensor(t);
                    LiveTensor { name: tensor.name.clone(), bytes: tensor.ty.bytes(), producer: g.node(tensor.producer.0).name.clone() }
                })
                .collect(),
            timeline: profile.timeline,
        }
    }

    /// The report for people: the peak and the largest tensors live there.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "graph        {:?}, {} ops in the schedule", self.graph, self.nodes);
        let _ = writeln!(s, "peak device  {} at '{}' ({} resident)", format_bytes(self.peak_device_bytes), self.peak_op, format_bytes(self.resident_bytes));
        let _ = writeln!(s, "live at peak ({} tensors), largest:", self.live_at_peak.len());
        for t in self.live_at_peak.iter().take(10) {
            let _ = writeln!(s, "  {:>12}  {}  (made by '{}')", format_bytes(t.bytes), t.name, t.producer);
        }
        s
    }
}
