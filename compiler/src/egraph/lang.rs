//! The term language and the e-class analysis that knows each class's shape.
//!
//! A term names a value computed by a graph:
//!
//! | term | meaning |
//! |---|---|
//! | `$name:f32[2,3]` | a variable or input (a parameterized vertex) with its type, or a tensor made outside a region |
//! | `(Op{attrs}->f32[2,3] x y ...)` | an op applied to its inputs; the head carries the op type, domain, canonical attributes and output types |
//! | `(out i node)` | output `i` of a multi-output op `node` (TENSAT's projection) |
//! | `none` | an omitted optional input |
//! | `(id x)`, `(swap_out x)`, `(swap_in x)` | identities (TFLMS eq. 2 and 5); ONNX `Identity` is `id` |
//! | `(split d i n x)` | part `i` of `n` of `x` along axis `d` |
//! | `(concat d x0 x1 ...)` | the parts concatenated along axis `d`; ONNX `Concat` is `concat` |
//! | `3` | an integer: an axis, a part index or count, an output index |
//!
//! `split` follows numpy's `array_split`: along an axis of length `len`, the
//! first `len mod n` parts have `len / n + 1` elements and the others
//! `len / n`, so the parts always concatenate back to `x`.
//!
//! Output types are part of an op's head: two nodes with the same op, attributes
//! and inputs always have the same types, so this costs no sharing, and it
//! lets the analysis give every class its shape without shape inference.

use crate::ir::{Attr, Attrs, Shape, TensorType};
pub use crate::shape::split::part_len;
use egg::{define_language, Analysis, DidMerge, EGraph, Id, Rewrite, Symbol};
use std::collections::HashMap;
use std::fmt::{self, Write};
use std::str::FromStr;
use std::sync::Arc;

define_language! {
    /// A value of a graph as a term; see the module documentation for each
    /// form. Variants: `Identity` (`id`), `SwapOut`, `SwapIn`, `Split`
    /// (children: axis, index, count, tensor), `Concat` (children: axis, then
    /// the parts), `Out` (children: index, node), `Absent` (`none`), `Int`,
    /// `Leaf` and `Op` (head symbol and inputs).
    pub enum Term {
        "id" = Identity(Id),
        "swap_out" = SwapOut(Id),
        "swap_in" = SwapIn(Id),
        "split" = Split([Id; 4]),
        "concat" = Concat(Box<[Id]>),
        "out" = Out([Id; 2]),
        "none" = Absent,
        Int(i64),
        Leaf(LeafName),
        Op(Symbol, Vec<Id>),
    }
}

/// An e-graph of [`Term`]s with their shapes.
pub type TermGraph = EGraph<Term, TermAnalysis>;

/// A rewrite rule over [`Term`]s.
pub type TermRewrite = Rewrite<Term, TermAnalysis>;

/// The name of a leaf: a variable or input with its type (`w:f32[4,3]`),
/// written with a leading `$` so that it never reads as an op head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeafName(pub Symbol);

impl fmt::Display for LeafName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${}", self.0)
    }
}

impl FromStr for LeafName {
    type Err = String;

    fn from_str(s: &str) -> Result<LeafName, String> {
        s.strip_prefix('$')
            .map(|name| LeafName(Symbol::from(name)))
            .ok_or_else(|| format!("'{s}' is not a leaf name (they start with '$')"))
    }
}

/// What an op head stands for: the op with its attributes and output types.
#[derive(Clone, Debug, PartialEq)]
pub struct Head {
    /// Operation type.
    pub op: String,
    /// Operator domain; empty for the ONNX default domain.
    pub domain: String,
    /// The node's attributes.
    pub attrs: Attrs,
    /// Type of each output.
    pub outputs: Vec<TensorType>,
    /// The head's text without its output types.
    signature: String,
}

impl Head {
    /// True for the op `op` of the ONNX default domain or the lms domain.
    pub fn is(&self, op: &str) -> bool {
        self.op == op && (self.domain.is_empty() || self.domain == lms_proto::contract::LMS_DOMAIN)
    }

    /// An integer attribute, or `default` when absent or of another kind.
    pub fn int(&self, name: &str, default: i64) -> i64 {
        self.attrs.int(name, default).unwrap_or(default)
    }
}

