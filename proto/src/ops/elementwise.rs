//! Shape inference for elementwise ops: unary activations and math,
//! broadcasting binary arithmetic, comparisons and logic, the variadic
//! `Sum`/`Max`/`Min`/`Mean`, and `Where`; their cost, and that of the
//! elementwise lms ops (gradients of unary ops, optimizer updates).

use super::axes::AxesMap;
use super::cost::{CostFn, CostNode, Work};
use super::registry::GradientForm;
use super::util::{
    broadcast, broadcast_data, broadcast_to, check_dtype, expect_inputs, fmt_shape, fold, input, input_of,
    normalize_axis, optional_input, same_dtype, typed, Accepts,
};
use super::{InferFn, Node, ShapeError, ShapeResult, Value};
use crate::types::{DType, Shape, TensorType};

/// The elementwise ops.
pub(super) const OPS: &[(&str, InferFn)] = &[
    ("Relu", |n| unary(n, Accepts::Numeric)),
    ("LeakyRelu", |n| unary(n, Accepts::Float)),
    ("Sigmoid", |n| unary(n, Accepts::Float)),
    ("Tanh", |n| unary(n, Accepts::Float)),
    ("Elu", |n| unary(n, Accepts::Float)),
    ("Selu", |n| unary(n, Accepts::Float)),
    ("Softplus", |n| unary(n, Accepts::Float)),
    ("Softsign", |n| unary(n, Accepts::Float)),
    ("Mish", |n| unary(n, Accepts::Float)),
    ("Neg", |n| unary(n, Accepts::Numeric)),
    ("Abs", |n| unary(n, Accepts::Numeric)),
    ("Exp", |n| unary(n, Accepts::Float)),
    ("Log", |n| unary(n, Accepts::Float)),
    ("Reciprocal", |n| unary(n, Accepts::Float)),
    ("Erf", |n| unary(n, Accepts::Float)),
    ("Cos", |n| unary(n, Accepts::Float)),
    ("Sin", |n| unary(n, Accepts::Float)),
    ("Gelu", |n| unary(n, Accepts::Float)),
    ("HardSigmoid", |n| unary(n, Accepts::Float)),
    ("HardSwish", |n| unary(n, Accepts::Float)),
    ("Sqrt", |n| unary(n, Accepts::Float)),
    ("Floor", |n| unary(n, Accepts::Float)),
    ("Ceil", |n| unary(n, Accepts::Float)),
    ("Round", |n| unary(n, Accepts::Float)),
    ("Not", |n| unary(n, Accepts::Bool)),
    ("IsNaN", classify),
    ("IsInf", classify),
    ("Clip", clip),
    ("PRelu", prelu),
    ("Add", |n| binary(n, Arith::Add)),
    ("Sub", |n| binary(n, Arith::Sub)),
    ("Mul", |n| binary(n, Arith::Mul)),
    ("Div", |n| binary(n, Arith::Div)),
    ("Pow", pow),
    ("Equal", |n| compare(n, Compare::Equal)),
    ("Less", |n| compare(n, Compare::Less)),
    ("Greater", |n| compare(n, Compare::Greater)),
    ("GreaterOrEqual", |n| compare(n, Compare::GreaterOrEqual)),
    ("LessOrEqual", |n| compare(n, Compare::LessOrEqual)),
    ("And", logic),
    ("Or", logic),
    ("Xor", logic),
    ("Sum", variadic),
    ("Max", variadic),
    ("Min", variadic),
    ("Mean", variadic),
    ("Where", where_),
];

