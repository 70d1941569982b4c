//! `lms run --profile-ops`: each node's measured time over a run's steps set
//! beside the time model's prediction for it, per node and per op type, so
//! the ops where the model and the backend disagree can be read off. The
//! first step is left out (it warms caches and pages); each node's figures are
//! its medians over the other steps, of wall time and of the CPU time of the
//! thread that issued it ([`lms_runtime::cpu_time`]: on the CPU backend, the
//! node's time less the time the system ran other work, the figure to set
//! against the model on a loaded machine), and the least of its CPU times
//! (what `lms profile` measures its probes by).

use crate::analysis::cost;
use crate::analysis::profile::DeviceProfile;
use crate::analysis::timeline;
use crate::ir::Graph;
use crate::ir::NodeId;
use crate::shape::cost::Engine;
use lms_runtime::StepReport;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Steps left out at the start of a run.
const WARM_UP_STEPS: usize = 1;

/// What `--profile-ops` writes.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OpTimes {
    /// The backend that ran the steps.
    pub device: String,
    /// The device profile of the predictions (the plan's).
    pub device_profile: String,
    /// Steps measured (the run's steps less the first).
    pub steps_measured: usize,
    /// Median wall time of the measured steps.
    pub step_median_us: f64,
    /// Median CPU time of the measured steps.
    pub step_cpu_median_us: f64,
    /// Least CPU time of the measured steps.
    pub step_cpu_least_us: f64,
    /// The predicted step (`lms simulate`'s).
    pub step_predicted_us: f64,
    /// The sum of the nodes' CPU-time medians: the step's CPU time less it
    /// is the time spent between nodes.
    pub nodes_cpu_median_sum_us: f64,
    /// Per op type, the largest measured CPU time first.
    pub ops: Vec<OpTypeTime>,
    /// Per node, in the order the step ran them.
    pub nodes: Vec<NodeTime>,
}

/// One node's measured and predicted time.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NodeTime {
    pub name: String,
    pub op: String,
    /// Median wall time over the measured steps.
    pub median_us: f64,
    /// Median CPU time over the measured steps.
    pub cpu_median_us: f64,
    /// Least CPU time over the measured steps.
    pub cpu_least_us: f64,
    /// The time model's time of the node (0 for a node it does not run).
    pub predicted_us: f64,
    /// The node's kernel class in the time model (`View` for a node that
    /// runs nothing, `Copy` for a swap), its bytes read plus written and
    /// its FLOPs: what the gaps are grouped by.
    pub class: String,
    pub bytes: u64,
    pub flops: u64,
}

/// The nodes of one op type together.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OpTypeTime {
    pub op: String,
    pub nodes: usize,
    /// Sum of the nodes' wall-time medians.
    pub median_us: f64,
    /// Sum of the nodes' CPU-time medians.
    pub cpu_median_us: f64,
    /// Sum of the nodes' least CPU times.
    pub cpu_least_us: f64,
    /// Sum of the nodes' predictions.
    pub predicted_us: f64,
}

/// Collects the traced spans of a run's steps.
#[derive(Debug, Default)]
pub struct Recorder {
    steps: usize,
    step_us: Vec<f64>,
    step_cpu_us: Vec<f64>,
    /// Per node name: its op and its measured wall and CPU times.
    nodes: Vec<(String, String, Vec<f64>, Vec<f64>)>,
    index: HashMap<String, usize>,
}

impl Recorder {
    /// Adds one step's report (its trace must be on).
    pub fn record(&mut self, report: &StepReport) {
        self.steps += 1;
        if self.steps <= WARM_UP_STEPS {
            return;
        }
        self.step_us.push(report.step_seconds * 1e6);
        self.step_cpu_us.push(report.step_cpu_seconds * 1e6);
        for event in &report.trace {
            let next = self.nodes.len();
            let i = *self.index.entry(event.name.clone()).or_insert(next);
            if i == next {
                self.nodes.push((event.name.clone(), event.op.clone(), Vec::new(), Vec::new()));
            }
            let cpu_us = event.args.iter().find(|(k, _)| k == "cpu_us").and_then(|(_, v)| v.parse().ok());
            self.nodes[i].2.push(event.dur_us);
            self.nodes[i].3.push(cpu_us.unwrap_or(event.dur_us));
        }
    }

    /// The measured times beside `predicted`'s.
    pub fn finish(self, device: String, predicted: &Predicted) -> OpTimes {
        let nodes: Vec<NodeTime> = self
            .nodes
            .into_iter()
            .map(|(name, op, mut wall, mut cpu)| {
                let predicted_us = predicted.node_us.get(&name).copied().unwrap_or(0.0);
                let (class, bytes, flops) = predicted.node_work.get(&name).cloned().unwrap_or(("View".into(), 0, 0));
                NodeTime {
                    median_us: median(&mut wall),
                    cpu_median_us: median(&mut cpu),
                    cpu_least_us: least(&cpu),
                    predicted_us,
                    class,
                    bytes,
                    flops,
                    name,
                    op,
                }
            })
            .collect();
        let mut by_op: BTreeMap<&str, OpTypeTime> = BTreeMap::new();
        for node in &nodes {
            let entry = by_op.entry(&node.op).or_insert_with(|| OpTypeTime {
                op: node.op.clone(),
                nodes: 0,
                median_us: 0.0,
                cpu_median_us: 0.0,
                cpu_least_us: 0.0,
                predicted_us: 0.0,
            });
            entry.nodes += 1;
            entry.median_us += node.median_us;
            entry.cpu_median_us += node.cpu_median_us;
            entry.cpu_least_us += node.cpu_least_us;
            entry.predicted_us += node.predicted_us;
        }
        let mut ops: Vec<OpTypeTime> = by_op.into_values().collect();
        ops.sort_by(|a, b| b.cpu_median_us.total_cmp(&a.cpu_median_us).then_with(|| a.op.cmp(&b.op)));
        let (mut step_us, mut step_cpu_us) = (self.step_us, self.step_cpu_us);
        OpTimes {
            device,
            device_profile: predicted.profile.clone(),
            steps_measured: step_us.len(),
            step_median_us: median(&mut step_us),
            step_cpu_median_us: median(&mut step_cpu_us),
            step_cpu_least_us: least(&step_cpu_us),
            step_predicted_us: predicted.step_us,
            nodes_cpu_median_sum_us: nodes.iter().map(|n| n.cpu_median_us).sum(),
            ops,
            nodes,
        }
    }
}

