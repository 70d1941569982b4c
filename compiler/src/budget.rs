//! The memory a plan must fit: a device budget and a host budget, in bytes,
//! built once from the flags (`--budget`, `--host-budget`) or the
//! [`Compile`](crate::Compile) builder by one rule, and read by `compile`,
//! `max-batch`, `plan-curve`, `simulate`, TFLMS's search and the planner.
//! `lms run`'s memory limits are the same pair with each side optional
//! ([`Limits`]), completed from the plan's budget and the machine's memory.

use crate::error::Result;
use crate::flags;

/// Host memory the swapped tensors may use when a device budget is given
/// without a host budget: 64 GiB, a fixed figure so the same command plans
/// the same graph on every machine (it is recorded in the plan).
pub const DEFAULT_HOST_BUDGET_BYTES: u64 = 64 << 30;

/// A device budget and a host budget, in bytes ([`Limits`] when either may
/// be missing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budget<Bytes = u64> {
    pub device: Bytes,
    pub host: Bytes,
}

/// A budget whose sides may each be missing: the limits `lms run` is given
/// (`--device-memory`, `--host-memory`), or a plan's recorded budget.
pub type Limits = Budget<Option<u64>>;

impl Budget {
    /// `device` with `host`, or with [`DEFAULT_HOST_BUDGET_BYTES`] when no
    /// host budget is given.
    pub fn new(device: u64, host: Option<u64>) -> Budget {
        Budget { device, host: host.unwrap_or(DEFAULT_HOST_BUDGET_BYTES) }
    }

    /// The budget an optional device size and host size give: none without
    /// a device size, and a host size without one is refused, naming them as
    /// the caller spells them (`names`: device, then host).
    pub fn from_sizes(device: Option<u64>, host: Option<u64>, names: [&str; 2]) -> Result<Option<Budget>> {
        flags::needs(host.is_some(), names[1], device.is_some(), names[0])?;
        Ok(device.map(|device| Budget::new(device, host)))
    }
}

impl Limits {
    /// Each side of `self`, else of `fallback`.
    pub fn or(self, fallback: Limits) -> Limits {
        Budget { device: self.device.or(fallback.device), host: self.host.or(fallback.host) }
    }

    /// Each side of `self`, else of `default`.
    pub fn unwrap_or(self, default: Budget) -> Budget {
        Budget { device: self.device.unwrap_or(default.device), host: self.host.unwrap_or(default.host) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_take_each_side_from_the_first_that_has_it() {
        let given = Limits { device: None, host: Some(0) };
        let plan = Limits { device: Some(7 << 20), host: Some(1 << 30) };
        let machine = Budget { device: 16 << 30, host: 32 << 30 };
        assert_eq!(given.or(plan).unwrap_or(machine), Budget { device: 7 << 20, host: 0 });
        assert_eq!(given.unwrap_or(machine), Budget { device: 16 << 30, host: 0 });
        assert_eq!(Limits::default().or(plan).unwrap_or(machine), Budget { device: 7 << 20, host: 1 << 30 });
    }
}
