//! Elementwise unary ops: activations, float math, Neg/Abs, Clip and Not.

use super::num::{Float, Num};
use super::{dispatch_float, dispatch_num, Ctx, Kernel};
use crate::attrs::Attrs;
use crate::error::{KernelError, Result};
use crate::tensor::{Elem, HostTensor};

/// Maps input X elementwise with `|$x| $body`, `$T` bound to its element type.
macro_rules! map_input {
    ($ctx:expr, $dispatch:ident, $T:ident, |$x:ident| $body:expr) => {{
        let input = $ctx.input(0, "X")?;
        let data = $dispatch!(input.dtype(), "input X", $T => {
            let xs = input.view::<$T>("input X")?;
            Ok($T::wrap(xs.iter().map(|&$x| -> $T { $body }).collect()))
        })?;
        Ok(vec![HostTensor::new(input.shape.clone(), data)?])
    }};
}

/// The unary kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[
    ("Abs", abs),
    ("Ceil", ceil),
    ("Clip", clip),
    ("Cos", cos),
    ("Elu", elu),
    ("Erf", erf),
    ("Exp", exp),
    ("Floor", floor),
    ("Gelu", gelu),
    ("HardSigmoid", hard_sigmoid),
    ("HardSwish", hard_swish),
    ("IsInf", is_inf),
    ("IsNaN", is_nan),
    ("LeakyRelu", leaky_relu),
    ("Log", log),
    ("Mish", mish),
    ("Neg", neg),
    ("Not", not),
    ("Reciprocal", reciprocal),
    ("Relu", relu),
    ("Round", round),
    ("Selu", selu),
    ("Sigmoid", sigmoid),
    ("Sin", sin),
    ("Softplus", softplus),
    ("Softsign", softsign),
    ("Sqrt", sqrt),
    ("Tanh", tanh),
];

/// f′ of a differentiable unary map, in f64, with its op's attributes read.
pub(super) type Derivative = Box<dyn Fn(f64) -> f64>;

/// Makes an op's [`Derivative`] from its attributes.
pub(super) type DerivativeOf = fn(&Attrs<'_>) -> Result<Derivative>;

/// The derivatives of the differentiable unary maps, by op: `UnaryGrad` (dY · f′(X)) runs
/// the one its `op` attribute names, reading that op's attributes with the forward
/// kernels' defaults.
pub(super) const DERIVATIVES: &[(&str, DerivativeOf)] = &[
    ("Abs", |_| {
        derivative(|x| {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        })
    }),
    // Passes the gradient where `min ≤ x ≤ max` (the bounds included, as clamp).
    ("Clip", |a| {
        let (min, max) = (f64::from(a.float("min", f32::NEG_INFINITY)?), f64::from(a.float("max", f32::INFINITY)?));
        derivative(move |x| f64::from(u8::from(min <= x && x <= max)))
    }),
    ("Cos", |_| derivative(|x| -x.sin())),
    ("Elu", |a| {
        let alpha = f64::from(a.float("alpha", 1.0)?);
        derivative(move |x| if x > 0.0 { 1.0 } else { alpha * x.exp() })
    }),
    ("Erf", |_| derivative(|x| std::f64::consts::FRAC_2_SQRT_PI * (-x * x).exp())),
    ("Exp", |_| derivative(f64::exp)),
    ("HardSigmoid", |a| {
        let (alpha, beta) = (f64::from(a.float("alpha", 0.2)?), f64::from(a.float("beta", 0.5)?));
        derivative(move |x| {
            let v = alpha * x + beta;
            if v > 0.0 && v < 1.0 {
                alpha
            } else {
                0.0
            }
        })
    }),
    // PyTorch's convention at the kinks: x/3 + 1/2 on [−3, 3], 0 below, 1 above.
    ("HardSwish", |_| {
        derivative(|x| {
            if x < -3.0 {
                0.0
            } else if x <= 3.0 {
                x / 3.0 + 0.5
            } else {
                1.0
            }
        })
    }),
    ("LeakyRelu", |a| {
        let alpha = f64::from(a.float("alpha", 0.01)?);
        derivative(move |x| if x < 0.0 { alpha } else { 1.0 })
    }),
    ("Log", |_| derivative(|x| 1.0 / x)),
    // tanh(sp) + x · (1 − tanh²(sp)) · σ(x), sp = softplus(x) (whose derivative is σ).
    ("Mish", |_| {
        derivative(|x| {
            let t = (x.max(0.0) + (-x.abs()).exp().ln_1p()).tanh();
            t + x * (1.0 - t * t) * sigmoid_of(x)
        })
    }),
    ("Neg", |_| derivative(|_| -1.0)),
    ("Reciprocal", |_| derivative(|x| -1.0 / (x * x))),
    ("Relu", |_| derivative(|x| f64::from(u8::from(x > 0.0)))),
    ("Selu", |a| {
        let (alpha, gamma) = (f64::from(a.float("alpha", 1.673_263_2)?), f64::from(a.float("gamma", 1.050_701)?));
        derivative(move |x| if x > 0.0 { gamma } else { gamma * alpha * x.exp() })
    }),
    ("Sigmoid", |_| {
        derivative(|x| {
            let s = sigmoid_of(x);
            s * (1.0 - s)
        })
    }),
    ("Sin", |_| derivative(f64::cos)),
    ("Softplus", |_| derivative(sigmoid_of::<f64>)),
    ("Softsign", |_| derivative(|x| 1.0 / (1.0 + x.abs()).powi(2))),
    ("Sqrt", |_| derivative(|x| 0.5 / x.sqrt())),
    ("Tanh", |_| derivative(|x| 1.0 - x.tanh().powi(2))),
];

/// `f` as a [`Derivative`].
fn derivative(f: impl Fn(f64) -> f64 + 'static) -> Result<Derivative> {
    Ok(Box::new(f))
}

fn relu(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    // max_nan keeps NaN as NaN.
    map_input!(ctx, dispatch_num, T, |x| x.max_nan(T::ZERO))
}

fn neg(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_num, T, |x| x.neg())
}

