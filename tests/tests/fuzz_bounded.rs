//! A bounded fuzz run of each target (a few seconds each): no panic, no slow input, no
//! execution holding more than 1 GiB; command lines also end with a documented status and
//! one error line, and external data is never read from outside the model's folder. Long campaigns run with the `lms-fuzz` binary.

use lms_tests::fuzz::alloc::CountingAlloc;
use lms_tests::fuzz::runner::{self, Options};
use lms_tests::fuzz::{npz, surface, targets};
use std::time::Duration;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[test]
fn a_few_seconds_of_each_target_find_nothing() {
    #[cfg(target_os = "linux")]
    lms_tests::assert_devices_intact("before the bounded fuzz run");
    let out = std::env::temp_dir().join(format!("lms-fuzz-bounded-{}", std::process::id()));
    for target in [targets::onnx_import(), targets::lms_load(), npz::npz_inputs()] {
        let options = Options {
            executions: 1_000_000,
            time: Duration::from_secs(4),
            per_input: Duration::from_secs(10),
            seed: 7,
            out: out.clone(),
            progress_every: 0,
        };
        let s = runner::run(&target, &options);
        eprintln!(
            "{}: {} executions, {} accepted, peak {} MiB",
            target.name,
            s.executions,
            s.accepted,
            s.peak_bytes >> 20
        );
        assert!(s.findings.is_empty(), "{}: {:#?}", target.name, s.findings);
        assert!(s.executions >= 100, "{}: only {} executions", target.name, s.executions);
        assert!(s.accepted > 0, "{}: no mutated input got past validation", target.name);
        assert!(s.peak_bytes > 0, "the counting allocator is installed");
    }
    // In the same test: the runner's watchdog and allocation counter are per process.
    for target in [surface::cli_args(), surface::external_layouts()] {
        let options = Options {
            executions: 1_000_000,
            time: Duration::from_secs(4),
            per_input: Duration::from_secs(20),
            seed: 7,
            out: out.clone(),
            progress_every: 0,
        };
        let s = runner::run(&target, &options);
        eprintln!("{}: {} executions, {} accepted", target.name, s.executions, s.accepted);
        assert!(s.findings.is_empty(), "{}: {:#?}", target.name, s.findings);
        // Each command line runs the binary: fewer executions than the in-process targets.
        assert!(s.executions >= 10, "{}: only {} executions", target.name, s.executions);
        assert!(
            s.accepted > 0 && s.accepted < s.executions,
            "{}: {} of {} accepted",
            target.name,
            s.accepted,
            s.executions
        );
    }
    let _ = std::fs::remove_dir_all(&out);
    #[cfg(target_os = "linux")]
    lms_tests::assert_devices_intact("after the bounded fuzz run");
}
