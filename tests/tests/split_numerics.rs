//! Split numerics on the CPU: every split rule of the compiler's shape rules
//! (`lms_compiler::shape::split`), carried out with the runtime's CPU kernels on
//! micro-tensors, gives what the unsplit op gives. Concat splits of batch and
//! channels are bit-identical; partial sums, the gradients of spatial splits
//! (added where halos overlap) and batch normalization by merged statistics
//! are within `SUM_TOLERANCE` relative to the
//! largest magnitude of the unsplit result. Random shapes, strides, pads and
//! dilations from a fixed seed.

use lms_compiler::ir::{DType as IrDType, TensorType};
use lms_compiler::shape::cost::CostNode;
use lms_compiler::shape::split::{
    self, halo_parts, part_ranges, AxisWindow, Combine, HaloOutput, SplitRule, SUM_TOLERANCE,
};
use lms_proto::lms::attribute::Value;
use lms_proto::lms::{Attribute, DType, Ints};
use lms_runtime::attrs::Attrs;
use lms_runtime::cpu::kernels;
use lms_runtime::{HostTensor, KernelContext};

/// A dense f32 tensor.
#[derive(Clone, Debug, PartialEq)]
struct T {
    shape: Vec<usize>,
    data: Vec<f32>,
}

impl T {
    fn zeros(shape: &[usize]) -> T {
        T { shape: shape.to_vec(), data: vec![0.0; shape.iter().product()] }
    }

    /// Elements before `axis`, along it, and after it.
    fn blocks(&self, axis: usize) -> (usize, usize, usize) {
        let outer = self.shape[..axis].iter().product();
        let inner = self.shape[axis + 1..].iter().product();
        (outer, self.shape[axis], inner)
    }

    /// The positions `range` along `axis`.
    fn slice(&self, axis: usize, range: std::ops::Range<usize>) -> T {
        let (outer, len, inner) = self.blocks(axis);
        let mut shape = self.shape.clone();
        shape[axis] = range.len();
        let mut data = Vec::with_capacity(outer * range.len() * inner);
        for o in 0..outer {
            data.extend_from_slice(&self.data[(o * len + range.start) * inner..(o * len + range.end) * inner]);
        }
        T { shape, data }
    }

    /// Adds `part` at offset `at` along `axis`.
    fn add_at(&mut self, axis: usize, at: usize, part: &T) {
        let (outer, len, inner) = self.blocks(axis);
        let plen = part.shape[axis];
        for o in 0..outer {
            let dst = &mut self.data[(o * len + at) * inner..(o * len + at + plen) * inner];
            for (d, s) in dst.iter_mut().zip(&part.data[o * plen * inner..(o + 1) * plen * inner]) {
                *d += s;
            }
        }
    }

    fn host(&self) -> HostTensor {
        HostTensor::from_vec(self.shape.clone(), self.data.clone()).expect("tensor")
    }

    fn ty(&self) -> TensorType {
        TensorType::new(IrDType::F32, self.shape.clone())
    }
}

/// Concatenates along `axis`.
fn concat(parts: &[T], axis: usize) -> T {
    let mut shape = parts[0].shape.clone();
    shape[axis] = parts.iter().map(|p| p.shape[axis]).sum();
    let mut whole = T::zeros(&shape);
    let mut at = 0;
    for p in parts {
        whole.add_at(axis, at, p);
        at += p.shape[axis];
    }
    whole
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32
    }

    /// Uniform in lo..=hi.
    fn int(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.next() as usize % (hi - lo + 1)
    }

    fn tensor(&mut self, shape: &[usize]) -> T {
        let n = shape.iter().product();
        T { shape: shape.to_vec(), data: (0..n).map(|_| (self.next() % 2001) as f32 / 1000.0 - 1.0).collect() }
    }
}

fn ints(name: &str, v: &[usize]) -> Attribute {
    Attribute { name: name.into(), value: Some(Value::Ints(Ints { values: v.iter().map(|&x| x as i64).collect() })) }
}

fn int(name: &str, v: i64) -> Attribute {
    Attribute { name: name.into(), value: Some(Value::Int(v)) }
}