/// What the analysis knows about an e-class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// An integer: an axis, a part index or count, an output index.
    Int(i64),
    /// A tensor of this shape.
    Tensor(Shape),
    /// The outputs of a multi-output op, by shape.
    Tuple(Vec<Shape>),
    /// Not a value (an omitted input), or a term built outside the builders.
    Unknown,
}

impl Value {
    /// The integer, for [`Value::Int`].
    pub fn int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// The shape, for [`Value::Tensor`].
    pub fn shape(&self) -> Option<&Shape> {
        match self {
            Value::Tensor(s) => Some(s),
            _ => None,
        }
    }
}

/// The e-class analysis: each class's [`Value`], and the tables that give
/// op heads and leaves their meaning. Terms are added through
/// [`TermAnalysis::head`] and [`TermAnalysis::leaf`], which register them.
#[derive(Debug, Default)]
pub struct TermAnalysis {
    /// Opset of the ONNX default domain the terms are written against (some
    /// ops, such as Softmax, change meaning across opsets).
    pub opset: i64,
    heads: HashMap<Symbol, Arc<Head>>,
    leaves: HashMap<Symbol, Shape>,
    /// Index of each distinct constant tensor attribute, by type and bytes,
    /// so that heads compare tensors exactly without printing them.
    constants: HashMap<(TensorType, Arc<[u8]>), usize>,
    /// Classes created, merged into or given a shape since the saturation
    /// run last took them (egg calls [`Analysis::modify`] on each): where
    /// the next iteration looks for new matches.
    pub touched: Vec<Id>,
}

impl TermAnalysis {
    /// An analysis for terms of the given opset.
    pub fn new(opset: i64) -> TermAnalysis {
        TermAnalysis { opset, ..TermAnalysis::default() }
    }

    /// The head symbol of an op with these attributes and output types,
    /// registered so that [`TermAnalysis::lookup`] finds it.
    pub fn head(&mut self, op: &str, domain: &str, attrs: &Attrs, outputs: Vec<TensorType>) -> Symbol {
        let mut signature = String::new();
        if !domain.is_empty() {
            signature.push_str(domain);
            signature.push('.');
        }
        signature.push_str(op);
        if !attrs.0.is_empty() {
            signature.push('{');
            for (i, (name, attr)) in attrs.iter().enumerate() {
                if i > 0 {
                    signature.push(',');
                }
                match attr {
                    Attr::Tensor(t) => {
                        let next = self.constants.len();
                        let index = *self.constants.entry((t.ty.clone(), t.bytes.clone())).or_insert(next);
                        let _ = write!(signature, "{name}=tensor#{index}");
                    }
                    other => {
                        let _ = write!(signature, "{name}={other}");
                    }
                }
            }
            signature.push('}');
        }
        let head = Head { op: op.to_string(), domain: domain.to_string(), attrs: attrs.clone(), outputs, signature };
        self.register(head)
    }

    /// The head symbol of `head`'s op with other output types: the op
    /// applied to parts of its inputs.
    pub fn with_outputs(&mut self, head: &Head, outputs: Vec<TensorType>) -> Symbol {
        self.register(Head { outputs, ..head.clone() })
    }

    fn register(&mut self, head: Head) -> Symbol {
        let mut text = head.signature.clone();
        text.push_str("->");
        match &head.outputs[..] {
            [one] => {
                let _ = write!(text, "{one}");
            }
            many => {
                text.push('(');
                for (i, ty) in many.iter().enumerate() {
                    if i > 0 {
                        text.push(',');
                    }
                    let _ = write!(text, "{ty}");
                }
                text.push(')');
            }
        }
        let symbol = Symbol::from(text);
        self.heads.entry(symbol).or_insert_with(|| Arc::new(head));
        symbol
    }

    /// The head a symbol stands for.
    pub fn lookup(&self, symbol: Symbol) -> Option<&Arc<Head>> {
        self.heads.get(&symbol)
    }

    /// The leaf for a variable, input or outside tensor of this name and type.
    pub fn leaf(&mut self, name: &str, ty: &TensorType) -> Term {
        let symbol = Symbol::from(format!("{name}:{ty}"));
        self.leaves.insert(symbol, ty.shape.clone());
        Term::Leaf(LeafName(symbol))
    }
}

