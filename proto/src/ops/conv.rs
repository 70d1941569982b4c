//! Shape inference for convolutions: `Conv` and `ConvTranspose`, 1-D to 3-D;
//! their cost and that of their gradients.

use super::axes::{AxesMap, Windowed};
use super::cost::{CostFn, CostNode};
use super::split::{self, Dim, HaloOutput, SplitExtension};
use super::util::{
    check_rank, expect_inputs, fmt_shape, input, input_of, optional_input, positive_attr, same_dtype, too_large, typed,
    Accepts,
};
use super::window::Window;
use super::{InferFn, Node, ShapeError, ShapeResult, Value};

/// The convolution ops.
pub(super) const OPS: &[(&str, InferFn)] = &[("Conv", conv), ("ConvTranspose", conv_transpose)];

/// Work of the convolutions: each output element of a `Conv` is a dot
/// product over one weight filter, W[m] of C/group·k... elements, 2 FLOPs per
/// multiply-add; each input element of a `ConvTranspose` scatters into
/// M/group·k... outputs. The data gradient is the transposed convolution of
/// dY with W and the weight gradient correlates dY with X: both as many
/// FLOPs as the forward convolution. A bias adds one FLOP per output.
pub(super) const COSTS: &[(&str, CostFn)] = &[
    ("Conv", |n| n.matrix(2 * n.out_numel(0) * filter(n, 1) + bias(n))),
    ("ConvTranspose", |n| n.matrix(2 * n.in_numel(0) * filter(n, 1) + bias(n))),
    // dY [N, M, D'...], W [M, C/group, k...].
    ("ConvGradData", |n| n.matrix(2 * n.in_numel(0) * filter(n, 1))),
    // dY [N, M, D'...], X; dW [M, C/group, k...].
    ("ConvGradWeight", |n| n.matrix(2 * n.in_numel(0) * n.outputs[0].shape.iter().skip(1).product::<usize>() as u64)),
    ("ConvGradBias", |n| n.per_input(1)),
];

/// The ops of this family lms cannot differentiate, and why (every other op a model may
/// hold has a gradient rule in the compiler).
pub(super) const NO_GRADIENT: &[(&str, &str)] = &[];

/// The ops of this family without an axes map (coupled along every axis), and why.
pub(super) const NO_AXES: &[(&str, &str)] = &[
    ("ConvTranspose", "its windows scatter into overlapping output positions; not stated yet"),
    ("ConvGradBias", "sums over every axis but the channels; its extension splits those sums"),
];

/// Axes maps: a convolution computes each sample alone from input 0 and each output
/// channel from its filter (and bias); its data gradient each sample from dY and each
/// input channel from its slice of the filters; its weight gradient each filter channel
/// from X's (it sums over the samples; its filters, from dY's channels, are left coupled:
/// see `Windowed::leading`). All three split
/// along their spatial axes with halos; grouped, along their samples only.
pub(super) const AXES: &[(&str, AxesMap)] = &[
    ("Conv", AxesMap::Windowed(Windowed { leading: [&[(0, 0)], &[(1, 0), (2, 0)]], halo: true })),
    ("ConvGradData", AxesMap::Windowed(Windowed { leading: [&[(0, 0)], &[(1, 1)]], halo: true })),
    ("ConvGradWeight", AxesMap::Windowed(Windowed { leading: [&[], &[(1, 1)]], halo: true })),
];

