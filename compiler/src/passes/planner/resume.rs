//! The greedy run at falling targets on one graph, each run resumed from
//! where the run at a higher target first depended on its target.
//!
//! The greedy's choices depend on its device target in two places only: it
//! stops once the peak is within the target, and when the cheapest
//! candidate removes more than the peak's excess over the target it looks
//! for one that removes the whole excess for less. Until a run at target `T`
//! first reaches either, a run at any target below `T` takes the same
//! decisions, pops the same candidates and holds the same queue. So the
//! run's state there (its [`Progress`]) is saved, and a run at a lower target
//! starts from it instead of from nothing: the same plan as from scratch,
//! and a ladder of targets costs about one greedy to the lowest target plus
//! each target's last decisions and clean-up.

use super::apply::Names;
use super::candidate::{Candidate, Queue};
use super::{by_gap_end, Decisions, Facts, PlanOptions, Planner, State};
use std::rc::Rc;

/// Saved runs kept per host budget and chain bound (the most recently
/// used are kept).
const SAVED_PER_KEY: usize = 2;

/// Where a greedy run stands: the planner's trackers and decisions, the
/// queue of the peak it works on, and the candidate it popped there (taken
/// next unless one covering the whole excess costs less).
#[derive(Clone)]
pub(super) struct Progress<'f, 'g> {
    pub planner: Planner<'f, 'g>,
    queue: Queue,
    queued_for: Option<usize>,
    popped: Option<Candidate>,
}

impl<'f, 'g> Progress<'f, 'g> {
    /// A run that has decided nothing yet.
    pub fn start(facts: &'f Facts<'g>, options: PlanOptions, by_gap_end: Rc<[usize]>) -> Progress<'f, 'g> {
        let profile = &facts.memory;
        let planner = Planner {
            facts,
            options,
            device: super::Tracker::new(&profile.timeline),
            host: super::Tracker::new(&profile.host_timeline),
            state: vec![State::Kept; facts.droppable.len()],
            pins: vec![Vec::new(); facts.droppable.len()],
            by_gap_end,
            swapped_bytes: 0,
            decisions: Vec::new(),
        };
        Progress { planner, queue: Queue::default(), queued_for: None, popped: None }
    }

    /// Takes the cheapest candidate at the peak until the peak fits or no
    /// candidate relieves it. With `save`, returns the run as it stood where
    /// it first depended on its target (module doc).
    pub fn greedy(&mut self, save: bool) -> Option<Progress<'f, 'g>> {
        let mut saved = None;
        let save_once = |saved: &mut Option<Progress<'f, 'g>>, run: &Progress<'f, 'g>| {
            if save && saved.is_none() {
                *saved = Some(run.clone());
            }
        };
        loop {
            let (step, peak) = self.planner.device.peak();
            let target = self.planner.options.budget.device;
            if peak <= target {
                save_once(&mut saved, self);
                return saved;
            }
            if self.queued_for != Some(step) {
                self.queue = Queue::new(self.planner.candidates_at(step));
                self.queued_for = Some(step);
            }
            let planner = &self.planner;
            let popped = match self.popped.take() {
                Some(c) => Some(c),
                None => self.queue.pop_cheapest(|c| planner.cost(c, step)),
            };
            let Some(cheapest) = popped else {
                save_once(&mut saved, self);
                return saved;
            };
            // The last bytes of a peak: one candidate that covers them all may
            // cost less in total than the cheapest per byte.
            let excess = peak - target;
            let mut taken = cheapest;
            if taken.bytes > excess {
                self.popped = Some(taken);
                save_once(&mut saved, self);
                taken = self.popped.take().expect("just popped");
                let planner = &self.planner;
                if let Some(whole) = self.queue.cheapest_covering(excess, |c| planner.cost(c, step)) {
                    if whole.extra_seconds < taken.extra_seconds {
                        self.queue.push(std::mem::replace(&mut taken, whole));
                    }
                }
            }
            self.planner.take(taken, step);
        }
    }
}

/// Whether runs with options `a` and `b` take the same decisions until one
/// of them stops (all but the device target equal).
fn same_key(a: &PlanOptions, b: &PlanOptions) -> bool {
    a.budget.host == b.budget.host && a.max_chain == b.max_chain
}

/// The planner's runs on one graph's facts, each resumed from a saved
/// run at a target at or above its own (module doc).
pub struct Greedy<'f, 'g> {
    pub(super) facts: &'f Facts<'g>,
    /// The graph's names, for the patches of its plans.
    pub(super) names: Names<'g>,
    by_gap_end: Rc<[usize]>,
    /// Saved runs, least recently used first.
    saved: Vec<Progress<'f, 'g>>,
}

impl<'f, 'g> Greedy<'f, 'g> {
    /// Runs on `facts`, none saved yet.
    pub fn new(facts: &'f Facts<'g>) -> Greedy<'f, 'g> {
        Greedy { facts, names: Names::of(facts.g), by_gap_end: by_gap_end(facts).into(), saved: Vec::new() }
    }

    /// The saved run a plan for `options` resumes: the one of the lowest
    /// target at or above `options`' device budget, with the same host
    /// budget and chain bound.
    fn resumed_by(&self, options: PlanOptions) -> Option<usize> {
        self.saved
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                let saved = &p.planner.options;
                same_key(saved, &options) && saved.budget.device >= options.budget.device
            })
            .min_by_key(|(_, p)| p.planner.options.budget.device)
            .map(|(i, _)| i)
    }

    /// Whether a plan for `options` resumes a saved run.
    #[cfg(test)]
    pub fn resumes(&self, options: PlanOptions) -> bool {
        self.resumed_by(options).is_some()
    }

    /// [`super::plan_with`]`(facts, options)`, resumed from a saved run
    /// ([`Greedy::resumed_by`]) where there is one.
    pub fn plan(&mut self, options: PlanOptions) -> Decisions {
        let mut run = match self.resumed_by(options) {
            Some(i) => {
                let used = self.saved.remove(i);
                let mut run = used.clone();
                self.saved.push(used);
                run.planner.options = options;
                run
            }
            None => Progress::start(self.facts, options, self.by_gap_end.clone()),
        };
        if let Some(saved) = run.greedy(true) {
            self.saved.push(saved);
            let kept = self.saved.iter().filter(|p| same_key(&p.planner.options, &options)).count();
            if kept > SAVED_PER_KEY {
                let oldest = self.saved.iter().position(|p| same_key(&p.planner.options, &options)).expect("counted");
                self.saved.remove(oldest);
            }
        }
        run.planner.finish()
    }
}
