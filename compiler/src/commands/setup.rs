//! What a training graph was made for — its batch, optimizer, memory strategy
//! and budgets — read from the graph itself, as every summary states it
//! (`compile`, `simulate`, `run`, `show`; `max-batch` states its search).

use crate::ir::{Attr, Graph};
use crate::train::Optimizer;
use crate::units::format_bytes;
use serde::Serialize;

/// The batch, optimizer, strategy and budgets of a training graph.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Setup {
    /// The leading dimension of the first data input (`None` for a graph
    /// without inputs).
    pub batch: Option<usize>,
    /// The optimizer and its learning rate (and momentum), e.g. `adam (lr
    /// 0.001)`; `None` for a graph without updates.
    pub optimizer: Option<String>,
    /// The plan's memory strategy (`none` for a graph nobody rewrote).
    pub strategy: String,
    /// The plan's device and host budgets, when it was made for them.
    pub budget_device_bytes: Option<u64>,
    pub budget_host_bytes: Option<u64>,
}

impl Setup {
    /// The setup `g` records: its first input's leading dimension, the
    /// optimizer of its update ops and its plan.
    pub fn of(g: &Graph) -> Setup {
        let batch = g.inputs.first().and_then(|&t| g.tensor(t).ty.shape.first().copied());
        Setup {
            batch,
            optimizer: recorded_optimizer(g).as_ref().map(describe_optimizer),
            strategy: g.plan.strategy.clone(),
            budget_device_bytes: g.plan.budget_device_bytes,
            budget_host_bytes: g.plan.budget_host_bytes,
        }
    }

    /// One line for people: `batch 32, adam (lr 0.001), strategy tflms,
    /// budget 2.15 MiB device and 64.00 GiB host` (or `no budget`).
    pub fn describe(&self) -> String {
        let batch = self.batch.map_or_else(|| "no data input".to_string(), |b| format!("batch {b}"));
        let optimizer = self.optimizer.as_deref().unwrap_or("no optimizer");
        let budget = match (self.budget_device_bytes, self.budget_host_bytes) {
            (Some(device), Some(host)) => {
                format!("budget {} device and {} host", format_bytes(device), format_bytes(host))
            }
            (Some(device), None) => format!("budget {} device", format_bytes(device)),
            _ => "no budget".to_string(),
        };
        format!("{batch}, {optimizer}, strategy {}, {budget}", self.strategy)
    }
}

/// An optimizer for people: its name and learning rate, and momentum's
/// momentum (`momentum (lr 0.01, momentum 0.9)`).
pub fn describe_optimizer(optimizer: &Optimizer) -> String {
    match *optimizer {
        Optimizer::Sgd { lr } => format!("sgd (lr {lr})"),
        Optimizer::Momentum { lr, momentum } => format!("momentum (lr {lr}, momentum {momentum})"),
        Optimizer::Adam { lr, .. } => format!("adam (lr {lr})"),
    }
}

/// The optimizer of the first update op in `g`'s schedule, from its
/// attributes.
fn recorded_optimizer(g: &Graph) -> Option<Optimizer> {
    g.schedule().iter().find_map(|&id| {
        let node = g.node(id);
        let float = |name: &str| match node.attrs.get(name) {
            Some(Attr::Float(v)) => Some(*v),
            _ => None,
        };
        match node.op.as_str() {
            "SgdUpdate" => Some(Optimizer::Sgd { lr: float("lr")? }),
            "MomentumUpdate" => Some(Optimizer::Momentum { lr: float("lr")?, momentum: float("momentum")? }),
            "AdamUpdate" => Some(Optimizer::Adam {
                lr: float("lr")?,
                beta1: float("beta1")?,
                beta2: float("beta2")?,
                epsilon: float("epsilon")?,
            }),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_names_batch_optimizer_strategy_and_budgets() {
        let setup = Setup {
            batch: Some(32),
            optimizer: Some(describe_optimizer(&Optimizer::Momentum { lr: 0.05, momentum: 0.9 })),
            strategy: "tflms".into(),
            budget_device_bytes: Some(2200 << 10),
            budget_host_bytes: Some(1 << 30),
        };
        assert_eq!(
            setup.describe(),
            "batch 32, momentum (lr 0.05, momentum 0.9), strategy tflms, budget 2.15 MiB device and 1.00 GiB host"
        );
        let bare = Setup { strategy: "none".into(), ..Setup::default() };
        assert_eq!(bare.describe(), "no data input, no optimizer, strategy none, no budget");
    }
}
