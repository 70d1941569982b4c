//! Every op lms knows, declared once and numbered: its name, domain and family, with its
//! shape rule (ONNX ops), cost rule, axes map, split extension and, for an op lms cannot differentiate,
//! why. An [`OpId`] is an op's index here;
//! the compiler's lookups and the runtime's kernel tables are indexed by it, and a
//! program's nodes are resolved to it once, when the program is loaded.
//!
//! The families are the modules of [`crate::ops`]: each lists its ONNX ops' shape rules
//! (`OPS`), the cost rules of those ops and of the lms ops derived from them (`COSTS`:
//! training forms, gradients, optimizers, split parts), their axes maps (`AXES`; the ops
//! without one in `NO_AXES`), the split rules their maps cannot state (`SPLIT_EXTENSIONS`) and
//! the ops without a gradient, with the reason (`NO_GRADIENT`; the compiler's gradient
//! rules are keyed by [`OpId`]), the ops whose gradient their definition states
//! (`GRADIENTS`, a [`GradientForm`]); the swap ops are in [`super::cost`]. An op is an ONNX op when it has a shape rule, an
//! lms op (`proto/OPS.md`) otherwise.

use super::axes::AxesMap;
use super::{constant, conv, cost, elementwise, indexing, lms_outputs, nn, pool, reduce, split, tensor_ops, InferFn};
use crate::contract::{INPUT_OP, LMS_DOMAIN, VARIABLE_OP};
use std::collections::HashMap;
use std::sync::OnceLock;

/// The number of an op: its index in the registry (stable within a build).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(u16);

impl OpId {
    /// The op's index, for tables indexed by op.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The op's definition.
    pub fn def(self) -> &'static OpDef {
        &registry().defs[self.index()]
    }

    /// The op's name (its ONNX or lms op type).
    pub fn name(self) -> &'static str {
        self.def().name
    }
}

/// The family an op belongs to: the module of [`crate::ops`] that defines it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Elementwise,
    Conv,
    Pool,
    Nn,
    Reduce,
    TensorOps,
    Indexing,
    Constant,
    /// The copies between device and host memory (`SwapOut`, `SwapIn`).
    Swap,
}

/// One op's definition.
#[derive(Debug)]
pub struct OpDef {
    /// The op type.
    pub name: &'static str,
    /// The family that defines it.
    pub family: Family,
    /// Its shape-and-type rule: `Some` exactly for the ONNX ops (default domain).
    pub(super) infer: Option<InferFn>,
    /// Its output rule, for an lms op with one ([`lms_outputs`]).
    pub(super) outputs: Option<lms_outputs::OutputsFn>,
    /// Its cost rule.
    pub(super) cost: cost::CostFn,
    /// Its split rules beyond its axes map's, where it has them.
    pub(super) split_extension: Option<split::SplitExtension>,
    /// Why lms cannot differentiate it, for an op a model may hold that has no gradient rule.
    pub no_gradient: Option<&'static str>,
    /// Its gradient, where the definition states it rather than a rule of the compiler.
    pub gradient: Option<GradientForm>,
    /// The function evaluations (exponential, logarithm, error function, tanh,
    /// trigonometric, power) per element its CPU kernel makes; 0 for none.
    pub evaluations: u64,
    /// Its axes map, where it has one.
    pub axes: Option<AxesMap>,
    /// Why it has no axes map (it is coupled along every axis), where it has none.
    pub no_axes: Option<&'static str>,
}

impl OpDef {
    /// Whether the op is an ONNX op (default domain) rather than an lms op.
    pub fn is_onnx(&self) -> bool {
        self.infer.is_some()
    }

    /// Whether a backend runs the op as a kernel: every op but the parameterized vertices
    /// (`Variable`, `Input`: values the executor writes) and the swaps (copies it makes).
    pub fn is_kernel(&self) -> bool {
        self.family != Family::Swap && ![VARIABLE_OP, INPUT_OP].contains(&self.name)
    }
}

/// A gradient an op's definition states, which the compiler builds for any op declaring it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradientForm {
    /// Linear in input 0 and its own adjoint (it keeps or zeroes each element, as a mask):
    /// dX = the op applied to dY, with the node's attributes and its other inputs, which
    /// take no gradient.
    SelfAdjoint,
    /// An elementwise map of input 0: dX = `UnaryGrad(dY, X)`, which multiplies dY by the
    /// map's derivative at X (both backends' `UnaryGrad` kernels evaluate the derivative of
    /// the op they name).
    Unary {
        /// The node's attributes the derivative reads, which travel with it.
        attrs: &'static [&'static str],
        /// The transcendental functions it evaluates per element (as [`OpDef::evaluations`]).
        evaluations: u64,
    },
}

