//! `lms show`: what a `.lms` file holds — where it came from (its
//! provenance metadata), its setup (batch, optimizer, strategy, budgets), the
//! device profile of its plan, its arenas, the plan's decisions by kind and
//! the predicted step — without running or rewriting anything.

use crate::analysis::profile::DeviceProfile;
use crate::analysis::timeline;
use crate::commands::setup::Setup;
use crate::commands::simulate::format_seconds;
use crate::emit::serialize;
use crate::error::Result;
use crate::units::format_bytes;
use lms_proto::contract::{placement, Pool, Program, SPLIT_PART_OP, SPLIT_WINDOW_OP};
use lms_proto::escape::Escaped;
use lms_proto::ops::scratch::planned_conv_algorithm;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

/// What `lms show` reports; serialized as its `--json` output.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ShowReport {
    pub graph: String,
    pub ops: usize,
    pub tensors: usize,
    /// The metadata `lms compile` recorded, in the file's order (see
    /// [`crate::commands::provenance`]).
    pub provenance: Vec<Fact>,
    pub setup: Setup,
    /// The plan's device profile: a shipped profile's name or the name of
    /// the profile the file carries.
    pub device_profile: String,
    /// True when the file carries the profile's content (it was given as a
    /// file); false for a shipped profile, or an older file naming a path.
    pub device_profile_carried: bool,
    pub arena_device_bytes: u64,
    pub arena_host_bytes: u64,
    /// The plan's decisions by kind: swaps, recomputes, and tensors split.
    pub decisions: Vec<DecisionCount>,
    /// The predicted time of one step on the plan's device profile.
    pub predicted_step_seconds: f64,
    /// The convolutions' cuDNN algorithms as the plan fixes them, by direction and
    /// algorithm (in that order).
    pub conv_algorithms: Vec<ConvAlgorithmCount>,
}

/// How many convolution nodes run one cuDNN algorithm in one direction, and the largest
/// workspace the plan gives one of them.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ConvAlgorithmCount {
    /// `forward`, `backward data` or `backward filter`.
    pub direction: &'static str,
    /// cuDNN's number of the algorithm in that direction.
    pub algorithm: i32,
    pub nodes: usize,
    pub largest_workspace_bytes: u64,
}

/// One metadata fact.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Fact {
    pub key: String,
    pub value: String,
}

/// How many decisions of one kind the plan holds, and the bytes they move
/// off the device (none for a split).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DecisionCount {
    pub kind: &'static str,
    pub tensors: usize,
    pub bytes: u64,
}

impl ShowReport {
    /// Reads the `.lms` file at `path` (checked as every command checks it).
    pub fn read(path: &Path) -> Result<ShowReport> {
        let program = Program::load(path)?;
        let (g, schedule) = serialize::from_program(&program).map_err(|e| e.in_file(path))?;
        let profile = DeviceProfile::of_plan(&g.plan).map_err(|e| e.in_file(path))?;
        let recorded = program.graph().plan.as_ref();
        let arena = |pool: Pool, recorded: Option<u64>| {
            recorded.unwrap_or_else(|| placement::of_program(&program, pool).arena_bytes)
        };
        let split = g.node_ids().filter(|&id| [SPLIT_PART_OP, SPLIT_WINDOW_OP].contains(&g.node(id).op.as_str()));
        let bytes = |tensors: &mut dyn Iterator<Item = crate::ir::TensorId>| -> (usize, u64) {
            tensors.fold((0, 0), |(n, b), t| (n + 1, b + g.tensor(t).ty.bytes()))
        };
        let (swaps, swapped) = bytes(&mut g.plan.swaps.iter().map(|s| s.tensor));
        let (recomputes, recomputed) = bytes(&mut g.plan.recomputes.iter().map(|r| r.tensor));
        Ok(ShowReport {
            graph: g.name.clone(),
            ops: schedule.iter().filter(|&&id| !g.node(id).parameterized).count(),
            tensors: g.tensors().count(),
            provenance: (program.graph().metadata.iter())
                .map(|m| Fact { key: m.key.clone(), value: m.value.clone() })
                .collect(),
            setup: Setup::of(&g),
            device_profile: profile.name.clone(),
            device_profile_carried: g.plan.device_profile_json.is_some(),
            arena_device_bytes: arena(Pool::Device, recorded.and_then(|p| p.arena_device_bytes)),
            arena_host_bytes: arena(Pool::Host, recorded.and_then(|p| p.arena_host_bytes)),
            decisions: vec![
                DecisionCount { kind: "swap", tensors: swaps, bytes: swapped },
                DecisionCount { kind: "recompute", tensors: recomputes, bytes: recomputed },
                DecisionCount { kind: "split", tensors: split.count(), bytes: 0 },
            ],
            predicted_step_seconds: timeline::simulate(&g, &schedule, &profile).step_seconds,
            conv_algorithms: conv_algorithm_counts(&program),
        })
    }

    /// The report for people.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "graph           {:?}, {} ops, {} tensors", self.graph, self.ops, self.tensors);
        let _ = writeln!(s, "setup           {}", self.setup.describe());
        let carried = if self.device_profile_carried { " (carried in the file)" } else { "" };
        let _ = writeln!(s, "device profile  {}{carried}", self.device_profile);
        let _ = writeln!(
            s,
            "arenas          device {}, host {}",
            format_bytes(self.arena_device_bytes),
            format_bytes(self.arena_host_bytes)
        );
        let decisions: Vec<String> = (self.decisions.iter())
            .map(|d| match d.kind {
                "split" => format!("{} tensors split", d.tensors),
                kind => format!("{} {kind}s ({})", d.tensors, format_bytes(d.bytes)),
            })
            .collect();
        let _ = writeln!(s, "decisions       {}", decisions.join(", "));
        let _ =
            writeln!(s, "predicted step  {} on {}", format_seconds(self.predicted_step_seconds), self.device_profile);
        let convolutions: Vec<String> = (self.conv_algorithms.iter())
            .map(|c| {
                let workspace = format_bytes(c.largest_workspace_bytes);
                format!("{} {} algorithm {} (workspace up to {workspace})", c.nodes, c.direction, c.algorithm)
            })
            .collect();
        if !convolutions.is_empty() {
            let _ = writeln!(s, "convolutions    {}", convolutions.join(", "));
        }
        if self.provenance.is_empty() {
            let _ = writeln!(s, "provenance      none recorded");
        } else {
            let _ = writeln!(s, "provenance");
            let width = self.provenance.iter().map(|f| f.key.len()).max().unwrap_or(0);
            for f in &self.provenance {
                let key = Escaped(&f.key).to_string();
                let _ = writeln!(s, "  {key:<width$}  {}", Escaped(&f.value));
            }
        }
        s
    }
}

/// The plan's convolution algorithms of `program` ([`planned_conv_algorithm`]), counted by
/// direction and algorithm.
fn conv_algorithm_counts(program: &Program) -> Vec<ConvAlgorithmCount> {
    let mut counts: BTreeMap<(u8, i32), (&'static str, usize, u64)> = BTreeMap::new();
    for chosen in (0..program.node_count()).filter_map(|n| planned_conv_algorithm(program, n)) {
        let key = (chosen.direction as u8, chosen.algorithm);
        let count = counts.entry(key).or_insert((chosen.direction.name(), 0, 0));
        count.1 += 1;
        count.2 = count.2.max(chosen.workspace_bytes);
    }
    (counts.into_iter())
        .map(|((_, algorithm), (direction, nodes, largest_workspace_bytes))| ConvAlgorithmCount {
            direction,
            algorithm,
            nodes,
            largest_workspace_bytes,
        })
        .collect()
}
