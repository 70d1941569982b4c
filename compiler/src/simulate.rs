//! `lms simulate`: memory over the schedule of a compiled graph, with the
//! runtime's accounting rules (proto/OPS.md), and no GPU; against the
//! budgets of the graph's plan when it has them.

use crate::analysis::memory;
use crate::ir::{Graph, NodeId};
use crate::units::format_bytes;
use serde::Serialize;
use std::fmt::Write;

/// What `lms simulate` reports; serialized as its `--json` output.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SimulateReport {
    pub graph: String,
    /// The plan's memory strategy (`none` for a graph nobody rewrote).
    pub strategy: String,
    /// The plan's device budget, when it was made for one.
    pub budget_device_bytes: Option<u64>,
    /// The plan's host budget, when it was made for one.
    pub budget_host_bytes: Option<u64>,
    /// With budgets: whether both peaks are within them.
    pub fits: Option<bool>,
    /// With budgets: device budget minus device peak (negative: over).
    pub device_margin_bytes: Option<i64>,
    /// With budgets: host budget minus host peak (negative: over).
    pub host_margin_bytes: Option<i64>,
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
    pub peak_host_bytes: u64,
    /// Host bytes live at each step of the schedule.
    pub host_timeline: Vec<u64>,
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
        let margin = |budget: Option<u64>, peak: u64| budget.map(|b| b as i64 - peak as i64);
        let device_margin_bytes = margin(g.plan.budget_device_bytes, profile.peak_bytes);
        let host_margin_bytes = margin(g.plan.budget_host_bytes, profile.host_peak_bytes);
        SimulateReport {
            graph: g.name.clone(),
            strategy: g.plan.strategy.clone(),
            budget_device_bytes: g.plan.budget_device_bytes,
            budget_host_bytes: g.plan.budget_host_bytes,
            fits: device_margin_bytes.map(|d| d >= 0 && host_margin_bytes.is_none_or(|h| h >= 0)),
            device_margin_bytes,
            host_margin_bytes,
            nodes: schedule.len(),
            peak_device_bytes: profile.peak_bytes,
            peak_op: schedule.get(profile.peak_step).map_or_else(String::new, |&id| g.node(id).name.clone()),
            resident_bytes: profile.resident_bytes,
            live_at_peak: profile
                .live_at_peak
                .iter()
                .map(|&t| {
                    let tensor = g.tensor(t);
                    LiveTensor {
                        name: tensor.name.clone(),
                        bytes: tensor.ty.bytes(),
                        producer: g.node(tensor.producer.0).name.clone(),
                    }
                })
                .collect(),
            timeline: profile.timeline,
            peak_host_bytes: profile.host_peak_bytes,
            host_timeline: profile.host_timeline,
        }
    }

    /// The report for people: the peak and the largest tensors live there.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "graph        {:?}, {} ops in the schedule", self.graph, self.nodes);
        let _ = writeln!(
            s,
            "peak device  {} at '{}' ({} resident)",
            format_bytes(self.peak_device_bytes),
            self.peak_op,
            format_bytes(self.resident_bytes)
        );
        let _ = writeln!(s, "peak host    {}", format_bytes(self.peak_host_bytes));
        let _ = writeln!(s, "strategy     {}", self.strategy);
        for (pool, budget, margin) in [
            ("device", self.budget_device_bytes, self.device_margin_bytes),
            ("host", self.budget_host_bytes, self.host_margin_bytes),
        ] {
            if let (Some(budget), Some(margin)) = (budget, margin) {
                let (verdict, by) = if margin >= 0 { ("fits", "to spare") } else { ("does NOT fit", "over") };
                let _ = writeln!(
                    s,
                    "budget       {pool} {}: {verdict}, {} {by}",
                    format_bytes(budget),
                    format_bytes(margin.unsigned_abs())
                );
            }
        }
        let _ = writeln!(s, "device       {}", sparkline(&self.timeline, self.peak_device_bytes));
        let _ = writeln!(s, "live at peak ({} tensors), largest:", self.live_at_peak.len());
        for t in self.live_at_peak.iter().take(10) {
            let _ = writeln!(s, "  {:>12}  {}  (made by '{}')", format_bytes(t.bytes), t.name, t.producer);
        }
        s
    }
}

/// The timeline as one line of block characters, 64 columns, each the
/// largest value in its stretch of the schedule relative to `scale`.
pub fn sparkline(timeline: &[u64], scale: u64) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    const COLUMNS: usize = 64;
    if timeline.is_empty() || scale == 0 {
        return String::new();
    }
    let per = timeline.len().div_ceil(COLUMNS);
    timeline
        .chunks(per)
        .map(|chunk| {
            let max = chunk.iter().copied().max().unwrap_or(0);
            BLOCKS[((max as f64 / scale as f64) * 7.0).round().clamp(0.0, 7.0) as usize]
        })
        .collect()
}

/// An SVG picture of memory over the schedule: device (and host) bytes of
/// each graph, the x axis the schedule position scaled to the same width.
pub fn svg(series: &[(&str, &SimulateReport)]) -> String {
    const W: f64 = 800.0;
    const H: f64 = 300.0;
    const PAD: f64 = 40.0;
    let top =
        series.iter().flat_map(|(_, r)| [r.peak_device_bytes, r.peak_host_bytes]).max().unwrap_or(1).max(1) as f64;
    let colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{}" font-family="sans-serif" font-size="12">"#,
        H + 2.0 * PAD
    );
    let _ = writeln!(
        out,
        r#"<text x="{PAD}" y="20">memory over the schedule (peak {} = top)</text>"#,
        format_bytes(top as u64)
    );
    let _ = writeln!(
        out,
        r##"<rect x="{PAD}" y="{PAD}" width="{}" height="{H}" fill="none" stroke="#999"/>"##,
        W - 2.0 * PAD
    );
    let mut legend = PAD + H + 20.0;
    let mut color = colors.iter().cycle();
    for (name, report) in series {
        for (what, timeline, dash) in
            [("device", &report.timeline, ""), ("host", &report.host_timeline, r#" stroke-dasharray="4 3""#)]
        {
            if timeline.iter().all(|&b| b == 0) {
                continue;
            }
            let c = color.next().expect("cycle never ends");
            let n = (timeline.len().max(2) - 1) as f64;
            let points: Vec<String> = timeline
                .iter()
                .enumerate()
                .map(|(i, &b)| {
                    format!("{:.1},{:.1}", PAD + i as f64 / n * (W - 2.0 * PAD), PAD + H - b as f64 / top * H)
                })
                .collect();
            let _ = writeln!(out, r#"<polyline fill="none" stroke="{c}"{dash} points="{}"/>"#, points.join(" "));
            let peak = if what == "device" { report.peak_device_bytes } else { report.peak_host_bytes };
            let _ = writeln!(
                out,
                r#"<text x="{PAD}" y="{legend}" fill="{c}">{name} {what}: peak {}</text>"#,
                format_bytes(peak)
            );
            legend += 16.0;
        }
    }
    out.push_str("</svg>\n");
    out
}
