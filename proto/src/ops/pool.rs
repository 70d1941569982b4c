//! Shape inference for pooling: `MaxPool`, `AveragePool`, the global pools
//! and `LRN`; their cost and that of their gradients.

use super::axes::{AxesMap, Windowed};
use super::conv::explicit_pads;
use super::cost::{CostFn, CostNode};
use super::split::{self, HaloOutput, SplitExtension};
use super::util::{check_dtype, check_rank, expect_inputs, input, input_of, positive_attr, typed, Accepts};
use super::window::Window;
use super::{InferFn, Node, ShapeResult, Value};
use crate::types::DType;

/// The pooling ops.
pub(super) const OPS: &[(&str, InferFn)] = &[
    ("MaxPool", max_pool),
    ("AveragePool", average_pool),
    ("GlobalAveragePool", global_pool),
    ("GlobalMaxPool", global_pool),
    ("LRN", lrn),
];

/// Work of the pools: a windowed pool compares or adds each window element
/// once per output element (its gradient revisits the windows from dY); a
/// global pool touches each input element once (its gradient each output
/// element); `LRN` sums `size` squares per element and then scales (3 more
/// FLOPs), its gradient twice that.
pub(super) const COSTS: &[(&str, CostFn)] = &[
    ("MaxPool", |n| n.per_output(window(n))),
    ("AveragePool", |n| n.per_output(window(n))),
    ("GlobalAveragePool", |n| n.per_input(1)),
    ("GlobalMaxPool", |n| n.per_input(1)),
    ("LRN", |n| n.per_input(lrn_per_element(n))),
    ("MaxPoolGrad", |n| n.per_input(window(n))),
    ("AveragePoolGrad", |n| n.per_input(window(n))),
    ("GlobalAveragePoolGrad", |n| n.per_output(1)),
    ("LRNGrad", |n| n.per_input(2 * lrn_per_element(n))),
];

/// The ops of this family lms cannot differentiate, and why (every other op a model may
/// hold has a gradient rule in the compiler).
pub(super) const NO_GRADIENT: &[(&str, &str)] =
    &[("GlobalMaxPool", "the gradient of global max pooling is not implemented (MaxPool has one)")];

/// Axes maps: each sample alone; pooling each channel alone, LRN mixing them; the
/// windowed pools and their gradients split along their spatial axes with halos.
/// `MaxPoolGrad` and `LRNGrad` read the forward input beside the gradient.
pub(super) const AXES: &[(&str, AxesMap)] = &[
    ("MaxPool", pool_axes(1, true)),
    ("AveragePool", pool_axes(1, true)),
    ("GlobalAveragePool", pool_axes(1, false)),
    ("GlobalMaxPool", pool_axes(1, false)),
    ("LRN", AxesMap::Windowed(Windowed { leading: [&[(0, 0)], &[]], halo: false })),
    ("MaxPoolGrad", pool_axes(2, true)),
    ("AveragePoolGrad", pool_axes(1, true)),
    ("GlobalAveragePoolGrad", pool_axes(1, false)),
    ("LRNGrad", AxesMap::Windowed(Windowed { leading: [&[(0, 0), (1, 0)], &[]], halo: false })),
];

