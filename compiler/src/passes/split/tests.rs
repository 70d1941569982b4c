use super::{patch, SplitRequest};
use crate::egraph::testing::Net;
use crate::egraph::{verify, Limits};
use crate::ir::{Attr, Attrs, Graph};
use crate::pipeline::apply_checked;
use crate::shape::split::Dim;

fn request(op: &str, dim: Dim, parts: usize, depth: usize) -> SplitRequest {
    SplitRequest { op: op.into(), dim, parts, depth }
}

/// x → Conv → Relu → MaxPool → (pool read by `head`, a Softmax along batch).
fn cnn() -> Graph {
    let mut net = Net::new();
    let x = net.input("x", &[4, 3, 8, 8]);
    let w = net.variable("w", &[6, 3, 3, 3]);
    let conv = net.op("conv", "Conv", Attrs::new().with("pads", Attr::Ints(vec![1, 1, 1, 1])), &[x, w], &[4, 6, 8, 8]);
    let relu = net.op("relu", "Relu", Attrs::new(), &[conv], &[4, 6, 8, 8]);
    let pool_attrs = Attrs::new().with("kernel_shape", Attr::Ints(vec![2, 2])).with("strides", Attr::Ints(vec![2, 2]));
    let pool = net.op("pool", "MaxPool", pool_attrs, &[relu], &[4, 6, 4, 4]);
    let head = net.op("head", "Softmax", Attrs::new().with("axis", Attr::Int(0)), &[pool], &[4, 6, 4, 4]);
    net.g.outputs = vec![head];
    net.g
}

fn ops(g: &Graph) -> Vec<String> {
    g.schedule().iter().filter(|&&n| !g.node(n).parameterized).map(|&n| g.node(n).name.clone()).collect()
}

#[test]
fn parses_the_flag_and_names_what_is_wrong() {
    assert_eq!(SplitRequest::parse("op=conv,dim=batch,parts=2"), Ok(request("conv", Dim::Batch, 2, 0)));
    assert_eq!(
        SplitRequest::parse("parts=4,depth=3,dim=width,op=a,b"),
        Err("'b' is not KEY=VALUE (op=NAME,dim=DIM,parts=P[,depth=K])".into())
    );
    assert_eq!(
        SplitRequest::parse("op=c,dim=depth,parts=2").unwrap_err(),
        "dim 'depth' is not one of batch, channel, height, width"
    );
    assert_eq!(
        SplitRequest::parse("op=c,dim=batch,parts=9").unwrap_err(),
        "parts '9' is not a whole number from 2 to 8"
    );
    assert_eq!(SplitRequest::parse("op=c,dim=batch").unwrap_err(), "needs op=NAME, dim=DIM and parts=P");
}

#[test]
fn a_batch_split_run_runs_depth_first_between_one_split_and_one_merge_and_is_proven() {
    let g = cnn();
    let (p, reports) = patch(&g, &[request("conv", Dim::Batch, 2, 2)]).unwrap();
    let (split, _) = apply_checked(&g, &p).unwrap();
    assert_eq!(reports[0].covered, ["conv", "relu", "pool"]);
    assert_eq!(reports[0].splits, ["x"]);
    assert_eq!(reports[0].merges, ["pool"]);
    assert_eq!(
        ops(&split),
        [
            "x.split0of2",
            "conv.part0",
            "relu.part0",
            "pool.part0",
            "x.split1of2",
            "conv.part1",
            "relu.part1",
            "pool.part1",
            "pool.merge",
            "head"
        ]
    );
    let proof = verify(&g, &split, &Limits::default()).unwrap();
    assert_eq!(proof.proven(), 1);
}

#[test]
fn a_single_op_merges_right_after_its_parts() {
    let g = cnn();
    let (p, reports) = patch(&g, &[request("relu", Dim::Channel, 3, 0)]).unwrap();
    let (split, _) = apply_checked(&g, &p).unwrap();
    assert_eq!(reports[0].merge, "concat along axis 1");
    assert_eq!(reports[0].merges, ["relu"]);
    assert_eq!(
        ops(&split),
        [
            "conv",
            "conv.split0of3",
            "relu.part0",
            "conv.split1of3",
            "relu.part1",
            "conv.split2of3",
            "relu.part2",
            "relu.merge",
            "pool",
            "head"
        ]
    );
    assert!(verify(&g, &split, &Limits::default()).is_ok());
}