fn abs(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_num, T, |x| Num::abs(x))
}

fn leaky_relu(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let alpha = ctx.attrs.float("alpha", 0.01)?;
    map_input!(ctx, dispatch_float, T, |x| if x < T::ZERO { T::from_f32(alpha) * x } else { x })
}

fn sigmoid(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| sigmoid_of(x))
}

/// 1 / (1 + e^-x), computed without overflow for either sign.
pub(super) fn sigmoid_of<T: Float>(x: T) -> T {
    if x >= T::ZERO {
        T::ONE / (T::ONE + (-x).exp())
    } else {
        let e = x.exp();
        e / (T::ONE + e)
    }
}

fn tanh(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| x.tanh())
}

fn elu(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let alpha = ctx.attrs.float("alpha", 1.0)?;
    map_input!(ctx, dispatch_float, T, |x| if x > T::ZERO { x } else { T::from_f32(alpha) * (x.exp() - T::ONE) })
}

fn selu(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let alpha = ctx.attrs.float("alpha", 1.673_263_2)?;
    let gamma = ctx.attrs.float("gamma", 1.050_701)?;
    map_input!(ctx, dispatch_float, T, |x| {
        let y = if x > T::ZERO { x } else { T::from_f32(alpha) * (x.exp() - T::ONE) };
        T::from_f32(gamma) * y
    })
}

fn softplus(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    // ln(1 + e^x) = max(x, 0) + ln(1 + e^-|x|), which never overflows.
    map_input!(ctx, dispatch_float, T, |x| {
        let pos = if x > T::ZERO { x } else { T::ZERO };
        pos + (-Num::abs(x)).exp().ln_1p()
    })
}

/// Mish (opset 18): x · tanh(softplus(x)), softplus as above.
fn mish(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| {
        let pos = if x > T::ZERO { x } else { T::ZERO };
        x * (pos + (-Num::abs(x)).exp().ln_1p()).tanh()
    })
}

fn softsign(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| x / (T::ONE + Num::abs(x)))
}

fn hard_sigmoid(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let alpha = ctx.attrs.float("alpha", 0.2)?;
    let beta = ctx.attrs.float("beta", 0.5)?;
    map_input!(ctx, dispatch_float, T, |x| {
        (T::from_f32(alpha) * x + T::from_f32(beta)).max_nan(T::ZERO).min_nan(T::ONE)
    })
}