/// Work of the elementwise ops: one FLOP per arithmetic step per output
/// element (a unary function, a comparison or a binary operation counts one),
/// inputs read and outputs written once. Optimizer updates count their
/// formula's steps per parameter element (proto/OPS.md).
pub(super) const COSTS: &[(&str, CostFn)] = &[
    ("Relu", |n| n.per_output(1)),
    ("LeakyRelu", |n| n.per_output(1)),
    ("Sigmoid", |n| n.per_output(1)),
    ("Tanh", |n| n.per_output(1)),
    ("Elu", |n| n.per_output(1)),
    ("Selu", |n| n.per_output(1)),
    ("Softplus", |n| n.per_output(1)),
    ("Softsign", |n| n.per_output(1)),
    // x · tanh(softplus(x)): two functions and a product.
    ("Mish", |n| n.per_output(3)),
    ("Neg", |n| n.per_output(1)),
    ("Abs", |n| n.per_output(1)),
    ("Exp", |n| n.per_output(1)),
    ("Log", |n| n.per_output(1)),
    ("Reciprocal", |n| n.per_output(1)),
    ("Erf", |n| n.per_output(1)),
    ("Cos", |n| n.per_output(1)),
    ("Sin", |n| n.per_output(1)),
    ("Gelu", |n| n.per_output(1)),
    ("HardSigmoid", |n| n.per_output(1)),
    ("HardSwish", |n| n.per_output(2)),
    ("Sqrt", |n| n.per_output(1)),
    ("Floor", |n| n.per_output(1)),
    ("Ceil", |n| n.per_output(1)),
    ("Round", |n| n.per_output(1)),
    ("Not", |n| n.per_output(1)),
    ("IsNaN", |n| n.per_output(1)),
    ("IsInf", |n| n.per_output(1)),
    ("Clip", |n| n.per_output(2)),
    ("PRelu", |n| n.per_output(2)),
    ("Add", |n| n.per_output(1)),
    ("Sub", |n| n.per_output(1)),
    ("Mul", |n| n.per_output(1)),
    ("Div", |n| n.per_output(1)),
    ("Pow", |n| n.per_output(1)),
    ("Equal", |n| n.per_output(1)),
    ("Less", |n| n.per_output(1)),
    ("Greater", |n| n.per_output(1)),
    ("GreaterOrEqual", |n| n.per_output(1)),
    ("LessOrEqual", |n| n.per_output(1)),
    ("And", |n| n.per_output(1)),
    ("Or", |n| n.per_output(1)),
    ("Xor", |n| n.per_output(1)),
    ("Sum", variadic_cost),
    ("Max", variadic_cost),
    ("Min", variadic_cost),
    ("Mean", |n| n.per_output(n.inputs.len() as u64)),
    ("Where", |n| n.per_output(1)),
    // dY · f′(X): the derivative and the product.
    ("UnaryGrad", |n| n.per_output(2)),
    // dY · P · X^(P−1): the power and two products.
    ("PowGrad", |n| n.per_output(3)),
    // dX: a compare and a product; dSlope: a compare, a product and a sum.
    ("PReluGrad", |n| n.streaming(5 * n.in_numel(1))),
    // W − lr·dW.
    ("SgdUpdate", |n| n.per_output(2)),
    // V′ = momentum·V + dW; W′ = W − lr·V′.
    ("MomentumUpdate", |n| n.per_output(4)),
    ("AdamStep", |n| n.per_output(1)),
    // M′: 3, V′: 4, W′ = W − lr·(M′/c1)/(√(V′/c2) + ε): 7.
    ("AdamUpdate", |n| n.per_output(14)),
];

/// The ops of this family lms cannot differentiate, and why (every other op a model may
/// hold has a gradient rule in the compiler).
pub(super) const NO_GRADIENT: &[(&str, &str)] = &[
    ("Not", "its output is boolean"),
    ("Equal", "its output is boolean"),
    ("Less", "its output is boolean"),
    ("Greater", "its output is boolean"),
    ("GreaterOrEqual", "its output is boolean"),
    ("LessOrEqual", "its output is boolean"),
    ("And", "its output is boolean"),
    ("Or", "its output is boolean"),
    ("Xor", "its output is boolean"),
    ("IsNaN", "its output is boolean"),
    ("IsInf", "its output is boolean"),
    ("Floor", "it is piecewise constant, so its gradient is zero wherever it is defined"),
    ("Ceil", "it is piecewise constant, so its gradient is zero wherever it is defined"),
    ("Round", "it is piecewise constant, so its gradient is zero wherever it is defined"),
    ("Max", "the gradient of an elementwise maximum is not implemented"),
    ("Min", "the gradient of an elementwise minimum is not implemented"),
    ("Gelu", "the gradient of Gelu is not implemented"),
];

/// The function evaluations (exponential, logarithm, error function, tanh, trigonometric,
/// power) per element the CPU kernels of these ops make; the others make none.
pub(super) const EVALUATIONS: &[(&str, u64)] = &[
    ("Cos", 1),
    ("Erf", 1),
    ("Exp", 1),
    ("Gelu", 1),
    ("Log", 1),
    ("Mish", 2),
    ("Pow", 1),
    ("PowGrad", 1),
    ("Sigmoid", 1),
    ("Sin", 1),
    ("Softplus", 1),
    ("Tanh", 1),
];