/// Runs `op` (lms-domain when `lms`) with the declared output shapes.
fn run(op: &str, attrs: &[Attribute], inputs: &[&T], outputs: &[Vec<usize>]) -> Vec<T> {
    let hosts: Vec<HostTensor> = inputs.iter().map(|t| t.host()).collect();
    let slots: Vec<Option<&HostTensor>> = hosts.iter().map(Some).collect();
    let outs: Vec<(DType, Vec<usize>)> = outputs.iter().map(|s| (DType::DtypeF32, s.clone())).collect();
    let attrs = Attrs::new(attrs);
    let lms =
        op.ends_with("Grad") || op.starts_with("ConvGrad") || matches!(op, "SplitWindow" | "SplitPart" | "OverlapAdd");
    let made = if lms {
        kernels::lms(op, &attrs, &slots, &outs, &KernelContext::default())
    } else {
        kernels::forward(op, 17, &attrs, &slots, &outs)
    };
    let made = made.unwrap_or_else(|e| panic!("{op} {attrs:?}: {e}", attrs = attrs_debug(inputs)));
    made.into_iter().map(|h| T { shape: h.shape.clone(), data: h.as_f32("out").expect("f32").to_vec() }).collect()
}

/// Runs an ONNX op whose one output's shape the compiler's shape rules infer.
fn run1(op: &str, attrs: &[Attribute], inputs: &[&T]) -> T {
    use lms_compiler::shape::{infer, Node, Value as ShapeValue};
    let values: Vec<ShapeValue> = inputs.iter().map(|t| ShapeValue::of_type(t.ty())).collect();
    let slots: Vec<Option<&ShapeValue>> = values.iter().map(Some).collect();
    let ir = ir_attrs(attrs);
    let node = Node { op, opset: 17, attrs: &ir, inputs: &slots, num_outputs: 1 };
    let shape = infer(&node).unwrap_or_else(|e| panic!("{op}: {e}")).remove(0).ty.shape;
    run(op, attrs, inputs, &[shape]).remove(0)
}

fn attrs_debug(inputs: &[&T]) -> String {
    inputs.iter().map(|t| format!("{:?}", t.shape)).collect::<Vec<_>>().join(" ")
}

/// Asserts `got` equals `want` within `tol` of `want`'s largest magnitude.
fn assert_close(got: &T, want: &T, tol: f64, what: &str) {
    assert_eq!(got.shape, want.shape, "{what}: shapes");
    let scale = want.data.iter().fold(0f64, |m, v| m.max(v.abs() as f64)).max(f64::MIN_POSITIVE);
    for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        let err = (*g as f64 - *w as f64).abs() / scale;
        assert!(err <= tol, "{what}: element {i}: {g} vs {w} (relative {err:e} > {tol:e})");
    }
}

/// The shape rules' split rules of `op` on `inputs` giving `outputs`.
fn rules_of(op: &str, attrs: &lms_compiler::ir::Attrs, inputs: &[&T], outputs: &[Vec<usize>]) -> Vec<SplitRule> {
    let ins: Vec<TensorType> = inputs.iter().map(|t| t.ty()).collect();
    let outs: Vec<TensorType> = outputs.iter().map(|s| TensorType::new(IrDType::F32, s.clone())).collect();
    let in_refs: Vec<Option<&TensorType>> = ins.iter().map(Some).collect();
    let out_refs: Vec<&TensorType> = outs.iter().collect();
    split::rules(&CostNode { op, attrs, inputs: &in_refs, outputs: &out_refs })
}

/// The compiler's form of the test's attributes (ints and ints lists only).
fn ir_attrs(attrs: &[Attribute]) -> lms_compiler::ir::Attrs {
    use lms_compiler::ir::Attr;
    let mut out = lms_compiler::ir::Attrs::new();
    for a in attrs {
        match &a.value {
            Some(Value::Int(v)) => out.set(&a.name, Attr::Int(*v)),
            Some(Value::Ints(v)) => out.set(&a.name, Attr::Ints(v.values.clone())),
            _ => unreachable!("the tests use ints only"),
        }
    }
    out
}

/// Carries out every Concat and Sum rule of `op` in `parts` parts and checks
/// the result against the unsplit op; returns how many rules were checked.
fn check_rules(op: &str, attrs: &[Attribute], inputs: &[&T], parts: usize) -> usize {
    let whole = run1(op, attrs, inputs);
    check_split(op, attrs, inputs, whole, parts)
}

