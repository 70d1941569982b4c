//! `lms simulate`: memory over the schedule of a compiled graph, with the
//! runtime's accounting rules (proto/OPS.md), against the budgets of the
//! graph's plan when it has them, and the predicted time of the step on a
//! device profile (the three-stream timeline), with no GPU.

use crate::analysis::memory;
use crate::analysis::profile::DeviceProfile;
use crate::analysis::timeline::{self, Timeline};
use crate::ir::{Graph, NodeId};
use crate::units::format_bytes;
use lms_proto::trace::{Lane, TraceEvent};
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
    /// The device profile the times are predicted for.
    pub device_profile: String,
    /// Predicted time of one step: when the last of the three streams finishes.
    pub predicted_step_seconds: f64,
    /// Busy time of the compute stream.
    pub compute_seconds: f64,
    /// Busy time of the host-to-device stream (swap-ins).
    pub h2d_seconds: f64,
    /// Busy time of the device-to-host stream (swap-outs).
    pub d2h_seconds: f64,
    /// Time the compute stream waits for swap-ins.
    pub stall_seconds: f64,
    /// FLOPs of the step.
    pub flops: u64,
    /// FLOPs of Conv, ConvTranspose, Gemm, MatMul and their gradients.
    pub gemm_flops: u64,
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
    /// Swaps that stall compute or end after the last kernel.
    pub exposed_swaps: usize,
    /// The predicted timeline, one event per kernel or copy (for `--trace`
    /// and the SVG).
    #[serde(skip)]
    pub trace: Vec<TraceEvent>,
}

/// A tensor live at the peak.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LiveTensor {
    pub name: String,
    pub bytes: u64,
    pub producer: String,
}

impl SimulateReport {
    /// Simulates the memory of `g` over `schedule`, and its time on `device`.
    pub fn new(g: &Graph, schedule: &[NodeId], device: &DeviceProfile) -> SimulateReport {
        let profile = memory::simulate(g, schedule);
        let margin = |budget: Option<u64>, peak: u64| budget.map(|b| b as i64 - peak as i64);
        let device_margin_bytes = margin(g.plan.budget_device_bytes, profile.peak_bytes);
        let host_margin_bytes = margin(g.plan.budget_host_bytes, profile.host_peak_bytes);
        let time = timeline::simulate(g, schedule, device);
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
            device_profile: device.name.clone(),
            predicted_step_seconds: time.step_seconds,
            compute_seconds: time.compute_seconds,
            h2d_seconds: time.h2d_seconds,
            d2h_seconds: time.d2h_seconds,
            stall_seconds: time.stall_seconds,
            flops: time.flops,
            gemm_flops: time.gemm_flops,
            h2d_bytes: time.h2d_bytes,
            d2h_bytes: time.d2h_bytes,
            exposed_swaps: time.swaps().filter(|e| time.is_exposed(e)).count(),
            trace: trace_events(g, &time),
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
        let _ = writeln!(
            s,
            "step time    {} predicted on {} (busy: compute {}, host-to-device {}, device-to-host {}; stall {}, {} exposed swaps)",
            format_seconds(self.predicted_step_seconds),
            self.device_profile,
            format_seconds(self.compute_seconds),
            format_seconds(self.h2d_seconds),
            format_seconds(self.d2h_seconds),
            format_seconds(self.stall_seconds),
            self.exposed_swaps
        );
        let _ = writeln!(
            s,
            "work         {:.3} TFLOP ({:.3} in convolutions and matrix products), swapped {} out, {} in",
            self.flops as f64 / 1e12,
            self.gemm_flops as f64 / 1e12,
            format_bytes(self.d2h_bytes),
            format_bytes(self.h2d_bytes)
        );
        let _ = writeln!(s, "live at peak ({} tensors), largest:", self.live_at_peak.len());
        for t in self.live_at_peak.iter().take(10) {
            let _ = writeln!(s, "  {:>12}  {}  (made by '{}')", format_bytes(t.bytes), t.name, t.producer);
        }
        s
    }
}