/// The gradients the definitions state: the unary maps differentiated by `UnaryGrad`, with
/// the attributes their derivative reads and the transcendental functions it evaluates.
pub(super) const GRADIENTS: &[(&str, GradientForm)] = &[
    ("Relu", GradientForm::Unary { attrs: &[], evaluations: 0 }),
    ("LeakyRelu", GradientForm::Unary { attrs: &["alpha"], evaluations: 0 }),
    ("Sigmoid", GradientForm::Unary { attrs: &[], evaluations: 1 }),
    ("Tanh", GradientForm::Unary { attrs: &[], evaluations: 1 }),
    ("Elu", GradientForm::Unary { attrs: &["alpha"], evaluations: 1 }),
    ("Selu", GradientForm::Unary { attrs: &["alpha", "gamma"], evaluations: 1 }),
    ("Softplus", GradientForm::Unary { attrs: &[], evaluations: 1 }),
    ("Softsign", GradientForm::Unary { attrs: &[], evaluations: 0 }),
    ("Mish", GradientForm::Unary { attrs: &[], evaluations: 3 }),
    ("Exp", GradientForm::Unary { attrs: &[], evaluations: 1 }),
    ("Log", GradientForm::Unary { attrs: &[], evaluations: 0 }),
    ("Sqrt", GradientForm::Unary { attrs: &[], evaluations: 0 }),
    ("Erf", GradientForm::Unary { attrs: &[], evaluations: 1 }),
    ("HardSigmoid", GradientForm::Unary { attrs: &["alpha", "beta"], evaluations: 0 }),
    ("HardSwish", GradientForm::Unary { attrs: &[], evaluations: 0 }),
    ("Cos", GradientForm::Unary { attrs: &[], evaluations: 1 }),
    ("Sin", GradientForm::Unary { attrs: &[], evaluations: 1 }),
    ("Abs", GradientForm::Unary { attrs: &[], evaluations: 0 }),
    ("Neg", GradientForm::Unary { attrs: &[], evaluations: 0 }),
    ("Reciprocal", GradientForm::Unary { attrs: &[], evaluations: 0 }),
];

/// The ops of this family without an axes map (coupled along every axis), and why.
pub(super) const NO_AXES: &[(&str, &str)] = &[
    ("PowGrad", "sums dY's positions where P broadcasts back to X's shape"),
    ("PReluGrad", "two outputs; dSlope sums over X's positions"),
    ("MomentumUpdate", "updates a variable and its optimizer state (several outputs), never split"),
    ("AdamStep", "the optimizer's scalar step count"),
    ("AdamUpdate", "updates a variable and its optimizer state (several outputs), never split"),
];

/// Axes maps: every op here with one output is elementwise with numpy broadcasting (the
/// optimizer updates with several outputs have none).
pub(super) const AXES: &[(&str, AxesMap)] = &[
    ("Abs", AxesMap::Elementwise),
    ("Add", AxesMap::Elementwise),
    ("And", AxesMap::Elementwise),
    ("Ceil", AxesMap::Elementwise),
    ("Clip", AxesMap::Elementwise),
    ("Div", AxesMap::Elementwise),
    ("Elu", AxesMap::Elementwise),
    ("Equal", AxesMap::Elementwise),
    ("Erf", AxesMap::Elementwise),
    ("Exp", AxesMap::Elementwise),
    ("Floor", AxesMap::Elementwise),
    ("Gelu", AxesMap::Elementwise),
    ("Greater", AxesMap::Elementwise),
    ("GreaterOrEqual", AxesMap::Elementwise),
    ("HardSigmoid", AxesMap::Elementwise),
    ("LeakyRelu", AxesMap::Elementwise),
    ("Less", AxesMap::Elementwise),
    ("LessOrEqual", AxesMap::Elementwise),
    ("Log", AxesMap::Elementwise),
    ("Max", AxesMap::Elementwise),
    ("Mean", AxesMap::Elementwise),
    ("Min", AxesMap::Elementwise),
    ("Mul", AxesMap::Elementwise),
    ("Neg", AxesMap::Elementwise),
    ("Not", AxesMap::Elementwise),
    ("Or", AxesMap::Elementwise),
    ("Pow", AxesMap::Elementwise),
    ("PRelu", AxesMap::Elementwise),
    ("Reciprocal", AxesMap::Elementwise),
    ("Relu", AxesMap::Elementwise),
    ("Round", AxesMap::Elementwise),
    ("Selu", AxesMap::Elementwise),
    ("Sigmoid", AxesMap::Elementwise),
    ("Softplus", AxesMap::Elementwise),
    ("Softsign", AxesMap::Elementwise),
    ("Mish", AxesMap::Elementwise),
    ("Sqrt", AxesMap::Elementwise),
    ("Sub", AxesMap::Elementwise),
    ("Sum", AxesMap::Elementwise),
    ("Tanh", AxesMap::Elementwise),
    ("Where", AxesMap::Elementwise),
    ("Xor", AxesMap::Elementwise),
    ("UnaryGrad", AxesMap::Elementwise),
    ("SgdUpdate", AxesMap::Elementwise),
    ("Cos", AxesMap::Elementwise),
    ("Sin", AxesMap::Elementwise),
    ("HardSwish", AxesMap::Elementwise),
    ("IsNaN", AxesMap::Elementwise),
    ("IsInf", AxesMap::Elementwise),
];

