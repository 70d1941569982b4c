//! Memory passes: rewrites of a training graph that lower its device memory.
//!
//! - [`tflms`]: TFLMS (tflms.txt §4-5): swap-out/swap-in identity ops on the
//!   CPU with control edges that time the swap-ins, and a budget mode that
//!   searches its knobs with the memory simulator.

pub mod tflms;
