//! `lms plan-curve`: predicted step time against device budget, for the
//! budget planner (`auto`) and TFLMS, from the smallest live peak the
//! planner reaches — on the graph as built or split along the batch into
//! the most parts, where `auto` matters most — to the unrewritten graph's
//! placed arena (no limit needed), at evenly spaced budgets. Each point is a full plan whose
//! placed arenas fit the budgets, applied to the training graph and timed on
//! the device profile's three-stream timeline. Auto's point is the fastest
//! of the search's plan at that budget (`planner::search`, what `compile`
//! writes) and auto's point at the budget before it, which fits this one
//! too: its curve never rises with the budget.

use crate::analysis::footprint::Footprint;
use crate::analysis::profile::DeviceProfile;
use crate::analysis::timeline;
use crate::budget::Budget;
use crate::commands::simulate::format_seconds;
use crate::egraph::rules::split::MAX_PARTS;
use crate::emit::chart::{self, LegendEntry, Marker, Plot, Scale, Swatch, Unit};
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::passes::planner::{self, PlanOptions, Speeds};
use crate::passes::split::{batch_patch, BatchSplit};
use crate::passes::tflms::{self, FreeKnobs, TflmsConfig};
use crate::pipeline;
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
    let options = |device_budget| PlanOptions::new(Budget { device: device_budget, host: host_budget });
    let unsplit_smallest = planner::plan(g, g.schedule(), &speeds, options(0)).device_peak;
    let smallest = unsplit_smallest.min(smallest_split_peak(g, device, options(0))).min(peak);
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
            Ok(planned) => {
                let graph = &planned.fitted.graph;
                Some(fitting(graph, &Footprint::of(graph, graph.schedule())))
            }
            Err(Error::NoPlan { .. }) => None,
            Err(e) => return Err(e),
        };
        // A plan that fits a lower budget on the curve fits this one too.
        let below = points.last().and_then(|p: &Point| p.auto.clone());
        let auto = match (found, below) {
            (Some(found), Some(below)) if below.step_seconds < found.step_seconds => Some(below),
            (found, below) => found.or(below),
        };
        let tflms = match tflms::fit(
            g,
            &TflmsConfig::default(),
            FreeKnobs::ALL,
            Budget { device: budget, host: host_budget },
        ) {
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

/// The smallest live peak the planner reaches on `g` split along the batch
/// into the most parts ([`MAX_PARTS`], every op), under `options`; `u64::MAX`
/// when the graph has no batch split.
fn smallest_split_peak(g: &Graph, device: &DeviceProfile, options: PlanOptions) -> u64 {
    let split = BatchSplit { parts: MAX_PARTS, min_bytes: 0 };
    let Some((patch, _)) = batch_patch(g, &split) else { return u64::MAX };
    // A split the emission cannot carry out has no plans to draw.
    let Ok((graph, _)) = pipeline::apply_checked(g, &patch) else { return u64::MAX };
    let speeds = Speeds::from_profile(&graph, device);
    planner::plan(&graph, graph.schedule(), &speeds, options).device_peak
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

    /// A line chart: predicted step over the unrewritten step (y) against
    /// device budget (x), one line per strategy with a marker at each plan;
    /// a budget where a strategy has no plan gets a cross in the strip under
    /// the plot.
    pub fn svg(&self) -> String {
        const WIDTH: f64 = 760.0;
        const LEFT: f64 = 80.0;
        const HEIGHT: f64 = 300.0;
        /// The strip of budgets without a plan.
        const STRIP: f64 = 30.0;
        let mut body = String::new();
        let title = format!(
            "{} on {}: predicted step over the unrewritten step ({}) against the device budget, host budget {}",
            self.graph,
            self.device_profile,
            format_seconds(self.unrewritten_step_seconds),
            format_bytes(self.host_budget_bytes)
        );
        let below_title = chart::title(&mut body, &title, LEFT, WIDTH - LEFT - 10.0);
        let (lo, hi) = match (self.points.first(), self.points.last()) {
            (Some(a), Some(b)) => (a.budget_bytes as f64, b.budget_bytes as f64),
            _ => (0.0, 1.0),
        };
        let top = STRATEGIES
            .iter()
            .flat_map(|(_, pick, ..)| self.points.iter().filter_map(|p| pick(p).map(|f| f.overhead)))
            .fold(1.05, f64::max);
        let plot = Plot {
            left: LEFT,
            top: below_title + 10.0,
            width: WIDTH - LEFT - chart::LABEL_MARGIN,
            height: HEIGHT,
            x: Scale::exact(lo, hi, Unit::bytes(hi)),
            y: Scale::to_tick(1.0, top, Unit::RATIO),
        };
        plot.y_axis(&mut body, "overhead", "predicted step ÷ unrewritten step");
        let strip = plot.bottom() + STRIP / 2.0;
        plot.x_axis(
            &mut body,
            &format!("device budget ({})", plot.x.unit.name),
            plot.bottom() + STRIP,
            plot.bottom() + STRIP,
        );
        let _ = writeln!(
            body,
            r##"<text class="strip-label" x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="#555">no plan</text>"##,
            LEFT - 8.0,
            strip + 4.0
        );
        for (i, (name, pick, color, marker)) in STRATEGIES.iter().enumerate() {
            let _ = writeln!(body, r#"<g class="strategy" data-strategy="{name}">"#);
            let mut run: Vec<String> = Vec::new();
            let mut runs: Vec<Vec<String>> = Vec::new();
            for p in &self.points {
                let x = plot.x(p.budget_bytes as f64);
                match pick(p) {
                    Some(f) => {
                        let y = plot.y(f.overhead);
                        run.push(format!("{x:.1},{y:.1}"));
                        let hover = format!(
                            "{name} at {}: {} ({:.3}×), device arena {}",
                            format_bytes(p.budget_bytes),
                            format_seconds(f.step_seconds),
                            f.overhead,
                            format_bytes(f.device_arena_bytes)
                        );
                        marker.draw(&mut body, x, y, color, "point", &hover);
                    }
                    None => {
                        runs.extend((!run.is_empty()).then(|| std::mem::take(&mut run)));
                        let hover = format!("{name} at {}: no plan fits", format_bytes(p.budget_bytes));
                        let y = strip + (i as f64 - 0.5) * 8.0;
                        Marker::Cross.draw(&mut body, x, y, color, "no-plan", &hover);
                    }
                }
            }
            runs.extend((!run.is_empty()).then_some(run));
            for run in runs {
                let _ = writeln!(body, r#"<polyline fill="none" stroke="{color}" points="{}"/>"#, run.join(" "));
            }
            body.push_str("</g>\n");
        }
        let legend: Vec<LegendEntry> = STRATEGIES
            .iter()
            .map(|(name, _, color, marker)| LegendEntry {
                swatch: Swatch::Line { color: color.to_string(), dashed: false, marker: Some(*marker) },
                text: match *name {
                    "auto" => "auto: the budget planner's search (what compile --strategy auto writes)".to_string(),
                    _ => "tflms: TFLMS's swap plan".to_string(),
                },
            })
            .chain(std::iter::once(LegendEntry {
                swatch: Swatch::Marker { color: "#555".to_string(), marker: Marker::Cross },
                text: "no plan of that strategy fits the budget (in its colour, under the plot)".to_string(),
            }))
            .collect();
        let height = chart::legend(&mut body, &legend, LEFT, plot.bottom() + STRIP + 50.0) + 10.0;
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="lms-plan-curve" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
        );
        chart::background(&mut out, WIDTH, height);
        out.push_str(&body);
        out.push_str("</svg>\n");
        out
    }
}

/// How a strategy's points are read from a [`Point`].
type Pick = fn(&Point) -> Option<&Fitting>;

/// The strategies of the chart: name, its points, colour, marker.
const STRATEGIES: [(&str, Pick, &str, Marker); 2] = [
    ("auto", |p| p.auto.as_ref(), "#1f77b4", Marker::Circle),
    ("tflms", |p| p.tflms.as_ref(), "#d62728", Marker::Square),
];

#[cfg(test)]
mod tests {
    use super::*;
    use roxmltree::Document;

    fn fitting(step_seconds: f64) -> Fitting {
        Fitting {
            step_seconds,
            overhead: step_seconds / 1e-3,
            device_peak_bytes: 1 << 20,
            host_peak_bytes: 0,
            device_arena_bytes: 1 << 20,
            host_arena_bytes: 0,
        }
    }

    /// A curve over five budgets where TFLMS fits only the upper three.
    fn curve(graph: &str) -> PlanCurve {
        let points = (0..5u64)
            .map(|i| Point {
                budget_bytes: (1 << 20) + i * (300 << 10),
                auto: Some(fitting(1.6e-3 - i as f64 * 1e-4)),
                tflms: (i >= 2).then(|| fitting(2.2e-3 - i as f64 * 2e-4)),
            })
            .collect();
        PlanCurve {
            graph: graph.to_string(),
            device_profile: "h100-sxm".into(),
            host_budget_bytes: 64 << 30,
            unrewritten_peak_bytes: 3 << 20,
            unrewritten_arena_bytes: 3 << 20,
            unrewritten_step_seconds: 1e-3,
            points,
        }
    }

    #[test]
    fn the_chart_has_titled_ticked_axes_a_legend_with_markers_and_marks_budgets_without_a_plan() {
        let svg = curve("a graph with a name long enough to need a second line of title <&>").svg();
        let doc = Document::parse(&svg).unwrap();
        let width: f64 = doc.root_element().attribute("width").unwrap().parse().unwrap();
        let texts = |class: &str| -> Vec<String> {
            let axis = doc.descendants().find(|n| n.attribute("class") == Some(class)).unwrap();
            axis.descendants().filter(|n| n.has_tag_name("text")).map(|t| t.text().unwrap().to_string()).collect()
        };
        let (x, y) = (texts("axis x"), texts("axis y"));
        assert!(x.len() >= 4 && x[..x.len() - 1].iter().all(|t| t.ends_with(" MiB")), "{x:?}");
        assert_eq!(x.last().map(String::as_str), Some("device budget (MiB)"));
        assert!(y.len() >= 4 && y[..y.len() - 1].iter().all(|t| t.ends_with('×')), "{y:?}");
        assert_eq!(y[0], "1×");
        assert_eq!(y.last().map(String::as_str), Some("predicted step ÷ unrewritten step"));
        let title: Vec<&str> = doc
            .descendants()
            .find(|n| n.attribute("class") == Some("title"))
            .unwrap()
            .children()
            .filter_map(|t| t.text())
            .collect();
        assert!(title.len() >= 2, "{title:?}");
        assert!(title.iter().all(|l| 80.0 + l.chars().count() as f64 * chart::CHAR_WIDTH <= width), "{title:?}");
        assert!(title.concat().contains("<&>"));
        for text in doc.descendants().filter(|n| n.has_tag_name("text")) {
            let x: f64 = text.attribute("x").unwrap().parse().unwrap();
            assert!((0.0..=width).contains(&x), "{:?} at {x}", text.text());
        }
        let class_count = |class: &str| doc.descendants().filter(|n| n.attribute("class") == Some(class)).count();
        assert_eq!(class_count("point"), 5 + 3, "a marker at every plan");
        assert_eq!(class_count("no-plan"), 2, "a cross at each budget TFLMS does not fit");
        assert_eq!(class_count("swatch"), 3, "the legend's markers");
        assert_eq!(class_count("background"), 1);
    }
}
