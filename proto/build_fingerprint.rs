//! The fingerprint of the schemas the committed code in `src/generated/` was made from:
//! FNV-1a (64 bits) of `schema/onnx.proto` and `schema/lms.proto`, in that order. Shared
//! by `build.rs`, which refuses to build stale code, and the test that generates it.

use std::path::Path;

/// The fingerprint of the schemas under `root` (the crate's folder).
pub fn of_schemas(root: &Path) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for schema in ["schema/onnx.proto", "schema/lms.proto"] {
        let bytes = std::fs::read(root.join(schema)).unwrap_or_else(|e| panic!("{schema}: {e}"));
        for byte in bytes {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}