/// The convolutions' extensions of their axes maps (`ConvTranspose` has none): partial
/// sums over the reduced channels of an ungrouped Conv without a bias (which would be
/// added once per part) and of its data gradient (dY's channels); the weight and bias
/// gradients' partial sums over the batch, and the bias gradient's over height and width;
/// the Halo rules of Conv and its data and weight gradients along height and width under
/// explicit or no padding (windows of dX overlap-added, partial weight gradients summed).
pub(super) const SPLIT_EXTENSIONS: &[(&str, SplitExtension)] = &[
    ("Conv", |n| {
        let slots = n.inputs.len();
        let mut rules = Vec::new();
        if ungrouped(n) && n.input(2).is_none() {
            rules.push(split::sum(Dim::Channel, slots, &[(0, 1), (1, 1)]));
        }
        if explicit_pads(n) {
            rules.extend(split::halo(n, &[0], HaloOutput::Concat));
        }
        rules
    }),
    ("ConvGradData", |n| {
        let mut rules = Vec::new();
        if ungrouped(n) {
            rules.push(split::sum(Dim::Channel, 2, &[(0, 1), (1, 0)]));
        }
        rules.extend(split::halo(n, &[0], HaloOutput::OverlapAdd));
        rules
    }),
    ("ConvGradWeight", |n| {
        let mut rules = vec![split::sum(Dim::Batch, 2, &[(0, 0), (1, 0)])];
        rules.extend(split::halo(n, &[0, 1], HaloOutput::Sum));
        rules
    }),
    ("ConvGradBias", |n| {
        let mut rules = vec![split::sum(Dim::Batch, 1, &[(0, 0)])];
        let spatial: &[(Dim, usize)] = match n.in_shape(0).len() {
            3 => &[(Dim::Width, 2)],
            4 => &[(Dim::Height, 2), (Dim::Width, 3)],
            _ => &[],
        };
        rules.extend(spatial.iter().map(|&(dim, axis)| split::sum(dim, 1, &[(0, axis)])));
        rules
    }),
];

/// Whether a convolution has one group (its channels are not blocked).
fn ungrouped(node: &CostNode<'_>) -> bool {
    node.attrs.int("group", 1).is_ok_and(|g| g == 1)
}

/// Whether a windowed op's padding is explicit (or absent), so that parts
/// can have their own.
pub(super) fn explicit_pads(node: &CostNode<'_>) -> bool {
    node.attrs.string("auto_pad", "NOTSET".into()).is_ok_and(|p| matches!(p.as_str(), "NOTSET" | "" | "VALID"))
}

/// Elements of one filter of the weight at input `index`: W [M, C/group, k...]
/// gives C/group·k....
fn filter(node: &CostNode<'_>, index: usize) -> u64 {
    node.in_shape(index).iter().skip(1).product::<usize>() as u64
}

/// One FLOP per output element when the bias (input 2) is present.
fn bias(node: &CostNode<'_>) -> u64 {
    if node.input(2).is_some() {
        node.out_numel(0)
    } else {
        0
    }
}

/// The input and weight of a convolution, checked against each other.
struct Operands<'a> {
    x: &'a Value,
    w: &'a Value,
    group: usize,
}

impl<'a> Operands<'a> {
    fn read(node: &Node<'a>) -> ShapeResult<Operands<'a>> {
        expect_inputs(node, 2, 3)?;
        let x = input_of(node, 0, Accepts::Float)?;
        let w = input(node, 1)?;
        same_dtype(x, w)?;
        check_rank(x, 0, 3)?;
        if w.ty.rank() != x.ty.rank() {
            return Err(ShapeError::Invalid(format!(
                "weight {} and input {} differ in rank",
                fmt_shape(&w.ty.shape),
                fmt_shape(&x.ty.shape)
            )));
        }
        let group = positive_attr("group", node.attrs.int("group", 1)?)?;
        Ok(Operands { x, w, group })
    }

    /// Checks the optional bias (input 2) against the output channels.
    fn check_bias(&self, node: &Node<'_>, channels: usize) -> ShapeResult<()> {
        match optional_input(node, 2) {
            Some(b) if b.ty.shape != [channels] => {
                Err(ShapeError::Invalid(format!("bias has shape {}, expected [{channels}]", fmt_shape(&b.ty.shape))))
            }
            Some(b) => same_dtype(self.x, b).map(drop),
            None => Ok(()),
        }
    }

    /// Checks that `channels` is a multiple of the group count.
    fn check_divisible(&self, channels: usize, what: &str) -> ShapeResult<()> {
        if channels % self.group == 0 {
            Ok(())
        } else {
            Err(ShapeError::Invalid(format!("{what} {channels} is not divisible by group {}", self.group)))
        }
    }
}

/// `Conv`: X [N, C, D...] and W [M, C/group, k...] give [N, M, D'...].
fn conv(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    let ops = Operands::read(node)?;
    let (x, w) = (&ops.x.ty.shape, &ops.w.ty.shape);
    let (channels, out_channels) = (x[1], w[0]);
    if w[1].checked_mul(ops.group) != Some(channels) {
        return Err(ShapeError::Invalid(format!(
            "input has {channels} channels, weight {} expects {} per group x group {}",
            fmt_shape(w),
            w[1],
            ops.group
        )));
    }
    ops.check_divisible(out_channels, "output channels")?;
    ops.check_bias(node, out_channels)?;
    let mut shape = vec![x[0], out_channels];
    shape.extend(Window::conv(node.attrs, &x[2..], &w[2..])?.output);
    Ok(vec![typed(ops.x.ty.dtype, shape)])
}

/// `ConvTranspose`: X [N, C, D...] and W [C, M/group, k...] give [N, M, D'...]
/// with D' from the window rule ([`Window::conv_transpose`]).
fn conv_transpose(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    let ops = Operands::read(node)?;
    let (x, w) = (&ops.x.ty.shape, &ops.w.ty.shape);
    if w[0] != x[1] {
        return Err(ShapeError::Invalid(format!(
            "input has {} channels, weight {} expects {}",
            x[1],
            fmt_shape(w),
            w[0]
        )));
    }
    ops.check_divisible(x[1], "input channels")?;
    let out_channels = w[1].checked_mul(ops.group).ok_or_else(too_large)?;
    ops.check_bias(node, out_channels)?;
    // The window seen from the forward convolution: its input is this op's output.
    let mut shape = vec![x[0], out_channels];
    shape.extend(Window::conv_transpose(node.attrs, &x[2..], &w[2..])?.input);
    Ok(vec![typed(ops.x.ty.dtype, shape)])
}

#[cfg(test)]
mod tests {
    use super::super::cost::testing::{counts, work_of};
    use super::super::cost::Engine;
    use super::super::util::testing::{error, f, shape, t};
    use crate::types::{Attr, Attrs, DType};

