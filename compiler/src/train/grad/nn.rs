//! Gradients of neural-network ops: convolution, pooling, LRN, softmax,
//! normalisation, Gather, GatherElements, and lms's training-mode ops and losses.

use super::{Ctx, GradFn};
use crate::error::Result;
use crate::ir::{Attr, AttrError, Attrs, TensorData, TensorId, TensorType};
use crate::shape::SoftmaxAxis;
use crate::train::builder::Builder;
use lms_proto::ops::window::Window;
use lms_proto::ops::ShapeResult;

/// The rules of the neural-network ops and of lms's training-mode ops and losses.
pub(super) const RULES: &[(&str, GradFn)] = &[
    ("Conv", conv),
    ("ConvTranspose", conv_transpose),
    ("MaxPool", pool),
    ("AveragePool", pool),
    ("GlobalAveragePool", global_average_pool),
    ("LRN", lrn),
    ("Softmax", softmax),
    ("LogSoftmax", softmax),
    ("LayerNormalization", layer_normalization),
    ("InstanceNormalization", instance_normalization),
    ("Gather", gather),
    ("GatherElements", gather),
    ("SoftmaxCrossEntropy", loss),
    ("MeanSquaredError", loss),
    ("BatchNormTrain", batch_norm_train),
    ("DropoutTrain", dropout_train),
];

fn global_average_pool(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let ty = b.ty(ctx.input(0)?);
    Ok(vec![Some(b.lms1(&ctx.name("gap"), "GlobalAveragePoolGrad", Attrs::new(), &[ctx.dy(0)?], ty))])
}

fn lrn(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let x = ctx.input(0)?;
    let mut attrs = Attrs::new();
    copy_attrs(ctx, &mut attrs, &["size", "alpha", "beta", "bias"]);
    let ty = b.ty(x);
    Ok(vec![Some(b.lms1(&ctx.name("lrn"), "LRNGrad", attrs, &[ctx.dy(0)?, x], ty))])
}

/// Softmax and LogSoftmax.
fn softmax(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let form = SoftmaxAxis::at_opset(b.graph.opset);
    let axis = ctx.node.attrs.int("axis", form.default).map_err(|e| attr_fail(ctx, e))?;
    let attrs = Attrs::new().with("axis", Attr::Int(axis)).with("coerce", Attr::Int(form.coerced as i64));
    let y = ctx.node.outputs[0];
    let ty = b.ty(y);
    let grad_op = if ctx.node.op == "Softmax" { "SoftmaxGrad" } else { "LogSoftmaxGrad" };
    Ok(vec![Some(b.lms1(&ctx.name("softmax"), grad_op, attrs, &[ctx.dy(0)?, y], ty))])
}

fn layer_normalization(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let (x, scale) = (ctx.input(0)?, ctx.input(1)?);
    let [_, mean, invstd] = ctx.node.outputs[..] else {
        return Err(ctx.fail("training needs LayerNormalization's mean and inverse deviation outputs".into()));
    };
    let axis = ctx.node.attrs.int("axis", -1).map_err(|e| attr_fail(ctx, e))?;
    let (tx, ts) = (b.ty(x), b.ty(scale));
    let outs = b.lms(
        &ctx.name("layernorm"),
        "LayerNormGrad",
        Attrs::new().with("axis", Attr::Int(axis)),
        &[Some(ctx.dy(0)?), Some(x), Some(scale), Some(mean), Some(invstd)],
        vec![tx, ts.clone(), ts],
    );
    let bias = ctx.node.inputs.get(2).copied().flatten().map(|_| outs[2]);
    Ok(vec![Some(outs[0]), Some(outs[1]), bias])
}

