use super::*;
use crate::ir::{Attrs, DType, Device, Node, NodeId, Phase, TensorType};

fn ty() -> TensorType {
    TensorType::new(DType::F32, vec![4])
}

fn node(name: &str, op: &str) -> Node {
    Node {
        name: name.into(),
        op: op.into(),
        domain: String::new(),
        attrs: Attrs::new(),
        parameterized: op == "Input",
        phase: Phase::Forward,
        device: Device::Gpu,
        inputs: vec![],
        outputs: vec![],
    }
}

/// x -> a -> b -> c, and an unread side op `s` after `a`: (graph, ids by name).
fn chain() -> (Graph, impl Fn(&Graph, &str) -> NodeId) {
    let mut g = Graph::new("chain", 13);
    let mut last = None;
    for (name, op) in [("x", "Input"), ("a", "Relu"), ("s", "Neg"), ("b", "Relu"), ("c", "Relu")] {
        let input = if name == "s" { g.node(g.schedule()[1]).outputs.first().copied() } else { last };
        let id = g.add_node(
            Node { inputs: input.into_iter().map(Some).collect(), ..node(name, op) },
            vec![(name.into(), ty())],
        );
        if name != "s" {
            last = Some(g.node(id).outputs[0]);
        }
    }
    g.outputs = vec![last.expect("c")];
    invariants::check(&g).expect("a valid graph");
    let find = |g: &Graph, name: &str| g.node_ids().find(|&id| g.node(id).name == name).expect("named node");
    (g, find)
}

fn names(g: &Graph) -> Vec<&str> {
    g.schedule().iter().map(|&id| g.node(id).name.as_str()).collect()
}

#[test]
fn the_schedule_survives_removals_and_reused_indices() {
    let (g, find) = chain();
    let mut remove = Patch::new("remove");
    remove.remove_node(find(&g, "s"));
    let (g, _) = apply_checked(&g, &remove).expect("s is unread");
    // The next node added takes the freed index, yet goes where the patch puts it.
    let (c, b) = (find(&g, "c"), find(&g, "b"));
    let mut add = Patch::new("add");
    let b_out = TensorRef::Existing(g.node(b).outputs[0]);
    let copy =
        add.add_node(node("copy", "Identity"), vec![Some(b_out)], vec![("copy".into(), ty())], Position::Before(c));
    add.rewire(c, 0, TensorRef::New(copy, 0));
    let (g, applied) = apply_checked(&g, &add).expect("valid patch");
    assert!(applied.node(copy).index() < c.index(), "the freed index was reused");
    assert_eq!(names(&g), ["x", "a", "b", "copy", "c"]);
    assert_eq!(crate::analysis::order::schedule(&g).expect("acyclic"), g.schedule());
}

#[test]
fn a_patch_naming_what_is_not_there_changes_nothing() {
    let (g, find) = chain();
    let before = crate::emit::text::to_text(&g).expect("acyclic");
    let mut bad = Patch::new("bad");
    bad.add_node(
        node("n", "Relu"),
        vec![Some(TensorRef::Existing(g.node(find(&g, "a")).outputs[0]))],
        vec![("n".into(), ty())],
        Position::After(find(&g, "a")),
    );
    bad.rewire(find(&g, "b"), 0, TensorRef::New(NewNode(7), 0));
    let err = apply_checked(&g, &bad).expect_err("no new node 7");
    assert!(err.to_string().starts_with("pass 'bad': node 'b' input 0 is rewired to no tensor"), "{err}");
    let mut g2 = g.clone();
    assert!(apply(&mut g2, &bad).is_err());
    assert_eq!(crate::emit::text::to_text(&g2).expect("acyclic"), before, "nothing was applied");
}

#[test]
fn types_must_agree() {
    let (g, find) = chain();
    let mut wrong = Patch::new("wrong");
    let a_out = TensorRef::Existing(g.node(find(&g, "a")).outputs[0]);
    let declared = vec![("n".into(), TensorType::new(DType::F32, vec![5]))];
    wrong.add_node(node("n", "Relu"), vec![Some(a_out)], declared, Position::After(find(&g, "a")));
    let err = apply_checked(&g, &wrong).expect_err("Relu keeps the shape");
    assert!(err.to_string().contains("declares outputs [f32[5]] but its inputs give [f32[4]]"), "{err}");
}

#[test]
fn the_manager_rejects_a_reader_scheduled_before_its_producer() {
    let (g, find) = chain();
    let mut early = Patch::new("early");
    let b_out = TensorRef::Existing(g.node(find(&g, "b")).outputs[0]);
    early.add_node(node("n", "Relu"), vec![Some(b_out)], vec![("n".into(), ty())], Position::Before(find(&g, "a")));
    let err = apply_checked(&g, &early).expect_err("n runs before b");
    assert_eq!(err.to_string(), "pass 'early': the schedule runs node 'n' before 'b', which it depends on");
}

#[test]
fn the_manager_rejects_control_cycles_and_dangling_reads() {
    let (g, find) = chain();
    let mut cycle = Patch::new("cycle");
    cycle.add_control_edge(NodeRef::Existing(find(&g, "c")), NodeRef::Existing(find(&g, "a")));
    let err = apply_checked(&g, &cycle).expect_err("c -> a closes a cycle");
    assert!(err.to_string().contains("the schedule runs node 'a' before 'c'"), "{err}");
    let mut dangling = Patch::new("dangling");
    dangling.remove_node(find(&g, "b"));
    let err = apply_checked(&g, &dangling).expect_err("c reads b");
    assert_eq!(err.to_string(), "pass 'dangling': node 'c' input 0 reads a tensor whose producer was removed");
}

/// A pass adding one node after `a`, to check that the manager runs passes,
/// dumps and stops where it is told.
struct AddAfterA;

impl Pass<()> for AddAfterA {
    fn name(&self) -> &'static str {
        "add"
    }

    fn run(&mut self, cx: &mut Context) -> Result<(Step, ())> {
        let g = &cx.graph;
        let a = g.node_ids().find(|&id| g.node(id).name == "a").expect("a");
        let mut patch = Patch::new(self.name());
        let out = TensorRef::Existing(g.node(a).outputs[0]);
        patch.add_node(node("added", "Relu"), vec![Some(out)], vec![("added".into(), ty())], Position::After(a));
        Ok((Step::Patch(patch), ()))
    }
}

#[test]
fn the_manager_dumps_and_stops_after_named_passes() {
    let dir = std::env::temp_dir().join(format!("lms-pipeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let dump = dir.join("after-add.txt");
    let mut passes: Vec<Box<dyn Pass<()>>> = vec![Box::new(AddAfterA), Box::new(AddAfterA)];
    let mut cx = Context { graph: chain().0, ..Context::default() };
    let options = PassOptions { dump_after: Some(("add".into(), dump.clone())), stop_after: Some("add".into()) };
    let ran = run(&mut passes, &mut cx, &options).expect("runs");
    assert_eq!((ran.passes, ran.reports.len(), ran.stopped), (vec!["add"], 1, true));
    assert_eq!(names(&cx.graph), ["x", "a", "added", "s", "b", "c"]);
    let text = std::fs::read_to_string(&dump).expect("dumped");
    assert!(text.contains("%added: f32[4] = Relu(%a)"), "{text}");
    let unknown = PassOptions { stop_after: Some("nope".into()), ..PassOptions::default() };
    let err = run(&mut passes, &mut cx, &unknown).expect_err("no such pass");
    assert_eq!(err.to_string(), "no pass named 'nope' in this compile (passes: add, add)");
    std::fs::remove_dir_all(&dir).expect("cleaned up");
}