    fn ints(name: &str, v: &[i64]) -> Attrs {
        Attrs::new().with(name, Attr::Ints(v.to_vec()))
    }

    /// Hand-computed: ResNet's stem, 1x3x224x224 * 64x3x7x7 → 1x64x112x112:
    /// 802,816 outputs x 147 multiply-adds x 2 = 236,027,904 FLOPs (+ 802,816 for the bias).
    #[test]
    fn costs() {
        let (x, w, y): (&[usize], &[usize], &[usize]) = (&[1, 3, 224, 224], &[64, 3, 7, 7], &[1, 64, 112, 112]);
        let bytes = |s: &[usize]| 4 * s.iter().product::<usize>() as u64;
        let conv = work_of("Conv", &Attrs::new(), &[x, w, &[64]], &[y]);
        assert_eq!(conv.flops, 236_027_904 + 802_816);
        assert_eq!((conv.bytes_read, conv.bytes_written), (bytes(x) + bytes(w) + 256, bytes(y)));
        assert_eq!(conv.engine, Engine::Matrix);
        assert_eq!(counts("ConvGradData", &[y, w], &[x]).0, 236_027_904);
        assert_eq!(counts("ConvGradWeight", &[y, x], &[w]).0, 236_027_904);
        let bias = work_of("ConvGradBias", &Attrs::new(), &[y], &[&[64]]);
        assert_eq!((bias.flops, bias.engine), (802_816, Engine::Vector));
        // Transposed: 1x16x7x7 inputs each scatter into 8x3x3 outputs.
        assert_eq!(counts("ConvTranspose", &[&[1, 16, 7, 7], &[16, 8, 3, 3]], &[&[1, 8, 14, 14]]).0, 2 * 784 * 72);
    }

    #[test]
    fn resnet_stem() {
        let attrs = ints("strides", &[2, 2]).with("pads", Attr::Ints(vec![3, 3, 3, 3]));
        assert_eq!(
            shape("Conv", 13, attrs, &[f(&[1, 3, 224, 224]), f(&[64, 3, 7, 7]), f(&[64])]),
            vec![1, 64, 112, 112]
        );
    }

