//! Snapshot testing of rewrites: the stable text form of a compiled graph,
//! one line per op in schedule order, for a user's own `insta` tests. The
//! same model and options always give the same text, so a snapshot changes
//! only when the rewrite does.
//!
//! ```
//! use lms_compiler::passes::tflms::TflmsConfig;
//! use lms_compiler::Compile;
//!
//! let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/models/mlp.onnx");
//! let text = lms_compiler::testing::rewrite_text(Compile::new(model).batch(2).tflms(TflmsConfig::default()))?;
//! assert!(text.contains("SwapOut") && text.contains("SwapIn"));
//! // In a test of your own: insta::assert_snapshot!(text);
//! # Ok::<(), lms_compiler::Error>(())
//! ```

use crate::commands::builder::Compile;
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Compiles `compile` (with verification, as configured) and returns the
/// graph's stable text form; nothing is left on disk.
pub fn rewrite_text(compile: Compile) -> Result<String> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "lms-testing-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| Error::from(e).in_file(&dir))?;
    let text_path = dir.join("graph.txt");
    let result = compile
        .text(&text_path)
        .write(dir.join("graph.lms"))
        .and_then(|_| std::fs::read_to_string(&text_path).map_err(|e| Error::from(e).in_file(&text_path)));
    let _ = std::fs::remove_dir_all(&dir);
    result
}
