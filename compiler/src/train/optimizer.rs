//! Update ops (phase update) for SGD, momentum and Adam. Each writes its
//! variables through update edges and runs after every other reader of the
//! variables it writes (control edges), so the write is safe in place.

use super::builder::Builder;
use super::Optimizer;
use crate::error::Result;
use crate::ir::{Attr, Attrs, DType, NodeId, Phase, TensorId, TensorType, VARIABLE_OP};
use std::collections::HashMap;

/// Adds the update of every trained variable that has a gradient.
pub fn attach(
    b: &mut Builder,
    trainable: &[TensorId],
    grads: &HashMap<TensorId, TensorId>,
    optimizer: Optimizer,
) -> Result<()> {
    b.phase = Phase::Update;
    let zeros = || Attrs::new().with("init", Attr::String("zeros".into()));
    let step = match optimizer {
        Optimizer::Adam { .. } => {
            let t = b.add_leaf("adam.step", VARIABLE_OP, zeros(), TensorType::new(DType::F32, vec![]));
            let next = b.lms1("adam.step/update", "AdamStep", Attrs::new(), &[t], TensorType::new(DType::F32, vec![]));
            write_back(b, &[(next, t)]);
            Some(next)
        }
        _ => None,
    };
    for &w in trainable {
        let Some(&dw) = grads.get(&w) else { continue };
        let name = b.graph.tensor(w).name.clone();
        let ty = b.ty(w);
        let update = format!("{name}/update");
        let writes: Vec<(TensorId, TensorId)> = match optimizer {
            Optimizer::Sgd { lr } => {
                let out = b.lms1(&update, "SgdUpdate", Attrs::new().with("lr", Attr::Float(lr)), &[w, dw], ty);
                vec![(out, w)]
            }
            Optimizer::Momentum { lr, momentum } => {
                let v = b.add_leaf(&format!("{name}.momentum"), VARIABLE_OP, zeros(), ty.clone());
                let attrs = Attrs::new().with("lr", Attr::Float(lr)).with("momentum", Attr::Float(momentum));
                let outs = b.lms(&update, "MomentumUpdate", attrs, &[Some(w), Some(v), Some(dw)], vec![ty.clone(), ty]);
                vec![(outs[0], w), (outs[1], v)]
            }
            Optimizer::Adam { lr, beta1, beta2, epsilon } => {
                let m = b.add_leaf(&format!("{name}.adam_m"), VARIABLE_OP, zeros(), ty.clone());
                let v = b.add_leaf(&format!("{name}.adam_v"), VARIABLE_OP, zeros(), ty.clone());
                let attrs = Attrs::new()
                    .with("lr", Attr::Float(lr))
                    .with("beta1", Attr::Float(beta1))
                    .with("beta2", Attr::Float(beta2))
                    .with("epsilon", Attr::Float(epsilon));
                let t = step.expect("Adam has a step counter");
                let outs = b.lms(
                    &update,
                    "AdamUpdate",
                    attrs,
                    &[Some(w), Some(m), Some(v), Some(dw), Some(t)],
                    vec![ty.clone(), ty.clone(), ty],
                );
                vec![(outs[0], w), (outs[1], m), (outs[2], v)]
            }
        };
        write_back(b, &writes);
    }
    Ok(())
}

/// Update edges from each new value to its variable, and control edges from
/// every other reader of the variable to the writer.
fn write_back(b: &mut Builder, writes: &[(TensorId, TensorId)]) {
    for &(value, variable) in writes {
        let writer = b.graph.tensor(value).producer.0;
        let var_node: NodeId = b.graph.tensor(variable).producer.0;
        let mut readers: Vec<NodeId> = b.graph.readers(variable).map(|(r, _)| r).filter(|&r| r != writer).collect();
        readers.sort();
        readers.dedup();
        for r in readers {
            b.graph.add_control_edge(r, writer);
        }
        b.graph.add_update_edge(value, var_node);
    }
}