#[test]
fn a_height_split_of_a_conv_reads_overlapping_windows_with_their_own_pads_and_is_proven() {
    let g = cnn();
    let (p, reports) = patch(&g, &[request("conv", Dim::Height, 2, 0)]).unwrap();
    let (split, _) = apply_checked(&g, &p).unwrap();
    assert_eq!(reports[0].merge, "concat of halo parts along axis 2");
    assert_eq!((&reports[0].splits[..], &reports[0].merges[..]), (&["x".to_string()][..], &["conv".to_string()][..]));
    assert_eq!(
        ops(&split),
        ["conv.part0.in0", "conv.part0", "conv.part1.in0", "conv.part1", "conv.merge", "relu", "pool", "head"]
    );
    let node = |name: &str| split.node(split.node_ids().find(|&n| split.node(n).name == name).unwrap());
    // 3x3 pad 1 over 8 rows: rows 0..4 read 0..5 padded above, rows 4..8 read 3..8 padded below.
    for (i, begin, end, pads) in [(0, 0, 5, [1, 1, 0, 1]), (1, 3, 8, [0, 1, 1, 1])] {
        let window = node(&format!("conv.part{i}.in0"));
        assert_eq!((window.attrs.int("begin", -1), window.attrs.int("end", -1)), (Ok(begin), Ok(end)));
        assert_eq!(node(&format!("conv.part{i}")).attrs.ints("pads", vec![]), Ok(pads.to_vec()));
    }
    let proof = verify(&g, &split, &Limits::default()).unwrap();
    assert_eq!(proof.proven(), 1);
    assert!(proof.applied.contains_key("distribute-halo"));
}

#[test]
fn a_channel_split_of_a_conv_slices_its_filters_and_is_proven() {
    let g = cnn();
    let (p, reports) = patch(&g, &[request("conv", Dim::Channel, 2, 0)]).unwrap();
    let (split, _) = apply_checked(&g, &p).unwrap();
    assert_eq!(reports[0].merge, "concat along axis 1");
    assert_eq!((&reports[0].splits[..], &reports[0].merges[..]), (&["w".to_string()][..], &["conv".to_string()][..]));
    let proof = verify(&g, &split, &Limits::default()).unwrap();
    assert_eq!(proof.proven(), 1);
    assert!(proof.applied.contains_key("distribute-windowed"));
}

#[test]
fn splits_that_are_not_emitted_or_not_legal_are_refused_by_name() {
    let g = cnn();
    let err = |r: SplitRequest| patch(&g, &[r]).unwrap_err().to_string();
    assert_eq!(
        err(request("head", Dim::Batch, 2, 0)),
        "node 'head' (Softmax): Softmax on inputs [4,6,4,4] cannot be split"
    );
    assert_eq!(
        err(request("pool", Dim::Height, 5, 0)),
        "node 'pool' (MaxPool): its window makes 4 positions along axis 2, fewer than 5 parts"
    );
    assert!(err(request("cnv", Dim::Batch, 2, 0)).starts_with("--split op 'cnv' matches no op"));
    // A 1x1 conv padded by 3 rows above: its first output rows read only padding.
    let mut net = Net::new();
    let x = net.input("x", &[1, 1, 4, 4]);
    let w = net.variable("w", &[1, 1, 1, 1]);
    let pads = Attrs::new().with("pads", Attr::Ints(vec![3, 0, 0, 0]));
    let padded = net.op("padded", "Conv", pads, &[x, w], &[1, 1, 7, 4]);
    net.g.outputs = vec![net.op("head", "Relu", Attrs::new(), &[padded], &[1, 1, 7, 4])];
    assert_eq!(
        patch(&net.g, &[request("padded", Dim::Height, 4, 0)]).unwrap_err().to_string(),
        "node 'padded' (Conv): part 0 of its split along axis 2 reads only padding"
    );
    let both = patch(&g, &[request("conv", Dim::Batch, 2, 0), request("relu", Dim::Batch, 2, 0)]).unwrap_err();
    assert!(both.to_string().contains("overlap or feed each other"), "{both}");
}

