//! The HTML report (`--html` on `lms compile` and `lms simulate`): one
//! self-contained page, nothing fetched from the network. It holds a
//! summary per graph (peaks, budgets, predicted step, stall), the picture of
//! [`super::svg`] (memory before and after on a shared time axis with the
//! budget, and the three streams), and the table of the plan's decisions
//! (swap, recompute, split: tensor, bytes, extra time, why), built by a small
//! script from the decisions embedded as JSON, sortable by any column.
//! Hovering a row, a copy or a peak names its tensor or op.

use super::svg::{self, escape, Series};
use crate::simulate::format_seconds;
use crate::units::format_bytes;
use serde::Serialize;
use std::fmt::Write;

/// One row of the decision table, as the page's script reads it.
#[derive(Serialize)]
struct Row<'a> {
    kind: &'a str,
    tensor: &'a str,
    bytes: u64,
    bytes_text: String,
    extra_seconds: f64,
    extra_text: String,
    why: &'a str,
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
    let decisions = series.last().map_or(&[][..], |(_, r)| &r.decisions[..]);
    let rows: Vec<Row<'_>> = decisions
        .iter()
        .map(|d| Row {
            kind: d.kind,
            tensor: &d.tensor,
            bytes: d.bytes,
            bytes_text: format_bytes(d.bytes),
            extra_seconds: d.extra_seconds,
            extra_text: format_seconds(d.extra_seconds),
            why: &d.why,
        })
        .collect();
    let count = match decisions.len() {
        0 => "The plan holds no decisions.".to_string(),
        n => format!(
            "{n} decisions: {} taken off the device, {} of extra predicted time in all.",
            format_bytes(decisions.iter().map(|d| d.bytes).sum()),
            format_seconds(decisions.iter().map(|d| d.extra_seconds).sum())
        ),
    };
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

/// One row per graph: ops, peaks, budgets and fit, predicted step.
fn summary(series: &[Series<'_>]) -> String {
    let mut s = String::from(
        "<table class=\"summary\">\n<tr><th>graph</th><th>strategy</th><th>ops</th><th>device peak</th><th>host peak</th><th>budget</th><th>step</th><th>compute stalled</th><th>swapped out</th></tr>\n",
    );
    for (name, r) in series {
        let budget = match (r.budget_device_bytes, r.fits) {
            (Some(b), Some(fits)) => format!("{} ({})", format_bytes(b), if fits { "fits" } else { "does not fit" }),
            _ => "none".to_string(),
        };
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td title=\"at '{}'\">{}</td><td>{}</td><td>{budget}</td><td>{} on {}</td><td>{}</td><td>{}</td></tr>",
            escape(name),
            escape(&r.strategy),
            r.nodes,
            escape(&r.peak_op),
            format_bytes(r.peak_device_bytes),
            format_bytes(r.peak_host_bytes),
            format_seconds(r.predicted_step_seconds),
            escape(&r.device_profile),
            format_seconds(r.stall_seconds),
            format_bytes(r.d2h_bytes)
        );
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
    use super::*;
    use crate::emit::svg::tests::before_and_after;

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

    #[test]
    fn a_graph_without_a_plan_says_it_has_no_decisions() {
        let (before, _) = before_and_after();
        let page = report("tiny_gpt", &[("graph", &before)]);
        assert!(page.contains("<p id=\"decision-count\">The plan holds no decisions.</p>"));
        assert!(page.contains("id=\"decision-data\">[]</script>"));
    }
}