/// The time model's times of a graph's nodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Predicted {
    profile: String,
    step_us: f64,
    node_us: HashMap<String, f64>,
    /// Per node name: its kernel class, bytes and FLOPs.
    node_work: HashMap<String, (String, u64, u64)>,
}

impl Predicted {
    /// The timeline of `g` run in `schedule` order on the profile its plan
    /// was made for.
    pub fn of(g: &Graph, schedule: &[NodeId]) -> crate::error::Result<Predicted> {
        let profile = DeviceProfile::of_plan(&g.plan)?;
        let timeline = timeline::simulate(g, schedule, &profile);
        let node_us = timeline.events.iter().map(|e| (g.node(e.node).name.clone(), (e.end - e.start) * 1e6)).collect();
        let node_work = schedule
            .iter()
            .map(|&id| {
                let (node, work) = (g.node(id), cost::work(g, id));
                let class = match work.engine {
                    Engine::View => "View".to_string(),
                    Engine::DeviceToHost | Engine::HostToDevice => "Copy".to_string(),
                    engine => format!("{:?}", crate::shape::kernel_class(&node.op, &node.attrs, engine)),
                };
                (node.name.clone(), (class, work.bytes_read + work.bytes_written, work.flops))
            })
            .collect();
        Ok(Predicted { profile: profile.name, step_us: timeline.step_seconds * 1e6, node_us, node_work })
    }
}

/// The least of `values` (0 when empty).
fn least(values: &[f64]) -> f64 {
    values.iter().copied().reduce(f64::min).unwrap_or(0.0)
}

/// The median of `values` (sorted in place; 0 when empty).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lms_proto::trace::{Lane, TraceEvent};

    /// A step of `seconds` (wall; the CPU time a tenth less) whose nodes
    /// took their wall time and 1 µs less on the CPU.
    fn step(seconds: f64, spans: &[(&str, &str, f64)]) -> StepReport {
        let trace = spans
            .iter()
            .map(|&(name, op, dur_us)| TraceEvent {
                name: name.into(),
                op: op.into(),
                lane: Lane::Compute,
                start_us: 0.0,
                dur_us,
                args: vec![("cpu_us".into(), format!("{:.3}", dur_us - 1.0))],
            })
            .collect();
        StepReport { step_seconds: seconds, step_cpu_seconds: 0.9 * seconds, trace, ..StepReport::default() }
    }

    #[test]
    fn medians_leave_out_the_first_step_and_sum_by_op_type() {
        let mut recorder = Recorder::default();
        recorder.record(&step(1.0, &[("a", "Relu", 900.0), ("b", "Relu", 900.0), ("c", "Add", 900.0)]));
        recorder.record(&step(30e-6, &[("a", "Relu", 5.0), ("b", "Relu", 7.0), ("c", "Add", 10.0)]));
        recorder.record(&step(90e-6, &[("a", "Relu", 50.0), ("b", "Relu", 8.0), ("c", "Add", 12.0)]));
        recorder.record(&step(32e-6, &[("a", "Relu", 6.0), ("b", "Relu", 6.0), ("c", "Add", 11.0)]));
        let predicted = Predicted {
            profile: "p".into(),
            step_us: 20.0,
            node_us: [("a".to_string(), 4.0)].into(),
            node_work: [("a".to_string(), ("Elementwise".to_string(), 8, 1))].into(),
        };
        let times = recorder.finish("cpu".into(), &predicted);
        assert_eq!(times.steps_measured, 3);
        assert_eq!((times.step_median_us.round(), (times.step_cpu_median_us * 10.0).round()), (32.0, 288.0));
        let medians: Vec<(&str, f64, f64, f64)> =
            times.nodes.iter().map(|n| (n.name.as_str(), n.median_us, n.cpu_median_us, n.predicted_us)).collect();
        assert_eq!(medians, [("a", 6.0, 5.0, 4.0), ("b", 7.0, 6.0, 0.0), ("c", 11.0, 10.0, 0.0)]);
        let least: Vec<f64> = times.nodes.iter().map(|n| n.cpu_least_us).collect();
        assert_eq!((least, (times.step_cpu_least_us * 10.0).round()), (vec![4.0, 5.0, 9.0], 270.0));
        assert_eq!(times.ops.iter().map(|o| o.cpu_least_us).collect::<Vec<_>>(), [9.0, 9.0]);
        let work: Vec<(&str, u64, u64)> = times.nodes.iter().map(|n| (n.class.as_str(), n.bytes, n.flops)).collect();
        assert_eq!(work, [("Elementwise", 8, 1), ("View", 0, 0), ("View", 0, 0)]);
        let ops: Vec<(&str, usize, f64, f64)> =
            times.ops.iter().map(|o| (o.op.as_str(), o.nodes, o.median_us, o.cpu_median_us)).collect();
        assert_eq!(ops, [("Relu", 2, 13.0, 11.0), ("Add", 1, 11.0, 10.0)]);
        assert_eq!(times.nodes_cpu_median_sum_us, 21.0);
    }
}
