//! The stored values a proof must cover besides the terms: every variable's
//! initial value and every constant. The terms name a variable by its vertex
//! and know nothing of its bytes, so a rewrite that zeroed a weight would
//! still prove "equal"; here each such value gets a content hash (SHA-256
//! of its type, its attributes and its bytes), compared with the original's
//! by the same identity the terms use.
//!
//! - A variable (a parameterized vertex other than an input) is identified
//!   by its name; its value is its type, its attributes (`init`, seeds,
//!   fans) and its stored bytes.
//! - A constant (an op holding a tensor attribute: `Constant`,
//!   `ConstantOfShape`) is identified by its output tensor's name; its value
//!   is its attributes and output types. A constant the rewrite removed
//!   along with its tensor (a shape computation a split made dead) is left
//!   to the terms, which hold the attribute's bytes; one whose tensor the
//!   rewritten graph still has must be there with the same value.

use crate::ir::{Attr, Graph, INPUT_OP};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Which stored value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Stored {
    /// A variable's initial value, by the variable's name.
    Initial {
        /// The variable.
        variable: String,
    },
    /// A constant, by its output tensor's name.
    Constant {
        /// The constant's tensor.
        tensor: String,
    },
}

impl fmt::Display for Stored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stored::Initial { variable } => write!(f, "the initial value of variable '{variable}'"),
            Stored::Constant { tensor } => write!(f, "constant '{tensor}'"),
        }
    }
}

/// The verdict on one stored value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// Both graphs hold it with the same content hash.
    Equal,
    /// The content hashes differ (shown shortened: original, rewritten).
    Differs {
        /// The original's hash.
        original: String,
        /// The rewritten graph's hash.
        rewritten: String,
    },
    /// Only the original holds this variable, or this constant while the
    /// rewritten graph still has its tensor.
    MissingInRewritten,
    /// Only the rewritten graph holds this variable.
    MissingInOriginal,
}

/// One stored value and its verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ValueItem {
    /// The value.
    pub what: Stored,
    /// Its verdict.
    pub verdict: Verdict,
}

impl ValueItem {
    /// Why the item fails, after its name ("differs from the original's
    /// (content hash ...)"); `None` when equal.
    pub fn reason(&self) -> Option<String> {
        match &self.verdict {
            Verdict::Equal => None,
            Verdict::Differs { original, rewritten } => {
                Some(format!("differs from the original's (content hash {rewritten}, the original's {original})"))
            }
            Verdict::MissingInRewritten => Some("is missing in the rewritten graph".into()),
            Verdict::MissingInOriginal => Some("is not in the original graph".into()),
        }
    }
}

/// Compares the stored values of both graphs, in name order: variables by
/// name, then the constants the original holds whose tensors the rewritten
/// graph still has.
pub fn compare(original: &Graph, rewritten: &Graph) -> Vec<ValueItem> {
    let (a, b) = (hashes(original), hashes(rewritten));
    let kept: BTreeSet<&str> = rewritten.tensors().map(|(_, t)| t.name.as_str()).collect();
    let mut items = Vec::new();
    for (what, x) in &a {
        let verdict = match (b.get(what), what) {
            (Some(y), _) if y == x => Verdict::Equal,
            (Some(y), _) => Verdict::Differs { original: short(x), rewritten: short(y) },
            (None, Stored::Initial { .. }) => Verdict::MissingInRewritten,
            (None, Stored::Constant { tensor }) if kept.contains(tensor.as_str()) => Verdict::MissingInRewritten,
            (None, Stored::Constant { .. }) => continue,
        };
        items.push(ValueItem { what: what.clone(), verdict });
    }
    for what in b.keys().filter(|w| matches!(w, Stored::Initial { .. }) && !a.contains_key(w)) {
        items.push(ValueItem { what: what.clone(), verdict: Verdict::MissingInOriginal });
    }
    items.sort_by(|x, y| x.what.cmp(&y.what));
    items
}

