//! The matrix products a backend that lowers convolutions to im2col and a
//! GEMM per image runs for a matrix op (the CPU backend): their count and
//! shape, and the bytes the lowering moves besides (im2col's or col2im's
//! column buffer). A product's speed depends on its shape — the smallest of
//! its three sides decides how well its blocks fill — so the time model
//! rates each product at the measured rate of a square product of that side.

use crate::ir::{Graph, NodeId};

/// `count` products of an `m`×`k` by a `k`×`n` matrix, and `lowering_bytes`
/// moved around them (read and written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gemms {
    pub count: u64,
    pub m: u64,
    pub k: u64,
    pub n: u64,
    pub lowering_bytes: u64,
}

impl Gemms {
    /// FLOPs of all the products.
    pub fn flops(&self) -> f64 {
        2.0 * (self.count * self.m * self.k * self.n) as f64
    }

    /// FLOPs of one square product whose side is this shape's smallest:
    /// the size at which the measured rate of square products is read.
    pub fn rate_size(&self) -> f64 {
        let side = self.m.min(self.k).min(self.n) as f64;
        2.0 * side * side * side
    }
}

/// The products of node `id`: `MatMul` (batched over the output's leading
/// dimensions), `Gemm`, and `Conv`, `ConvGradData`, `ConvGradWeight` (one
/// per image and group, the kernel's window as the inner side); `None` for
/// any other op or shapes that do not fit.
pub fn of(g: &Graph, id: NodeId) -> Option<Gemms> {
    let node = g.node(id);
    let input = |i: usize| node.inputs.get(i).copied().flatten().map(|t| g.tensor(t).ty.shape.as_slice());
    let output = |i: usize| node.outputs.get(i).map(|&t| g.tensor(t).ty.shape.as_slice());
    let dims = |s: &[usize]| s.iter().map(|&d| d as u64).collect::<Vec<u64>>();
    match node.op.as_str() {
        "MatMul" => {
            let (a, y) = (dims(input(0)?), dims(output(0)?));
            let k = *a.last()?;
            let (m, n) = match (a.len(), y.len()) {
                (1, _) => (1, *y.last()?),
                (_, 1) => (*y.first()?, 1),
                (_, r) => (y[r - 2], y[r - 1]),
            };
            let count = y.iter().rev().skip(2).product::<u64>().max(1);
            Some(Gemms { count, m, k, n, lowering_bytes: 0 })
        }
        "Gemm" => {
            let (a, y) = (dims(input(0)?), dims(output(0)?));
            let trans_a = node.attrs.int("transA", 0).unwrap_or(0) != 0;
            let k = *if trans_a { a.first() } else { a.get(1) }?;
            Some(Gemms { count: 1, m: *y.first()?, k, n: *y.get(1)?, lowering_bytes: 0 })
        }
        // Conv(X, W) → Y; ConvGradData(dY, W) → dX; ConvGradWeight(dY, X) → dW.
        "Conv" => conv(input(0)?, input(1)?, output(0)?),
        "ConvGradData" => conv(output(0)?, input(1)?, input(0)?),
        "ConvGradWeight" => conv(input(1)?, output(0)?, input(0)?),
        _ => None,
    }
}

/// The products of a convolution of `x` [N, C, ...] by `w` [M, C/G, ...]
/// giving `y` [N, M, ...]: per image and group, [M/G, C/G·window] by
/// [C/G·window, positions]; unless the kernel is 1×1 over every position
/// (no lowering), the column buffer of 4-byte elements is written and read
/// once per product.
fn conv(x: &[usize], w: &[usize], y: &[usize]) -> Option<Gemms> {
    if x.len() < 3 || w.len() != x.len() || y.len() != x.len() || w[1] == 0 || w[0] == 0 {
        return None;
    }
    let (images, channels, group_channels) = (x[0] as u64, x[1] as u64, w[1] as u64);
    let groups = (channels / group_channels).max(1);
    let window: u64 = w[2..].iter().map(|&d| d as u64).product();
    let positions: u64 = y[2..].iter().map(|&d| d as u64).product();
    let inputs: u64 = x[2..].iter().map(|&d| d as u64).product();
    let inner = group_channels * window;
    let pointwise = window == 1 && positions == inputs;
    let count = images * groups;
    let lowering_bytes = if pointwise { 0 } else { 2 * 4 * count * inner * positions };
    Some(Gemms { count, m: w[0] as u64 / groups, k: inner, n: positions, lowering_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn convolutions_are_products_per_image_and_group() {
        let lowered = conv(&[2, 8, 16, 16], &[4, 8, 3, 3], &[2, 4, 16, 16]).unwrap();
        assert_eq!(lowered, Gemms { count: 2, m: 4, k: 72, n: 256, lowering_bytes: 2 * 4 * 2 * 72 * 256 });
        assert_eq!((lowered.flops(), lowered.rate_size()), (2.0 * 2.0 * 4.0 * 72.0 * 256.0, 128.0));
        let pointwise = conv(&[1, 8, 4, 4], &[16, 8, 1, 1], &[1, 16, 4, 4]).unwrap();
        assert_eq!((pointwise.k, pointwise.n, pointwise.lowering_bytes), (8, 16, 0));
        // A strided 1×1 kernel still gathers its positions.
        assert!(conv(&[1, 8, 4, 4], &[16, 8, 1, 1], &[1, 16, 2, 2]).unwrap().lowering_bytes > 0);
        let grouped = conv(&[1, 8, 4, 4], &[8, 2, 3, 3], &[1, 8, 4, 4]).unwrap();
        assert_eq!((grouped.count, grouped.m, grouped.k, grouped.n), (4, 2, 18, 16));
        assert_eq!(conv(&[8, 4], &[4, 4], &[8, 4]), None);
    }
}