/// Checks every Concat and Sum rule of `op` against its unsplit output `whole`.
fn check_split(op: &str, attrs: &[Attribute], inputs: &[&T], whole: T, parts: usize) -> usize {
    let outputs = vec![whole.shape.clone()];
    let rules = rules_of(op, &ir_attrs(attrs), inputs, &outputs);
    let mut checked = 0;
    for rule in rules {
        let len = rule.inputs.iter().zip(inputs).find_map(|(a, t)| a.map(|a| t.shape[a])).expect("a sliced input");
        let parts = parts.min(len);
        let ranges = part_ranges(len, parts);
        let part_inputs = |i: usize| -> Vec<T> {
            inputs
                .iter()
                .zip(&rule.inputs)
                .map(|(t, a)| a.map_or((*t).clone(), |a| t.slice(a, ranges[i].clone())))
                .collect()
        };
        let what = format!("{op} {:?} along {}", inputs.iter().map(|t| &t.shape).collect::<Vec<_>>(), rule.dim);
        match rule.combine {
            Combine::Concat { axis } => {
                let made: Vec<T> = (0..parts)
                    .map(|i| {
                        let mut shape = whole.shape.clone();
                        shape[axis] = ranges[i].len();
                        let ins = part_inputs(i);
                        run(op, attrs, &ins.iter().collect::<Vec<_>>(), &[shape]).remove(0)
                    })
                    .collect();
                assert_eq!(concat(&made, axis), whole, "{what}: a concat split is bit-identical");
            }
            Combine::Sum => {
                let mut total = T::zeros(&whole.shape);
                for i in 0..parts {
                    let ins = part_inputs(i);
                    total.add_at(
                        0,
                        0,
                        &run(op, attrs, &ins.iter().collect::<Vec<_>>(), std::slice::from_ref(&whole.shape))[0],
                    );
                }
                assert_close(&total, &whole, SUM_TOLERANCE, &format!("{what} (partial sums)"));
            }
            // Statistics splits: batch_norm_statistics_splits_match_the_unsplit_ops.
            Combine::Halo { .. } | Combine::Statistics => continue,
        }
        checked += 1;
    }
    checked
}

/// A random windowed-op geometry on [N, C, H, W] (or [N, C, W] when 1-D).
struct Geometry {
    x: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pads: Vec<usize>,
}

impl Geometry {
    fn random(rng: &mut Rng, channels: usize) -> Geometry {
        let spatial = rng.int(1, 2);
        let (mut kernel, mut strides, mut dilations, mut sizes, mut begin, mut end) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..spatial {
            let k = rng.int(1, 4);
            let d = rng.int(1, 3);
            let span = (k - 1) * d + 1;
            kernel.push(k);
            dilations.push(d);
            strides.push(rng.int(1, 3));
            begin.push(rng.int(0, k - 1));
            end.push(rng.int(0, k - 1));
            sizes.push(span + rng.int(2, 12));
        }
        let mut x = vec![rng.int(1, 3), channels];
        x.extend(sizes);
        Geometry { x, kernel, strides, dilations, pads: [begin, end].concat() }
    }

    fn attrs(&self, kernel_shape: bool) -> Vec<Attribute> {
        let mut attrs =
            vec![ints("strides", &self.strides), ints("dilations", &self.dilations), ints("pads", &self.pads)];
        if kernel_shape {
            attrs.push(ints("kernel_shape", &self.kernel));
        }
        attrs
    }

    /// The window along spatial `axis` (2 and on) over an output of `output`.
    fn window(&self, axis: usize, output: usize) -> AxisWindow {
        let s = axis - 2;
        let n = self.kernel.len();
        AxisWindow {
            kernel: self.kernel[s],
            stride: self.strides[s],
            dilation: self.dilations[s],
            pad_begin: self.pads[s],
            pad_end: self.pads[n + s],
            input: self.x[axis],
            output,
        }
    }

    /// `attrs` with the pads of spatial `axis` replaced.
    fn part_attrs(&self, kernel_shape: bool, axis: usize, begin: usize, end: usize) -> Vec<Attribute> {
        let mut pads = self.pads.clone();
        let n = self.kernel.len();
        pads[axis - 2] = begin;
        pads[n + axis - 2] = end;
        Geometry { pads, ..self.clone_shape() }.attrs(kernel_shape)
    }