    #[test]
    fn groups_dilation_strides() {
        let depthwise = Attrs::new().with("group", Attr::Int(32)).with("pads", Attr::Ints(vec![1, 1, 1, 1]));
        assert_eq!(shape("Conv", 11, depthwise, &[f(&[2, 32, 56, 56]), f(&[32, 1, 3, 3])]), vec![2, 32, 56, 56]);
        let dilated = ints("dilations", &[2, 2]).with("strides", Attr::Ints(vec![1, 2]));
        // Effective kernel 5: (20 - 5) / 1 + 1 = 16 and (20 - 5) / 2 + 1 = 8.
        assert_eq!(shape("Conv", 11, dilated, &[f(&[1, 4, 20, 20]), f(&[8, 4, 3, 3])]), vec![1, 8, 16, 8]);
        let conv1d = Attrs::new().with("kernel_shape", Attr::Ints(vec![3]));
        assert_eq!(shape("Conv", 11, conv1d, &[f(&[1, 4, 10]), f(&[8, 4, 3])]), vec![1, 8, 8]);
        assert_eq!(shape("Conv", 11, Attrs::new(), &[f(&[1, 2, 5, 6, 7]), f(&[4, 2, 1, 2, 3])]), vec![1, 4, 5, 5, 5]);
    }

    #[test]
    fn auto_pad() {
        let same =
            Attrs::new().with("auto_pad", Attr::String("SAME_UPPER".into())).with("strides", Attr::Ints(vec![2, 2]));
        assert_eq!(shape("Conv", 11, same, &[f(&[1, 3, 225, 224]), f(&[16, 3, 3, 3])]), vec![1, 16, 113, 112]);
        let valid = Attrs::new().with("auto_pad", Attr::String("VALID".into())).with("pads", Attr::Ints(vec![9; 4]));
        assert_eq!(shape("Conv", 11, valid, &[f(&[1, 3, 10, 10]), f(&[16, 3, 3, 3])]), vec![1, 16, 8, 8]);
    }

    #[test]
    fn conv_errors() {
        assert_eq!(
            error("Conv", 11, Attrs::new(), &[f(&[1, 4, 8, 8]), f(&[8, 3, 3, 3])]),
            "input has 4 channels, weight [8,3,3,3] expects 3 per group x group 1"
        );
        assert_eq!(
            error("Conv", 11, Attrs::new(), &[f(&[1, 3, 2, 2]), f(&[8, 3, 3, 3])]),
            "kernel extent 3 is larger than padded input 2 on spatial axis 0"
        );
        assert_eq!(
            error("Conv", 11, ints("strides", &[0, 1]), &[f(&[1, 3, 8, 8]), f(&[8, 3, 3, 3])]),
            "unsupported value [0, 1] for attribute 'strides'"
        );
        assert_eq!(
            error("Conv", 11, ints("pads", &[1, 1]), &[f(&[1, 3, 8, 8]), f(&[8, 3, 3, 3])]),
            "attribute 'pads' has 2 values, expected 4"
        );
        assert_eq!(
            error("Conv", 11, Attrs::new(), &[f(&[1, 3]), f(&[8, 3])]),
            "input 0 has rank 2, expected at least 3"
        );
        assert_eq!(
            error("Conv", 11, Attrs::new(), &[t(DType::I64, &[1, 3, 8, 8]), t(DType::I64, &[8, 3, 3, 3])]),
            "input 0 must be a float tensor, got i64"
        );
        assert_eq!(
            error("Conv", 11, Attrs::new(), &[f(&[1, 3, 8, 8]), f(&[8, 3, 3, 3]), f(&[4])]),
            "bias has shape [4], expected [8]"
        );
    }

    #[test]
    fn transpose() {
        let up = ints("strides", &[2, 2])
            .with("pads", Attr::Ints(vec![1, 1, 1, 1]))
            .with("output_padding", Attr::Ints(vec![1, 1]));
        assert_eq!(shape("ConvTranspose", 11, up, &[f(&[1, 16, 7, 7]), f(&[16, 8, 3, 3])]), vec![1, 8, 14, 14]);
        let grouped = Attrs::new().with("group", Attr::Int(2));
        assert_eq!(shape("ConvTranspose", 11, grouped, &[f(&[1, 4, 5]), f(&[4, 3, 2])]), vec![1, 6, 6]);
        let explicit = ints("output_shape", &[10, 12]).with("strides", Attr::Ints(vec![2, 2]));
        assert_eq!(shape("ConvTranspose", 11, explicit, &[f(&[1, 4, 5, 6]), f(&[4, 2, 3, 3])]), vec![1, 2, 10, 12]);
        let same = ints("strides", &[3]).with("auto_pad", Attr::String("SAME_LOWER".into()));
        assert_eq!(shape("ConvTranspose", 11, same, &[f(&[1, 4, 5]), f(&[4, 2, 3])]), vec![1, 2, 15]);
    }
}