/// The predicted timeline as Chrome-trace events: one per kernel or copy,
/// with its bytes, FLOPs and stall.
fn trace_events(g: &Graph, time: &Timeline) -> Vec<TraceEvent> {
    time.events
        .iter()
        .map(|e| {
            let node = g.node(e.node);
            let mut args = vec![("bytes".to_string(), e.bytes.to_string())];
            if e.flops > 0 {
                args.push(("flops".into(), e.flops.to_string()));
            }
            if e.stall > 0.0 {
                let what = if e.lane == Lane::Compute { "waited_us" } else { "stall_caused_us" };
                args.push((what.into(), format!("{:.3}", e.stall * 1e6)));
            }
            TraceEvent {
                name: node.name.clone(),
                op: node.op.clone(),
                lane: e.lane,
                start_us: e.start * 1e6,
                dur_us: (e.end - e.start) * 1e6,
                args,
            }
        })
        .collect()
}

/// Seconds for people: `1.234 s`, `12.3 ms` or `45.6 µs`.
pub fn format_seconds(seconds: f64) -> String {
    if seconds >= 1.0 {
        format!("{seconds:.3} s")
    } else if seconds >= 1e-3 {
        format!("{:.1} ms", seconds * 1e3)
    } else {
        format!("{:.1} µs", seconds * 1e6)
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
/// each graph, the x axis the schedule position scaled to the same width;
/// under it, each graph's predicted streams (compute, device-to-host,
/// host-to-device) on a time axis shared by all graphs.
pub fn svg(series: &[(&str, &SimulateReport)]) -> String {
    const W: f64 = 800.0;
    const H: f64 = 300.0;
    const PAD: f64 = 40.0;
    const LANE: f64 = 12.0;
    let top =
        series.iter().flat_map(|(_, r)| [r.peak_device_bytes, r.peak_host_bytes]).max().unwrap_or(1).max(1) as f64;
    let colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
    let lanes_top = PAD + H + 30.0;
    let lanes_height = series.len() as f64 * (16.0 + 3.0 * LANE + 8.0);
    let legend_top = lanes_top + lanes_height + 10.0;
    let legend_lines = series.len() as f64 * 2.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{}" font-family="sans-serif" font-size="12">"#,
        legend_top + 16.0 * legend_lines + PAD / 2.0
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
    let mut legend = legend_top;
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
    let longest = series.iter().map(|(_, r)| r.predicted_step_seconds).fold(0.0, f64::max);
    let _ = writeln!(
        out,
        r#"<text x="{PAD}" y="{}">predicted streams over time (0 to {} = width)</text>"#,
        lanes_top - 8.0,
        format_seconds(longest)
    );
    let mut y = lanes_top;
    for (name, report) in series {
        let _ = writeln!(
            out,
            r#"<text x="{PAD}" y="{}">{name} on {}: step {}</text>"#,
            y + 12.0,
            report.device_profile,
            format_seconds(report.predicted_step_seconds)
        );
        y += 16.0;
        for (row, lane) in Lane::ALL.into_iter().enumerate() {
            let lane_y = y + row as f64 * LANE;
            let _ = writeln!(
                out,
                r##"<text x="2" y="{:.1}" font-size="9" fill="#555">{}</text>"##,
                lane_y + 9.0,
                lane.name()
            );
            let fill = ["#1f77b4", "#ff7f0e", "#2ca02c"][row];
            for (x0, x1) in lane_spans(&report.trace, lane, longest * 1e6, W - 2.0 * PAD) {
                let _ = writeln!(
                    out,
                    r#"<rect x="{:.1}" y="{lane_y:.1}" width="{:.1}" height="{}" fill="{fill}"/>"#,
                    PAD + x0,
                    (x1 - x0).max(0.5),
                    LANE - 2.0
                );
            }
        }
        y += 3.0 * LANE + 8.0;
    }
    out.push_str("</svg>\n");
    out
}

/// The busy spans of `lane` in pixels over `width` for a time axis of
/// `span_us`, neighbours closer than half a pixel merged.
fn lane_spans(events: &[TraceEvent], lane: Lane, span_us: f64, width: f64) -> Vec<(f64, f64)> {
    let scale = if span_us > 0.0 { width / span_us } else { 0.0 };
    let mut spans: Vec<(f64, f64)> = Vec::new();
    for e in events.iter().filter(|e| e.lane == lane && e.dur_us > 0.0) {
        let (x0, x1) = (e.start_us * scale, (e.start_us + e.dur_us) * scale);
        match spans.last_mut() {
            Some(last) if x0 - last.1 < 0.5 => last.1 = last.1.max(x1),
            _ => spans.push((x0, x1)),
        }
    }
    spans
}