/// A family's tables: shape rules, cost rules, split extensions, ops without a gradient, stated
/// gradients, axes maps, ops without one.
pub(super) struct FamilyTables {
    pub family: Family,
    pub ops: &'static [(&'static str, InferFn)],
    pub costs: &'static [(&'static str, cost::CostFn)],
    pub split_extensions: &'static [(&'static str, split::SplitExtension)],
    pub no_gradient: &'static [(&'static str, &'static str)],
    pub gradients: &'static [(&'static str, GradientForm)],
    pub evaluations: &'static [(&'static str, u64)],
    pub axes: &'static [(&'static str, AxesMap)],
    pub no_axes: &'static [(&'static str, &'static str)],
}

/// Every family, in registry order.
pub(super) const FAMILIES: &[FamilyTables] = &[
    FamilyTables {
        family: Family::Elementwise,
        ops: elementwise::OPS,
        costs: elementwise::COSTS,
        no_gradient: elementwise::NO_GRADIENT,
        gradients: elementwise::GRADIENTS,
        evaluations: elementwise::EVALUATIONS,
        axes: elementwise::AXES,
        no_axes: elementwise::NO_AXES,
        ..NO_TABLES
    },
    FamilyTables {
        family: Family::Conv,
        ops: conv::OPS,
        costs: conv::COSTS,
        split_extensions: conv::SPLIT_EXTENSIONS,
        no_gradient: conv::NO_GRADIENT,
        axes: conv::AXES,
        no_axes: conv::NO_AXES,
        ..NO_TABLES
    },
    FamilyTables {
        family: Family::Pool,
        ops: pool::OPS,
        costs: pool::COSTS,
        split_extensions: pool::SPLIT_EXTENSIONS,
        no_gradient: pool::NO_GRADIENT,
        axes: pool::AXES,
        ..NO_TABLES
    },
    FamilyTables {
        family: Family::Nn,
        ops: nn::OPS,
        costs: nn::COSTS,
        split_extensions: nn::SPLIT_EXTENSIONS,
        no_gradient: nn::NO_GRADIENT,
        evaluations: nn::EVALUATIONS,
        axes: nn::AXES,
        no_axes: nn::NO_AXES,
        ..NO_TABLES
    },
    FamilyTables {
        family: Family::Reduce,
        ops: reduce::OPS,
        costs: reduce::COSTS,
        split_extensions: reduce::SPLIT_EXTENSIONS,
        no_gradient: reduce::NO_GRADIENT,
        no_axes: reduce::NO_AXES,
        axes: reduce::AXES,
        ..NO_TABLES
    },
    FamilyTables {
        family: Family::TensorOps,
        ops: tensor_ops::OPS,
        costs: tensor_ops::COSTS,
        no_gradient: tensor_ops::NO_GRADIENT,
        axes: tensor_ops::AXES,
        no_axes: tensor_ops::NO_AXES,
        ..NO_TABLES
    },
    FamilyTables {
        family: Family::Indexing,
        ops: indexing::OPS,
        costs: indexing::COSTS,
        split_extensions: indexing::SPLIT_EXTENSIONS,
        no_gradient: indexing::NO_GRADIENT,
        gradients: indexing::GRADIENTS,
        axes: indexing::AXES,
        no_axes: indexing::NO_AXES,
        ..NO_TABLES
    },
    FamilyTables {
        family: Family::Constant,
        ops: constant::OPS,
        costs: constant::COSTS,
        no_gradient: constant::NO_GRADIENT,
        axes: constant::AXES,
        no_axes: constant::NO_AXES,
        ..NO_TABLES
    },
    FamilyTables { family: Family::Swap, costs: cost::COSTS, no_axes: cost::NO_AXES, ..NO_TABLES },
];

/// A family with every table empty, the base the families above fill in.
const NO_TABLES: FamilyTables = FamilyTables {
    family: Family::Swap,
    ops: &[],
    costs: &[],
    split_extensions: &[],
    no_gradient: &[],
    gradients: &[],
    evaluations: &[],
    axes: &[],
    no_axes: &[],
};

/// The definitions, and the id of each name.
struct Registry {
    defs: Vec<OpDef>,
    by_name: HashMap<&'static str, OpId>,
}

/// The registry, built once from the families' tables: an op is each entry of a `COSTS`
/// table (every op has exactly one cost rule), with the shape rule, axes map and split extension of its name.
fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let named = |name: &str| {
            let infer = FAMILIES.iter().flat_map(|f| f.ops).find(|(n, _)| *n == name).map(|&(_, r)| r);
            let split_extension =
                FAMILIES.iter().flat_map(|f| f.split_extensions).find(|(n, _)| *n == name).map(|&(_, r)| r);
            let no_gradient =
                FAMILIES.iter().flat_map(|f| f.no_gradient).find(|(n, _)| *n == name).map(|&(_, why)| why);
            let gradient = FAMILIES.iter().flat_map(|f| f.gradients).find(|(n, _)| *n == name).map(|&(_, g)| g);
            let evaluations =
                FAMILIES.iter().flat_map(|f| f.evaluations).find(|(n, _)| *n == name).map_or(0, |&(_, e)| e);
            let axes = FAMILIES.iter().flat_map(|f| f.axes).find(|(n, _)| *n == name).map(|&(_, m)| m);
            let no_axes = FAMILIES.iter().flat_map(|f| f.no_axes).find(|(n, _)| *n == name).map(|&(_, why)| why);
            let outputs = lms_outputs::RULES.iter().find(|(n, _)| *n == name).map(|&(_, r)| r);
            (infer, outputs, split_extension, no_gradient, gradient, evaluations, axes, no_axes)
        };
        let defs: Vec<OpDef> = FAMILIES
            .iter()
            .flat_map(|f| f.costs.iter().map(move |&(name, cost)| (f.family, name, cost)))
            .map(|(family, name, cost)| {
                let (infer, outputs, split_extension, no_gradient, gradient, evaluations, axes, no_axes) = named(name);
                OpDef {
                    name,
                    family,
                    infer,
                    outputs,
                    cost,
                    split_extension,
                    no_gradient,
                    gradient,
                    evaluations,
                    axes,
                    no_axes,
                }
            })
            .collect();
        let by_name = defs.iter().enumerate().map(|(i, d)| (d.name, OpId(i as u16))).collect();
        Registry { defs, by_name }
    })
}

