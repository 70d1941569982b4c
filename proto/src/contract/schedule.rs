//! Checks of `Graph.schedule`, the order the runtime executes and the simulator walks: a
//! permutation of all nodes that runs every node after the producers of its inputs and its
//! control predecessors, and every update after the other readers of the variable it writes.
//! Nobody reorders a valid schedule; there is no topological sort here.

use super::describe;
use super::program::Program;
use crate::lms::Graph;

/// `Graph.schedule` as node ids, checked to be a permutation of the nodes in which every
/// node comes after each of `predecessors[node]`; returns it with each node's position.
pub fn check_schedule(graph: &Graph, predecessors: &[Vec<usize>]) -> Result<(Vec<usize>, Vec<usize>), String> {
    let n = graph.nodes.len();
    if graph.schedule.len() != n {
        return Err(format!("schedule has {} entries for {n} nodes", graph.schedule.len()));
    }
    let mut position = vec![usize::MAX; n];
    for (i, &id) in graph.schedule.iter().enumerate() {
        let id = id as usize;
        if id >= n {
            return Err(format!("schedule entry {i} names node id {id}, but the graph has {n} nodes"));
        }
        if position[id] != usize::MAX {
            return Err(format!("schedule names {} twice", describe::node(graph, id)));
        }
        position[id] = i;
    }
    for (v, ps) in predecessors.iter().enumerate() {
        if let Some(&u) = ps.iter().find(|&&u| position[u] >= position[v]) {
            return Err(format!(
                "schedule runs {} before {}, which it depends on",
                describe::node(graph, v),
                describe::node(graph, u)
            ));
        }
    }
    Ok((graph.schedule.iter().map(|&id| id as usize).collect(), position))
}

/// Checks that every update runs after every other reader of the variable it writes.
pub fn check_update_order(program: &Program) -> Result<(), String> {
    let mut readers = vec![Vec::new(); program.tensor_count()];
    for n in 0..program.node_count() {
        for &t in program.node_inputs(n).iter().flatten() {
            readers[t].push(n);
        }
    }
    for u in program.updates() {
        let writer = program.producer(u.tensor);
        let stored = program.node_outputs(u.variable)[0];
        let late = readers[stored].iter().find(|&&r| r != writer && program.position(r) > program.position(writer));
        if let Some(&reader) = late {
            let graph = program.graph();
            return Err(format!(
                "{} reads variable {} after {} updates it",
                describe::node(graph, reader),
                describe::node(graph, u.variable),
                describe::node(graph, writer)
            ));
        }
    }
    Ok(())
}
