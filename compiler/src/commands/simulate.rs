//! `lms simulate`: memory over the schedule of a compiled graph, with the
//! runtime's accounting rules (proto/OPS.md), against the budgets of the
//! graph's plan when it has them, and the predicted time of the step on a
//! device profile (the three-stream timeline), with no GPU.

use crate::analysis::footprint::Footprint;
use crate::analysis::memory;
use crate::analysis::profile::DeviceProfile;
use crate::analysis::scheduled::Scheduled;
use crate::analysis::timeline::{self, Timeline};
use crate::commands::setup::Setup;
use crate::ir::{Attr, Graph, NodeId, SPLIT_PART_OP, SPLIT_WINDOW_OP};
use crate::passes::planner::{self, DecisionReport};
use crate::units::format_bytes;
use lms_proto::trace::{Lane, TraceEvent};
use serde::Serialize;
use std::fmt::Write;

pub mod html;
pub mod svg;

/// What `lms simulate` reports; serialized as its `--json` output.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SimulateReport {
    pub graph: String,
    /// The leading dimension of the graph's data inputs.
    pub batch: Option<usize>,
    /// The optimizer of its update ops, e.g. `adam (lr 0.001)`.
    pub optimizer: Option<String>,
    /// The plan's memory strategy (`none` for a graph nobody rewrote).
    pub strategy: String,
    /// The plan's device budget, when it was made for one.
    pub budget_device_bytes: Option<u64>,
    /// The plan's host budget, when it was made for one.
    pub budget_host_bytes: Option<u64>,
    /// With budgets: whether both placed arenas are within them
    /// ([`Footprint::fits`]).
    pub fits: Option<bool>,
    /// With budgets: device budget minus device arena (negative: over).
    pub device_margin_bytes: Option<i64>,
    /// With budgets: host budget minus host arena (negative: over).
    pub host_margin_bytes: Option<i64>,
    pub nodes: usize,
    pub peak_device_bytes: u64,
    /// The op running at the peak.
    pub peak_op: String,
    /// Scratch bytes that op's kernel takes (counted in the peak and placed in the arena).
    pub scratch_device_bytes: u64,
    /// Bytes resident for the whole run (variables, inputs).
    pub resident_bytes: u64,
    /// Tensors live at the peak, largest first.
    pub live_at_peak: Vec<LiveTensor>,
    /// Device bytes live at each step of the schedule.
    pub timeline: Vec<u64>,
    /// Seconds from the start of the step by which each step of the schedule
    /// has started (it and every step before it): the time axis of
    /// `timeline` and `host_timeline`.
    pub timeline_seconds: Vec<f64>,
    pub peak_host_bytes: u64,
    /// Host bytes live at each step of the schedule.
    pub host_timeline: Vec<u64>,
    /// Bytes of the device arena with every tensor at its static offset: the peak plus
    /// alignment and fragmentation (what a runtime that never allocates per step needs).
    pub arena_device_bytes: u64,
    /// The same for the pinned host pool.
    pub arena_host_bytes: u64,
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
    /// The plan's decisions (swaps, recomputes) with their predicted extra time.
    pub decisions: Vec<DecisionReport>,
    /// The split the graph holds (batch or spatial parts), if any.
    pub split: Option<SplitSummary>,
    /// The predicted timeline, one event per kernel or copy (for `--trace`
    /// and the SVG).
    #[serde(skip)]
    pub trace: Vec<TraceEvent>,
}

/// The tensors a split cuts and the ops that run in parts.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SplitSummary {
    /// Tensors cut into parts (`SplitPart`/`SplitWindow` sets).
    pub tensors: usize,
    /// The most parts any tensor is cut into.
    pub parts: usize,
    /// Kernels that run one part each (named `<op>.part<i>` by the split pass).
    pub ops_in_parts: usize,
}