/// `Sum`, `Max`, `Min` of n inputs: n − 1 operations per output element.
fn variadic_cost(node: &CostNode<'_>) -> Work {
    node.per_output(node.inputs.len().saturating_sub(1).max(1) as u64)
}

/// One input, output of the same type.
fn unary(node: &Node<'_>, accepts: Accepts) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, 1)?;
    Ok(vec![Value::of_type(input_of(node, 0, accepts)?.ty.clone())])
}

/// `IsNaN`, `IsInf`: a float input; a bool output of its shape.
fn classify(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, 1)?;
    let x = input_of(node, 0, Accepts::Float)?;
    Ok(vec![typed(DType::Bool, x.ty.shape.clone())])
}

/// `Clip`: bounds are attributes before opset 11 and optional scalar inputs after.
fn clip(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, if node.opset < 11 { 1 } else { 3 })?;
    let x = input_of(node, 0, Accepts::Numeric)?;
    for index in 1..3 {
        if let Some(bound) = optional_input(node, index) {
            same_dtype(x, bound)?;
        }
    }
    Ok(vec![Value::of_type(x.ty.clone())])
}

/// `PRelu`: the slope broadcasts to the input (per channel before opset 7).
fn prelu(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 2, 2)?;
    let x = input_of(node, 0, Accepts::Numeric)?;
    let slope = input(node, 1)?;
    same_dtype(x, slope)?;
    if node.opset < 7 {
        // Before numpy broadcasting, a slope holds one value or one per channel (axis 1).
        let channels = x.ty.shape.get(1..1 + slope.ty.rank());
        if slope.ty.numel() != 1 && channels != Some(&slope.ty.shape[..]) {
            return Err(ShapeError::Invalid(format!(
                "slope {} matches neither one value nor the channels of {}",
                fmt_shape(&slope.ty.shape),
                fmt_shape(&x.ty.shape)
            )));
        }
    } else {
        broadcast_to(&slope.ty.shape, &x.ty.shape, "slope")?;
    }
    Ok(vec![Value::of_type(x.ty.clone())])
}

/// The output shape of a binary op: numpy broadcasting from opset 7, the
/// `broadcast`/`axis` attributes before.
fn binary_shape(node: &Node<'_>, a: &[usize], b: &[usize]) -> ShapeResult<Shape> {
    if node.opset >= 7 {
        return broadcast(a, b);
    }
    let mismatch = || ShapeError::Invalid(format!("cannot broadcast {} to {}", fmt_shape(b), fmt_shape(a)));
    if node.attrs.int("broadcast", 0)? == 0 {
        return if a == b { Ok(a.to_vec()) } else { Err(mismatch()) };
    }
    // Legacy broadcasting: `b` matches a contiguous run of `a`'s dims starting
    // at `axis` (by default, its trailing dims).
    let start = match node.attrs.int_opt("axis")? {
        Some(axis) => normalize_axis(axis, a.len())?,
        None => a.len().checked_sub(b.len()).ok_or_else(mismatch)?,
    };
    let window = a.get(start..start + b.len()).ok_or_else(mismatch)?;
    if window.iter().zip(b).all(|(&x, &y)| x == y || y == 1) {
        Ok(a.to_vec())
    } else {
        Err(mismatch())
    }
}

/// Integer arithmetic folded at compile time.
#[derive(Clone, Copy, Debug)]
enum Arith {
    Add,
    Sub,
    Mul,
    Div,
}

