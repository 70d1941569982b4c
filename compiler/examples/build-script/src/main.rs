//! Trains the program its build script compiled (embedded with
//! `include_bytes!`) for a few steps on the CPU backend, under the device
//! budget the build script fitted it to.

use lms_runtime::{CpuBackend, Program, RunOptions, Session};

/// The `.lms` program compiled by `build.rs`.
static PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tiny_gpt.lms"));

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let program = Program::decode(PROGRAM, "tiny_gpt.lms")?;
    let options = RunOptions { device_memory: 2200 << 10, ..RunOptions::default() };
    let mut session = Session::new(program, CpuBackend::new(), options)?;
    for step in 1..=3 {
        let result = session.step()?;
        println!("step {step}: loss {:.4}", result.loss.unwrap_or(f32::NAN));
    }
    Ok(())
}
