//! Analyses over the IR: execution ordering (γ of tflms.txt Definition 2 and
//! the default schedule), tensor classification, lifetimes and memory.

pub mod classify;
pub mod lifetime;
pub mod memory;
pub mod order;