/// A pool whose first `data` inputs (1 or 2) carry samples and channels like its output,
/// with halos when `halo`.
const fn pool_axes(data: usize, halo: bool) -> AxesMap {
    let leading: [&'static [(usize, usize)]; 2] =
        if data == 1 { [&[(0, 0)], &[(0, 1)]] } else { [&[(0, 0), (1, 0)], &[(0, 1), (1, 1)]] };
    AxesMap::Windowed(Windowed { leading, halo })
}

/// The pools' extensions of their axes maps: the Halo rules of the windowed pools and
/// their gradients along height and width, when not in `ceil_mode` and with explicit
/// padding. MaxPool with its indices output has none (the indices are flat over the whole
/// tensor; its map couples every axis of a second output).
pub(super) const SPLIT_EXTENSIONS: &[(&str, SplitExtension)] = &[
    ("MaxPool", |n| if n.outputs.len() == 1 { halos(n, &[0], HaloOutput::Concat) } else { Vec::new() }),
    ("AveragePool", |n| halos(n, &[0], HaloOutput::Concat)),
    ("MaxPoolGrad", |n| halos(n, &[0, 1], HaloOutput::OverlapAdd)),
    ("AveragePoolGrad", |n| halos(n, &[0], HaloOutput::OverlapAdd)),
];

/// The Halo rules slicing the inputs at `sliced`, where the window allows them.
fn halos(node: &CostNode<'_>, sliced: &[usize], output: HaloOutput) -> Vec<split::SplitRule> {
    if node.attrs.int("ceil_mode", 0).is_ok_and(|c| c == 0) && explicit_pads(node) {
        split::halo(node, sliced, output)
    } else {
        Vec::new()
    }
}

/// Elements of one pooling window (`kernel_shape`).
fn window(node: &CostNode<'_>) -> u64 {
    node.attrs.ints("kernel_shape", vec![]).unwrap_or_default().iter().map(|&k| k.max(1) as u64).product()
}

/// FLOPs per element of `LRN`: `size` squares summed, then the scaling.
fn lrn_per_element(node: &CostNode<'_>) -> u64 {
    2 * node.attrs.int("size", 1).unwrap_or(1).max(1) as u64 + 3
}

/// The pooled output of a windowed pool over X [N, C, D...].
fn pooled(node: &Node<'_>, x: &Value) -> ShapeResult<Value> {
    check_rank(x, 0, 3)?;
    let shape = &x.ty.shape;
    let mut out = shape[..2].to_vec();
    out.extend(Window::pool(node.attrs, shape)?.output);
    Ok(typed(x.ty.dtype, out))
}

/// `MaxPool`: outputs Y and the optional i64 `Indices` of the same shape.
/// Floats, and 8-bit integers from opset 12.
fn max_pool(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, 1)?;
    let x = input(node, 0)?;
    if !(node.opset >= 12 && matches!(x.ty.dtype, DType::I8 | DType::U8)) {
        check_dtype(x, 0, Accepts::Float)?;
    }
    let y = pooled(node, x)?;
    let indices = typed(DType::I64, y.ty.shape.clone());
    Ok(vec![y, indices])
}

/// `AveragePool` (`count_include_pad` does not change the shape).
fn average_pool(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, 1)?;
    Ok(vec![pooled(node, input_of(node, 0, Accepts::Float)?)?])
}

/// `GlobalAveragePool`, `GlobalMaxPool`: [N, C, D...] to [N, C, 1...].
fn global_pool(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, 1)?;
    let x = input_of(node, 0, Accepts::Float)?;
    check_rank(x, 0, 2)?;
    let mut shape = x.ty.shape.clone();
    shape[2..].fill(1);
    Ok(vec![typed(x.ty.dtype, shape)])
}

/// `LRN`: same shape; the window `size` must be positive.
fn lrn(node: &Node<'_>) -> ShapeResult<Vec<Value>> {
    expect_inputs(node, 1, 1)?;
    let x = input_of(node, 0, Accepts::Float)?;
    check_rank(x, 0, 2)?;
    positive_attr("size", node.attrs.req_int("size")?)?;
    Ok(vec![Value::of_type(x.ty.clone())])
}

#[cfg(test)]
mod tests {
    use super::super::cost::testing::{counts, work_of};
    use super::super::util::testing::{error, f, run, shape, t};
    use crate::types::{Attr, Attrs, DType};

    /// Hand-computed: ResNet's 3x3 max pool, 1x64x112x112 → 1x64x56x56 is
    /// 200,704 outputs x 9 comparisons.
    #[test]
    fn costs() {
        let (x, y): (&[usize], &[usize]) = (&[1, 64, 112, 112], &[1, 64, 56, 56]);
        let k3 = Attrs::new().with("kernel_shape", Attr::Ints(vec![3, 3]));
        let pool = work_of("MaxPool", &k3, &[x], &[y]);
        assert_eq!((pool.flops, pool.bytes_read, pool.bytes_written), (1_806_336, 3_211_264, 802_816));
        assert_eq!(work_of("MaxPoolGrad", &k3, &[y, x], &[x]).flops, 1_806_336);
        assert_eq!(counts("GlobalAveragePool", &[&[2, 2048, 7, 7]], &[&[2, 2048, 1, 1]]).0, 200_704);
        assert_eq!(counts("GlobalAveragePoolGrad", &[&[2, 2048, 1, 1]], &[&[2, 2048, 7, 7]]).0, 200_704);
        let lrn = Attrs::new().with("size", Attr::Int(5));
        assert_eq!(work_of("LRN", &lrn, &[&[1, 96, 55, 55]], &[&[1, 96, 55, 55]]).flops, 290_400 * 13);
    }