    fn clone_shape(&self) -> Geometry {
        Geometry {
            x: self.x.clone(),
            kernel: self.kernel.clone(),
            strides: self.strides.clone(),
            dilations: self.dilations.clone(),
            pads: self.pads.clone(),
        }
    }
}

/// A windowed op split spatially: the forward (concatenated parts) is
/// bit-identical, and its gradients (each part's, added where the halos
/// overlap; weight gradients summed) equal the unsplit gradients within
/// `SUM_TOLERANCE`.
fn check_halo(rng: &mut Rng, op: &str) -> bool {
    let conv = op == "Conv";
    let channels = rng.int(1, 4);
    let g = Geometry::random(rng, channels);
    let x = rng.tensor(&g.x);
    let mut attrs = g.attrs(!conv);
    let mut inputs = vec![x.clone()];
    if conv {
        let mut w_shape = vec![rng.int(1, 4), channels];
        w_shape.extend(&g.kernel);
        inputs.push(rng.tensor(&w_shape));
        if rng.int(0, 1) == 1 {
            inputs.push(rng.tensor(&[w_shape[0]]));
        }
    } else if op == "AveragePool" {
        attrs.push(int("count_include_pad", rng.int(0, 1) as i64));
    }
    let refs: Vec<&T> = inputs.iter().collect();
    let y = run1(op, &attrs, &refs);
    let rules = rules_of(op, &ir_attrs(&attrs), &refs, std::slice::from_ref(&y.shape));
    let halos: Vec<usize> = rules
        .iter()
        .filter_map(|r| match r.combine {
            Combine::Halo { axis, output: HaloOutput::Concat } => Some(axis),
            _ => None,
        })
        .collect();
    assert_eq!(halos.len(), g.kernel.len(), "{op}: one Halo rule per spatial axis");
    let axis = halos[rng.int(0, halos.len() - 1)];
    if y.shape[axis] < 2 {
        return false;
    }
    let parts = rng.int(2, y.shape[axis].min(4));
    let dy = rng.tensor(&y.shape);
    let what = format!("{op} x {:?} {attrs:?} along axis {axis} in {parts}", g.x);

    // Unsplit gradients.
    let grad_data = |dy: &T, x: &T, attrs: &[Attribute]| -> T {
        let out = vec![x.shape.clone()];
        match op {
            "Conv" => run("ConvGradData", attrs, &[dy, &inputs[1]], &out).remove(0),
            "MaxPool" => run("MaxPoolGrad", attrs, &[dy, x], &out).remove(0),
            _ => run("AveragePoolGrad", attrs, &[dy], &out).remove(0),
        }
    };
    let grad_weight = |dy: &T, x: &T, attrs: &[Attribute]| -> T {
        run("ConvGradWeight", attrs, &[dy, x], &[inputs[1].shape.clone()]).remove(0)
    };
    let dx = grad_data(&dy, &x, &attrs);
    let window = g.window(axis, y.shape[axis]);
    check_gradient_rules(op, &attrs, &[&dy, &x], &inputs, axis, &window);

    // The parts, through the runtime's SplitWindow, SplitPart and OverlapAdd kernels.
    let halo = halo_parts(&window, parts);
    let (mut ys, mut dx_parts, mut dw_parts) = (Vec::new(), Vec::new(), Vec::new());
    for (i, part) in halo.iter().enumerate() {
        let mut part_attrs = g.part_attrs(!conv, axis, part.pad_begin, part.pad_end);
        part_attrs.extend(attrs.iter().filter(|a| a.name == "count_include_pad").cloned());
        let bounds =
            [int("axis", axis as i64), int("begin", part.input.start as i64), int("end", part.input.end as i64)];
        let xp = run("SplitWindow", &bounds, &[&x], &[x.slice(axis, part.input.clone()).shape]).remove(0);
        assert_eq!(xp, x.slice(axis, part.input.clone()), "{what}: SplitWindow copies the window");
        let mut ins = vec![&xp];
        ins.extend(&refs[1..]);
        let mut y_shape = y.shape.clone();
        y_shape[axis] = part.output.len();
        ys.push(run(op, &part_attrs, &ins, &[y_shape.clone()]).remove(0));
        let range = [int("axis", axis as i64), int("index", i as i64), int("parts", parts as i64)];
        let dyp = run("SplitPart", &range, &[&dy], &[y_shape]).remove(0);
        dx_parts.push(grad_data(&dyp, &xp, &part_attrs));
        if conv {
            dw_parts.push(grad_weight(&dyp, &xp, &part_attrs));
        }
    }
    assert_eq!(concat(&ys, axis), y, "{what}: forward parts concatenate to the unsplit output");
    let begins: Vec<usize> = halo.iter().map(|p| p.input.start).collect();
    let merge = [int("axis", axis as i64), ints("begins", &begins)];
    let dx_merged =
        run("OverlapAdd", &merge, &dx_parts.iter().collect::<Vec<_>>(), std::slice::from_ref(&x.shape)).remove(0);
    assert_close(&dx_merged, &dx, SUM_TOLERANCE, &format!("{what}: data gradient"));
    if conv {
        let dw = grad_weight(&dy, &x, &attrs);
        let mut sum = T::zeros(&dw.shape);
        dw_parts.iter().for_each(|p| sum.add_at(0, 0, p));
        assert_close(&sum, &dw, SUM_TOLERANCE, &format!("{what}: weight gradient"));
    }
    true
}

