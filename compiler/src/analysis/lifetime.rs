//! Tensor lifetimes in γ units: for a tensor made by u and read by v1..vk,
//! max γ(vi) − γ(u) (the distance TFLMS compares with its threshold α).

use crate::ir::Graph;

/// Lifetime of every tensor, indexed by `TensorId::index()`; `None` for a
/// tensor nobody reads. `gamma` comes from [`super::order::gamma`].
pub fn lifetimes(g: &Graph, gamma: &[u32]) -> Vec<Option<u32>> {
    g.tensors()
        .map(|(t, tensor)| {
            let born = gamma[tensor.producer.0.index()];
            g.readers(t).map(|(r, _)| gamma[r.index()].saturating_sub(born)).max()
        })
        .collect()
}