impl Arith {
    /// Applies the op with wrapping (the result is cut to the dtype's width);
    /// division truncates toward zero, as ONNX does for integers.
    fn apply(self, dtype: DType, a: i64, b: i64) -> ShapeResult<i64> {
        Ok(match self {
            Arith::Add => a.wrapping_add(b),
            Arith::Sub => a.wrapping_sub(b),
            Arith::Mul => a.wrapping_mul(b),
            Arith::Div if b == 0 => return Err(ShapeError::Invalid("integer division by zero".into())),
            Arith::Div if dtype == DType::U64 => ((a as u64) / (b as u64)) as i64,
            Arith::Div => a.wrapping_div(b),
        })
    }
}

/// Folds a broadcasting binary op on known integer inputs.
fn fold_binary(
    out_shape: &[usize],
    a: &Value,
    b: &Value,
    f: impl Fn(i64, i64) -> ShapeResult<i64>,
) -> ShapeResult<Option<Vec<i64>>> {
    match (broadcast_data(a, out_shape), broadcast_data(b, out_shape)) {
        (Some(x), Some(y)) => x.into_iter().zip(y).map(|(x, y)| f(x, y)).collect::<ShapeResult<_>>().map(Some),
        _ => Ok(None),
    }
}

/// `Add`, `Sub`, `Mul`, `Div`: same dtypes, broadcast shapes; folded for integers.
fn binary(node: &Node<'_>, op: Arith) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 2, 2)?;
    let a = input_of(node, 0, Accepts::Numeric)?;
    let b = input(node, 1)?;
    let dtype = same_dtype(a, b)?;
    let shape = binary_shape(node, &a.ty.shape, &b.ty.shape)?;
    let ty = TensorType::new(dtype, shape);
    let out = fold(ty.clone(), || fold_binary(&ty.shape, a, b, |x, y| op.apply(dtype, x, y)))?;
    Ok(vec![out])
}

/// `Pow`: the exponent may have another numeric dtype (opset 12); the output
/// has the base's.
fn pow(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 2, 2)?;
    let base = input_of(node, 0, Accepts::Numeric)?;
    let exponent = input_of(node, 1, Accepts::Numeric)?;
    if node.opset < 12 {
        same_dtype(base, exponent)?;
    }
    Ok(vec![typed(base.ty.dtype, binary_shape(node, &base.ty.shape, &exponent.ty.shape)?)])
}

/// Comparisons folded at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Compare {
    Equal,
    Less,
    Greater,
    GreaterOrEqual,
    LessOrEqual,
}

impl Compare {
    /// Compares two elements of `dtype` (u64 compares unsigned).
    fn apply(self, dtype: DType, a: i64, b: i64) -> bool {
        let order = if dtype == DType::U64 { (a as u64).cmp(&(b as u64)) } else { a.cmp(&b) };
        match self {
            Compare::Equal => order.is_eq(),
            Compare::Less => order.is_lt(),
            Compare::Greater => order.is_gt(),
            Compare::GreaterOrEqual => order.is_ge(),
            Compare::LessOrEqual => order.is_le(),
        }
    }
}

/// `Equal` (any dtype) and `Less`/`Greater`/`GreaterOrEqual`/`LessOrEqual`
/// (numeric): a bool output; folded for integers.
fn compare(node: &Node<'_>, op: Compare) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 2, 2)?;
    let a = input(node, 0)?;
    let b = input(node, 1)?;
    let dtype = same_dtype(a, b)?;
    if op != Compare::Equal {
        check_dtype(a, 0, Accepts::Numeric)?;
    }
    let ty = TensorType::new(DType::Bool, binary_shape(node, &a.ty.shape, &b.ty.shape)?);
    let out = fold(ty.clone(), || fold_binary(&ty.shape, a, b, |x, y| Ok(i64::from(op.apply(dtype, x, y)))))?;
    Ok(vec![out])
}

/// `And`, `Or`, `Xor`: two bool inputs, broadcast; a bool output.
fn logic(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 2, 2)?;
    let a = input_of(node, 0, Accepts::Bool)?;
    let b = input_of(node, 1, Accepts::Bool)?;
    Ok(vec![typed(DType::Bool, binary_shape(node, &a.ty.shape, &b.ty.shape)?)])
}

