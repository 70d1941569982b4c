//! Scratch memory: device bytes a node's kernel takes while it runs, besides its inputs
//! and outputs. Each node's scratch is a block of the device arena live at the node's step
//! only ([`super::placement::lifetimes`]); the compiler's memory simulation counts it in the
//! step's bytes, and the runtime allocates it around the node, so both agree to the byte.
//!
//! Planned today: the zero-padded copy a convolution with asymmetric pads works on (cuDNN
//! pads symmetrically): X padded for `Conv` and `ConvGradWeight`, dX padded for
//! `ConvGradData`, in f32 — every halo part of a spatial split has such pads.

use super::ops::LMS_DOMAIN;
use super::program::Program;
use crate::lms::attribute::Value;

/// Bytes of a padded f32 copy: the kernels compute convolutions in f32.
const PADDED_ELEMENT_BYTES: u64 = 4;

/// Scratch bytes of a node with op `op` in `domain`, explicit `pads` (ONNX order: every
/// spatial axis's begin, then every end), input shapes `inputs` (`None`: an absent optional
/// input) and output shapes `outputs`. 0 for ops that take none.
pub fn scratch_bytes(
    domain: &str,
    op: &str,
    pads: Option<&[i64]>,
    inputs: &[Option<&[usize]>],
    outputs: &[&[usize]],
) -> u64 {
    let padded = match (domain, op) {
        ("" | "ai.onnx", "Conv") => inputs.first().copied().flatten(),
        (LMS_DOMAIN, "ConvGradWeight") => inputs.get(1).copied().flatten(),
        (LMS_DOMAIN, "ConvGradData") => outputs.first().copied(),
        _ => None,
    };
    match (padded, pads) {
        (Some(shape), Some(pads)) => padded_copy_bytes(shape, pads),
        _ => 0,
    }
}

/// Bytes of `shape` (N, C, spatial axes...) padded by `pads` in f32 when the pads are
/// asymmetric on some axis; 0 when they are symmetric or do not fit the shape.
fn padded_copy_bytes(shape: &[usize], pads: &[i64]) -> u64 {
    let spatial = shape.len().saturating_sub(2);
    if shape.len() < 3 || pads.len() != 2 * spatial || pads.iter().any(|&p| p < 0) {
        return 0;
    }
    let (begin, end) = pads.split_at(spatial);
    if begin == end {
        return 0;
    }
    let mut elements = (shape[0] * shape[1]) as u64;
    for d in 0..spatial {
        elements = elements.saturating_mul(shape[2 + d] as u64 + begin[d] as u64 + end[d] as u64);
    }
    elements.saturating_mul(PADDED_ELEMENT_BYTES)
}

/// Scratch bytes of every node of `program`, by node index.
pub fn of_program(program: &Program) -> Vec<u64> {
    (0..program.node_count())
        .map(|n| {
            let node = program.node(n);
            let pads = node.attributes.iter().find(|a| a.name == "pads").and_then(|a| match &a.value {
                Some(Value::Ints(ints)) => Some(&ints.values[..]),
                _ => None,
            });
            let inputs: Vec<Option<&[usize]>> =
                program.node_inputs(n).iter().map(|t| t.map(|t| &program.tensor_type(t).shape[..])).collect();
            let outputs: Vec<&[usize]> =
                program.node_outputs(n).iter().map(|&t| &program.tensor_type(t).shape[..]).collect();
            scratch_bytes(&node.domain, &node.op, pads, &inputs, &outputs)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asymmetric_pads_take_a_padded_copy() {
        let x: &[usize] = &[2, 3, 8, 8];
        assert_eq!(scratch_bytes("", "Conv", Some(&[1, 1, 1, 1]), &[Some(x)], &[&[2, 4, 8, 8]]), 0, "symmetric");
        assert_eq!(scratch_bytes("", "Conv", Some(&[1, 0, 0, 0]), &[Some(x)], &[&[2, 4, 8, 7]]), 2 * 3 * 9 * 8 * 4);
        assert_eq!(scratch_bytes("", "Conv", None, &[Some(x)], &[&[2, 4, 6, 6]]), 0, "no pads");
        let dy: &[usize] = &[2, 4, 9, 8];
        let grad_weight = scratch_bytes(LMS_DOMAIN, "ConvGradWeight", Some(&[1, 0, 1, 1]), &[Some(dy), Some(x)], &[]);
        assert_eq!(grad_weight, 2 * 3 * 10 * 9 * 4, "X padded");
        let grad_data = scratch_bytes(LMS_DOMAIN, "ConvGradData", Some(&[0, 2, 0, 0]), &[Some(dy), None], &[x]);
        assert_eq!(grad_data, 2 * 3 * 8 * 10 * 4, "dX padded");
        assert_eq!(scratch_bytes("", "Relu", Some(&[1, 0, 0, 0]), &[Some(x)], &[x]), 0, "not a convolution");
    }
}
