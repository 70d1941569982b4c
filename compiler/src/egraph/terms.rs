//! A graph's tensors as terms, added to an e-graph bottom-up.
//!
//! Each tensor gets the e-class of its term; the graph is a DAG and the
//! builder memoises every tensor, so shared subterms are shared e-classes
//! and nothing is expanded into a tree. Recomputed copies of an op are the
//! same term as the original and hash-cons into its class. Control edges and
//! node names carry no meaning and are not looked at.

use super::lang::{axis, part_len, Term, TermGraph};
use crate::error::{Error, Result};
use crate::ir::CycleError;
use crate::ir::{Graph, NodeId, TensorId, SPLIT_PART_OP, SWAP_IN_OP, SWAP_OUT_OP};
use egg::Id;
use lms_proto::contract::LMS_DOMAIN;

/// Adds the terms of one graph's tensors to an e-graph.
pub struct TermBuilder<'g> {
    g: &'g Graph,
    /// Nodes whose outputs are terms; the outputs of the others are leaves
    /// named by tensor (`None`: every node is inside).
    region: Option<Vec<bool>>,
    /// E-class of each tensor added so far, indexed by `TensorId::index()`.
    classes: Vec<Option<Id>>,
}

/// Progress of the depth-first walk over a node.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Visit {
    New,
    Open,
    Done,
}

