//! The SVG picture of simulated training steps (`lms simulate --svg`, and
//! inline in the HTML report): device memory of each graph in one panel and
//! host memory (swapped tensors) in a second panel with its own scale, on one
//! time axis shared by all graphs that ends with the longest step (before and
//! after a rewrite have different op counts, but one step of each has a
//! predicted duration), each panel with its budget labelled in the margin;
//! under them each graph's three streams (compute, device-to-host,
//! host-to-device) on the same axis; then a legend, inside the picture.
//! Hovering a copy or a peak names its tensor or op.

use super::{format_seconds, SimulateReport};
use crate::emit::chart::{self, escape, LegendEntry, Marker, Plot, Scale, Swatch, Unit, LINE};
use crate::units::format_bytes;
use lms_proto::trace::{Lane, TraceEvent};
use std::fmt::Write;

/// A graph's report and its label (`before`, `after`).
pub type Series<'a> = (&'a str, &'a SimulateReport);

/// Width of the picture.
const WIDTH: f64 = 960.0;
/// Left margin: the y axis's labels and the lanes' names.
const LEFT: f64 = 110.0;
const DEVICE_HEIGHT: f64 = 240.0;
const HOST_HEIGHT: f64 = 140.0;
/// Space between the panels.
const GAP: f64 = 16.0;
/// Space under the last panel for the time axis's labels and title.
const X_AXIS: f64 = 50.0;
const LANE: f64 = 14.0;
/// Colours of the graphs' curves, in series order.
const SERIES_COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
/// Colours of the lanes, in `Lane::ALL` order.
const LANE_COLORS: [&str; 3] = ["#7f7f7f", "#ff7f0e", "#17becf"];

/// The picture of `series`, one graph each, as a standalone SVG document.
pub fn memory_and_streams(series: &[Series<'_>]) -> String {
    let mut body = String::new();
    let profiles = distinct(series.iter().map(|(_, r)| r.device_profile.as_str()));
    let under_title = chart::title(
        &mut body,
        &format!("Memory over one training step, predicted on {}", profiles.join(" / ")),
        LEFT,
        WIDTH - LEFT - 10.0,
    );
    let frame = Frame::new(series, under_title + 10.0);
    let lowest = frame.host.as_ref().unwrap_or(&frame.device).bottom();
    let lanes_top = lowest + X_AXIS;
    let lanes_bottom = lanes_top + series.len() as f64 * (LINE + 3.0 * LANE + 10.0);
    frame.device.y_axis(&mut body, "device", &format!("device memory ({})", frame.device.y.unit.name));
    if let Some(host) = &frame.host {
        host.y_axis(&mut body, "host", &format!("host memory ({})", host.y.unit.name));
    }
    frame.device.x_axis(
        &mut body,
        &format!("time from the start of the step ({})", frame.device.x.unit.name),
        lanes_bottom,
        lowest,
    );
    if let Some(budget) = frame.budget {
        frame.device.reference(&mut body, "budget", budget as f64, &["device budget".into(), format_bytes(budget)]);
    }
    if let (Some(host), Some(budget)) = (&frame.host, frame.host_budget) {
        host.reference(&mut body, "budget host-budget", budget as f64, &["host budget".into(), format_bytes(budget)]);
    }
    for ((name, report), color) in series.iter().zip(SERIES_COLORS.iter().cycle()) {
        frame.curves(&mut body, name, report, color);
    }
    let mut y = lanes_top;
    for (name, report) in series {
        frame.lanes(&mut body, name, report, y);
        y += LINE + 3.0 * LANE + 10.0;
    }
    let height = chart::legend(&mut body, &legend_entries(series, &frame), LEFT, lanes_bottom + 10.0) + 10.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="lms-step" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    chart::background(&mut out, WIDTH, height);
    out.push_str(&body);
    out.push_str("</svg>\n");
    out
}

/// The values of `items` in first-seen order, each once.
fn distinct<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = Vec::new();
    for item in items {
        if !seen.contains(&item) {
            seen.push(item);
        }
    }
    seen
}