/// Normalises an ONNX axis (negative counts from the end) for a rank.
pub fn axis(value: i64, rank: usize) -> Option<usize> {
    let rank = i64::try_from(rank).ok()?;
    let a = if value < 0 { value + rank } else { value };
    (0..rank).contains(&a).then_some(a as usize)
}

impl Analysis<Term> for TermAnalysis {
    type Data = Value;

    fn make(egraph: &mut TermGraph, enode: &Term, _id: Id) -> Value {
        let data = |id: Id| &egraph[id].data;
        match enode {
            Term::Int(v) => Value::Int(*v),
            Term::Absent => Value::Unknown,
            Term::Leaf(name) => egraph.analysis.leaves.get(&name.0).cloned().map_or(Value::Unknown, Value::Tensor),
            Term::Identity(x) | Term::SwapOut(x) | Term::SwapIn(x) => data(*x).clone(),
            Term::Op(symbol, _) => match egraph.analysis.heads.get(symbol).map(|h| &h.outputs[..]) {
                Some([one]) => Value::Tensor(one.shape.clone()),
                Some(many) => Value::Tuple(many.iter().map(|t| t.shape.clone()).collect()),
                None => Value::Unknown,
            },
            Term::Out([i, node]) => match (data(*i), data(*node)) {
                (Value::Int(i), Value::Tuple(shapes)) => {
                    usize::try_from(*i).ok().and_then(|i| shapes.get(i)).cloned().map_or(Value::Unknown, Value::Tensor)
                }
                _ => Value::Unknown,
            },
            Term::Split([d, i, n, x]) => {
                let whole = data(*x).shape();
                let ints = (data(*d).int(), data(*i).int(), data(*n).int());
                split_shape(whole, ints).map_or(Value::Unknown, Value::Tensor)
            }
            Term::Concat(ids) => match ids.split_first() {
                Some((d, parts)) => {
                    let shapes: Option<Vec<&Shape>> = parts.iter().map(|&p| data(p).shape()).collect();
                    concat_shape(data(*d).int(), shapes).map_or(Value::Unknown, Value::Tensor)
                }
                None => Value::Unknown,
            },
        }
    }

    fn modify(egraph: &mut TermGraph, id: Id) {
        egraph.analysis.touched.push(id);
    }

    /// Equal terms have equal shapes (the rules only equate terms whose shapes
    /// agree), so merging keeps whichever value is known.
    fn merge(&mut self, a: &mut Value, b: Value) -> DidMerge {
        match (&*a, b) {
            (Value::Unknown, Value::Unknown) => DidMerge(false, false),
            (Value::Unknown, b) => {
                *a = b;
                DidMerge(true, false)
            }
            (_, Value::Unknown) => DidMerge(false, true),
            (_, _) => DidMerge(false, false),
        }
    }
}

/// Shape of part `i` of `n` of a tensor of shape `whole` along axis `d`.
fn split_shape(whole: Option<&Shape>, (d, i, n): (Option<i64>, Option<i64>, Option<i64>)) -> Option<Shape> {
    let mut shape = whole?.clone();
    let (d, i, n) = (usize::try_from(d?).ok()?, usize::try_from(i?).ok()?, usize::try_from(n?).ok()?);
    if i >= n || d >= shape.len() {
        return None;
    }
    shape[d] = part_len(shape[d], i, n);
    Some(shape)
}

/// Shape of parts concatenated along axis `d`; `None` when they disagree
/// on another axis.
fn concat_shape(d: Option<i64>, parts: Option<Vec<&Shape>>) -> Option<Shape> {
    let parts = parts?;
    let mut shape = (*parts.first()?).clone();
    let d = usize::try_from(d?).ok().filter(|&d| d < shape.len())?;
    let same_elsewhere =
        |p: &Shape| p.len() == shape.len() && p.iter().zip(&shape).enumerate().all(|(k, (a, b))| k == d || a == b);
    if !parts.iter().all(|p| same_elsewhere(p)) {
        return None;
    }
    shape[d] = parts.iter().map(|p| p[d]).sum();
    Some(shape)
}
