//! The fuzz runner reports what it must: a panic, an input over the per-input time limit,
//! an execution holding more than 1 GiB; and it writes each finding's input out.

use lms_tests::fuzz::alloc::{CountingAlloc, LIMIT};
use lms_tests::fuzz::mutate::Rng;
use lms_tests::fuzz::runner::{self, FindingKind, Options, Target};
use std::time::Duration;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn unchanged(_: &mut Rng, seed: &[u8], _: &[Vec<u8>]) -> Vec<u8> {
    seed.to_vec()
}

#[test]
fn panics_slow_inputs_and_big_allocations_are_findings() {
    let out = std::env::temp_dir().join(format!("lms-fuzz-runner-{}", std::process::id()));
    let options = Options {
        executions: 3,
        time: Duration::from_secs(60),
        per_input: Duration::from_millis(20),
        seed: 1,
        out: out.clone(),
        progress_every: 0,
    };
    let run = |bytes: &[u8]| -> bool {
        match bytes {
            b"panic" => panic!("boom on {bytes:?}"),
            b"slow" => std::thread::sleep(Duration::from_millis(60)),
            b"big" => drop(std::hint::black_box(vec![0u8; LIMIT + (64 << 20)])),
            _ => {}
        }
        true
    };
    for (input, kind) in [("panic", FindingKind::Panic), ("slow", FindingKind::Slow), ("big", FindingKind::Memory)] {
        let target =
            Target { name: "probe", seeds: vec![input.as_bytes().to_vec()], mutate: unchanged, run: Box::new(run) };
        let s = runner::run(&target, &options);
        assert_eq!(s.executions, 3, "{input}");
        assert_eq!(s.findings.len(), 3, "{input}: {:#?}", s.findings);
        for f in &s.findings {
            assert_eq!(f.kind, kind, "{input}");
            assert_eq!(std::fs::read(&f.input).unwrap(), input.as_bytes());
        }
        if kind == FindingKind::Panic {
            assert!(s.findings[0].message.contains("boom"), "{}", s.findings[0].message);
        }
    }
    let fine = Target { name: "probe", seeds: vec![b"fine".to_vec()], mutate: unchanged, run: Box::new(run) };
    let s = runner::run(&fine, &options);
    assert!(s.findings.is_empty() && s.accepted == 3, "{:#?}", s.findings);
    std::fs::remove_dir_all(&out).unwrap();
}