/// `Sum`, `Max`, `Min`, `Mean`: one or more inputs of one dtype, broadcast
/// together (opsets before 8 require equal shapes, which broadcasting accepts).
fn variadic(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, usize::MAX)?;
    let first = input_of(node, 0, Accepts::Numeric)?;
    let mut shape = first.ty.shape.clone();
    for index in 1..node.inputs.len() {
        let other = input(node, index)?;
        same_dtype(first, other)?;
        shape = broadcast(&shape, &other.ty.shape)?;
    }
    Ok(vec![typed(first.ty.dtype, shape)])
}

/// `Where`: a bool condition selects between two values of one dtype, all
/// three broadcast together; folded for integers.
fn where_(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 3, 3)?;
    let cond = input_of(node, 0, Accepts::Bool)?;
    let x = input(node, 1)?;
    let y = input(node, 2)?;
    let dtype = same_dtype(x, y)?;
    let shape = broadcast(&broadcast(&cond.ty.shape, &x.ty.shape)?, &y.ty.shape)?;
    let ty = TensorType::new(dtype, shape);
    let out = fold(ty.clone(), || {
        let data = [cond, x, y].map(|v| broadcast_data(v, &ty.shape));
        Ok(match data {
            [Some(c), Some(x), Some(y)] => {
                Some(c.iter().zip(x).zip(y).map(|((&c, x), y)| if c != 0 { x } else { y }).collect())
            }
            _ => None,
        })
    })?;
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::super::cost::testing::counts;
    use super::super::util::testing::{data, error, f, ints, run, scalar, shape, t};
    use crate::types::{Attr, Attrs, DType};

    #[test]
    fn broadcasting() {
        assert_eq!(shape("Add", 13, Attrs::new(), &[f(&[2, 1, 3]), f(&[4, 1])]), vec![2, 4, 3]);
        assert_eq!(shape("Mul", 13, Attrs::new(), &[f(&[]), f(&[5])]), vec![5]);
        assert_eq!(shape("Sum", 13, Attrs::new(), &[f(&[3, 1]), f(&[1, 4]), f(&[4])]), vec![3, 4]);
        assert_eq!(shape("Where", 16, Attrs::new(), &[t(DType::Bool, &[2, 1]), f(&[3]), f(&[1, 1, 1])]), vec![1, 2, 3]);
    }

    #[test]
    fn broadcast_errors() {
        assert_eq!(error("Add", 13, Attrs::new(), &[f(&[2, 3]), f(&[4])]), "cannot broadcast [2,3] with [4]");
        assert_eq!(error("Add", 13, Attrs::new(), &[f(&[2]), t(DType::I64, &[2])]), "input dtypes differ: f32 and i64");
        assert_eq!(error("Add", 13, Attrs::new(), &[f(&[2])]), "expected 2 inputs, got 1");
        assert_eq!(error("Sqrt", 13, Attrs::new(), &[t(DType::I64, &[2])]), "input 0 must be a float tensor, got i64");
    }

    #[test]
    fn legacy_broadcast() {
        let on = Attrs::new().with("broadcast", Attr::Int(1));
        assert_eq!(shape("Add", 6, on.clone(), &[f(&[2, 3, 4, 5]), f(&[4, 5])]), vec![2, 3, 4, 5]);
        let axis1 = on.clone().with("axis", Attr::Int(1));
        assert_eq!(shape("Mul", 6, axis1.clone(), &[f(&[2, 3, 4, 5]), f(&[3, 1])]), vec![2, 3, 4, 5]);
        assert_eq!(error("Mul", 6, axis1, &[f(&[2, 3, 4, 5]), f(&[4])]), "cannot broadcast [4] to [2,3,4,5]");
        assert!(run("Add", 6, Attrs::new(), &[f(&[2, 3]), f(&[3])], 1).is_err());
    }

    #[test]
    fn comparisons_and_prelu() {
        let out = run("Less", 13, Attrs::new(), &[f(&[2, 3]), f(&[3])], 1).unwrap();
        let less = run("Less", 13, Attrs::new(), &[ints(&[1, 2, 3]), scalar(2)], 1).unwrap();
        assert_eq!(data(&less[0]), vec![1, 0, 0]);
        assert_eq!(out[0].ty.dtype, DType::Bool);
        assert_eq!(shape("PRelu", 16, Attrs::new(), &[f(&[1, 8, 4, 4]), f(&[8, 1, 1])]), vec![1, 8, 4, 4]);
        assert_eq!(
            error("PRelu", 16, Attrs::new(), &[f(&[1, 8, 4, 4]), f(&[8])]),
            "slope [8] does not broadcast to [1,8,4,4]"
        );
    }

    #[test]
    fn integer_folding() {
        let div = run("Div", 13, Attrs::new(), &[ints(&[7, -7, 9]), scalar(2)], 1).unwrap();
        assert_eq!(data(&div[0]), vec![3, -3, 4]);
        let sub = run("Sub", 13, Attrs::new(), &[ints(&[7, 1]), ints(&[1, 2])], 1).unwrap();
        assert_eq!(data(&sub[0]), vec![6, -1]);
        let eq = run("Equal", 13, Attrs::new(), &[ints(&[1, 2, 3]), scalar(2)], 1).unwrap();
        assert_eq!((eq[0].ty.dtype, data(&eq[0])), (DType::Bool, vec![0, 1, 0]));
        let wh = run("Where", 16, Attrs::new(), &[eq[0].clone(), scalar(-1), ints(&[4, 5, 6])], 1).unwrap();
        assert_eq!(data(&wh[0]), vec![4, -1, 6]);
        assert_eq!(error("Div", 13, Attrs::new(), &[ints(&[1]), scalar(0)]), "integer division by zero");
        let unknown = run("Add", 13, Attrs::new(), &[t(DType::I64, &[2]), scalar(1)], 1).unwrap();
        assert_eq!(unknown[0].data, None);
    }

    #[test]
    fn gelu_hard_sigmoid_logic_and_ordered_comparisons() {
        assert_eq!(shape("Gelu", 20, Attrs::new(), &[f(&[2, 3])]), vec![2, 3]);
        assert_eq!(shape("HardSigmoid", 6, Attrs::new(), &[f(&[4])]), vec![4]);
        assert_eq!(error("Gelu", 20, Attrs::new(), &[t(DType::I64, &[2])]), "input 0 must be a float tensor, got i64");
        let and = run("And", 7, Attrs::new(), &[t(DType::Bool, &[2, 1]), t(DType::Bool, &[3])], 1).unwrap();
        assert_eq!((and[0].ty.dtype, and[0].ty.shape.clone()), (DType::Bool, vec![2, 3]));
        assert!(run("Xor", 7, Attrs::new(), &[f(&[2]), f(&[2])], 1).is_err());
        let ge = run("GreaterOrEqual", 16, Attrs::new(), &[ints(&[1, 2, 3]), scalar(2)], 1).unwrap();
        assert_eq!(data(&ge[0]), vec![0, 1, 1]);
        let le = run("LessOrEqual", 16, Attrs::new(), &[ints(&[1, 2, 3]), scalar(2)], 1).unwrap();
        assert_eq!(data(&le[0]), vec![1, 1, 0]);
    }

    /// Hand-computed: a [64, 1000] tensor is 64,000 elements, 256,000 bytes.
    #[test]
    fn costs() {
        let x: &[usize] = &[64, 1000];
        let b = 256_000;
        assert_eq!(counts("Relu", &[x], &[x]), (64_000, b, b));
        assert_eq!(counts("Add", &[x, &[1000]], &[x]), (64_000, b + 4000, b));
        assert_eq!(counts("Clip", &[x], &[x]), (128_000, b, b));
        assert_eq!(counts("Sum", &[x, x, x], &[x]), (128_000, 3 * b, b));
        assert_eq!(counts("Mean", &[x, x, x], &[x]), (192_000, 3 * b, b));
        assert_eq!(counts("UnaryGrad", &[x, x], &[x]), (128_000, 2 * b, b));
        // Momentum reads W, V, dW and writes W′, V′: 4 FLOPs per parameter.
        assert_eq!(counts("MomentumUpdate", &[x, x, x], &[x, x]), (256_000, 3 * b, 2 * b));
        assert_eq!(counts("AdamUpdate", &[x, x, x, x, &[]], &[x, x, x]).0, 14 * 64_000);
    }

    #[test]
    fn clip_forms() {
        assert_eq!(shape("Clip", 6, Attrs::new().with("min", Attr::Float(0.0)), &[f(&[3, 4])]), vec![3, 4]);
        assert_eq!(shape("Clip", 13, Attrs::new(), &[f(&[3, 4]), f(&[]), f(&[])]), vec![3, 4]);
        assert!(run("Clip", 6, Attrs::new(), &[f(&[3]), f(&[])], 1).is_err());
    }
}