impl<'g> TermBuilder<'g> {
    /// A builder for the whole graph: variables and inputs are leaves named by
    /// their vertex.
    pub fn new(g: &'g Graph) -> TermBuilder<'g> {
        TermBuilder { g, region: None, classes: vec![None; g.tensor_count()] }
    }

    /// A builder for a region: the nodes with `inside[node.index()]` set;
    /// tensors made outside it are leaves named by tensor.
    pub fn region(g: &'g Graph, inside: Vec<bool>) -> TermBuilder<'g> {
        TermBuilder { g, region: Some(inside), classes: vec![None; g.tensor_count()] }
    }

    /// The e-class of tensor `t`, adding its term and every term it needs.
    /// Fails when the tensor depends on itself through read edges.
    pub fn tensor(&mut self, egraph: &mut TermGraph, t: TensorId) -> Result<Id> {
        if let Some(id) = self.classes[t.index()] {
            return Ok(id);
        }
        let mut visit = vec![Visit::New; self.g.node_bound()];
        let mut stack = vec![(self.g.tensor(t).producer.0, false)];
        while let Some((n, inputs_done)) = stack.pop() {
            if inputs_done {
                self.add_node(egraph, n);
                visit[n.index()] = Visit::Done;
                continue;
            }
            if visit[n.index()] == Visit::Done || self.classes[self.g.node(n).outputs[0].index()].is_some() {
                continue;
            }
            visit[n.index()] = Visit::Open;
            stack.push((n, true));
            if self.is_leaf(n) {
                continue;
            }
            for &input in self.g.node(n).inputs.iter().flatten() {
                let p = self.g.tensor(input).producer.0;
                match visit[p.index()] {
                    Visit::Open => return Err(Error::Cycle(CycleError { node: self.g.node(p).name.clone() })),
                    Visit::New if self.classes[input.index()].is_none() => stack.push((p, false)),
                    _ => {}
                }
            }
        }
        self.classes[t.index()].ok_or_else(|| Error::Usage(format!("tensor '{}' has no term", self.g.tensor(t).name)))
    }

    /// Whether the node's outputs are leaves.
    fn is_leaf(&self, n: NodeId) -> bool {
        self.g.node(n).parameterized || self.region.as_ref().is_some_and(|inside| !inside[n.index()])
    }

    /// Adds the terms of a node whose inputs all have classes.
    fn add_node(&mut self, egraph: &mut TermGraph, n: NodeId) {
        let node = self.g.node(n);
        if self.is_leaf(n) {
            for &t in &node.outputs {
                let tensor = self.g.tensor(t);
                // Variables and inputs by their vertex, outside tensors by name.
                let name = if node.parameterized { &node.name } else { &tensor.name };
                let leaf = egraph.analysis.leaf(name, &tensor.ty);
                self.classes[t.index()] = Some(egraph.add(leaf));
            }
            return;
        }
        let inputs: Vec<Option<Id>> = node
            .inputs
            .iter()
            .map(|t| t.map(|t| self.classes[t.index()].expect("the walk adds inputs before their readers")))
            .collect();
        let outputs = self.node_terms(egraph, n, &inputs);
        for (&t, id) in node.outputs.iter().zip(outputs) {
            self.classes[t.index()] = Some(id);
        }
    }

    /// The classes of a node's outputs, given its inputs' classes.
    fn node_terms(&self, egraph: &mut TermGraph, n: NodeId, inputs: &[Option<Id>]) -> Vec<Id> {
        let node = self.g.node(n);
        let ranks: Vec<usize> = node.outputs.iter().map(|&t| self.g.tensor(t).ty.rank()).collect();
        match (node.domain.as_str(), node.op.as_str(), inputs, &ranks[..]) {
            (LMS_DOMAIN, SWAP_OUT_OP, &[Some(x)], &[_]) => vec![egraph.add(Term::SwapOut(x))],
            (LMS_DOMAIN, SWAP_IN_OP, &[Some(x)], &[_]) => vec![egraph.add(Term::SwapIn(x))],
            ("", "Identity", &[Some(x)], &[_]) => vec![egraph.add(Term::Identity(x))],
            (LMS_DOMAIN, SPLIT_PART_OP, &[Some(x)], &[rank]) => match self.split_part(n, rank) {
                Some([d, i, count]) => {
                    let [d, i, count] = [d, i, count].map(|v| egraph.add(Term::Int(v as i64)));
                    vec![egraph.add(Term::Split([d, i, count, x]))]
                }
                None => self.op_terms(egraph, n, inputs),
            },
            ("", "Concat", _, &[rank]) if !inputs.is_empty() && inputs.iter().all(Option::is_some) => {
                match node.attrs.int_opt("axis").ok().flatten().and_then(|a| axis(a, rank)) {
                    Some(d) => {
                        let mut children = vec![egraph.add(Term::Int(d as i64))];
                        children.extend(inputs.iter().flatten());
                        vec![egraph.add(Term::Concat(children.into()))]
                    }
                    None => self.op_terms(egraph, n, inputs),
                }
            }
            ("", "Split", &[Some(x), ..], _) => match self.even_split(n) {
                Some(d) => {
                    let count = node.outputs.len();
                    let (d, n_parts, x) = (egraph.add(Term::Int(d as i64)), egraph.add(Term::Int(count as i64)), x);
                    (0..count)
                        .map(|i| {
                            let i = egraph.add(Term::Int(i as i64));
                            egraph.add(Term::Split([d, i, n_parts, x]))
                        })
                        .collect()
                }
                None => self.op_terms(egraph, n, inputs),
            },
            _ => self.op_terms(egraph, n, inputs),
        }
    }

    /// The axis of an ONNX Split whose outputs are the `array_split` parts
    /// of its input (the `split` term); `None` for other splits.
    fn even_split(&self, n: NodeId) -> Option<usize> {
        let node = self.g.node(n);
        let input = &self.g.tensor((*node.inputs.first()?)?).ty.shape;
        let d = axis(node.attrs.int("axis", 0).ok()?, input.len())?;
        let count = node.outputs.len();
        let matches = node.outputs.iter().enumerate().all(|(i, &t)| {
            let shape = &self.g.tensor(t).ty.shape;
            shape.len() == input.len()
                && shape.iter().zip(input).enumerate().all(
                    |(k, (&a, &b))| {
                        if k == d {
                            a == part_len(b, i, count)
                        } else {
                            a == b
                        }
                    },
                )
        });
        (count >= 1 && matches).then_some(d)
    }

    /// The axis, index and part count of an lms `SplitPart` whose output has
    /// the `array_split` length of its part; `None` otherwise.
    fn split_part(&self, n: NodeId, rank: usize) -> Option<[usize; 3]> {
        let node = self.g.node(n);
        let int = |name| node.attrs.int_opt(name).ok().flatten();
        let d = axis(int("axis")?, rank)?;
        let (i, count) = (usize::try_from(int("index")?).ok()?, usize::try_from(int("parts")?).ok()?);
        let input = &self.g.tensor((*node.inputs.first()?)?).ty.shape;
        let output = &self.g.tensor(node.outputs[0]).ty.shape;
        let fits = i < count
            && input.len() == rank
            && output
                .iter()
                .zip(input)
                .enumerate()
                .all(|(k, (&a, &b))| a == if k == d { part_len(b, i, count) } else { b });
        fits.then_some([d, i, count])
    }

    /// A generic op term; multi-output ops get one `(out i node)` per output.
    fn op_terms(&self, egraph: &mut TermGraph, n: NodeId, inputs: &[Option<Id>]) -> Vec<Id> {
        let node = self.g.node(n);
        let types = node.outputs.iter().map(|&t| self.g.tensor(t).ty.clone()).collect();
        let head = egraph.analysis.head(&node.op, &node.domain, &node.attrs, types);
        let children = inputs.iter().map(|slot| slot.unwrap_or_else(|| egraph.add(Term::Absent))).collect();
        let op = egraph.add(Term::Op(head, children));
        if node.outputs.len() == 1 {
            return vec![op];
        }
        (0..node.outputs.len())
            .map(|i| {
                let i = egraph.add(Term::Int(i as i64));
                egraph.add(Term::Out([i, op]))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::TermBuilder;
    use crate::egraph::lang::{Term, TermAnalysis, TermGraph};
    use crate::egraph::testing::Net;
    use crate::ir::{Attr, Attrs};
    use egg::Language;

    #[test]
    fn shared_tensors_are_shared_classes_and_recomputed_copies_hash_cons() {
        let mut net = Net::new();
        let x = net.input("x", &[2, 3]);
        let r = net.op("r", "Relu", Attrs::new(), &[x], &[2, 3]);
        let again = net.op("r_again", "Relu", Attrs::new(), &[x], &[2, 3]);
        let s = net.op("s", "Add", Attrs::new(), &[r, r], &[2, 3]);
        let mut egraph = TermGraph::new(TermAnalysis::new(17));
        let mut terms = TermBuilder::new(&net.g);
        let (rc, ac, sc) = (
            terms.tensor(&mut egraph, r).unwrap(),
            terms.tensor(&mut egraph, again).unwrap(),
            terms.tensor(&mut egraph, s).unwrap(),
        );
        assert_eq!(rc, ac, "a recomputed copy is the same term");
        // x, relu, add: three classes, no tree expansion.
        assert_eq!(egraph.number_of_classes(), 3);
        assert_eq!(egraph[sc].nodes[0].children(), &[rc, rc]);
    }

    #[test]
    fn identity_concat_and_even_split_become_their_terms() {
        let mut net = Net::new();
        let x = net.input("x", &[4, 3]);
        let id = net.op("id", "Identity", Attrs::new(), &[x], &[4, 3]);
        let halves = net.ops("split", "Split", "", Attrs::new(), &[x], &[&[2, 3], &[2, 3]]);
        let uneven = net.ops("uneven", "Split", "", Attrs::new(), &[x], &[&[1, 3], &[3, 3]]);
        let cat = net.op("cat", "Concat", Attrs::new().with("axis", Attr::Int(-2)), &halves, &[4, 3]);
        let mut egraph = TermGraph::new(TermAnalysis::new(17));
        let mut terms = TermBuilder::new(&net.g);
        let node = |egraph: &TermGraph, id| egraph[id].nodes[0].clone();
        let idc = terms.tensor(&mut egraph, id).unwrap();
        assert!(matches!(node(&egraph, idc), Term::Identity(_)));
        let catc = terms.tensor(&mut egraph, cat).unwrap();
        let Term::Concat(children) = node(&egraph, catc) else { panic!("Concat is a concat term") };
        assert_eq!(egraph[children[0]].data.int(), Some(0), "the axis is normalised");
        assert!(matches!(node(&egraph, children[1]), Term::Split(_)));
        let unevenc = terms.tensor(&mut egraph, uneven[0]).unwrap();
        assert!(matches!(node(&egraph, unevenc), Term::Out(_)), "a split other than array_split stays an op");
        assert_eq!(egraph[unevenc].data.shape(), Some(&vec![1, 3]));
    }
}
