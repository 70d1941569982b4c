//! Typed, defaulting access to a node's attributes.

use crate::error::{KernelError, Result};
use crate::tensor::HostTensor;
use lms_proto::lms::attribute::Value;
use lms_proto::lms::{Attribute, DType};

/// A node's attributes, looked up by name; errors name the attribute.
#[derive(Clone, Copy, Debug)]
pub struct Attrs<'a> {
    list: &'a [Attribute],
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Int(_) => "int",
        Value::Float(_) => "float",
        Value::String(_) => "string",
        Value::Ints(_) => "ints",
        Value::Floats(_) => "floats",
        Value::Strings(_) => "strings",
        Value::Tensor(_) => "tensor",
    }
}

fn wrong(name: &str, expected: &str, found: &Value) -> KernelError {
    KernelError::attr(name, format!("expected {expected}, found {}", kind(found)))
}

impl<'a> Attrs<'a> {
    /// Wraps a node's attribute list.
    pub fn new(list: &'a [Attribute]) -> Self {
        Attrs { list }
    }

    /// The value of `name`, `None` when absent; an attribute without a value is an error.
    fn get(&self, name: &str) -> Result<Option<&'a Value>> {
        match self.list.iter().find(|a| a.name == name) {
            None => Ok(None),
            Some(a) => a.value.as_ref().map(Some).ok_or_else(|| KernelError::attr(name, "has no value")),
        }
    }

    /// The attributes but tensors, as the contract's op rules read them.
    pub fn contract(&self) -> lms_proto::types::Attrs {
        lms_proto::types::Attrs::without_tensors(self.list)
    }

    /// Whether the node carries `name`.
    pub fn has(&self, name: &str) -> bool {
        self.list.iter().any(|a| a.name == name)
    }

    /// An int attribute, `None` when absent.
    pub fn int_opt(&self, name: &str) -> Result<Option<i64>> {
        match self.get(name)? {
            None => Ok(None),
            Some(Value::Int(v)) => Ok(Some(*v)),
            Some(other) => Err(wrong(name, "int", other)),
        }
    }

    /// An int attribute, `default` when absent.
    pub fn int(&self, name: &str, default: i64) -> Result<i64> {
        Ok(self.int_opt(name)?.unwrap_or(default))
    }

    /// An ints attribute, `None` when absent.
    pub fn ints_opt(&self, name: &str) -> Result<Option<&'a [i64]>> {
        match self.get(name)? {
            None => Ok(None),
            Some(Value::Ints(v)) => Ok(Some(&v.values)),
            Some(other) => Err(wrong(name, "ints", other)),
        }
    }

    /// A float attribute, `None` when absent.
    pub fn float_opt(&self, name: &str) -> Result<Option<f32>> {
        match self.get(name)? {
            None => Ok(None),
            Some(Value::Float(v)) => Ok(Some(*v)),
            Some(other) => Err(wrong(name, "float", other)),
        }
    }

    /// A float attribute, `default` when absent.
    pub fn float(&self, name: &str, default: f32) -> Result<f32> {
        Ok(self.float_opt(name)?.unwrap_or(default))
    }

    /// A floats attribute, `None` when absent.
    pub fn floats_opt(&self, name: &str) -> Result<Option<&'a [f32]>> {
        match self.get(name)? {
            None => Ok(None),
            Some(Value::Floats(v)) => Ok(Some(&v.values)),
            Some(other) => Err(wrong(name, "floats", other)),
        }
    }

    /// A string attribute, `default` when absent.
    pub fn string(&self, name: &str, default: &'a str) -> Result<&'a str> {
        match self.get(name)? {
            None => Ok(default),
            Some(Value::String(v)) => Ok(v),
            Some(other) => Err(wrong(name, "string", other)),
        }
    }

    /// A tensor attribute decoded into a host tensor, `None` when absent.
    pub fn tensor_opt(&self, name: &str) -> Result<Option<HostTensor>> {
        let t = match self.get(name)? {
            None => return Ok(None),
            Some(Value::Tensor(t)) => t,
            Some(other) => return Err(wrong(name, "tensor", other)),
        };
        let dtype =
            DType::try_from(t.dtype).map_err(|_| KernelError::attr(name, format!("unknown dtype {}", t.dtype)))?;
        let shape = t
            .shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| KernelError::attr(name, "dimension does not fit in usize"))?;
        HostTensor::from_le_bytes(dtype, &shape, &t.data).map(Some).map_err(|e| KernelError::attr(name, e.to_string()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use lms_proto::lms::{Floats, Ints, TensorValue};

    /// Builds an attribute for tests.
    pub(crate) fn attr(name: &str, value: Value) -> Attribute {
        Attribute { name: name.to_string(), value: Some(value) }
    }

    /// An int attribute.
    pub(crate) fn int(name: &str, v: i64) -> Attribute {
        attr(name, Value::Int(v))
    }

    /// An ints attribute.
    pub(crate) fn ints(name: &str, v: &[i64]) -> Attribute {
        attr(name, Value::Ints(Ints { values: v.to_vec() }))
    }

    /// A float attribute.
    pub(crate) fn float(name: &str, v: f32) -> Attribute {
        attr(name, Value::Float(v))
    }

    /// A string attribute.
    pub(crate) fn string(name: &str, v: &str) -> Attribute {
        attr(name, Value::String(v.to_string()))
    }

    #[test]
    fn typed_access_with_defaults() {
        let list = vec![
            int("axis", -1),
            ints("perm", &[1, 0]),
            float("alpha", 0.5),
            string("mode", "edge"),
            attr("scales", Value::Floats(Floats { values: vec![2.0] })),
            attr(
                "value",
                Value::Tensor(TensorValue {
                    dtype: DType::DtypeI64 as i32,
                    shape: vec![1],
                    data: 7i64.to_le_bytes().to_vec(),
                }),
            ),
        ];
        let a = Attrs::new(&list);
        assert_eq!(a.int("axis", 0).unwrap(), -1);
        assert_eq!(a.int("group", 1).unwrap(), 1);
        assert_eq!(a.ints_opt("perm").unwrap(), Some(&[1i64, 0][..]));
        assert_eq!(a.float("alpha", 1.0).unwrap(), 0.5);
        assert_eq!(a.float("beta", 1.0).unwrap(), 1.0);
        assert_eq!(a.floats_opt("scales").unwrap(), Some(&[2.0f32][..]));
        assert_eq!(a.string("mode", "constant").unwrap(), "edge");
        let t = a.tensor_opt("value").unwrap().unwrap();
        assert_eq!(t.as_i64("value").unwrap(), &[7]);
        assert!(a.has("perm") && !a.has("pads"));
    }

    #[test]
    fn wrong_kind_names_the_attribute() {
        let list = vec![float("axis", 1.0), Attribute { name: "x".into(), value: None }];
        let a = Attrs::new(&list);
        let err = a.int("axis", 0).unwrap_err();
        assert_eq!(err.to_string(), "attribute `axis`: expected int, found float");
        assert!(a.ints_opt("x").is_err());
    }
}
