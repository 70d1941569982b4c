//! `lms plan-curve`: predicted step time against device budget, for the
//! budget planner (`auto`) and TFLMS, from the smallest live peak the
//! planner reaches to the unrewritten graph's placed arena (no limit
//! needed), at evenly spaced budgets. Each point is a full plan whose
//! placed arenas fit the budgets, applied to the training graph and timed on
//! the device profile's three-stream timeline. Auto's point is the fastest
//! of the search's plan at that budget (`planner::search`, what `compile`
//! writes) and auto's point at the budget before it, which fits this one
//! too: its curve never rises with the budget.

use crate::analysis::footprint::Footprint;
use crate::analysis::profile::DeviceProfile;
use crate::analysis::timeline;
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::passes::planner::{self, PlanOptions, Speeds, DEFAULT_MAX_CHAIN};
use crate::passes::tflms::{self, FreeKnobs, TflmsConfig};
use crate::pipeline;
use crate::simulate::format_seconds;
use crate::units::format_bytes;
use serde::Serialize;
use std::fmt::Write;

/// A plan at one budget: its predicted step, peaks and arenas.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fitting {
    pub step_seconds: f64,
    /// `step_seconds` over the unrewritten graph's predicted step.
    pub overhead: f64,
    pub device_peak_bytes: u64,
    pub host_peak_bytes: u64,
    pub device_arena_bytes: u64,
    pub host_arena_bytes: u64,
}

/// Both strategies at one device budget (`None`: no plan fits).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    pub budget_bytes: u64,
    pub auto: Option<Fitting>,
    pub tflms: Option<Fitting>,
}

/// The curve, as `--json` writes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanCurve {
    pub graph: String,
    pub device_profile: String,
    pub host_budget_bytes: u64,
    /// Peak, placed arena and predicted step of the training graph as built.
    pub unrewritten_peak_bytes: u64,
    pub unrewritten_arena_bytes: u64,
    pub unrewritten_step_seconds: f64,
    /// Smallest budget first.
    pub points: Vec<Point>,
}

/// The curve of training graph `g` over `steps` budgets (at least 2), with
/// `host_budget` host bytes, timed on `device`.
pub fn plan_curve(g: &Graph, device: &DeviceProfile, host_budget: u64, steps: usize) -> Result<PlanCurve> {
    let step_seconds = |g: &Graph| timeline::simulate(g, g.schedule(), device).step_seconds;
    let unrewritten = Footprint::of(g, g.schedule());
    let (peak, arena) = (unrewritten.device.peak_bytes, unrewritten.device.arena_bytes);
    let base = step_seconds(g);
    let speeds = Speeds::from_profile(g, device);
    let options = |device_budget| PlanOptions { device_budget, host_budget, max_chain: DEFAULT_MAX_CHAIN };
    let smallest = planner::plan(g, g.schedule(), &speeds, options(0)).device_peak.min(peak);
    let fitting = |graph: &Graph, f: &Footprint| {
        let step = step_seconds(graph);
        Fitting {
            step_seconds: step,
            overhead: step / base,
            device_peak_bytes: f.device.peak_bytes,
            host_peak_bytes: f.host.peak_bytes,
            device_arena_bytes: f.device.arena_bytes,
            host_arena_bytes: f.host.arena_bytes,
        }
    };
    let last = steps.max(2) as u64 - 1;
    let mut points = Vec::with_capacity(steps);
    for i in 0..=last {
        let budget = smallest + (arena - smallest) * i / last;
        let found = match planner::search(g, device, options(budget)) {
            Ok(planned) => Some(fitting(&planned.fitted.graph, &planned.fitted.footprint)),
            Err(Error::NoPlan { .. }) => None,
            Err(e) => return Err(e),
        };
        // A plan that fits a lower budget on the curve fits this one too.
        let below = points.last().and_then(|p: &Point| p.auto.clone());
        let auto = match (found, below) {
            (Some(found), Some(below)) if below.step_seconds < found.step_seconds => Some(below),
            (found, below) => found.or(below),
        };
        let tflms = match tflms::fit(g, &TflmsConfig::default(), FreeKnobs::ALL, budget, host_budget) {
            Ok(f) => {
                let graph = match &f.plan {
                    Some(plan) => pipeline::apply_checked(g, &plan.patch)?.0,
                    None => g.clone(),
                };
                Some(fitting(&graph, &f.after))
            }
            Err(Error::OverBudget { .. }) => None,
            Err(e) => return Err(e),
        };
        points.push(Point { budget_bytes: budget, auto, tflms });
    }
    Ok(PlanCurve {
        graph: g.name.clone(),
        device_profile: device.name.clone(),
        host_budget_bytes: host_budget,
        unrewritten_peak_bytes: peak,
        unrewritten_arena_bytes: arena,
        unrewritten_step_seconds: base,
        points,
    })
}