fn gelu(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    match ctx.attrs.string("approximate", "none")? {
        "none" => map_input!(ctx, dispatch_float, T, |x| {
            T::from_f64(0.5) * x * (T::ONE + (x * T::from_f64(std::f64::consts::FRAC_1_SQRT_2)).erf_libm())
        }),
        "tanh" => map_input!(ctx, dispatch_float, T, |x| {
            let inner = T::from_f64((2.0 / std::f64::consts::PI).sqrt()) * (x + T::from_f64(0.044715) * x * x * x);
            T::from_f64(0.5) * x * (T::ONE + inner.tanh())
        }),
        other => Err(KernelError::attr("approximate", format!("unknown value `{other}`"))),
    }
}

/// HardSwish: x · HardSigmoid(x) with alpha 1/6 and beta 0.5 (fixed by ONNX).
fn hard_swish(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| {
        x * (T::from_f32(1.0 / 6.0) * x + T::from_f32(0.5)).max_nan(T::ZERO).min_nan(T::ONE)
    })
}

fn exp(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| x.exp())
}

fn log(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| x.ln())
}

fn reciprocal(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| T::ONE / x)
}

fn erf(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| x.erf_libm())
}

fn cos(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| x.cos())
}

fn sin(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| x.sin())
}

fn sqrt(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| x.sqrt())
}

fn floor(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| x.floor())
}

fn ceil(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| x.ceil())
}

/// Round: to the nearest integer, halves to the even one (as ONNX and IEEE 754).
fn round(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    map_input!(ctx, dispatch_float, T, |x| x.round_ties_even())
}

fn not(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    let data = x.as_bool("input X")?.iter().map(|&b| !b).collect::<Vec<_>>();
    Ok(vec![HostTensor::from_vec(x.shape.clone(), data)?])
}

fn is_nan(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    classify(ctx, |v| v.is_nan())
}

/// IsInf: +inf where `detect_positive` (1), −inf where `detect_negative` (1).
fn is_inf(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let positive = ctx.attrs.int("detect_positive", 1)? != 0;
    let negative = ctx.attrs.int("detect_negative", 1)? != 0;
    classify(ctx, |v| v.is_infinite() && if v > 0.0 { positive } else { negative })
}

/// A bool of X's shape: `test` of each element (in f64).
fn classify(ctx: &Ctx<'_>, test: impl Fn(f64) -> bool) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    let data: Vec<bool> = dispatch_float!(x.dtype(), "input X", T => {
        Ok(x.view::<T>("input X")?.iter().map(|v| test(v.to_f64())).collect())
    })?;
    Ok(vec![HostTensor::from_vec(x.shape.clone(), data)?])
}

/// Clip: bounds from attributes `min`/`max` (opset < 11) or from optional scalar inputs.
fn clip(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    dispatch_num!(x.dtype(), "input X", T => clip_typed::<T>(ctx, x))
}

