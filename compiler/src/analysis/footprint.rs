//! What a graph takes of each memory pool over its schedule, and whether
//! that fits a pair of budgets: the one notion of "fits" that `compile`,
//! `simulate`, the TFLMS search, the planner, the batch split, `max-batch`
//! and `plan-curve` decide by.
//!
//! Each pool has a live peak ([`memory::simulate`]: the most bytes live at
//! once) and a placed arena ([`memory::placement`]: every tensor at its
//! static offset, the contract's placement, which the `.lms` records and the
//! runtime allocates). The arena is at least the live peak, and it is what a
//! device must hold, so a graph fits when each pool's *arena* is within its
//! budget. Searches plan by the live peak (cheap to track per decision) and
//! confirm by the arena; where the arena is over, they plan again at a live
//! target lowered in proportion ([`Footprint::lower`]), a bounded number of
//! rounds ([`MAX_ROUNDS`]). The arena is not monotone in the batch or the
//! target, so no search infers one plan's fit from another's.

use super::memory::{self, MemoryProfile, Pool};
use super::scheduled::Scheduled;
use crate::budget::Budget;
use crate::error::Error;
use crate::ir::{Graph, NodeId};

/// How many times a search plans again at a lower live target when the
/// placed arena of its plan is over the budget.
pub const MAX_ROUNDS: usize = 8;

/// One pool's live peak and placed arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolFootprint {
    /// Most bytes live at once.
    pub peak_bytes: u64,
    /// Schedule position of the peak (first, on ties).
    pub peak_step: usize,
    /// Bytes of the arena with every tensor at its static offset.
    pub arena_bytes: u64,
}

/// Both pools' live peaks and placed arenas over one schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    pub device: PoolFootprint,
    pub host: PoolFootprint,
}

impl Footprint {
    /// Simulates and places `g` over `schedule`.
    pub fn of(g: &Graph, schedule: &[NodeId]) -> Footprint {
        let view = Scheduled::new(g, schedule.to_vec());
        Footprint::with_profile(g, &view, &memory::simulate_scheduled(g, &view))
    }

    /// Places `g` in `view`, whose memory `profile` was already simulated.
    pub fn with_profile(g: &Graph, view: &Scheduled, profile: &MemoryProfile) -> Footprint {
        Footprint::placed(g, view, profile, Budget { device: 0, host: 0 })
    }

    /// [`Footprint::of`], each pool's placement stopped at the first arena
    /// within its budget ([`memory::placement_within`]): whether it fits,
    /// and each arena over its budget, are [`Footprint::of`]'s; an arena
    /// within its budget may be above it. For searches that only decide.
    pub fn within(g: &Graph, schedule: &[NodeId], budgets: Budget) -> Footprint {
        let view = Scheduled::new(g, schedule.to_vec());
        Footprint::placed(g, &view, &memory::simulate_scheduled(g, &view), budgets)
    }

    /// Places each pool of `g` in `view` stopped at the first arena within its budget in
    /// `enough` (0: the placement).
    fn placed(g: &Graph, view: &Scheduled, profile: &MemoryProfile, enough: Budget) -> Footprint {
        let arena = |pool, enough| memory::placement_within(g, view, pool, enough).arena_bytes;
        Footprint {
            device: PoolFootprint {
                peak_bytes: profile.peak_bytes,
                peak_step: profile.peak_step,
                arena_bytes: arena(Pool::Device, enough.device),
            },
            host: PoolFootprint {
                peak_bytes: profile.host_peak_bytes,
                peak_step: profile.host_peak_step,
                arena_bytes: arena(Pool::Host, enough.host),
            },
        }
    }

    /// Whether `g` over `schedule` fits `budgets` ([`Footprint::fits`]),
    /// placing only when each pool's live peak is within its budget (an
    /// arena is at least its live peak, so a peak over the budget decides).
    pub fn graph_fits(g: &Graph, schedule: &[NodeId], budgets: Budget) -> bool {
        let view = Scheduled::new(g, schedule.to_vec());
        let profile = memory::simulate_scheduled(g, &view);
        profile.peak_bytes <= budgets.device
            && profile.host_peak_bytes <= budgets.host
            && Footprint::placed(g, &view, &profile, budgets).fits(budgets)
    }

    /// Whether the device arena is within the device budget and the host
    /// arena within the host budget.
    pub fn fits(&self, budgets: Budget) -> bool {
        self.device.arena_bytes <= budgets.device && self.host.arena_bytes <= budgets.host
    }