/// The split rules' concatenations and the e-graph's independence conditions,
/// both read from the axes map, agree: the e-graph derives every one, slicing
/// the inputs alike (the pass takes its axis from the former and its legality
/// from the latter).
#[test]
fn shape_rules_and_the_e_graph_slice_inputs_alike() {
    use crate::egraph::lang::TermAnalysis;
    use crate::egraph::rules::independence::family_of;
    use crate::ir::{DType, TensorType};
    use crate::shape::cost::CostNode;
    use crate::shape::split::{rules, Combine};
    let f = |s: &[usize]| TensorType::new(DType::F32, s.to_vec());
    let pads = Attrs::new().with("pads", Attr::Ints(vec![1, 1, 1, 1]));
    let pool = Attrs::new().with("kernel_shape", Attr::Ints(vec![2, 2]));
    let cases: Vec<(&str, Attrs, Vec<TensorType>, TensorType)> = vec![
        ("Conv", pads.clone(), vec![f(&[4, 3, 8, 8]), f(&[6, 3, 3, 3]), f(&[6])], f(&[4, 6, 8, 8])),
        ("MaxPool", pool.clone(), vec![f(&[4, 3, 8, 8])], f(&[4, 3, 7, 7])),
        ("AveragePool", pool, vec![f(&[4, 3, 8, 8])], f(&[4, 3, 7, 7])),
        ("MatMul", Attrs::new(), vec![f(&[4, 8]), f(&[8, 6])], f(&[4, 6])),
        ("MatMul", Attrs::new(), vec![f(&[4, 5, 8]), f(&[8, 6])], f(&[4, 5, 6])),
        ("Gemm", Attrs::new(), vec![f(&[4, 8]), f(&[8, 6]), f(&[6])], f(&[4, 6])),
        ("Softmax", Attrs::new(), vec![f(&[4, 6, 2])], f(&[4, 6, 2])),
        ("Relu", Attrs::new(), vec![f(&[4, 6, 2])], f(&[4, 6, 2])),
        ("Add", Attrs::new(), vec![f(&[4, 6, 2]), f(&[6, 1])], f(&[4, 6, 2])),
    ];
    let mut analysis = TermAnalysis::new(17);
    for (op, attrs, inputs, output) in &cases {
        let ins: Vec<Option<&TensorType>> = inputs.iter().map(Some).collect();
        let node = CostNode { op, attrs, inputs: &ins, outputs: &[output] };
        let symbol = analysis.head(op, "", attrs, vec![output.clone()]);
        let head = analysis.lookup(symbol).unwrap().clone();
        let family = family_of(&head).unwrap();
        let shapes: Vec<Option<&crate::ir::Shape>> = inputs.iter().map(|t| Some(&t.shape)).collect();
        for rule in rules(&node) {
            let Combine::Concat { axis } = rule.combine else { continue };
            match family.split_inputs(&head, &shapes, axis, 17) {
                Some(splits) => assert_eq!(splits, rule.inputs, "{op} along {}", rule.dim),
                None => panic!("{op}: the e-graph does not derive its split along {}", rule.dim),
            }
        }
    }
}

/// x → BatchNormTrain (running statistics written back) → Relu, and the
/// gradient of the normalization from a given dY.
fn batch_norm() -> Graph {
    let mut net = Net::new();
    let x = net.input("x", &[5, 3, 4]);
    let dy = net.input("dy", &[5, 3, 4]);
    let params: Vec<_> = ["scale", "bias", "rm", "rv"].iter().map(|name| net.variable(name, &[3])).collect();
    let mut inputs = vec![x];
    inputs.extend(&params);
    let shapes: [&[usize]; 5] = [&[5, 3, 4], &[3], &[3], &[3], &[3]];
    let bn = net.ops("bn", "BatchNormTrain", "lms", Attrs::new(), &inputs, &shapes);
    let (rm, rv) = (net.node(params[2]), net.node(params[3]));
    net.g.add_update_edge(bn[1], rm);
    net.g.add_update_edge(bn[2], rv);
    let relu = net.op("relu", "Relu", Attrs::new(), &[bn[0]], &[5, 3, 4]);
    let grad_shapes: [&[usize]; 3] = [&[5, 3, 4], &[3], &[3]];
    let grads = net.ops("grad", "BatchNormGrad", "lms", Attrs::new(), &[dy, x, params[0], bn[3], bn[4]], &grad_shapes);
    let dx = net.op("dx", "Relu", Attrs::new(), &[grads[0]], &[5, 3, 4]);
    let dparams = net.op("dparams", "Add", Attrs::new(), &[grads[1], grads[2]], &[3]);
    net.g.outputs = vec![relu, dx, dparams];
    net.g
}

