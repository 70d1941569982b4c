//! The HTML report (`--html` on `lms compile` and `lms simulate`): one
//! self-contained page, nothing fetched from the network. It holds a
//! summary per graph (peaks, arenas, budgets, predicted step, stall, what
//! was swapped, recomputed and split), the picture of [`super::svg`]
//! (device and host memory before and after on a shared time axis with the
//! budgets, and the three streams), where the step's extra time goes (each
//! part of the growth, adding up to it), and the table of the plan's
//! decisions (swap, recompute, split: tensor, bytes, extra time, why), built
//! by a small script from the decisions embedded as JSON, sortable by any
//! column. Hovering a row, a copy or a peak names its tensor or op.

use super::svg::{self, Series};
use super::{format_seconds, SimulateReport};
use crate::emit::chart::escape;
use crate::units::format_bytes;
use serde::Serialize;
use std::borrow::Cow;
use std::fmt::Write;

/// One row of the decision table, as the page's script reads it.
#[derive(Serialize)]
struct Row<'a> {
    kind: &'a str,
    tensor: Cow<'a, str>,
    bytes: u64,
    bytes_text: String,
    extra_seconds: f64,
    extra_text: String,
    why: Cow<'a, str>,
}

/// The page for `series` (one graph, or before and after a rewrite); the
/// decision table lists the last graph's plan. `title` names the model.
pub fn report(title: &str, series: &[Series<'_>]) -> String {
    let mut page = String::new();
    let title = escape(title);
    let _ = writeln!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>lms report: {title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>lms report: {title}</h1>"
    );
    page.push_str(&summary(series));
    page.push_str("<h2>Memory and streams</h2>\n<figure>\n");
    page.push_str(&svg::memory_and_streams(series));
    page.push_str("</figure>\n");
    let before = match series {
        [(_, before), _, ..] => Some(*before),
        _ => None,
    };
    let last = series.last().map(|(_, r)| *r);
    let decisions = last.map_or(&[][..], |r| &r.decisions[..]);
    let mut rows: Vec<Row<'_>> = decisions
        .iter()
        .map(|d| Row {
            kind: d.kind,
            tensor: Cow::Borrowed(&d.tensor),
            bytes: d.bytes,
            bytes_text: format_bytes(d.bytes),
            extra_seconds: d.extra_seconds,
            extra_text: format_seconds(d.extra_seconds),
            why: Cow::Borrowed(&d.why),
        })
        .collect();
    if let Some(row) = last.and_then(|after| split_row(before, after)) {
        rows.push(row);
    }
    let count = match rows.len() {
        0 => "The plan holds no decisions.".to_string(),
        n => format!(
            "{n} decisions: {} swapped out, {} recomputed, {} of extra predicted time in all.",
            format_bytes(decisions.iter().filter(|d| d.kind == "swap").map(|d| d.bytes).sum()),
            format_bytes(decisions.iter().filter(|d| d.kind == "recompute").map(|d| d.bytes).sum()),
            format_seconds(rows.iter().map(|d| d.extra_seconds).sum())
        ),
    };
    if let (Some(before), Some(after)) = (before, last) {
        page.push_str(&time_accounting(before, after));
    }
    let json = serde_json::to_string(&rows).expect("rows serialize").replace('<', "\\u003c");
    let _ = writeln!(
        page,
        r##"<h2>Decisions</h2>
<p id="decision-count">{count}</p>
<table id="decisions">
<thead><tr><th data-key="index">#</th><th data-key="kind">kind</th><th data-key="tensor">tensor</th><th data-key="bytes">bytes</th><th data-key="extra_seconds">extra time</th><th data-key="why">why</th></tr></thead>
<tbody></tbody>
</table>
<noscript><p>The decision table is drawn by a script; the same decisions are in the JSON report.</p></noscript>
<script type="application/json" id="decision-data">{json}</script>
<script>{SCRIPT}</script>
</body>
</html>"##
    );
    page
}

/// One row per graph: ops, peaks and arenas, budgets and fit, predicted
/// step, and what the plan swapped, recomputed and split.
fn summary(series: &[Series<'_>]) -> String {
    let mut s = String::from(
        "<table class=\"summary\">\n<tr><th>graph</th><th>strategy</th><th>ops</th><th>device peak</th><th>device arena</th><th>host peak</th><th>budgets</th><th>step</th><th>compute stalled</th><th>swapped out</th><th>recomputed</th><th>split</th></tr>\n",
    );
    for (name, r) in series {
        let budget = match (r.budget_device_bytes, r.fits) {
            (Some(b), Some(fits)) => {
                let host = r.budget_host_bytes.map_or_else(String::new, |h| format!(", host {}", format_bytes(h)));
                format!("device {}{host} ({})", format_bytes(b), if fits { "fits" } else { "does not fit" })
            }
            _ => "none".to_string(),
        };
        let recomputed: u64 = r.decisions.iter().filter(|d| d.kind == "recompute").map(|d| d.bytes).sum();
        let split = r.split.as_ref().map_or_else(
            || "no".to_string(),
            |sp| format!("{} tensors in up to {} parts, {} kernels in parts", sp.tensors, sp.parts, sp.ops_in_parts),
        );
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td title=\"at '{}'\">{}</td><td>{}</td><td>{}</td><td>{budget}</td><td>{} on {}</td><td>{}</td><td>{}</td><td>{}</td><td>{split}</td></tr>",
            escape(name),
            escape(&r.strategy),
            r.nodes,
            escape(&r.peak_op),
            format_bytes(r.peak_device_bytes),
            format_bytes(r.arena_device_bytes),
            format_bytes(r.peak_host_bytes),
            format_seconds(r.predicted_step_seconds),
            escape(&r.device_profile),
            format_seconds(r.stall_seconds),
            format_bytes(r.d2h_bytes),
            format_bytes(recomputed)
        );
    }
    s.push_str("</table>\n");
    s
}

/// The decision row of the split `after` holds: the tensors it cuts, the
/// device bytes it saves and the kernel time it adds (both against
/// `before`, when the page has it; the kernel time less the recomputes').
fn split_row<'a>(before: Option<&SimulateReport>, after: &'a SimulateReport) -> Option<Row<'a>> {
    let split = after.split.as_ref()?;
    let recomputes: f64 = after.decisions.iter().filter(|d| d.kind == "recompute").map(|d| d.extra_seconds).sum();
    let (bytes, bytes_text, extra_seconds, extra_text) = match before {
        Some(b) => {
            let saved = b.peak_device_bytes.saturating_sub(after.peak_device_bytes);
            let extra = after.compute_seconds - b.compute_seconds - recomputes;
            (saved, format_bytes(saved), extra, format_seconds(extra))
        }
        None => (0, "n/a".to_string(), 0.0, "n/a".to_string()),
    };
    Some(Row {
        kind: "split",
        tensor: Cow::Owned(format!("{} tensors in up to {} parts", split.tensors, split.parts)),
        bytes,
        bytes_text,
        extra_seconds,
        extra_text,
        why: Cow::Owned(format!(
            "{} kernels run one part at a time so fewer bytes are live at once; its time is the parts' kernels and the merges",
            split.ops_in_parts
        )),
    })
}

