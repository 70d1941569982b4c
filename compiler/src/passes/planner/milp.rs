//! The exact reference the planner is measured against (tests only): a
//! mixed-integer program in the manner of Checkmate over the planner's own
//! decision space and cost model, solved with a pure-Rust solver.
//!
//! Per droppable tensor one binary per option: keep it, swap it with the
//! swap-in after any position from the one that hides its transfer to its
//! first reader after its gap, or recompute it with the chain from what is
//! resident when nothing else is dropped. Constraints: one option per
//! tensor; device memory within the budget at every step (a recompute's
//! chain counted at its first reader after its gap); host memory within its
//! budget; a chain's droppable sources resident where it runs. Objective: the
//! exposed swap-in time, the chains' time and the links' overload (linear
//! through two non-negative slack variables).

use super::candidate::swap_in_exposed;
use super::facts::Facts;
use super::PlanOptions;
use crate::passes::recompute;
use good_lp::{microlp, variable, variables, Expression, Solution, SolverModel, Variable};

/// Bytes per unit in the program (keeps coefficients near 1).
const MIB: f64 = (1 << 20) as f64;
/// Seconds per unit in the program.
const MS: f64 = 1e-3;

/// One option of one tensor.
struct Choice {
    var: Variable,
    tensor: usize,
    /// Device memory freed over `from..=to`; host memory taken over `host_from..=to` (swaps).
    from: usize,
    to: usize,
    swap: bool,
    /// Chain bytes at the first reader after its gap, and the chain's sources (recompute).
    transient: f64,
    sources: Vec<usize>,
}

/// The smallest predicted extra seconds of any plan in the planner's space
/// that fits `options`' budgets; `None` when none fits.
pub(super) fn optimum(facts: &Facts<'_>, options: PlanOptions) -> Option<f64> {
    let profile = &facts.memory;
    let mut vars = variables!();
    let mut objective = Expression::from(0.0);
    let mut choices: Vec<Choice> = Vec::new();
    for (i, d) in facts.droppable.iter().enumerate() {
        if d.swappable && options.budget.host > 0 {
            let lead = d.bytes as f64 / facts.speeds.h2d_bytes_per_second;
            for q in facts.clock.latest_hiding(d.gap_start, d.gap_end, lead)..d.gap_end {
                let var = vars.add(variable().binary());
                objective += var * (swap_in_exposed(facts, d, q) / MS);
                let (from, to) = (d.gap_start + 1, q);
                choices.push(Choice { var, tensor: i, from, to, swap: true, transient: 0.0, sources: vec![] });
            }
        }
        let resident = |u: crate::ir::TensorId| {
            let made = facts.view.position[facts.g.tensor(u).producer.0.index()];
            made <= d.gap_end && d.gap_end <= facts.view.last_use[u.index()]
        };
        if let Some(chain) = recompute::chain(facts.g, d.tensor, resident, &facts.view.position, options.max_chain) {
            let var = vars.add(variable().binary());
            objective += var * (chain.seconds(&facts.speeds.node_seconds) / MS);
            let sources = chain.sources.iter().filter_map(|&s| facts.gap_at(s, d.gap_end)).collect();
            choices.push(Choice {
                var,
                tensor: i,
                from: d.gap_start + 1,
                to: d.gap_end - 1,
                swap: false,
                transient: chain.transient_bytes as f64 / MIB,
                sources,
            });
        }
    }
    let (out_over, in_over) = (vars.add(variable().min(0.0)), vars.add(variable().min(0.0)));
    objective += out_over + in_over;
    let goal = objective.clone();
    let mut problem = vars.minimise(objective).using(microlp);
    let mut swapped = Expression::from(0.0);
    for c in choices.iter().filter(|c| c.swap) {
        swapped += c.var * (facts.droppable[c.tensor].bytes as f64 / MIB);
    }
    let seconds_per_unit = |bandwidth: f64| MIB / bandwidth / MS;
    problem = problem
        .with(constraint(
            swapped.clone() * seconds_per_unit(facts.speeds.d2h_bytes_per_second) - facts.forward_seconds / MS,
            out_over,
        ))
        .with(constraint(
            swapped * seconds_per_unit(facts.speeds.h2d_bytes_per_second) - facts.backward_seconds / MS,
            in_over,
        ));
    for i in 0..facts.droppable.len() {
        let mut one = Expression::from(0.0);
        for c in choices.iter().filter(|c| c.tensor == i) {
            one += c.var;
        }
        problem = problem.with(one.leq(1.0));
    }
    let budget = options.budget.device as f64 / MIB;
    for (step, &bytes) in profile.timeline.iter().enumerate() {
        let mut live = Expression::from(bytes as f64 / MIB);
        let mut touched = false;
        for c in &choices {
            let d = &facts.droppable[c.tensor];
            if c.from <= step && step <= c.to {
                live -= c.var * (d.bytes as f64 / MIB);
                touched = true;
            } else if !c.swap && step == d.gap_end {
                live += c.var * c.transient;
                touched = true;
            }
        }
        if bytes as f64 / MIB > budget || touched {
            problem = problem.with(live.leq(budget));
        }
        let mut host = Expression::from(profile.host_timeline[step] as f64 / MIB);
        let mut hosted = false;
        for c in choices.iter().filter(|c| c.swap) {
            let d = &facts.droppable[c.tensor];
            if d.out_at < step && step <= c.to {
                host += c.var * (d.bytes as f64 / MIB);
                hosted = true;
            }
        }
        if hosted {
            problem = problem.with(host.leq(options.budget.host as f64 / MIB));
        }
    }
    // A chain's droppable sources stay resident where it runs.
    for c in choices.iter().filter(|c| !c.swap) {
        let at = facts.droppable[c.tensor].gap_end;
        for other in choices.iter().filter(|o| c.sources.contains(&o.tensor) && o.from <= at && at <= o.to) {
            problem = problem.with((c.var + other.var).leq(1.0));
        }
    }
    let solution = problem.solve().ok()?;
    Some(solution.eval(&goal) * MS)
}

/// `expr <= slack` as a constraint.
fn constraint(expr: Expression, slack: Variable) -> good_lp::Constraint {
    (expr - slack).leq(0.0)
}