#[test]
fn batch_norm_splits_by_merged_statistics_and_moves_its_updates_to_the_merge() {
    let g = batch_norm();
    let (p, reports) = patch(&g, &[request("bn", Dim::Batch, 2, 0)]).unwrap();
    let (split, _) = apply_checked(&g, &p).unwrap();
    assert_eq!(reports[0].merge, "statistics merged across parts");
    assert_eq!(reports[0].merges, ["bn.0"]);
    assert_eq!(
        ops(&split),
        [
            "x.split0of2",
            "bn.part0.statistics",
            "x.split1of2",
            "bn.part1.statistics",
            "bn.merge",
            "bn.part0",
            "bn.part1",
            "bn.0.merge",
            "relu",
            "grad",
            "dx",
            "dparams"
        ]
    );
    let merge = split.node_ids().find(|&n| split.node(n).name == "bn.merge").unwrap();
    let updates = split.out_edges(merge).filter(|(_, e)| e.action == crate::ir::Action::Update).count();
    assert_eq!(updates, 2, "the merge writes both running statistics");
    let proof = verify(&g, &split, &Limits::default()).unwrap();
    assert_eq!(proof.proven(), 5);

    let (p, reports) = patch(&g, &[request("grad", Dim::Batch, 3, 0)]).unwrap();
    let (split, _) = apply_checked(&g, &p).unwrap();
    assert_eq!(reports[0].splits, ["dy", "x"]);
    assert_eq!(verify(&g, &split, &Limits::default()).unwrap().proven(), 5);
    // The forward pass feeds the gradient: one run each is refused.
    let both = patch(&g, &[request("bn", Dim::Batch, 2, 0), request("grad", Dim::Batch, 2, 0)]).unwrap_err();
    assert!(both.to_string().contains("overlap or feed each other"), "{both}");
}

#[test]
fn a_batch_norm_merge_of_the_wrong_parts_is_not_proven() {
    use crate::egraph::check;
    let g = batch_norm();
    let (p, _) = patch(&g, &[request("bn", Dim::Batch, 2, 0)]).unwrap();
    let (mut split, _) = apply_checked(&g, &p).unwrap();
    let named = |g: &Graph, name: &str| g.node_ids().find(|&n| g.node(n).name == name).unwrap();
    // The merge reads part 0's statistics twice: the whole batch's are not those.
    let (merge, part0) = (named(&split, "bn.merge"), named(&split, "bn.part0.statistics"));
    let stats0 = split.node(part0).outputs[0];
    split.set_input(merge, 3, Some(stats0));
    let report = check(&g, &split, &Limits::default()).unwrap();
    // Y, the running statistics and the saved statistics the gradient reads are all wrong.
    assert_eq!(report.proven(), 0, "{}", report.to_text(true));
    assert_eq!(report.items.len(), 5);
    assert!(verify(&g, &split, &Limits::default()).is_err());
}

/// A Dropout in training that stays whole feeds a Reshape whose shape is
/// computed from the Dropout's output (as exporters write `x.view(...)`):
/// the batch split runs the Reshape and what follows in parts, drops the
/// shape computation its parts no longer read, and keeps the Dropout (and
/// its mask, which the gradient reads) whole.
#[test]
fn a_batch_split_keeps_a_whole_dropout_whose_output_a_split_reshape_reads() {
    use super::batch_patch;
    use crate::ir::{DType, TensorType};
    use crate::passes::split::BatchSplit;
    let mut net = Net::new();
    let x = net.input("x", &[4, 6]);
    let dropout = net.ops(
        "dropout",
        "DropoutTrain",
        "lms",
        Attrs::new().with("ratio", Attr::Float(0.1)),
        &[x],
        &[&[4, 6], &[4, 6]],
    );
    net.g.tensor_mut(dropout[1]).ty = TensorType::new(DType::Bool, vec![4, 6]);
    let shape = net.op("shape", "Shape", Attrs::new(), &[dropout[0]], &[2]);
    net.g.tensor_mut(shape).ty = TensorType::new(DType::I64, vec![2]);
    let view = net.op("view", "Reshape", Attrs::new(), &[dropout[0], shape], &[4, 6]);
    let relu = net.op("relu", "Relu", Attrs::new(), &[view], &[4, 6]);
    let dy = net.input("dy", &[4, 6]);
    let dx = net.ops(
        "dx",
        "DropoutGrad",
        "lms",
        Attrs::new().with("ratio", Attr::Float(0.1)),
        &[dy, dropout[1]],
        &[&[4, 6]],
    )[0];
    net.g.outputs = vec![relu, dx];
    let g = net.g;
    let (p, report) = batch_patch(&g, &BatchSplit { parts: 2, min_bytes: 0 }).unwrap();
    let (split, _) = apply_checked(&g, &p).unwrap();
    assert!(report.ops >= 2, "{report:?}");
    let names = ops(&split);
    assert!(names.contains(&"dropout".to_string()), "{names:?}");
    assert!(!names.contains(&"shape".to_string()), "{names:?}");
    assert!(names.contains(&"view.part1".to_string()), "{names:?}");
    verify(&g, &split, &Limits::default()).unwrap();
}
