//! Robustness: truncated and byte-mutated versions of the fixture models
//! never make the frontend (decode, import, inspect) panic.

use lms_compiler::commands::inspect::InspectReport;
use lms_compiler::frontend::{self, FrontendOptions};
use lms_tests::{fixture, list, onnx_data};

/// Deterministic xorshift generator: the same mutations every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Imports bytes as a model; any error is fine, a panic is not.
fn import(bytes: &[u8]) {
    if let Ok(proto) = frontend::decode_model(bytes) {
        if let Ok(model) = frontend::import(&proto, None, &FrontendOptions { batch: Some(2), ..Default::default() }) {
            let _ = InspectReport::new(&model);
        }
    }
}

#[test]
fn ten_thousand_mutated_models_never_panic() {
    let mut models = list(&fixture("models"), |p| p.extension().is_some_and(|e| e == "onnx"));
    models.extend(list(&onnx_data("light"), |p| p.extension().is_some_and(|e| e == "onnx")));
    let originals: Vec<Vec<u8>> = models.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut cases = 0;
    for round in 0..10_000 {
        let original = &originals[round % originals.len()];
        let mut bytes = original.clone();
        match rng.below(4) {
            0 => bytes.truncate(rng.below(original.len())),
            1 => {
                for _ in 0..1 + rng.below(8) {
                    let i = rng.below(bytes.len());
                    bytes[i] = rng.next() as u8;
                }
            }
            2 => {
                // Flip bits in varints and lengths near the start, where the structure is.
                let i = rng.below(bytes.len().min(4096));
                bytes[i] ^= 1 << rng.below(8);
            }
            _ => {
                let start = rng.below(bytes.len());
                let len = rng.below(64).min(bytes.len() - start);
                bytes.drain(start..start + len);
            }
        }
        let result = std::panic::catch_unwind(|| import(&bytes));
        assert!(result.is_ok(), "mutation {round} of {} panicked", models[round % models.len()].display());
        cases += 1;
    }
    assert_eq!(cases, 10_000);
}