/// Where the step's growth from `before` to `after` goes, in parts that add
/// up to it: recomputed kernels, the split's parts and merges (the rest of
/// the kernel time), the compute stream waiting for swap-ins (the swaps'
/// rows, and waits no single swap is charged with), and copies that run
/// after the last kernel or, on a device whose copies do not overlap
/// compute, in line with the kernels.
fn time_accounting(before: &SimulateReport, after: &SimulateReport) -> String {
    let sum = |kind: &str| after.decisions.iter().filter(|d| d.kind == kind).map(|d| d.extra_seconds).sum::<f64>();
    let (recomputes, swaps) = (sum("recompute"), sum("swap"));
    let growth = after.predicted_step_seconds - before.predicted_step_seconds;
    let kernels = after.compute_seconds - before.compute_seconds;
    let stall = after.stall_seconds - before.stall_seconds;
    let other_kernels =
        if after.split.is_some() { "split: the parts' kernels and the merges" } else { "other kernel time" };
    let parts = [
        ("recompute", "recomputed kernels (the recompute rows)", recomputes),
        ("split", other_kernels, kernels - recomputes),
        ("swap", "compute waiting for swap-ins (the swap rows)", swaps),
        ("stall", "compute waiting for copies no single swap is charged with", stall - swaps),
        ("copies", "copies after the last kernel, or in line with the kernels", growth - kernels - stall),
    ];
    let mut s = format!(
        "<h2>Where the extra time goes</h2>\n<p id=\"growth\">The step takes {} after and {} before: {} more, in these parts.</p>\n<table id=\"time-accounting\">\n<tr><th>part</th><th>extra time</th></tr>\n",
        format_seconds(after.predicted_step_seconds),
        format_seconds(before.predicted_step_seconds),
        format_seconds(growth)
    );
    for (key, what, seconds) in parts {
        if seconds.abs() > 1e-12 {
            let _ = writeln!(
                s,
                "<tr data-part=\"{key}\" data-seconds=\"{seconds:e}\"><td>{what}</td><td class=\"num\">{}</td></tr>",
                format_seconds(seconds)
            );
        }
    }
    s.push_str("</table>\n");
    s
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin:0.5em 0}\
th,td{border:1px solid #ccc;padding:2px 8px;text-align:left;font-size:13px}\
th[data-key]{cursor:pointer;background:#f0f0f0}\
td.num{text-align:right;font-variant-numeric:tabular-nums}\
tr.decision:hover{background:#fff4c2}\
figure{margin:0}";

/// Builds the decision rows from the embedded JSON; a click on a heading
/// sorts by that column (again: the other way).
const SCRIPT: &str = r##"
(function () {
  const rows = JSON.parse(document.getElementById("decision-data").textContent);
  rows.forEach(function (r, i) { r.index = i + 1; });
  const body = document.querySelector("#decisions tbody");
  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
  }
  function draw() {
    body.textContent = "";
    rows.forEach(function (r) {
      const tr = document.createElement("tr");
      tr.className = "decision";
      tr.dataset.kind = r.kind;
      tr.title = r.tensor;
      cell(tr, r.index, "num");
      cell(tr, r.kind);
      cell(tr, r.tensor);
      cell(tr, r.bytes_text, "num");
      cell(tr, r.extra_text, "num");
      cell(tr, r.why);
      body.appendChild(tr);
    });
  }
  let sorted = null;
  document.querySelectorAll("#decisions th[data-key]").forEach(function (th) {
    th.addEventListener("click", function () {
      const key = th.dataset.key;
      const sign = sorted === key ? -1 : 1;
      sorted = sign === 1 ? key : null;
      rows.sort(function (a, b) { return a[key] < b[key] ? -sign : a[key] > b[key] ? sign : a.index - b.index; });
      draw();
    });
  });
  draw();
})();
"##;

#[cfg(test)]
mod tests {
    use super::super::svg::tests::before_and_after;
    use super::*;

    #[test]
    fn the_page_is_self_contained_and_embeds_every_decision() {
        let (before, after) = before_and_after();
        let page = report("tiny_gpt (tiny_gpt.onnx)", &[("before", &before), ("after", &after)]);
        for outside in ["src=", "href=", "url(", "@import", "https:"] {
            assert!(!page.contains(outside), "the page reaches outside with {outside}");
        }
        assert_eq!(page.matches("http://").count(), 1, "only the SVG namespace");
        assert_eq!(page.matches("<svg ").count(), 1);
        assert_eq!(page.matches("<tr><td>").count(), 2, "one summary row per graph");
        let data = page.split("<script type=\"application/json\" id=\"decision-data\">").nth(1).unwrap();
        let rows: Vec<serde_json::Value> = serde_json::from_str(data.split("</script>").next().unwrap()).unwrap();
        assert_eq!(rows.len(), after.decisions.len());
        assert!(!rows.is_empty());
        for (row, decision) in rows.iter().zip(&after.decisions) {
            assert_eq!((row["kind"].as_str(), row["tensor"].as_str()), (Some("swap"), Some(decision.tensor.as_str())));
            assert_eq!(row["bytes"].as_u64(), Some(decision.bytes));
            assert_eq!(row["bytes_text"].as_str(), Some(format_bytes(decision.bytes).as_str()));
        }
        let n = after.decisions.len();
        assert!(page.contains(&format!("<p id=\"decision-count\">{n} decisions: ")));
    }

    #[test]
    fn names_cannot_end_the_script_or_add_markup() {
        let (before, mut after) = before_and_after();
        after.decisions[0].tensor = "</script><img src=x>".into();
        after.peak_op = "<b>op</b>".into();
        let page = report("a <model>", &[("before", &before), ("after", &after)]);
        assert_eq!(page.matches("</script>").count(), 2, "the data block's and the script's own");
        assert!(!page.contains("<img") && !page.contains("<b>op") && !page.contains("<model>"));
        assert!(page.contains("\\u003c/script>\\u003cimg src=x>"));
        assert!(page.contains("<title>lms report: a &lt;model&gt;</title>"));
        assert_eq!(page, report("a <model>", &[("before", &before), ("after", &after)]), "deterministic");
    }

    /// The `data-seconds` of each row of the time accounting, by part.
    fn accounting(page: &str) -> Vec<(String, f64)> {
        let table = page
            .split("<table id=\"time-accounting\">")
            .nth(1)
            .expect("a time accounting")
            .split("</table>")
            .next()
            .unwrap();
        table
            .split("<tr data-part=\"")
            .skip(1)
            .map(|row| {
                let (part, rest) = row.split_once('"').unwrap();
                let seconds = rest.split("data-seconds=\"").nth(1).unwrap().split('"').next().unwrap();
                (part.to_string(), seconds.parse().unwrap())
            })
            .collect()
    }

    #[test]
    fn the_parts_of_the_extra_time_add_up_to_the_steps_growth() {
        let (before, after) = before_and_after();
        let page = report("tiny_gpt", &[("before", &before), ("after", &after)]);
        let parts = accounting(&page);
        let total: f64 = parts.iter().map(|p| p.1).sum();
        let growth = after.predicted_step_seconds - before.predicted_step_seconds;
        assert!(
            (total - growth).abs() <= 1e-9 * growth.abs().max(1e-6),
            "{parts:?} add up to {total}, growth {growth}"
        );
        let swaps: f64 = after.decisions.iter().map(|d| d.extra_seconds).sum();
        let swap_row = parts.iter().find(|p| p.0 == "swap").map_or(0.0, |p| p.1);
        assert!((swap_row - swaps).abs() < 1e-12, "the swap part is the swap rows' sum");
        assert!(page.contains("<p id=\"growth\">The step takes "));
    }

    #[test]
    fn a_split_plan_has_a_split_row_and_says_so_in_the_summary() {
        use crate::analysis::profile::DeviceProfile;
        use crate::passes::split::{batch_patch, BatchSplit};
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/models/cnn_residual.onnx");
        let options = crate::frontend::FrontendOptions { batch: Some(8), ..Default::default() };
        let model = crate::frontend::load(&path, &options).unwrap();
        let whole = crate::train::build(&model.graph, &crate::train::TrainOptions::default()).unwrap();
        let (patch, _) = batch_patch(&whole, &BatchSplit { parts: 4, min_bytes: 0 }).unwrap();
        let (split, _) = crate::pipeline::apply_checked(&whole, &patch).unwrap();
        let device = DeviceProfile::load("h100-sxm").unwrap();
        let (before, after) = (
            SimulateReport::new(&whole, whole.schedule(), &device),
            SimulateReport::new(&split, split.schedule(), &device),
        );
        let summary = after.split.clone().expect("the split is seen");
        assert_eq!(summary.parts, 4);
        assert!(summary.tensors > 0 && summary.ops_in_parts >= 4 * summary.tensors.min(2), "{summary:?}");
        assert!(before.split.is_none());
        let page = report("cnn_residual", &[("before", &before), ("after", &after)]);
        let data = page.split("id=\"decision-data\">").nth(1).unwrap().split("</script>").next().unwrap();
        let rows: Vec<serde_json::Value> = serde_json::from_str(data).unwrap();
        let row = rows.iter().find(|r| r["kind"] == "split").expect("a split row");
        assert_eq!(row["tensor"].as_str(), Some(format!("{} tensors in up to 4 parts", summary.tensors).as_str()));
        let parts = accounting(&page);
        let split_part = parts.iter().find(|p| p.0 == "split").expect("the split's kernel time");
        assert_eq!(row["extra_seconds"].as_f64(), Some(split_part.1), "the row and the accounting agree");
        assert!(page.contains(&format!(
            "{} tensors in up to 4 parts, {} kernels in parts",
            summary.tensors, summary.ops_in_parts
        )));
        let total: f64 = parts.iter().map(|p| p.1).sum();
        let growth = after.predicted_step_seconds - before.predicted_step_seconds;
        assert!(
            (total - growth).abs() <= 1e-9 * growth.abs().max(1e-6),
            "{parts:?} add up to {total}, growth {growth}"
        );
    }

    #[test]
    fn a_graph_without_a_plan_says_it_has_no_decisions() {
        let (before, _) = before_and_after();
        let page = report("tiny_gpt", &[("graph", &before)]);
        assert!(page.contains("<p id=\"decision-count\">The plan holds no decisions.</p>"));
        assert!(page.contains("id=\"decision-data\">[]</script>"));
    }
}