fn clip_typed<T: Num>(ctx: &Ctx<'_>, x: &HostTensor) -> Result<Vec<HostTensor>> {
    let bound = |attr: &str, slot: usize, name: &str, default: T| -> Result<T> {
        if let Some(t) = ctx.opt_input(slot) {
            let v = t.view::<T>(&format!("input {name}"))?;
            return match v {
                [b] => Ok(*b),
                _ => Err(KernelError::shape(
                    format!("input {name}"),
                    format!("expected a scalar, found shape {:?}", t.shape),
                )),
            };
        }
        Ok(ctx.attrs.float_opt(attr)?.map_or(default, |b| T::from_f64(f64::from(b))))
    };
    let lo = bound("min", 1, "min", T::LOWEST)?;
    let hi = bound("max", 2, "max", T::HIGHEST)?;
    let xs = x.view::<T>("input X")?;
    let data: Vec<T> = xs.iter().map(|&v| v.max_nan(lo).min_nan(hi)).collect();
    Ok(vec![HostTensor::from_vec(x.shape.clone(), data)?])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use lms_proto::lms::DType::*;
    use lms_proto::ops::registry::{self, GradientForm};
    use std::collections::BTreeSet;

    /// `UnaryGrad` has a derivative for exactly the maps whose definitions state a unary
    /// gradient, and for Clip (whose rule reads its bounds from its inputs).
    #[test]
    fn derivatives_are_those_of_the_stated_unary_gradients() {
        let stated: BTreeSet<&str> = registry::all()
            .filter(|id| matches!(id.def().gradient, Some(GradientForm::Unary { .. })))
            .map(|id| id.name())
            .chain(["Clip"])
            .collect();
        let derivatives: BTreeSet<&str> = super::DERIVATIVES.iter().map(|&(name, _)| name).collect();
        assert_eq!(derivatives, stated);
    }

    /// Each derivative (its op's default attributes) against central differences of its
    /// forward kernel in f64, at points away from the kinks.
    #[test]
    fn derivatives_match_finite_differences_of_the_forward_kernels() {
        const H: f64 = 1e-5;
        let attrs = crate::attrs::Attrs::new(&[]);
        for &(op, read) in super::DERIVATIVES {
            let derivative = read(&attrs).unwrap();
            let points: &[f64] = match op {
                "Log" | "Sqrt" | "Reciprocal" => &[0.3, 0.8, 1.7, 2.6],
                _ => &[-2.7, -1.3, -0.4, 0.35, 0.9, 1.7, 2.6],
            };
            for &x in points {
                let f = |x: f64| run1(op, &[], &[&tensor(&[1], vec![x])], DtypeF64, &[1]).view::<f64>("y").unwrap()[0];
                let numeric = (f(x + H) - f(x - H)) / (2.0 * H);
                let got = derivative(x);
                assert!(
                    (got - numeric).abs() <= 1e-6 * numeric.abs().max(1.0),
                    "{op}'({x}) = {got}, numerically {numeric}"
                );
            }
        }
    }

    fn apply(op: &str, attrs: &[lms_proto::lms::Attribute], xs: &[f32]) -> Vec<f32> {
        let x = tensor(&[xs.len()], xs.to_vec());
        f32s(&run1(op, attrs, &[&x], DtypeF32, &[xs.len()]))
    }

    #[test]
    fn activations_match_their_formulas() {
        let xs = [-3.0f32, -0.5, 0.0, 0.5, 3.0];
        let each = |f: fn(f64) -> f64| xs.iter().map(|&x| f(f64::from(x)) as f32).collect::<Vec<_>>();
        assert_close(&apply("Relu", &[], &xs), &each(|x| x.max(0.0)));
        assert_close(&apply("LeakyRelu", &[float("alpha", 0.1)], &xs), &each(|x| if x < 0.0 { 0.1 * x } else { x }));
        assert_close(&apply("Sigmoid", &[], &xs), &each(|x| 1.0 / (1.0 + (-x).exp())));
        assert_close(&apply("Tanh", &[], &xs), &each(f64::tanh));
        assert_close(&apply("Elu", &[], &xs), &each(|x| if x > 0.0 { x } else { x.exp() - 1.0 }));
        assert_close(
            &apply("Selu", &[], &xs),
            &each(|x| 1.0507009873554805 * if x > 0.0 { x } else { 1.6732632423543772 * (x.exp() - 1.0) }),
        );
        assert_close(&apply("Softplus", &[], &xs), &each(|x| (1.0 + x.exp()).ln()));
        assert_close(&apply("Softsign", &[], &xs), &each(|x| x / (1.0 + x.abs())));
        assert_close(&apply("Mish", &[], &xs), &each(|x| x * (1.0 + x.exp()).ln().tanh()));
        assert_close(&apply("Neg", &[], &xs), &each(|x| -x));
        assert_close(&apply("Abs", &[], &xs), &each(f64::abs));
        assert_close(&apply("Exp", &[], &xs), &each(f64::exp));
        assert_close(&apply("Floor", &[], &xs), &each(f64::floor));
        assert_close(&apply("Ceil", &[], &xs), &each(f64::ceil));
        assert_close(&apply("Round", &[], &xs), &each(f64::round_ties_even));
        let halves = [-2.5f32, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4999, f32::NAN];
        let rounded = apply("Round", &[], &halves);
        assert_eq!(rounded[..7], [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 0.0]);
        assert!(rounded[7].is_nan());
        assert_close(&apply("Cos", &[], &xs), &each(f64::cos));
        assert_close(&apply("Sin", &[], &xs), &each(f64::sin));
        assert_close(&apply("HardSigmoid", &[], &xs), &each(|x| (0.2 * x + 0.5).clamp(0.0, 1.0)));
        assert_close(&apply("HardSwish", &[], &xs), &each(|x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0)));
        let pos = [0.25f32, 1.0, 4.0];
        let each_pos = |f: fn(f64) -> f64| pos.iter().map(|&x| f(f64::from(x)) as f32).collect::<Vec<_>>();
        assert_close(&apply("Log", &[], &pos), &each_pos(f64::ln));
        assert_close(&apply("Sqrt", &[], &pos), &each_pos(f64::sqrt));
        assert_close(&apply("Reciprocal", &[], &pos), &each_pos(|x| 1.0 / x));
    }

    #[test]
    fn is_nan_and_is_inf_classify_each_element() {
        let x = tensor(&[5], vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, f32::MAX]);
        let classify = |op: &str, attrs: &[lms_proto::lms::Attribute]| {
            run1(op, attrs, &[&x], DtypeBool, &[5]).as_bool("y").unwrap().to_vec()
        };
        assert_eq!(classify("IsNaN", &[]), [true, false, false, false, false]);
        assert_eq!(classify("IsInf", &[]), [false, true, true, false, false]);
        assert_eq!(classify("IsInf", &[int("detect_negative", 0)]), [false, true, false, false, false]);
        assert_eq!(classify("IsInf", &[int("detect_positive", 0)]), [false, false, true, false, false]);
    }

    #[test]
    fn extreme_inputs_stay_finite() {
        let y = apply("Sigmoid", &[], &[-1000.0, 1000.0]);
        assert_eq!(y, vec![0.0, 1.0]);
        let y = apply("Softplus", &[], &[-1000.0, 1000.0]);
        assert_eq!(y, vec![0.0, 1000.0]);
    }

    #[test]
    fn erf_is_precise() {
        // Reference values of erf to 10 digits.
        let y = apply("Erf", &[], &[0.1, 0.5, 1.0, 2.0, -1.5]);
        let want = [0.1124629160f64, 0.5204998778, 0.8427007929, 0.9953222650, -0.9661051465];
        assert_close(&y, &want.map(|v| v as f32));
        let y = apply("Gelu", &[], &[1.0]);
        assert_close(&y, &[0.8413447461f64 as f32]);
    }

    #[test]
    fn clip_reads_attributes_or_inputs() {
        let x = tensor(&[4], vec![-2.0f32, -0.5, 0.5, 2.0]);
        let y = run("Clip", 6, &[float("min", -1.0), float("max", 1.0)], &[&x], &[(DtypeF32, vec![4])]).unwrap();
        assert_eq!(f32s(&y[0]), vec![-1.0, -0.5, 0.5, 1.0]);
        let lo = tensor::<f32>(&[], vec![0.0]);
        let y = run_opt("Clip", 13, &[], &[Some(&x), Some(&lo), None], &[(DtypeF32, vec![4])]).unwrap();
        assert_eq!(f32s(&y[0]), vec![0.0, 0.0, 0.5, 2.0]);
        let xi = tensor(&[3], vec![-5i64, 0, 5]);
        let hi = tensor::<i64>(&[], vec![1]);
        let y = run_opt("Clip", 13, &[], &[Some(&xi), None, Some(&hi)], &[(DtypeI64, vec![3])]).unwrap();
        assert_eq!(y[0].as_i64("y").unwrap(), &[-5, 0, 1]);
    }

    #[test]
    fn not_and_int_relu() {
        let b = tensor(&[2], vec![true, false]);
        let y = run1("Not", &[], &[&b], DtypeBool, &[2]);
        assert_eq!(y.as_bool("y").unwrap(), &[false, true]);
        let xi = tensor(&[2], vec![-3i32, 4]);
        let y = run1("Relu", &[], &[&xi], DtypeI32, &[2]);
        assert_eq!(y.view::<i32>("y").unwrap(), &[0, 4]);
        let err = run("Exp", 17, &[], &[&xi], &[(DtypeI32, vec![2])]).unwrap_err();
        assert_eq!(err.to_string(), "Exp: input X: expected f32 or f64, found i32");
    }
}