/// The panels: device memory, and host memory when any graph swaps; one
/// time scale for both, ending with the longest step.
struct Frame {
    device: Plot,
    host: Option<Plot>,
    /// The budgets drawn, from the first graph that has one.
    budget: Option<u64>,
    host_budget: Option<u64>,
}

impl Frame {
    fn new(series: &[Series<'_>], top: f64) -> Frame {
        let budget = series.iter().find_map(|(_, r)| r.budget_device_bytes);
        let host_budget = series.iter().find_map(|(_, r)| r.budget_host_bytes);
        let longest = series.iter().map(|(_, r)| r.predicted_step_seconds).fold(0.0, f64::max);
        let x = Scale::exact(0.0, longest, Unit::seconds(longest));
        let width = WIDTH - LEFT - chart::LABEL_MARGIN;
        let bytes = |max: u64| Scale::to_tick(0.0, max as f64, Unit::bytes(max as f64));
        // Headroom above the highest of peaks and budget, so a budget line never lies on the frame.
        let device_max = series.iter().map(|(_, r)| r.peak_device_bytes).chain(budget).max().unwrap_or(0) * 21 / 20;
        let device = Plot { left: LEFT, top, width, height: DEVICE_HEIGHT, x: x.clone(), y: bytes(device_max) };
        let host_max = series.iter().map(|(_, r)| r.peak_host_bytes).max().unwrap_or(0);
        let host = (host_max > 0).then(|| Plot {
            left: LEFT,
            top: device.bottom() + GAP,
            width,
            height: HOST_HEIGHT,
            x,
            y: bytes(host_max),
        });
        Frame { device, host, budget, host_budget }
    }

    /// A graph's device curve (solid, in the device panel), host curve
    /// (dashed, in the host panel, when anything lives in host memory) and
    /// a marker at its device peak naming the op.
    fn curves(&self, out: &mut String, name: &str, report: &SimulateReport, color: &str) {
        let host = self.host.as_ref().map(|plot| (plot, "host", &report.host_timeline, r#" stroke-dasharray="5 3""#));
        for (plot, pool, timeline, dash) in std::iter::once((&self.device, "device", &report.timeline, "")).chain(host)
        {
            if pool == "host" && timeline.iter().all(|&b| b == 0) {
                continue;
            }
            let peak = timeline.iter().copied().max().unwrap_or(0);
            let _ = writeln!(
                out,
                r#"<polyline class="curve" data-series="{}" data-pool="{pool}" fill="none" stroke="{color}"{dash} points="{}"><title>{}: {pool} memory, peak {}</title></polyline>"#,
                escape(name),
                step_points(plot, timeline, &report.timeline_seconds, report.predicted_step_seconds),
                escape(name),
                format_bytes(peak)
            );
        }
        let peak_step = report.timeline.iter().position(|&b| b == report.peak_device_bytes);
        if let Some(at) = peak_step.and_then(|step| report.timeline_seconds.get(step)) {
            Marker::Circle.draw(
                out,
                self.device.x(*at),
                self.device.y(report.peak_device_bytes as f64),
                color,
                "peak",
                &format!("{name}: device peak {} at '{}'", format_bytes(report.peak_device_bytes), report.peak_op),
            );
        }
    }

    /// A graph's three streams from `top`: a heading, then one lane each,
    /// named in the left margin. Kernels closer than half a pixel merge into
    /// one bar; each copy is its own bar titled with its tensor.
    fn lanes(&self, out: &mut String, name: &str, report: &SimulateReport, top: f64) {
        let plot = &self.device;
        let _ = writeln!(
            out,
            r#"<g class="lanes" data-series="{}"><text x="{LEFT}" y="{:.1}">{}: step {} on {} (compute stalled {})</text>"#,
            escape(name),
            top + 13.0,
            escape(name),
            format_seconds(report.predicted_step_seconds),
            escape(&report.device_profile),
            format_seconds(report.stall_seconds)
        );
        for (row, (lane, color)) in Lane::ALL.into_iter().zip(LANE_COLORS).enumerate() {
            let y = top + LINE + row as f64 * LANE;
            let _ = writeln!(
                out,
                r##"<g class="lane" data-lane="{}"><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end" fill="#555">{}</text><rect x="{LEFT}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="#f4f4f4"/>"##,
                lane.name(),
                LEFT - 8.0,
                y + LANE - 4.0,
                lane.name(),
                plot.x(report.predicted_step_seconds) - LEFT,
                LANE - 2.0
            );
            let events = report.trace.iter().filter(|e| e.lane == lane && e.dur_us > 0.0);
            if lane == Lane::Compute {
                for (x0, x1, kernels) in merged(plot, events) {
                    let _ = writeln!(
                        out,
                        r#"<rect x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{color}"><title>{kernels} kernel(s)</title></rect>"#,
                        (x1 - x0).max(0.5),
                        LANE - 2.0
                    );
                }
            } else {
                for e in events {
                    let (x0, x1) = (plot.x(e.start_us * 1e-6), plot.x((e.start_us + e.dur_us) * 1e-6));
                    let _ = writeln!(
                        out,
                        r#"<rect class="copy" x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{color}"><title>{}</title></rect>"#,
                        (x1 - x0).max(0.5),
                        LANE - 2.0,
                        escape(&copy_title(e))
                    );
                }
            }
            out.push_str("</g>\n");
        }
        out.push_str("</g>\n");
    }
}

/// `bytes` at each step as a step function over the steps' times, in
/// `plot`: each value holds until the next step starts, the last until `end`.
fn step_points(plot: &Plot, bytes: &[u64], seconds: &[f64], end: f64) -> String {
    let mut points: Vec<String> = Vec::with_capacity(2 * bytes.len() + 1);
    let mut push = |x: f64, y: f64| {
        let p = format!("{x:.1},{y:.1}");
        if points.last() != Some(&p) {
            points.push(p);
        }
    };
    let mut held = None;
    for (&b, &t) in bytes.iter().zip(seconds) {
        let (x, y) = (plot.x(t), plot.y(b as f64));
        if let Some(previous) = held {
            push(x, previous);
        }
        push(x, y);
        held = Some(y);
    }
    if let (Some(y), Some(&last)) = (held, seconds.last()) {
        push(plot.x(end.max(last)), y);
    }
    points.join(" ")
}

/// Busy spans of `events` in pixels, neighbours closer than half a pixel
/// merged, with the number of events in each.
fn merged<'e>(plot: &Plot, events: impl Iterator<Item = &'e TraceEvent>) -> Vec<(f64, f64, usize)> {
    let mut spans: Vec<(f64, f64, usize)> = Vec::new();
    for e in events {
        let (x0, x1) = (plot.x(e.start_us * 1e-6), plot.x((e.start_us + e.dur_us) * 1e-6));
        match spans.last_mut() {
            Some(last) if x0 - last.1 < 0.5 => (last.1, last.2) = (last.1.max(x1), last.2 + 1),
            _ => spans.push((x0, x1, 1)),
        }
    }
    spans
}

/// The hover text of a copy: its tensor (when the plan names it), node and time.
fn copy_title(e: &TraceEvent) -> String {
    let arg = |key: &str| e.args.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let what = if e.lane == Lane::DeviceToHost { "swap-out" } else { "swap-in" };
    let bytes = arg("bytes").and_then(|b| b.parse::<u64>().ok()).map_or_else(String::new, |b| format_bytes(b / 2));
    match arg("tensor") {
        Some(tensor) => format!("{what} of {tensor} ({bytes}, {}): {}", format_seconds(e.dur_us * 1e-6), e.name),
        None => format!("{what} {} ({bytes}, {})", e.name, format_seconds(e.dur_us * 1e-6)),
    }
}

/// The legend: each graph's curves, the budget lines, the lanes' colours.
fn legend_entries(series: &[Series<'_>], frame: &Frame) -> Vec<LegendEntry> {
    let line =
        |color: &str, dashed: bool, marker: Option<Marker>| Swatch::Line { color: color.to_string(), dashed, marker };
    let mut entries = Vec::new();
    for ((name, report), &color) in series.iter().zip(SERIES_COLORS.iter().cycle()) {
        entries.push(LegendEntry {
            swatch: line(color, false, Some(Marker::Circle)),
            text: format!(
                "{name} device memory: peak {} at '{}' (marked)",
                format_bytes(report.peak_device_bytes),
                report.peak_op
            ),
        });
        if report.host_timeline.iter().any(|&b| b > 0) {
            entries.push(LegendEntry {
                swatch: line(color, true, None),
                text: format!("{name} host memory (swapped tensors): peak {}", format_bytes(report.peak_host_bytes)),
            });
        }
    }
    if let Some(budget) = frame.budget {
        entries.push(LegendEntry {
            swatch: line("#000", true, None),
            text: format!("device budget {}", format_bytes(budget)),
        });
    }
    if let (Some(_), Some(budget)) = (&frame.host, frame.host_budget) {
        entries.push(LegendEntry {
            swatch: line("#000", true, None),
            text: format!("host budget {}", format_bytes(budget)),
        });
    }
    for (lane, color) in Lane::ALL.into_iter().zip(LANE_COLORS) {
        let what = match lane {
            Lane::Compute => "compute stream: kernels",
            Lane::DeviceToHost => "device-to-host stream: swap-outs",
            Lane::HostToDevice => "host-to-device stream: swap-ins",
        };
        entries.push(LegendEntry { swatch: Swatch::Bar { color: color.to_string() }, text: what.to_string() });
    }
    entries
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analysis::profile::DeviceProfile;
    use crate::frontend::{self, FrontendOptions};
    use crate::ir::Graph;
    use crate::passes::tflms::{self, TflmsConfig};
    use crate::train::{self, TrainOptions};
    use roxmltree::{Document, Node};

    /// The small GPT fixture at batch 32 before and after TFLMS (default
    /// knobs), simulated on the H100 profile; the rewritten graph's plan
    /// has a 2200 KiB device budget, which it fits and the original does not.
    pub(crate) fn before_and_after() -> (SimulateReport, SimulateReport) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/models/tiny_gpt.onnx");
        let model = frontend::load(&path, &FrontendOptions { batch: Some(32), ..Default::default() }).unwrap();
        let training = train::build(&model.graph, &TrainOptions::default()).unwrap();
        let (mut rewritten, _) = tflms::rewrite(&training, &TflmsConfig::default()).unwrap();
        rewritten.plan.budget_device_bytes = Some(2200 << 10);
        let device = DeviceProfile::load("h100-sxm").unwrap();
        let simulate = |g: &Graph| SimulateReport::new(g, g.schedule(), &device);
        let (before, after) = (simulate(&training), simulate(&rewritten));
        assert!(after.peak_device_bytes <= 2200 << 10 && before.peak_device_bytes > 2200 << 10);
        (before, after)
    }

    fn number_attr(node: Node<'_, '_>, name: &str) -> f64 {
        node.attribute(name).unwrap_or_else(|| panic!("<{}> has no {name}", node.tag_name().name())).parse().unwrap()
    }

    fn elements<'a, 'i>(doc: &'a Document<'i>, tag: &str) -> Vec<Node<'a, 'i>> {
        doc.descendants().filter(|n| n.has_tag_name(tag)).collect()
    }

    /// The x and y of each point of a polyline.
    fn points(line: Node<'_, '_>) -> Vec<(f64, f64)> {
        let values = line.attribute("points").unwrap().split(' ').map(|p| p.split_once(',').unwrap());
        values.map(|(x, y)| (x.parse().unwrap(), y.parse().unwrap())).collect()
    }

    fn curve<'a, 'i>(doc: &'a Document<'i>, series: &str, pool: &str) -> Node<'a, 'i> {
        let found = elements(doc, "polyline")
            .into_iter()
            .find(|n| n.attribute("data-series") == Some(series) && n.attribute("data-pool") == Some(pool));
        found.unwrap_or_else(|| panic!("no {series} {pool} curve"))
    }

    fn title(node: Node<'_, '_>) -> String {
        node.children().find(|c| c.has_tag_name("title")).and_then(|t| t.text()).unwrap_or_default().to_string()
    }

    #[test]
    fn every_label_and_the_legend_lie_inside_the_picture() {
        let (before, after) = before_and_after();
        let picture = memory_and_streams(&[("before", &before), ("after", &after)]);
        let doc = Document::parse(&picture).unwrap();
        let svg = doc.root_element();
        let (width, height) = (number_attr(svg, "width"), number_attr(svg, "height"));
        let texts = elements(&doc, "text");
        for text in &texts {
            let (x, y) = (number_attr(*text, "x"), number_attr(*text, "y"));
            assert!((0.0..=width).contains(&x) && (12.0..=height).contains(&y), "{:?} at ({x}, {y})", text.text());
        }
        let legend = doc.descendants().find(|n| n.attribute("class") == Some("legend")).unwrap();
        let lines: Vec<String> =
            legend.descendants().filter(|n| n.has_tag_name("text")).map(|t| t.text().unwrap().into()).collect();
        assert_eq!(lines.len(), 7, "before device, after device and host, budget, three lanes: {lines:?}");
        assert!(lines[0].starts_with("before device memory: peak") && lines[2].starts_with("after host memory"));
        let lowest =
            legend.descendants().filter(|n| n.has_tag_name("text")).map(|t| number_attr(t, "y")).fold(0.0, f64::max);
        assert!(lowest + 4.0 <= height, "the legend's last line at {lowest} is cut off at {height}");
    }

    #[test]
    fn before_and_after_share_one_time_axis() {
        let (before, after) = before_and_after();
        let doc_text = memory_and_streams(&[("before", &before), ("after", &after)]);
        let doc = Document::parse(&doc_text).unwrap();
        let start = |series: &str| points(curve(&doc, series, "device"))[0].0;
        let end = |series: &str| points(curve(&doc, series, "device")).iter().map(|p| p.0).fold(0.0, f64::max);
        assert_eq!((start("before"), start("after")), (LEFT, LEFT));
        // The x of each curve's end is its step's predicted time on the shared axis.
        let ratio = (end("after") - LEFT) / (end("before") - LEFT);
        let expected = after.predicted_step_seconds / before.predicted_step_seconds;
        assert!((ratio / expected - 1.0).abs() < 0.01, "curves end at {ratio}x, steps take {expected}x");
        assert!(after.predicted_step_seconds > before.predicted_step_seconds, "swapping adds time");
        // Each lane ends where its graph's curve does.
        for (series, report) in [("before", &before), ("after", &after)] {
            let lanes = doc.descendants().find(|n| n.attribute("data-series") == Some(series) && n.has_tag_name("g"));
            for rect in lanes.unwrap().descendants().filter(|n| n.has_tag_name("rect")) {
                let right = number_attr(rect, "x") + number_attr(rect, "width");
                assert!(right <= end(series) + 0.6, "{series} bar ends at {right} after the curve's {}", end(series));
            }
            assert!(report.trace.iter().any(|e| e.lane == Lane::Compute));
        }
    }

    #[test]
    fn axes_are_labelled_with_units_and_the_budget_separates_the_peaks() {
        let (before, after) = before_and_after();
        let doc_text = memory_and_streams(&[("before", &before), ("after", &after)]);
        let doc = Document::parse(&doc_text).unwrap();
        let axis_texts = |class: &str| -> Vec<String> {
            let axis = doc.descendants().find(|n| n.attribute("class") == Some(class)).unwrap();
            axis.descendants().filter(|n| n.has_tag_name("text")).map(|t| t.text().unwrap().to_string()).collect()
        };
        let (y, x) = (axis_texts("axis y"), axis_texts("axis x"));
        assert_eq!(
            (y.first().map(String::as_str), y.last().map(String::as_str)),
            (Some("0 MiB"), Some("device memory (MiB)"))
        );
        assert!(y[1..y.len() - 1].iter().all(|t| t.ends_with(" MiB")) && y.len() >= 4, "{y:?}");
        assert!(x[..x.len() - 1].iter().all(|t| t.ends_with(" µs") || t.ends_with(" ms")) && x.len() >= 4, "{x:?}");
        assert!(x.last().unwrap().starts_with("time from the start of the step"));
        let budget = doc.descendants().find(|n| n.attribute("class") == Some("budget")).unwrap();
        assert_eq!(title(budget), "device budget 2.15 MiB");
        let line = budget.children().find(|n| n.has_tag_name("line")).unwrap();
        let budget_y = number_attr(line, "y1");
        let peak_y = |series: &str| points(curve(&doc, series, "device")).iter().map(|p| p.1).fold(f64::MAX, f64::min);
        assert!(peak_y("before") < budget_y && peak_y("after") > budget_y, "only the rewrite fits under the line");
    }

    #[test]
    fn time_ends_with_the_step_and_host_memory_has_its_own_panel_and_scale() {
        let (before, after) = before_and_after();
        let doc_text = memory_and_streams(&[("before", &before), ("after", &after)]);
        let doc = Document::parse(&doc_text).unwrap();
        let frames: Vec<Node<'_, '_>> =
            elements(&doc, "rect").into_iter().filter(|n| n.attribute("class") == Some("frame")).collect();
        assert_eq!(frames.len(), 2, "a device panel and a host panel");
        let right = number_attr(frames[0], "x") + number_attr(frames[0], "width");
        let end = points(curve(&doc, "after", "device")).iter().map(|p| p.0).fold(0.0, f64::max);
        assert!((end - right).abs() < 0.2, "the longest step ends at {end}, the axis at {right}");
        let (host_top, host_bottom) =
            (number_attr(frames[1], "y"), number_attr(frames[1], "y") + number_attr(frames[1], "height"));
        let host = points(curve(&doc, "after", "host"));
        assert!(host.iter().all(|p| p.1 >= host_top - 0.1 && p.1 <= host_bottom + 0.1), "host curve outside its panel");
        let top_of_host = host.iter().map(|p| p.1).fold(f64::MAX, f64::min);
        assert!(top_of_host < host_top + (host_bottom - host_top) / 2.0, "the host peak fills its own scale");
        let background = elements(&doc, "rect").into_iter().find(|n| n.attribute("class") == Some("background"));
        assert_eq!(background.and_then(|b| b.attribute("fill")), Some("#fff"), "an opaque background");
        // The budget's label sits in the right margin, where no curve runs.
        let budget = doc.descendants().find(|n| n.attribute("class") == Some("budget")).unwrap();
        for label in budget.children().filter(|n| n.has_tag_name("text")) {
            assert!(number_attr(label, "x") > right, "budget label inside the plot");
        }
    }

    #[test]
    fn copies_name_their_tensors_and_odd_names_are_escaped() {
        let (before, mut after) = before_and_after();
        let swapped = after.decisions[0].tensor.clone();
        for e in after.trace.iter_mut() {
            for (_, v) in e.args.iter_mut().filter(|(k, v)| k == "tensor" && *v == swapped) {
                *v = format!("<{swapped} & \"co\">");
            }
        }
        let picture = memory_and_streams(&[("before", &before), ("after", &after)]);
        assert_eq!(picture, memory_and_streams(&[("before", &before), ("after", &after)]), "same report, same bytes");
        let doc = Document::parse(&picture).unwrap();
        let copies: Vec<String> =
            doc.descendants().filter(|n| n.attribute("class") == Some("copy")).map(title).collect();
        let in_plan = after.decisions.len();
        assert!(copies.len() >= 2 * in_plan, "{} copies for {in_plan} swaps", copies.len());
        assert!(copies.iter().any(|t| t.starts_with(&format!("swap-out of <{swapped} & \"co\"> ("))), "{copies:?}");
        assert!(copies.iter().any(|t| t.starts_with(&format!("swap-in of <{swapped} & \"co\"> ("))));
        let peak = doc.descendants().find(|n| n.attribute("class") == Some("peak")).unwrap();
        assert!(title(peak).contains(&format!("at '{}'", before.peak_op)));
    }
}