/// InstanceNormalization is a layer normalization of each image's channel over its
/// positions (axis 2) with a per-channel affine map after it. The backward pass recomputes
/// that normalization with a scale of one (LayerNormalization at axis 2: x̂ and each
/// plane's mean and inverse deviation): dX = LayerNormGrad(dY·scale, X, 1, mean, invstd),
/// dscale = Σ dY·x̂ and dB = Σ dY over every axis but 1 (ConvGradBias).
fn instance_normalization(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let (dy, x, scale) = (ctx.dy(0)?, ctx.input(0)?, ctx.input(1)?);
    let (tx, ts) = (b.ty(x), b.ty(scale));
    let mut grads = vec![None; 3];
    if ctx.needs(0) || ctx.needs(1) {
        let epsilon = ctx.node.attrs.float("epsilon", 1e-5).map_err(|e| attr_fail(ctx, e))?;
        let one = TensorData::from_f32(vec![1], &[1.0]);
        let one = b.onnx1(&ctx.name("one"), "Constant", Attrs::new().with("value", Attr::Tensor(one)), &[])?;
        let plane = Attrs::new().with("axis", Attr::Int(2)).with("epsilon", Attr::Float(epsilon));
        let stats = b.onnx(&ctx.name("planes"), "LayerNormalization", plane, &[Some(x), Some(one)], 3)?;
        let [xhat, mean, invstd] = stats[..] else {
            return Err(ctx.fail("the recomputed normalization has no statistics".into()));
        };
        if ctx.needs(0) {
            // Before opset 7 a binary op broadcasts only when told to (scale [C, 1, ...]
            // then matches X's trailing axes).
            let legacy = if b.graph.opset < 7 { Attrs::new().with("broadcast", Attr::Int(1)) } else { Attrs::new() };
            let mut per_channel = vec![1; tx.rank() - 1];
            per_channel[0] = tx.shape[1];
            let channel = TensorType::new(ts.dtype, per_channel);
            let channel = b.lms1(&ctx.name("channel_scale"), "ReshapeTo", Attrs::new(), &[scale], channel);
            let dxhat = b.onnx1(&ctx.name("dxhat"), "Mul", legacy, &[dy, channel])?;
            let ty1 = b.ty(one);
            let outs = b.lms(
                &ctx.name("data"),
                "LayerNormGrad",
                Attrs::new().with("axis", Attr::Int(2)),
                &[Some(dxhat), Some(x), Some(one), Some(mean), Some(invstd)],
                vec![tx, ty1.clone(), ty1],
            );
            grads[0] = Some(outs[0]);
        }
        if ctx.needs(1) {
            let product = b.onnx1(&ctx.name("dy_xhat"), "Mul", Attrs::new(), &[dy, xhat])?;
            grads[1] = Some(b.lms1(&ctx.name("scale"), "ConvGradBias", Attrs::new(), &[product], ts.clone()));
        }
    }
    if ctx.needs(2) {
        let tb = b.ty(ctx.input(2)?);
        grads[2] = Some(b.lms1(&ctx.name("bias"), "ConvGradBias", Attrs::new(), &[dy], tb));
    }
    Ok(grads)
}

/// Gather and GatherElements: dY scatter-added into zeros of data's shape
/// (`GatherGrad`, `GatherElementsGrad`).
fn gather(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let op = ctx.node.op.as_str();
    if ctx.needs(1) {
        return Err(ctx.fail(format!("indices of {op} are not differentiable")));
    }
    let (data, indices) = (ctx.input(0)?, ctx.input(1)?);
    let rank = b.ty(data).rank() as i64;
    let axis = ctx.node.attrs.int("axis", 0).map_err(|e| attr_fail(ctx, e))?;
    let axis = if axis < 0 { axis + rank } else { axis };
    let ty = b.ty(data);
    let attrs = Attrs::new().with("axis", Attr::Int(axis));
    let grad = if op == "Gather" { "GatherGrad" } else { "GatherElementsGrad" };
    Ok(vec![Some(b.lms1(&ctx.name("gather"), grad, attrs, &[ctx.dy(0)?, indices], ty)), None])
}

/// The losses: `SoftmaxCrossEntropyGrad`, `MeanSquaredErrorGrad`.
fn loss(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let (pred, target) = (ctx.input(0)?, ctx.input(1)?);
    let grad_op = format!("{}Grad", ctx.node.op);
    let ty = b.ty(pred);
    Ok(vec![Some(b.lms1(&ctx.name("loss"), &grad_op, Attrs::new(), &[pred, target], ty)), None])
}

fn batch_norm_train(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let (x, scale) = (ctx.input(0)?, ctx.input(1)?);
    let outs = &ctx.node.outputs;
    let (tx, ts) = (b.ty(x), b.ty(scale));
    let grads = b.lms(
        &ctx.name("batchnorm"),
        "BatchNormGrad",
        Attrs::new(),
        &[Some(ctx.dy(0)?), Some(x), Some(scale), Some(outs[3]), Some(outs[4])],
        vec![tx, ts.clone(), ts],
    );
    Ok(vec![Some(grads[0]), Some(grads[1]), Some(grads[2]), None, None])
}

fn dropout_train(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let x = ctx.input(0)?;
    let mut attrs = Attrs::new();
    copy_attrs(ctx, &mut attrs, &["ratio"]);
    let ty = b.ty(x);
    Ok(vec![Some(b.lms1(&ctx.name("dropout"), "DropoutGrad", attrs, &[ctx.dy(0)?, ctx.node.outputs[1]], ty))])
}

fn attr_fail(ctx: &Ctx<'_>, e: AttrError) -> crate::error::Error {
    ctx.fail(e.to_string())
}

fn copy_attrs(ctx: &Ctx<'_>, attrs: &mut Attrs, names: &[&str]) {
    for &name in names {
        if let Some(v) = ctx.node.attrs.get(name) {
            attrs.set(name, v.clone());
        }
    }
}

/// Kernel shape, strides, dilations and explicit pads (`auto_pad` resolved) of a windowed
/// op's `window`, by the contract's window rule.
fn window_attrs(ctx: &Ctx<'_>, window: ShapeResult<Window>) -> Result<Attrs> {
    let w = window.map_err(|e| ctx.fail(e.to_string()))?;
    let ints = |v: &[usize]| Attr::Ints(v.iter().map(|&x| x as i64).collect());
    Ok(Attrs::new()
        .with("kernel_shape", ints(&w.kernel))
        .with("strides", ints(&w.strides))
        .with("dilations", ints(&w.dilations))
        .with("pads", ints(&[w.pads_begin, w.pads_end].concat())))
}