    fn kernel(k: &[i64]) -> Attrs {
        Attrs::new().with("kernel_shape", Attr::Ints(k.to_vec()))
    }

    #[test]
    fn max_pool_with_indices() {
        let attrs = kernel(&[3, 3]).with("strides", Attr::Ints(vec![2, 2])).with("pads", Attr::Ints(vec![1; 4]));
        let out = run("MaxPool", 12, attrs, &[f(&[1, 64, 112, 112])], 2).unwrap();
        assert_eq!(out[0].ty.shape, vec![1, 64, 56, 56]);
        assert_eq!((out[1].ty.dtype, &out[1].ty.shape), (DType::I64, &out[0].ty.shape));
        assert_eq!(
            run("MaxPool", 12, kernel(&[2]), &[f(&[1, 1, 4])], 3).unwrap_err().to_string(),
            "expected 1 to 2 outputs, got 3"
        );
    }

    #[test]
    fn ceil_mode() {
        let attrs = kernel(&[2, 2]).with("strides", Attr::Ints(vec![2, 2])).with("ceil_mode", Attr::Int(1));
        assert_eq!(shape("MaxPool", 12, attrs.clone(), &[f(&[1, 1, 5, 5])]), vec![1, 1, 3, 3]);
        assert_eq!(
            shape("MaxPool", 12, kernel(&[2, 2]).with("strides", Attr::Ints(vec![2, 2])), &[f(&[1, 1, 5, 5])]),
            vec![1, 1, 2, 2]
        );
        // A last window that would start in the end padding is dropped:
        // ceil((5 + 2 - 2) / 2) + 1 = 4, but window 4 starts at 6 = size + pad_begin.
        let padded = kernel(&[2])
            .with("strides", Attr::Ints(vec![2]))
            .with("pads", Attr::Ints(vec![1, 1]))
            .with("ceil_mode", Attr::Int(1));
        assert_eq!(shape("AveragePool", 19, padded.clone(), &[f(&[1, 1, 5])]), vec![1, 1, 3]);
        assert_eq!(shape("AveragePool", 19, padded, &[f(&[1, 1, 6])]), vec![1, 1, 4]);
    }

    #[test]
    fn global_and_lrn() {
        assert_eq!(shape("GlobalAveragePool", 1, Attrs::new(), &[f(&[2, 512, 7, 7])]), vec![2, 512, 1, 1]);
        assert_eq!(shape("GlobalMaxPool", 1, Attrs::new(), &[f(&[2, 8, 3, 4, 5])]), vec![2, 8, 1, 1, 1]);
        assert_eq!(
            shape("LRN", 13, Attrs::new().with("size", Attr::Int(5)), &[f(&[1, 96, 55, 55])]),
            vec![1, 96, 55, 55]
        );
        assert_eq!(error("LRN", 13, Attrs::new(), &[f(&[1, 3, 4, 4])]), "missing required attribute 'size'");
    }

    #[test]
    fn pool_errors() {
        assert_eq!(
            error("MaxPool", 12, Attrs::new(), &[f(&[1, 1, 4, 4])]),
            "missing required attribute 'kernel_shape'"
        );
        assert_eq!(
            error("MaxPool", 12, kernel(&[3]), &[f(&[1, 1, 4, 4])]),
            "attribute 'kernel_shape' has 1 values, expected 2"
        );
        assert_eq!(
            error("AveragePool", 12, kernel(&[2]), &[t(DType::I32, &[1, 1, 4])]),
            "input 0 must be a float tensor, got i32"
        );
        assert_eq!(shape("MaxPool", 12, kernel(&[2]), &[t(DType::U8, &[1, 1, 4])]), vec![1, 1, 3]);
        assert_eq!(
            error("MaxPool", 12, kernel(&[2, -1]), &[f(&[1, 1, 4, 4])]),
            "unsupported value [2, -1] for attribute 'kernel_shape'"
        );
    }
}
