//! How errors name a node or a tensor: by name (escaped, so an error stays on one line),
//! or by id when it has none.

use crate::escape::Escaped;
use crate::lms::Graph;

/// `node 'name' (Op)`, or `node #id (Op)` for an unnamed node.
pub fn node(graph: &Graph, id: usize) -> String {
    match graph.nodes.get(id) {
        Some(n) if n.name.is_empty() => format!("node #{id} ({})", Escaped(&n.op)),
        Some(n) => format!("node '{}' ({})", Escaped(&n.name), Escaped(&n.op)),
        None => format!("node #{id}"),
    }
}

/// `tensor 'name'`, or `tensor #id` for an unnamed tensor.
pub fn tensor(graph: &Graph, id: usize) -> String {
    match graph.tensors.get(id) {
        Some(t) if !t.name.is_empty() => format!("tensor '{}'", Escaped(&t.name)),
        _ => format!("tensor #{id}"),
    }
}