/// The gradient ops of a windowed op have Halo rules along `axis` that
/// overlap-add the input gradient and sum the weight gradient, and their
/// windows (from their own attributes and shapes) are the forward op's.
fn check_gradient_rules(op: &str, attrs: &[Attribute], dy_x: &[&T; 2], inputs: &[T], axis: usize, window: &AxisWindow) {
    let [dy, x] = *dy_x;
    let cases: Vec<(&str, Vec<&T>, Vec<usize>, HaloOutput)> = match op {
        "Conv" => vec![
            ("ConvGradData", vec![dy, &inputs[1]], x.shape.clone(), HaloOutput::OverlapAdd),
            ("ConvGradWeight", vec![dy, x], inputs[1].shape.clone(), HaloOutput::Sum),
        ],
        "MaxPool" => vec![("MaxPoolGrad", vec![dy, x], x.shape.clone(), HaloOutput::OverlapAdd)],
        _ => vec![("AveragePoolGrad", vec![dy], x.shape.clone(), HaloOutput::OverlapAdd)],
    };
    for (grad, ins, out, output) in cases {
        let ir = ir_attrs(attrs);
        let rules = rules_of(grad, &ir, &ins, std::slice::from_ref(&out));
        assert!(
            rules.iter().any(|r| r.combine == Combine::Halo { axis, output }),
            "{grad}: a Halo rule along axis {axis} merging by {output:?}"
        );
        let types: Vec<TensorType> = ins.iter().map(|t| t.ty()).collect();
        let in_refs: Vec<Option<&TensorType>> = types.iter().map(Some).collect();
        let out_ty = TensorType::new(IrDType::F32, out.clone());
        let node = CostNode { op: grad, attrs: &ir, inputs: &in_refs, outputs: &[&out_ty] };
        assert_eq!(split::axis_window(&node, axis).as_ref(), Some(window), "{grad}: the forward op's window");
    }
}

#[test]
fn spatially_split_conv_and_pools_equal_the_unsplit_ops_forward_and_backward() {
    let mut rng = Rng(0x5eed_5171);
    for op in ["Conv", "MaxPool", "AveragePool"] {
        let checked = (0..150).filter(|_| check_halo(&mut rng, op)).count();
        assert!(checked >= 100, "{op}: only {checked} cases had an output to split");
    }
}