fn conv(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let (dy, x, w) = (ctx.dy(0)?, ctx.input(0)?, ctx.input(1)?);
    let (tx, tw) = (b.ty(x), b.ty(w));
    let mut attrs = window_attrs(ctx, Window::conv(&ctx.node.attrs, &tx.shape[2..], &tw.shape[2..]))?;
    attrs.set("group", Attr::Int(ctx.node.attrs.int("group", 1).map_err(|e| attr_fail(ctx, e))?));
    let dx =
        if ctx.needs(0) { Some(b.lms1(&ctx.name("data"), "ConvGradData", attrs.clone(), &[dy, w], tx)) } else { None };
    let dw = if ctx.needs(1) { Some(b.lms1(&ctx.name("weight"), "ConvGradWeight", attrs, &[dy, x], tw)) } else { None };
    Ok(vec![dx, dw, conv_bias_grad(b, ctx, dy)])
}

/// The gradient of a convolution's optional bias (input 2): dY summed over all but the
/// channel axis.
fn conv_bias_grad(b: &mut Builder, ctx: &Ctx<'_>, dy: TensorId) -> Option<TensorId> {
    let bias = ctx.node.inputs.get(2).copied().flatten().filter(|_| ctx.needs(2))?;
    let tb = b.ty(bias);
    Some(b.lms1(&ctx.name("bias"), "ConvGradBias", Attrs::new(), &[dy], tb))
}

/// ConvTranspose is the adjoint of the Conv from its output back to its input with the
/// same weight, strides, dilations, group and begin pads: dX = Conv(dY, W); dW is that
/// Conv's weight gradient with X as its output gradient, ConvGradWeight(X, dY); dB sums dY.
fn conv_transpose(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let (dy, x, w) = (ctx.dy(0)?, ctx.input(0)?, ctx.input(1)?);
    let (tx, tw, ty) = (b.ty(x), b.ty(w), b.ty(ctx.node.outputs[0]));
    let mut attrs = adjoint_conv_attrs(ctx, &tx.shape, &tw.shape, &ty.shape)?;
    attrs.set("group", Attr::Int(ctx.node.attrs.int("group", 1).map_err(|e| attr_fail(ctx, e))?));
    let dx = if ctx.needs(0) { Some(b.onnx1(&ctx.name("data"), "Conv", attrs.clone(), &[dy, w])?) } else { None };
    let dw = if ctx.needs(1) { Some(b.lms1(&ctx.name("weight"), "ConvGradWeight", attrs, &[x, dy], tw)) } else { None };
    Ok(vec![dx, dw, conv_bias_grad(b, ctx, dy)])
}

/// Kernel shape, strides, dilations and explicit pads of the Conv from a ConvTranspose's
/// output `y` back to its input `x` (weight `w`): the ConvTranspose's window
/// ([`Window::conv_transpose`]: its begin pads are the ones it crops) with the end pads
/// that give exactly X's size ([`Window::with_tight_end_pads`]).
fn adjoint_conv_attrs(ctx: &Ctx<'_>, x: &[usize], w: &[usize], y: &[usize]) -> Result<Attrs> {
    if x.len() < 3 || w.len() != x.len() || y.len() != x.len() {
        return Err(ctx.fail(format!("shapes X {x:?}, W {w:?} and Y {y:?} do not fit a ConvTranspose")));
    }
    let window = Window::conv_transpose(&ctx.node.attrs, &x[2..], &w[2..]).map_err(|e| ctx.fail(e.to_string()))?;
    if window.input != y[2..] {
        return Err(ctx.fail(format!("output {y:?} differs from the window's spatial size {:?}", window.input)));
    }
    window_attrs(ctx, window.with_tight_end_pads())
}

/// MaxPool and AveragePool.
fn pool(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    if ctx.dys.iter().skip(1).any(Option::is_some) {
        return Err(ctx.fail("lms has no gradient through MaxPool's indices".into()));
    }
    let (dy, x) = (ctx.dy(0)?, ctx.input(0)?);
    let tx = b.ty(x);
    let mut attrs = window_attrs(ctx, Window::pool(&ctx.node.attrs, &tx.shape))?;
    for name in ["ceil_mode", "count_include_pad"] {
        if let Some(v) = ctx.node.attrs.get(name) {
            attrs.set(name, v.clone());
        }
    }
    let dx = if ctx.node.op == "MaxPool" {
        b.lms1(&ctx.name("maxpool"), "MaxPoolGrad", attrs, &[dy, x], tx)
    } else {
        b.lms1(&ctx.name("avgpool"), "AveragePoolGrad", attrs, &[dy], tx)
    };
    Ok(vec![Some(dx)])
}
