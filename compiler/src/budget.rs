//! The memory a plan must fit: a device budget and a host budget, in bytes,
//! built once from the flags (`--budget`, `--host-budget`) or the
//! [`Compile`](crate::Compile) builder by one rule, and read by `compile`,
//! `max-batch`, `plan-curve`, `simulate`, TFLMS's search and the planner.

use crate::error::Result;
use crate::flags;

/// Host memory the swapped tensors may use when a device budget is given
/// without a host budget: 64 GiB, a fixed figure so the same command plans
/// the same graph on every machine (it is recorded in the plan).
pub const DEFAULT_HOST_BUDGET_BYTES: u64 = 64 << 30;

/// A device budget and a host budget, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub device: u64,
    pub host: u64,
}

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