#[test]
fn every_concat_and_sum_rule_of_every_splittable_family_matches_the_unsplit_op() {
    let mut rng = Rng(0x1234_5678);
    let mut checked = 0;
    for _ in 0..20 {
        let (n, c, m) = (rng.int(2, 4), rng.int(2, 5), rng.int(2, 5));
        let (h, w) = (rng.int(3, 7), rng.int(3, 7));
        let parts = rng.int(2, 3);
        let x = rng.tensor(&[n, c, h, w]);
        let weight = rng.tensor(&[m, c, 3, 3]);
        let bias = rng.tensor(&[m]);
        let conv_attrs = vec![ints("pads", &[1, 1, 1, 1])];
        checked += check_rules("Conv", &conv_attrs, &[&x, &weight], parts);
        checked += check_rules("Conv", &conv_attrs, &[&x, &weight, &bias], parts);
        let y = run1("Conv", &conv_attrs, &[&x, &weight]);
        let dy = rng.tensor(&y.shape);
        let grad_attrs = vec![ints("pads", &[1, 1, 1, 1]), ints("strides", &[1, 1]), ints("dilations", &[1, 1])];
        checked += check_grad_rules("ConvGradData", &grad_attrs, &[&dy, &weight], &x.shape, parts);
        checked += check_grad_rules("ConvGradWeight", &grad_attrs, &[&dy, &x], &weight.shape, parts);
        checked += check_grad_rules("ConvGradBias", &[], &[&dy], &[m], parts);
        let pool = vec![ints("kernel_shape", &[2, 2]), ints("pads", &[0, 0, 1, 1])];
        checked += check_rules("MaxPool", &pool, &[&x], parts);
        checked += check_rules("AveragePool", &pool, &[&x], parts);
        checked += check_rules("GlobalAveragePool", &[], &[&x], parts);
        let py = run1("MaxPool", &pool, &[&x]);
        let dpy = rng.tensor(&py.shape);
        let pool_grad = [pool.clone(), vec![ints("strides", &[1, 1]), ints("dilations", &[1, 1])]].concat();
        checked += check_grad_rules("MaxPoolGrad", &pool_grad, &[&dpy, &x], &x.shape, parts);
        checked += check_grad_rules("AveragePoolGrad", &pool_grad, &[&dpy], &x.shape, parts);
        checked += check_rules("LRN", &[int("size", 3)], &[&x], parts);
        let a = rng.tensor(&[n * 3, c * 4]);
        let b = rng.tensor(&[c * 4, m]);
        checked += check_rules("MatMul", &[], &[&a, &b], parts);
        let batched = rng.tensor(&[n, h, c * 4]);
        checked += check_rules("MatMul", &[], &[&batched, &b], parts);
        checked += check_rules("Gemm", &[int("transB", 1)], &[&a, &rng.tensor(&[m, c * 4]), &rng.tensor(&[m])], parts);
        checked += check_rules("Relu", &[], &[&x], parts);
        checked += check_rules("Add", &[], &[&x, &rng.tensor(&[c, 1, 1])], parts);
        checked += check_rules("Mul", &[], &[&x, &rng.tensor(&[n, c, h, w])], parts);
    }
    assert!(checked >= 20 * 30, "only {checked} rules were checked");
}

/// [`check_rules`] for a gradient op of the lms domain, whose output shape
/// `output` the training graph declares.
fn check_grad_rules(op: &str, attrs: &[Attribute], inputs: &[&T], output: &[usize], parts: usize) -> usize {
    let whole = run(op, attrs, inputs, &[output.to_vec()]).remove(0);
    check_split(op, attrs, inputs, whole, parts)
}

/// Runs lms op `op` on host tensors with the declared outputs.
fn run_lms(op: &str, attrs: &[Attribute], inputs: &[&HostTensor], outputs: &[(DType, Vec<usize>)]) -> Vec<HostTensor> {
    let slots: Vec<Option<&HostTensor>> = inputs.iter().map(|&t| Some(t)).collect();
    kernels::lms(op, &Attrs::new(attrs), &slots, outputs, &KernelContext::default())
        .unwrap_or_else(|e| panic!("{op} on {}: {e}", attrs_debug_host(inputs)))
}

fn attrs_debug_host(inputs: &[&HostTensor]) -> String {
    inputs.iter().map(|t| format!("{:?}", t.shape)).collect::<Vec<_>>().join(" ")
}

fn f32s(t: &HostTensor) -> T {
    T { shape: t.shape.clone(), data: t.as_f32("output").expect("f32").to_vec() }
}

