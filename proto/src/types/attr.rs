//! Node attributes and typed access to them.

use super::TensorData;
use std::collections::BTreeMap;
use std::fmt;

/// One attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    Int(i64),
    Float(f32),
    String(String),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Strings(Vec<String>),
    Tensor(TensorData),
}

impl Attr {
    /// The value of a serialized attribute; `None` when it has none, or when a tensor in it
    /// has an unknown dtype or not the bytes its shape takes (the contract refuses both).
    pub fn from_proto(a: &crate::lms::Attribute) -> Option<Attr> {
        use crate::lms::attribute::Value as V;
        Some(match a.value.as_ref()? {
            V::Int(v) => Attr::Int(*v),
            V::Float(v) => Attr::Float(*v),
            V::String(v) => Attr::String(v.clone()),
            V::Ints(v) => Attr::Ints(v.values.clone()),
            V::Floats(v) => Attr::Floats(v.values.clone()),
            V::Strings(v) => Attr::Strings(v.values.clone()),
            V::Tensor(t) => {
                let shape = t.shape.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<Vec<usize>>>()?;
                let ty = super::TensorType::new(super::DType::from_code(t.dtype)?, shape);
                Attr::Tensor(TensorData::from_bytes(ty, t.data.clone())?)
            }
        })
    }

    /// Name of the attribute's kind, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Attr::Int(_) => "int",
            Attr::Float(_) => "float",
            Attr::String(_) => "string",
            Attr::Ints(_) => "ints",
            Attr::Floats(_) => "floats",
            Attr::Strings(_) => "strings",
            Attr::Tensor(_) => "tensor",
        }
    }
}

impl fmt::Display for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list<T: fmt::Display>(f: &mut fmt::Formatter<'_>, xs: &[T]) -> fmt::Result {
            f.write_str("[")?;
            for (i, x) in xs.iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{x}")?;
            }
            f.write_str("]")
        }
        match self {
            Attr::Int(v) => write!(f, "{v}"),
            Attr::Float(v) => write!(f, "{v:?}"),
            Attr::String(s) => write!(f, "{s:?}"),
            Attr::Ints(v) => list(f, v),
            Attr::Floats(v) => list(f, &v.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>()),
            Attr::Strings(v) => list(f, &v.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>()),
            Attr::Tensor(t) => {
                if t.ty.numel() <= 8 {
                    write!(f, "{}", t.ty)?;
                    list(f, &t.to_f64())
                } else {
                    write!(f, "{}<{} bytes>", t.ty, t.bytes.len())
                }
            }
        }
    }
}

/// A wrong or missing attribute, described without node context (the caller adds it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttrError {
    #[error("missing required attribute '{0}'")]
    Missing(String),
    #[error("attribute '{name}' is {found}, expected {expected}")]
    WrongKind { name: String, found: &'static str, expected: &'static str },
}

/// The attributes of a node, sorted by name (so printing is deterministic).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs(pub BTreeMap<String, Attr>);

macro_rules! getter {
    ($get:ident, $opt:ident, $variant:ident, $ty:ty, $kind:literal) => {
        /// The attribute as this kind, or `None` when absent.
        pub fn $opt(&self, name: &str) -> Result<Option<$ty>, AttrError> {
            match self.0.get(name) {
                None => Ok(None),
                Some(Attr::$variant(v)) => Ok(Some(v.clone())),
                Some(other) => Err(AttrError::WrongKind { name: name.into(), found: other.kind(), expected: $kind }),
            }
        }
        /// The attribute as this kind, or `default` when absent.
        pub fn $get(&self, name: &str, default: $ty) -> Result<$ty, AttrError> {
            Ok(self.$opt(name)?.unwrap_or(default))
        }
    };
}

impl Attrs {
    /// No attributes.
    pub fn new() -> Attrs {
        Attrs::default()
    }

    /// Sets an attribute, replacing any previous value.
    pub fn set(&mut self, name: impl Into<String>, value: Attr) {
        self.0.insert(name.into(), value);
    }

    /// Builder form of [`Attrs::set`].
    pub fn with(mut self, name: impl Into<String>, value: Attr) -> Attrs {
        self.set(name, value);
        self
    }

    /// The attributes of a serialized node but its tensors (the rules that read a node's
    /// geometry read ints and strings only, and tensor values are not copied).
    pub fn without_tensors(list: &[crate::lms::Attribute]) -> Attrs {
        use crate::lms::attribute::Value as V;
        let scalar = list.iter().filter(|a| !matches!(a.value, Some(V::Tensor(_))));
        Attrs(scalar.filter_map(|a| Some((a.name.clone(), Attr::from_proto(a)?))).collect())
    }

    /// The raw attribute.
    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.0.get(name)
    }

    /// True when the attribute is present.
    pub fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    getter!(int, int_opt, Int, i64, "int");
    getter!(float, float_opt, Float, f32, "float");
    getter!(string, string_opt, String, String, "string");
    getter!(ints, ints_opt, Ints, Vec<i64>, "ints");
    getter!(floats, floats_opt, Floats, Vec<f32>, "floats");

    /// A required tensor attribute.
    pub fn tensor(&self, name: &str) -> Result<&TensorData, AttrError> {
        match self.0.get(name) {
            None => Err(AttrError::Missing(name.into())),
            Some(Attr::Tensor(t)) => Ok(t),
            Some(other) => Err(AttrError::WrongKind { name: name.into(), found: other.kind(), expected: "tensor" }),
        }
    }

    /// A required int attribute.
    pub fn req_int(&self, name: &str) -> Result<i64, AttrError> {
        self.int_opt(name)?.ok_or_else(|| AttrError::Missing(name.into()))
    }

    /// Iterates over (name, value) in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Attr)> {
        self.0.iter()
    }
}