impl SplitSummary {
    /// The split of `g`, or `None` when nothing is cut.
    pub fn of(g: &Graph, schedule: &[NodeId]) -> Option<SplitSummary> {
        let int = |id: NodeId, key: &str| match g.node(id).attrs.get(key) {
            Some(Attr::Int(v)) => usize::try_from(*v).ok(),
            _ => None,
        };
        let cuts: Vec<NodeId> = schedule
            .iter()
            .copied()
            .filter(|&id| [SPLIT_PART_OP, SPLIT_WINDOW_OP].contains(&g.node(id).op.as_str()))
            .collect();
        if cuts.is_empty() {
            return None;
        }
        let is_part = |name: &str| {
            name.split('.')
                .skip(1)
                .any(|s| s.strip_prefix("part").is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit())))
        };
        Some(SplitSummary {
            tensors: cuts.iter().filter(|&&id| int(id, "index") == Some(0)).count(),
            parts: cuts.iter().filter_map(|&id| int(id, "parts")).max().unwrap_or(0),
            ops_in_parts: schedule
                .iter()
                .filter(|&&id| {
                    let n = g.node(id);
                    n.op != SPLIT_PART_OP && n.op != SPLIT_WINDOW_OP && !n.parameterized && is_part(&n.name)
                })
                .count(),
        })
    }
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
        let view = Scheduled::new(g, schedule.to_vec());
        let profile = memory::simulate_scheduled(g, &view);
        let footprint = Footprint::with_profile(g, &view, &profile);
        let margin = |budget: Option<u64>, arena: u64| budget.map(|b| b as i64 - arena as i64);
        let device_margin_bytes = margin(g.plan.budget_device_bytes, footprint.device.arena_bytes);
        let host_margin_bytes = margin(g.plan.budget_host_bytes, footprint.host.arena_bytes);
        let time = timeline::simulate(g, schedule, device);
        let setup = Setup::of(g);
        SimulateReport {
            graph: g.name.clone(),
            batch: setup.batch,
            optimizer: setup.optimizer,
            strategy: g.plan.strategy.clone(),
            budget_device_bytes: g.plan.budget_device_bytes,
            budget_host_bytes: g.plan.budget_host_bytes,
            fits: device_margin_bytes.map(|d| d >= 0 && host_margin_bytes.is_none_or(|h| h >= 0)),
            device_margin_bytes,
            host_margin_bytes,
            nodes: schedule.len(),
            peak_device_bytes: profile.peak_bytes,
            peak_op: schedule.get(profile.peak_step).map_or_else(String::new, |&id| g.node(id).name.clone()),
            scratch_device_bytes: profile.scratch_at_peak,
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
            timeline_seconds: started_by(g, schedule, &time),
            peak_host_bytes: profile.host_peak_bytes,
            host_timeline: profile.host_timeline,
            arena_device_bytes: footprint.device.arena_bytes,
            arena_host_bytes: footprint.host.arena_bytes,
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
            decisions: planner::report::from_plan(g, &time),
            split: SplitSummary::of(g, schedule),
            trace: trace_events(g, &time),
        }
    }

    /// The report for people: the peak and the largest tensors live there.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "graph        {:?}, {} ops in the schedule", self.graph, self.nodes);
        let setup = Setup {
            batch: self.batch,
            optimizer: self.optimizer.clone(),
            strategy: self.strategy.clone(),
            budget_device_bytes: self.budget_device_bytes,
            budget_host_bytes: self.budget_host_bytes,
        };
        let _ = writeln!(s, "setup        {}", setup.describe());
        let scratch = if self.scratch_device_bytes > 0 {
            format!(", {} of the op's scratch", format_bytes(self.scratch_device_bytes))
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "peak device  {} at '{}' ({} resident{scratch})",
            format_bytes(self.peak_device_bytes),
            self.peak_op,
            format_bytes(self.resident_bytes)
        );
        let _ = writeln!(s, "peak host    {}", format_bytes(self.peak_host_bytes));
        let _ = writeln!(
            s,
            "arenas       device {} (+{:.2}% over the peak: alignment, fragmentation), host {}",
            format_bytes(self.arena_device_bytes),
            overhead_percent(self.arena_device_bytes, self.peak_device_bytes),
            format_bytes(self.arena_host_bytes)
        );
        for (pool, budget, margin) in [
            ("device", self.budget_device_bytes, self.device_margin_bytes),
            ("host", self.budget_host_bytes, self.host_margin_bytes),
        ] {
            if let (Some(budget), Some(margin)) = (budget, margin) {
                let (verdict, by) = if margin >= 0 { ("fits", "to spare") } else { ("does NOT fit", "over") };
                let _ = writeln!(
                    s,
                    "budget       {pool} {}: {verdict}, its arena {} {by}",
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

/// For each step of `schedule`, the time by which it and every step before
/// it have started on `time` (views and parameterized vertices take none).
fn started_by(g: &Graph, schedule: &[NodeId], time: &Timeline) -> Vec<f64> {
    let mut start = vec![None; g.node_bound()];
    for e in &time.events {
        start[e.node.index()] = Some(e.start);
    }
    let mut at = 0.0f64;
    schedule
        .iter()
        .map(|id| {
            at = start[id.index()].map_or(at, |s: f64| at.max(s));
            at
        })
        .collect()
}

/// The tensor each copy of the plan moves, by node index.
fn copied_tensors(g: &Graph) -> Vec<Option<&str>> {
    let mut copied = vec![None; g.node_bound()];
    for swap in &g.plan.swaps {
        let name = g.tensor(swap.tensor).name.as_str();
        copied[swap.swap_out.index()] = Some(name);
        for i in &swap.swap_ins {
            copied[i.node.index()] = Some(name);
        }
    }
    copied
}

/// How much larger `arena` is than `peak`, in percent (0 for an empty peak).
pub fn overhead_percent(arena: u64, peak: u64) -> f64 {
    if peak == 0 {
        0.0
    } else {
        (arena as f64 / peak as f64 - 1.0) * 100.0
    }
}

/// The predicted timeline as Chrome-trace events: one per kernel or copy,
/// with its bytes, FLOPs, stall and, for a copy of the plan, its tensor.
fn trace_events(g: &Graph, time: &Timeline) -> Vec<TraceEvent> {
    let copied = copied_tensors(g);
    time.events
        .iter()
        .map(|e| {
            let node = g.node(e.node);
            let mut args = vec![("bytes".to_string(), e.bytes.to_string())];
            if let Some(tensor) = copied[e.node.index()] {
                args.push(("tensor".into(), tensor.to_string()));
            }
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

#[cfg(test)]
mod tests {
    use super::svg::tests::before_and_after;
    use super::SimulateReport;
    use crate::analysis::profile::DeviceProfile;
    use crate::frontend::{self, FrontendOptions};
    use crate::train::{self, TrainOptions};

    #[test]
    fn fits_by_the_placed_arena_not_the_live_peak() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/models/tiny_gpt.onnx");
        let model = frontend::load(&path, &FrontendOptions { batch: Some(32), ..Default::default() }).unwrap();
        let mut g = train::build(&model.graph, &TrainOptions::default()).unwrap();
        let device = DeviceProfile::load("h100-sxm").unwrap();
        let report = |g: &crate::ir::Graph| SimulateReport::new(g, g.schedule(), &device);
        let unbudgeted = report(&g);
        let (peak, arena) = (unbudgeted.peak_device_bytes, unbudgeted.arena_device_bytes);
        assert!(arena > peak, "alignment makes the arena larger: {arena} {peak}");
        g.plan.budget_host_bytes = Some(0);
        // Only the arena is over: the live peak is exactly the budget.
        g.plan.budget_device_bytes = Some(peak);
        let over = report(&g);
        assert_eq!(over.fits, Some(false));
        assert_eq!(over.device_margin_bytes, Some(peak as i64 - arena as i64));
        assert_eq!(over.host_margin_bytes, Some(0));
        assert!(over.to_text().contains("does NOT fit, its arena"), "{}", over.to_text());
        g.plan.budget_device_bytes = Some(arena);
        assert_eq!(report(&g).fits, Some(true));
    }

    #[test]
    fn each_step_has_a_time_and_each_swap_of_the_plan_a_row() {
        let (before, after) = before_and_after();
        for r in [&before, &after] {
            assert_eq!(r.timeline_seconds.len(), r.timeline.len());
            assert!(r.timeline_seconds.windows(2).all(|w| w[0] <= w[1]), "steps start in schedule order");
            assert!(*r.timeline_seconds.last().unwrap() < r.predicted_step_seconds);
        }
        assert!(before.decisions.is_empty());
        assert!(!after.decisions.is_empty() && after.decisions.iter().all(|d| d.kind == "swap" && d.bytes > 0));
        let charged: f64 = after.decisions.iter().map(|d| d.extra_seconds).sum();
        assert!(
            charged <= after.stall_seconds * (1.0 + 1e-9),
            "{charged} s charged, {} s stalled",
            after.stall_seconds
        );
        let tensors = after.trace.iter().filter(|e| e.args.iter().any(|(k, _)| k == "tensor")).count();
        let copies = after.trace.iter().filter(|e| e.lane != lms_proto::trace::Lane::Compute).count();
        assert!(copies > after.decisions.len());
        assert_eq!(tensors, copies, "every swap-out and swap-in of the plan names its tensor in the trace");
    }
}