/// The content hash of each stored value of `g`.
fn hashes(g: &Graph) -> BTreeMap<Stored, [u8; 32]> {
    let mut out = BTreeMap::new();
    for id in g.node_ids() {
        let node = g.node(id);
        let variable = node.parameterized && node.op != INPUT_OP;
        if !variable && !node.attrs.iter().any(|(_, a)| matches!(a, Attr::Tensor(_))) {
            continue;
        }
        let Some(&first) = node.outputs.first() else { continue };
        let mut h = hmac_sha256::Hash::new();
        for (name, attr) in node.attrs.iter() {
            h.update(name.as_bytes());
            h.update(b"=");
            match attr {
                Attr::Tensor(t) => {
                    h.update(t.ty.to_string().as_bytes());
                    h.update(&t.bytes);
                }
                other => h.update(other.to_string().as_bytes()),
            }
            h.update(b";");
        }
        for &t in &node.outputs {
            let tensor = g.tensor(t);
            h.update(tensor.ty.to_string().as_bytes());
            h.update((tensor.data.as_ref().map_or(0, |d| d.bytes.len()) as u64).to_le_bytes());
            h.update(tensor.data.as_ref().map_or(&[][..], |d| &d.bytes));
        }
        let what = if variable {
            Stored::Initial { variable: node.name.clone() }
        } else {
            Stored::Constant { tensor: g.tensor(first).name.clone() }
        };
        out.insert(what, h.finalize());
    }
    out
}

/// The first 8 bytes of a hash in hex.
fn short(hash: &[u8; 32]) -> String {
    hash[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::{compare, Stored, Verdict};
    use crate::egraph::testing::Net;
    use crate::ir::{Attr, Attrs, TensorData};

    fn net(w: &[f32], v: &[f32], c: f32) -> crate::ir::Graph {
        let mut net = Net::new();
        let x = net.input("x", &[2]);
        let wt = net.variable("w", &[2]);
        let vt = net.variable("v", &[2]);
        net.g.tensor_mut(wt).data = Some(TensorData::from_f32(vec![2], w));
        net.g.tensor_mut(vt).data = Some(TensorData::from_f32(vec![2], v));
        let value = Attrs::new().with("value", Attr::Tensor(TensorData::from_f32(vec![1], &[c])));
        let k = net.op("k", "Constant", value, &[], &[1]);
        let xw = net.op("xw", "Mul", Attrs::new(), &[x, wt], &[2]);
        let xv = net.op("xv", "Mul", Attrs::new(), &[xw, vt], &[2]);
        let out = net.op("out", "Add", Attrs::new(), &[xv, k], &[2]);
        net.g.outputs = vec![out];
        net.g
    }

    #[test]
    fn equal_values_pass_and_each_difference_is_named() {
        let original = net(&[1.0, 2.0], &[3.0, 4.0], 0.5);
        assert!(compare(&original, &original).iter().all(|i| i.verdict == Verdict::Equal));
        assert_eq!(compare(&original, &original).len(), 3, "w, v and the constant");

        let zeroed = compare(&original, &net(&[0.0, 0.0], &[3.0, 4.0], 0.5));
        let failing: Vec<&Stored> = zeroed.iter().filter(|i| i.verdict != Verdict::Equal).map(|i| &i.what).collect();
        assert_eq!(failing, [&Stored::Initial { variable: "w".into() }]);

        let flipped = f32::from_bits(0.5f32.to_bits() ^ 1);
        let items = compare(&original, &net(&[1.0, 2.0], &[3.0, 4.0], flipped));
        let failing: Vec<String> = items.iter().filter_map(|i| Some(format!("{} {}", i.what, i.reason()?))).collect();
        assert_eq!(failing.len(), 1);
        assert!(failing[0].starts_with("constant 'k' differs from the original's (content hash "), "{failing:?}");

        let swapped = compare(&original, &net(&[3.0, 4.0], &[1.0, 2.0], 0.5));
        assert_eq!(swapped.iter().filter(|i| i.verdict != Verdict::Equal).count(), 2, "both weights");
    }

    #[test]
    fn a_constant_whose_tensor_another_op_makes_is_missing() {
        let original = net(&[1.0, 2.0], &[3.0, 4.0], 0.5);
        let mut replaced = original.clone();
        let k = replaced.node_ids().find(|&id| replaced.node(id).name == "k").unwrap();
        let node = replaced.node_mut(k);
        (node.op, node.attrs) = ("RandomNormal".into(), Attrs::new());
        let items = compare(&original, &replaced);
        let failing: Vec<String> = items.iter().filter_map(|i| Some(format!("{} {}", i.what, i.reason()?))).collect();
        assert_eq!(failing, ["constant 'k' is missing in the rewritten graph"]);
    }
}