    /// Bytes each arena is over its budget (0 where it fits).
    pub fn excess(&self, budgets: Budget) -> Budget {
        Budget {
            device: self.device.arena_bytes.saturating_sub(budgets.device),
            host: self.host.arena_bytes.saturating_sub(budgets.host),
        }
    }

    /// Both arenas' excess together: how far from fitting (0: fits).
    pub fn overshoot(&self, budgets: Budget) -> u64 {
        let excess = self.excess(budgets);
        excess.device + excess.host
    }

    /// The live targets to plan at next, after a plan made at `target` has
    /// this footprint: for each pool whose arena is over its budget, the
    /// plan's live peak scaled by budget / arena (the live peak at which the
    /// arena would fit with the same overhead), and at least a thousandth
    /// below the old target, so rounds make progress; the other pool keeps
    /// its target.
    pub fn lower(&self, target: Budget, budgets: Budget) -> Budget {
        let lower = |target: u64, used: PoolFootprint, budget: u64| {
            if used.arena_bytes <= budget {
                return target;
            }
            let scaled = (used.peak_bytes as u128 * budget as u128 / used.arena_bytes as u128) as u64;
            scaled.min(target.saturating_sub((target / 1000).max(1)))
        };
        Budget {
            device: lower(target.device, self.device, budgets.device),
            host: lower(target.host, self.host, budgets.host),
        }
    }

    /// `Ok` when the footprint of `g` over `schedule` fits `budgets`; else
    /// [`Footprint::over`].
    pub fn check(&self, g: &Graph, schedule: &[NodeId], budgets: Budget) -> Result<(), Error> {
        if self.fits(budgets) {
            Ok(())
        } else {
            Err(self.over(g, schedule, budgets))
        }
    }

    /// [`Error::OverBudget`] for the pool whose arena is furthest over its
    /// budget (device on ties), naming the op at its live peak.
    pub fn over(&self, g: &Graph, schedule: &[NodeId], budgets: Budget) -> Error {
        let (pool, used, budget) = self.furthest_over(budgets);
        let op = schedule.get(used.peak_step).map_or_else(String::new, |&id| g.node(id).name.clone());
        Error::OverBudget { pool, arena: used.arena_bytes, peak: used.peak_bytes, budget, op }
    }

    /// The pool whose arena is furthest over its budget (device on ties):
    /// its name ("device" or "host"), footprint and budget.
    pub fn furthest_over(&self, budgets: Budget) -> (&'static str, PoolFootprint, u64) {
        let excess = self.excess(budgets);
        if excess.device >= excess.host {
            ("device", self.device, budgets.device)
        } else {
            ("host", self.host, budgets.host)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn footprint(device: (u64, u64), host: (u64, u64)) -> Footprint {
        let pool = |(peak_bytes, arena_bytes)| PoolFootprint { peak_bytes, peak_step: 0, arena_bytes };
        Footprint { device: pool(device), host: pool(host) }
    }

    #[test]
    fn fits_by_the_arena_of_both_pools() {
        let budgets = Budget { device: 100, host: 50 };
        assert!(footprint((90, 100), (40, 50)).fits(budgets));
        assert!(!footprint((90, 101), (40, 50)).fits(budgets), "the live peak fits, the device arena does not");
        assert!(!footprint((90, 100), (40, 51)).fits(budgets), "the host arena is over");
        assert_eq!(footprint((90, 130), (40, 52)).excess(budgets), Budget { device: 30, host: 2 });
        assert_eq!(footprint((90, 130), (40, 52)).overshoot(budgets), 32);
    }

    #[test]
    fn lowers_only_the_targets_of_pools_over_their_budget() {
        let budgets = Budget { device: 10_000, host: 5_000 };
        let over = footprint((9_900, 11_000), (4_000, 4_500));
        assert_eq!(over.lower(budgets, budgets), Budget { device: 9_000, host: 5_000 }, "9,900 × 10/11");
        let barely = footprint((9_990, 10_001), (4_000, 5_001));
        assert_eq!(barely.lower(budgets, budgets), Budget { device: 9_989, host: 3_999 });
        let tiny = footprint((100, 10_001), (0, 0));
        assert_eq!(tiny.lower(budgets, budgets).device, 99, "by the live peak, not the target");
    }
}