impl PlanCurve {
    /// The table for people: one row per budget.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:?} on {}: unrewritten peak {} (arena {}), step {}; host budget {}",
            self.graph,
            self.device_profile,
            format_bytes(self.unrewritten_peak_bytes),
            format_bytes(self.unrewritten_arena_bytes),
            format_seconds(self.unrewritten_step_seconds),
            format_bytes(self.host_budget_bytes)
        );
        let _ = writeln!(s, "{:>12}  {:>22}  {:>22}", "budget", "auto", "tflms");
        let cell = |f: &Option<Fitting>| match f {
            Some(f) => format!("{} ({:.3}x)", format_seconds(f.step_seconds), f.overhead),
            None => "does not fit".to_string(),
        };
        for p in &self.points {
            let _ = writeln!(s, "{:>12}  {:>22}  {:>22}", format_bytes(p.budget_bytes), cell(&p.auto), cell(&p.tflms));
        }
        s
    }

    /// A line chart: predicted overhead (y) against device budget (x), one
    /// line per strategy.
    pub fn svg(&self) -> String {
        const W: f64 = 640.0;
        const H: f64 = 320.0;
        const PAD: f64 = 50.0;
        let fits = |f: &Option<Fitting>| f.as_ref().map(|f| f.overhead);
        let top = self.points.iter().flat_map(|p| [fits(&p.auto), fits(&p.tflms)]).flatten().fold(1.0, f64::max);
        let (lo, hi) = match (self.points.first(), self.points.last()) {
            (Some(a), Some(b)) => (a.budget_bytes as f64, (b.budget_bytes as f64).max(a.budget_bytes as f64 + 1.0)),
            _ => (0.0, 1.0),
        };
        let x = |bytes: u64| PAD + (bytes as f64 - lo) / (hi - lo) * (W - 2.0 * PAD);
        let y = |overhead: f64| PAD + H - (overhead - 1.0) / (top - 1.0).max(1e-9) * H;
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{}" font-family="sans-serif" font-size="12">"#,
            H + 2.5 * PAD
        );
        let _ = writeln!(
            out,
            r#"<text x="{PAD}" y="20">{} on {}: predicted step over the unrewritten step ({}) against device budget</text>"#,
            xml_escape(&self.graph),
            xml_escape(&self.device_profile),
            format_seconds(self.unrewritten_step_seconds)
        );
        let _ = writeln!(
            out,
            r##"<rect x="{PAD}" y="{PAD}" width="{}" height="{H}" fill="none" stroke="#999"/>"##,
            W - 2.0 * PAD
        );
        let bottom = PAD + H + 16.0;
        let _ = writeln!(out, r#"<text x="{PAD}" y="{bottom}">{}</text>"#, format_bytes(lo as u64));
        let _ =
            writeln!(out, r#"<text x="{}" y="{bottom}" text-anchor="end">{}</text>"#, W - PAD, format_bytes(hi as u64));
        let _ =
            writeln!(out, r#"<text x="4" y="{}">{top:.2}x</text><text x="4" y="{}">1.00x</text>"#, PAD + 4.0, PAD + H);
        for (i, (name, color)) in [("auto", "#1f77b4"), ("tflms", "#d62728")].into_iter().enumerate() {
            let points: Vec<String> = self
                .points
                .iter()
                .filter_map(|p| {
                    let f = if name == "auto" { &p.auto } else { &p.tflms };
                    fits(f).map(|o| format!("{:.1},{:.1}", x(p.budget_bytes), y(o)))
                })
                .collect();
            let _ = writeln!(out, r#"<polyline fill="none" stroke="{color}" points="{}"/>"#, points.join(" "));
            for point in &points {
                let (cx, cy) = point.split_once(',').expect("x,y");
                let _ = writeln!(out, r#"<circle cx="{cx}" cy="{cy}" r="3" fill="{color}"/>"#);
            }
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}" fill="{color}">{name}</text>"#,
                PAD,
                bottom + 20.0 + 16.0 * i as f64
            );
        }
        out.push_str("</svg>\n");
        out
    }
}

/// `text` with XML's special characters escaped.
fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