/// The op named `name`, of either domain.
pub fn by_name(name: &str) -> Option<OpId> {
    registry().by_name.get(name).copied()
}

/// The op a node of `domain` (`""` or `ai.onnx` for ONNX, `lms`) with op type `name` runs;
/// `None` when no op of that domain has the name.
pub fn resolve(domain: &str, name: &str) -> Option<OpId> {
    let id = by_name(name)?;
    (id.def().is_onnx() == (domain != LMS_DOMAIN)).then_some(id)
}

/// Every op, in registry order.
pub fn all() -> impl Iterator<Item = OpId> {
    (0..registry().defs.len()).map(|i| OpId(i as u16))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape rule, split extension, axes map and missing gradient belongs to an op of the registry,
    /// and names resolve to their own domain only.
    #[test]
    fn every_rule_names_an_op_and_ids_resolve_by_domain() {
        for f in FAMILIES {
            let names = f.ops.iter().map(|r| r.0).chain(f.split_extensions.iter().map(|r| r.0));
            let names = names.chain(f.no_gradient.iter().map(|r| r.0)).chain(f.gradients.iter().map(|r| r.0));
            for name in names.chain(f.axes.iter().map(|r| r.0)) {
                assert!(by_name(name).is_some(), "{name} has a rule but no cost rule");
            }
        }
        for &(name, _) in lms_outputs::RULES {
            assert!(by_name(name).is_some_and(|op| !op.def().is_onnx()), "{name} has an output rule but is no lms op");
        }
        let unruled: Vec<&str> = all()
            .map(OpId::def)
            .filter(|d| !d.is_onnx() && d.is_kernel() && d.outputs.is_none())
            .map(|d| d.name)
            .collect();
        assert_eq!(unruled, ["Zeros"], "lms kernels without an output rule");
        assert_eq!(
            by_name("Tile").unwrap().def().no_gradient,
            Some("the gradient of Tile is not implemented (Expand has one)")
        );
        assert_eq!(by_name("Relu").unwrap().def().no_gradient, None);
        let (gemm, relu_grad) = (by_name("Gemm").unwrap(), by_name("UnaryGrad").unwrap());
        assert_eq!((gemm.name(), gemm.def().family, gemm.def().is_onnx()), ("Gemm", Family::Nn, true));
        assert_eq!(resolve("", "Gemm"), Some(gemm));
        assert_eq!(resolve("ai.onnx", "Gemm"), Some(gemm));
        assert_eq!(resolve(LMS_DOMAIN, "Gemm"), None);
        assert_eq!(resolve(LMS_DOMAIN, "UnaryGrad"), Some(relu_grad));
        assert_eq!(resolve("", "UnaryGrad"), None);
        assert_eq!(resolve("", "LSTM"), None);
        assert!(all().enumerate().all(|(i, id)| id.index() == i && by_name(id.name()) == Some(id)));
    }

    /// Every op of a family has an axes map or is listed without one, with its reason
    /// (not both, not twice).
    #[test]
    fn every_op_has_an_axes_map_or_a_reason_for_none() {
        for f in FAMILIES {
            for &(name, _) in f.costs {
                let mapped = f.axes.iter().filter(|r| r.0 == name).count();
                let unmapped = f.no_axes.iter().filter(|r| r.0 == name && !r.1.is_empty()).count();
                assert_eq!(mapped + unmapped, 1, "{name}: {mapped} axes maps and {unmapped} reasons for none");
            }
            for name in f.axes.iter().map(|r| r.0).chain(f.no_axes.iter().map(|r| r.0)) {
                assert!(f.costs.iter().any(|r| r.0 == name), "{name} is listed in a family it is not of");
            }
        }
        let id = |name| by_name(name).unwrap().def();
        assert_eq!((id("Tile").axes, id("Tile").no_axes.is_some()), (None, true));
        assert_eq!((id("MatMul").axes, id("MatMul").no_axes), (Some(AxesMap::MatMul), None));
    }
}