/// BatchNormTrain and BatchNormGrad split along the batch by their statistics,
/// wired input by input as the compiler's `Form` states (the split pass emits
/// and the e-graph proves that form), equal the unsplit ops on random shapes
/// and part counts: every output within `SUM_TOLERANCE`.
#[test]
fn batch_norm_statistics_splits_match_the_unsplit_ops() {
    use lms_compiler::egraph::rules::batch_norm::{Form, Source, GRAD, TRAIN};
    let mut rng = Rng(0x5eed_0b17);
    let attrs = [Attribute { name: "momentum".into(), value: Some(Value::Float(0.8)) }];
    for _ in 0..24 {
        let (n, c) = (rng.int(2, 9), rng.int(1, 5));
        let mut shape = vec![n, c];
        for _ in 0..rng.int(0, 2) {
            shape.push(rng.int(1, 5));
        }
        let parts = rng.int(2, n.min(8));
        let ranges = part_ranges(n, parts);
        // Offset values: the statistics must not cancel.
        let offset = |t: T| T { data: t.data.iter().map(|v| v + 50.0).collect(), ..t };
        let positive = |t: T| T { data: t.data.iter().map(|v| v.abs() + 0.5).collect(), ..t };
        let per_channel = rng.tensor(&[c]);
        let cases: [(&Form, Vec<T>); 2] = [
            (
                &TRAIN,
                vec![
                    offset(rng.tensor(&shape)),
                    per_channel.clone(),
                    rng.tensor(&[c]),
                    rng.tensor(&[c]),
                    positive(rng.tensor(&[c])),
                ],
            ),
            (
                &GRAD,
                vec![
                    rng.tensor(&shape),
                    offset(rng.tensor(&shape)),
                    per_channel,
                    rng.tensor(&[c]),
                    positive(rng.tensor(&[c])),
                ],
            ),
        ];
        for (form, inputs) in cases {
            let hosts: Vec<HostTensor> = inputs.iter().map(T::host).collect();
            let outputs: Vec<(DType, Vec<usize>)> = std::iter::once(shape.clone())
                .chain(std::iter::repeat_n(vec![c], if form.op == "BatchNormTrain" { 4 } else { 2 }))
                .map(|s| (DType::DtypeF32, s))
                .collect();
            let op_attrs: &[Attribute] = if form.merge_attrs { &attrs } else { &[] };
            let whole = run_lms(form.op, op_attrs, &hosts.iter().collect::<Vec<_>>(), &outputs);
            let sliced: Vec<Vec<HostTensor>> = (0..parts)
                .map(|i| form.sliced().iter().map(|&slot| inputs[slot].slice(0, ranges[i].clone()).host()).collect())
                .collect();
            let input = |s: Source, i: usize, merged: Option<&HostTensor>| -> HostTensor {
                match s {
                    Source::Part(slot) => sliced[i][form.sliced().iter().position(|&k| k == slot).unwrap()].clone(),
                    Source::Whole(slot) => hosts[slot].clone(),
                    Source::Merged => merged.expect("the merge ran").clone(),
                }
            };
            let stats: Vec<HostTensor> = (0..parts)
                .map(|i| {
                    let ins: Vec<HostTensor> = form.statistics_inputs.iter().map(|&s| input(s, i, None)).collect();
                    run_lms(form.statistics, &[], &ins.iter().collect::<Vec<_>>(), &[(DType::DtypeF64, vec![3, c])])
                        .remove(0)
                })
                .collect();
            let mut merge_inputs: Vec<&HostTensor> = form.merge_inputs.iter().map(|&slot| &hosts[slot]).collect();
            merge_inputs.extend(&stats);
            let mut merge_outputs = outputs[1..].to_vec();
            merge_outputs.push((DType::DtypeF64, vec![form.merged_rows, c]));
            let merged = run_lms(form.merge, op_attrs, &merge_inputs, &merge_outputs);
            let applied: Vec<T> = (0..parts)
                .map(|i| {
                    let ins: Vec<HostTensor> = form.apply_inputs.iter().map(|&s| input(s, i, merged.last())).collect();
                    let mut part_shape = shape.clone();
                    part_shape[0] = ranges[i].len();
                    f32s(
                        &run_lms(form.apply, &[], &ins.iter().collect::<Vec<_>>(), &[(DType::DtypeF32, part_shape)])[0],
                    )
                })
                .collect();
            let what = format!("{} {shape:?} in {parts}", form.op);
            assert_close(&concat(&applied, 0), &f32s(&whole[0]), SUM_TOLERANCE, &format!("{what}: output 0"));
            for k in 1..whole.len() {
                assert_close(&f32s(&merged[k - 1]), &f32s(&whole[k]), SUM_TOLERANCE, &format!("{what}: output {k}"));
            }
        }
    }
}
