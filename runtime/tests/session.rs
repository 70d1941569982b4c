//! Training steps on hand-built graphs: values, memory accounting, budgets, determinism.

mod common;

use common::{f32_bytes, float, int, string, training_graph, Builder, W0};
use lms_proto::contract::{placement, Pool};
use lms_proto::lms::DType;
use lms_proto::Message;
use lms_runtime::{CpuBackend, HostTensor, Program, RunOptions, RuntimeError, Session};

/// The default budget of each pool: 1 MiB.
const MIB: u64 = 1 << 20;

fn options(seed: u64) -> RunOptions {
    RunOptions { device_memory: MIB, host_memory: MIB, seed }
}

/// Seed-0 options with budgets of `device_memory` and `host_memory` bytes.
fn budgets(device_memory: u64, host_memory: u64) -> RunOptions {
    RunOptions { device_memory, host_memory, seed: 0 }
}

fn session(b: &Builder, options: RunOptions) -> Result<Session<CpuBackend>, RuntimeError> {
    let program = Program::new(b.graph.clone(), "test.lms")?;
    Session::new(program, CpuBackend::new(), options)
}

/// A seed-0 session on the shared training graph (with its swap when `swap`) under
/// budgets of `device_memory` and `host_memory` bytes.
fn budgeted(swap: bool, device_memory: u64, host_memory: u64) -> Result<Session<CpuBackend>, RuntimeError> {
    session(&training_graph(swap), budgets(device_memory, host_memory))
}

fn f32s(t: &HostTensor) -> Vec<f32> {
    t.as_f32("t").unwrap().to_vec()
}

fn variable(s: &mut Session<CpuBackend>, name: &str) -> Vec<f32> {
    let vars = s.variables().unwrap();
    f32s(&vars.into_iter().find(|(n, _)| n == name).unwrap().1)
}

#[test]
fn loss_and_update_are_computed() {
    let mut b = training_graph(false);
    let x = b.graph.inputs[0];
    b.graph.outputs.push(x);
    let mut s = session(&b, options(3)).unwrap();
    let step = s.step().unwrap();
    let x = f32s(&step.outputs[1]);
    // y = x·W, r = relu(y), loss = Σ r; g = xᵀ·r; W ← W − 0.1·g.
    let mut r = [0f64; 8];
    for i in 0..2 {
        for j in 0..4 {
            let y: f64 = (0..4).map(|k| f64::from(x[i * 4 + k]) * f64::from(W0[k * 4 + j])).sum();
            r[i * 4 + j] = y.max(0.0);
        }
    }
    let loss: f64 = r.iter().sum();
    assert!((f64::from(step.loss.unwrap()) - loss).abs() < 1e-5, "loss {:?} expected {loss}", step.loss);
    assert_eq!(step.outputs[0].shape, vec![1, 1]);
    let w = variable(&mut s, "W");
    for k in 0..4 {
        for j in 0..4 {
            let g: f64 = (0..2).map(|i| f64::from(x[i * 4 + k]) * r[i * 4 + j]).sum();
            let expected = f64::from(W0[k * 4 + j]) - f64::from(0.1f32) * g;
            assert!(
                (f64::from(w[k * 4 + j]) - expected).abs() < 1e-5,
                "W[{k},{j}] = {} expected {expected}",
                w[k * 4 + j]
            );
        }
    }
    // The next step reads the updated W; the batch is the same.
    let next = s.step().unwrap();
    assert_eq!(f32s(&next.outputs[1]), x);
    assert_ne!(next.loss, step.loss);
    assert_ne!(variable(&mut s, "W"), w);
    // Variables that no update edge writes keep their values.
    assert_eq!(variable(&mut s, "lr"), vec![0.1]);
    assert_eq!(variable(&mut s, "ones_col"), vec![1.0; 4]);
}

/// The arenas of `b`'s static placement: (device, host) bytes.
fn arenas(b: &Builder) -> (u64, u64) {
    let program = Program::new(b.graph.clone(), "test.lms").unwrap();
    let arena = |pool| placement::of_program(&program, pool).arena_bytes;
    (arena(Pool::Device), arena(Pool::Host))
}

#[test]
fn peak_follows_the_accounting_rules() {
    // Resident: W 64 + x 32 + lr 4 + ones_row 8 + ones_col 16 = 124 bytes. Order 5..11:
    // y 156; r 188, y freed → 156; rs 172; loss 176, rs freed → 160; g 224, r freed → 192;
    // s 256, g freed → 192; Wn 256, s and Wn freed → 128.
    let mut s = session(&training_graph(false), options(0)).unwrap();
    let report = s.step().unwrap().report;
    assert_eq!((report.peak_device_bytes, report.peak_host_bytes), (256, 0));
    assert_eq!((report.bytes_d2h, report.bytes_h2d), (0, 0));
    assert_eq!(report.op_seconds["MatMul"].calls, 3);
    assert_eq!(report.op_seconds.keys().collect::<Vec<_>>(), ["Gemm", "MatMul", "Mul", "Relu", "Sub"]);
    assert!(report.step_seconds > 0.0);
    // The arenas the step used are the placement's, to the byte: the five resident blocks
    // of 256 B (aligned) at the bottom and three live transient blocks above them.
    assert_eq!((report.arena_device_bytes, report.arena_host_bytes), arenas(&training_graph(false)));
    assert_eq!(report.arena_device_bytes, 2048);
    // The same next step: what a step leaves live is the resident set only.
    let next = s.step().unwrap().report;
    assert_eq!((next.peak_device_bytes, next.arena_device_bytes), (256, 2048));

    // With r swapped out after loss and in before g: device ... loss 176 → 160; SwapOut
    // (host +32), r freed → 128; SwapIn 160, rh freed (host 0); g 224 → 192; s 256; Wn 256.
    let mut s = session(&training_graph(true), options(0)).unwrap();
    let report = s.step().unwrap().report;
    assert_eq!((report.peak_device_bytes, report.peak_host_bytes), (256, 32));
    assert_eq!((report.bytes_d2h, report.bytes_h2d), (32, 32));
    assert_eq!((report.op_seconds["SwapOut"].calls, report.op_seconds["SwapIn"].calls), (1, 1));
    assert_eq!((report.arena_device_bytes, report.arena_host_bytes), arenas(&training_graph(true)));
    assert_eq!(report.arena_host_bytes, 256);
}

#[test]
fn explicit_schedule_is_followed() {
    // g (node 9) before rs (7) and loss (8): y 156; r 188 → 156; g 220; rs 236, r freed →
    // 204; loss 208, rs freed → 192; s 256; Wn 256. Peak 256, but r now dies after rs.
    let mut b = training_graph(false);
    b.graph.schedule = vec![0, 1, 2, 3, 4, 5, 6, 9, 7, 8, 10, 11];
    let mut s = session(&b, options(0)).unwrap();
    assert_eq!(s.program().order(), &[0, 1, 2, 3, 4, 5, 6, 9, 7, 8, 10, 11]);
    let report = s.step().unwrap().report;
    assert_eq!(report.peak_device_bytes, 256);
    // r, g and rs live together at rs: three transient blocks above the resident ones, as
    // in the default order.
    assert_eq!((report.arena_device_bytes, arenas(&b).0), (2048, 2048));
    let err = session(&b, budgets(2047, MIB)).err().unwrap();
    assert!(err.to_string().starts_with("out of device memory at node '"), "{err}");
    assert!(err.to_string().ends_with("the plan's device arena is 2.00 KiB (2048 B)"), "{err}");
}

/// A run whose device arena exceeds the budget by a byte is refused before anything is
/// placed, naming the node whose output's block ends past it.
#[test]
fn one_byte_below_the_arena_is_refused_naming_the_node() {
    assert!(budgeted(false, 2048, MIB).unwrap().step().is_ok());
    let err = budgeted(false, 2047, MIB).err().unwrap();
    let RuntimeError::OutOfMemory(oom) = &err else { panic!("not an out-of-memory error: {err}") };
    assert_eq!((oom.arena, oom.budget), (2048, 2047));
    assert_eq!(oom.offset + 256, 2048, "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "out of device memory at node '{0}' ({1}): wants {2} B for tensor '{0}' at offset 1.75 KiB, past the \
             2.00 KiB (2047 B) limit; the plan's device arena is 2.00 KiB (2048 B)",
            oom.node, oom.op, oom.wanted
        )
    );
}

#[test]
fn resident_tensors_count_against_the_budget() {
    // The five resident blocks take 1280 B; a budget below them fails at the first
    // variable whose block ends past it.
    let err = budgeted(false, 1000, MIB).err().unwrap();
    assert_eq!(
        err.to_string(),
        "out of device memory at node 'ones_row' (Variable): wants 8 B for tensor 'ones_row' at offset 768 B, past \
         the 1000 B (1000 B) limit; the plan's device arena is 2.00 KiB (2048 B)"
    );
    let err = budgeted(false, 123, MIB).err().unwrap();
    assert!(err.to_string().starts_with("out of device memory at node 'W' (Variable): wants 64 B"), "{err}");
}

#[test]
fn host_budget_is_enforced() {
    let err = budgeted(true, MIB, 255).err().unwrap();
    assert_eq!(
        err.to_string(),
        "out of host memory at node 'rh' (SwapOut): wants 32 B for tensor 'rh' at offset 0 B, past the 255 B \
         (255 B) limit; the plan's host arena is 256 B (256 B)"
    );
    let mut s = budgeted(true, MIB, 256).unwrap();
    assert!(s.step().is_ok());
}

#[test]
fn swapping_preserves_numerics_bit_for_bit() {
    let run = |swap: bool| {
        let mut s = session(&training_graph(swap), options(11)).unwrap();
        let losses: Vec<u32> = (0..4).map(|_| s.step().unwrap().loss.unwrap().to_bits()).collect();
        let w: Vec<u32> = variable(&mut s, "W").iter().map(|v| v.to_bits()).collect();
        (losses, w)
    };
    assert_eq!(run(false), run(true));
}

#[test]
fn runs_are_deterministic_per_seed() {
    let run = |seed: u64| {
        let mut s = session(&training_graph(false), options(seed)).unwrap();
        let losses: Vec<u32> = (0..3).map(|_| s.step().unwrap().loss.unwrap().to_bits()).collect();
        (losses, s.variables().unwrap())
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5).0, run(6).0);
}

#[test]
fn synthetic_integer_inputs_follow_range() {
    let mut b = training_graph(false);
    let labels = b.input("labels", DType::DtypeI64, &[200], vec![int("range", 10)]);
    let flags = b.input("flags", DType::DtypeI32, &[50], vec![]);
    b.graph.outputs.extend([labels, flags]);
    let mut s = session(&b, options(1)).unwrap();
    let step = s.step().unwrap();
    let labels = step.outputs[1].as_i64("labels").unwrap();
    assert!(labels.iter().all(|v| (0..10).contains(v)));
    assert!((0..10).all(|v| labels.contains(&v)));
    let flags = step.outputs[2].view::<i32>("flags").unwrap();
    assert!(flags.iter().all(|v| (0..2).contains(v)) && flags.contains(&0) && flags.contains(&1));
}

#[test]
fn random_initialisation_is_order_independent() {
    let build = |reverse: bool| {
        let mut b = training_graph(false);
        let he = vec![string("init", "he"), int("fan_in", 8)];
        let xavier = vec![string("init", "xavier"), int("fan_in", 8), int("fan_out", 4)];
        let specs = [("a", he), ("b", xavier)];
        let order: Vec<usize> = if reverse { vec![1, 0] } else { vec![0, 1] };
        for i in order {
            let (name, attrs) = &specs[i];
            b.variable_init(name, DType::DtypeF32, &[64, 8], attrs.clone());
        }
        let mut s = session(&b, options(9)).unwrap();
        let mut vars = s.variables().unwrap();
        vars.sort_by(|x, y| x.0.cmp(&y.0));
        vars
    };
    let (forward, backward) = (build(false), build(true));
    assert_eq!(forward, backward);
    let value = |name: &str| f32s(&forward.iter().find(|(n, _)| n == name).unwrap().1);
    let (a, b) = (value("a"), value("b"));
    let limit = (6.0f32 / 12.0).sqrt();
    assert!(b.iter().all(|v| v.abs() <= limit) && b.iter().any(|v| v.abs() > limit / 2.0));
    let var = a.iter().map(|v| v * v).sum::<f32>() / a.len() as f32;
    assert!((var - 0.25).abs() < 0.06, "he variance {var}, expected 2/8");
}

#[test]
fn initialisation_errors_name_the_variable() {
    let mut b = training_graph(false);
    b.variable_init("bad", DType::DtypeF32, &[2], vec![string("init", "glorot")]);
    let err = session(&b, options(0)).err().unwrap();
    assert_eq!(err.to_string(), "initialising 'bad': unknown init 'glorot' (expected data, he, xavier, zeros or ones)");
    let mut b = training_graph(false);
    b.variable_init("nofan", DType::DtypeF32, &[2], vec![string("init", "he")]);
    assert_eq!(
        session(&b, options(0)).err().unwrap().to_string(),
        "initialising 'nofan': init 'he' needs the fan_in attribute"
    );
    let mut b = training_graph(false);
    b.variable_init("nodata", DType::DtypeF32, &[2], vec![]);
    assert_eq!(
        session(&b, options(0)).err().unwrap().to_string(),
        "initialising 'nodata': init 'data', but the tensor stores 0 bytes and its type takes 8"
    );
}

#[test]
fn a_graph_without_a_scalar_output_has_no_loss() {
    let mut b = training_graph(false);
    let x = b.graph.inputs[0];
    b.graph.outputs.insert(0, x);
    let step = session(&b, options(0)).unwrap().step().unwrap();
    assert_eq!(step.loss, None);
    assert_eq!(step.outputs[0].shape, vec![2, 4]);
}

#[test]
fn given_values_replace_drawn_ones_and_are_type_checked() {
    let b = training_graph(false);
    let program = || Program::new(b.graph.clone(), "test.lms").unwrap();
    let w = HostTensor { shape: vec![4, 4], data: lms_runtime::Buffer::F32(vec![0.5; 16]) };
    let values = std::collections::BTreeMap::from([("W".to_string(), w)]);
    let mut s = Session::with_values(program(), CpuBackend::new(), options(0), &values).unwrap();
    assert!(variable(&mut s, "W").iter().all(|&v| v == 0.5));
    let wrong = HostTensor { shape: vec![2], data: lms_runtime::Buffer::F32(vec![0.5; 2]) };
    let values = std::collections::BTreeMap::from([("W".to_string(), wrong)]);
    let err = Session::with_values(program(), CpuBackend::new(), options(0), &values).err().unwrap();
    assert_eq!(err.to_string(), "initialising 'W': given value is f32 [2], the graph wants f32 [4, 4]");
}

#[test]
fn serialized_programs_load() {
    let b = training_graph(true);
    let bytes = b.graph.encode_to_vec();
    let dir = std::env::temp_dir().join(format!("lms-runtime-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("train.lms");
    std::fs::write(&path, &bytes).unwrap();
    let program = Program::load(&path).unwrap();
    assert_eq!(program.source(), path.display().to_string());
    let mut s = Session::new(program, CpuBackend::new(), options(2)).unwrap();
    let mut direct = session(&b, options(2)).unwrap();
    assert_eq!(s.step().unwrap().loss.unwrap().to_bits(), direct.step().unwrap().loss.unwrap().to_bits());
    std::fs::remove_dir_all(&dir).unwrap();

    let missing = dir.join("missing.lms");
    let err = Program::load(&missing).unwrap_err();
    assert!(err.to_string().starts_with(&format!("{}: cannot read: ", missing.display())), "{err}");
    let err = Program::decode(&[0xff, 0xff, 0xff], "junk.lms").unwrap_err();
    assert!(err.to_string().starts_with("junk.lms: not an lms graph"), "{err}");
    assert_eq!(f32_bytes(&[1.0]).len(), 4);
}

#[test]
fn later_readers_of_an_update_read_the_new_storage() {
    // c1 = c + 1 writes counter c; `later` reads c1 after the update (as AdamUpdate reads
    // AdamStep's output), and c1 is also a graph output.
    let mut b = training_graph(false);
    let c = b.variable_init("c", DType::DtypeF32, &[], vec![string("init", "zeros")]);
    let one = b.variable_init("one", DType::DtypeF32, &[], vec![string("init", "ones")]);
    let c1 = b.op("c1", "Add", &[c, one], &[], vec![]);
    b.update(c1, c);
    let later = b.op("later", "Mul", &[c1, one], &[], vec![]);
    b.graph.outputs.extend([later, c1]);
    let mut s = session(&b, options(0)).unwrap();
    for expected in [1.0f32, 2.0, 3.0] {
        let step = s.step().unwrap();
        assert_eq!((f32s(&step.outputs[1]), f32s(&step.outputs[2])), (vec![expected], vec![expected]));
    }
    assert_eq!(variable(&mut s, "c"), vec![3.0]);
}

#[test]
fn dropout_masks_depend_on_the_run_seed_and_the_step() {
    let masks = |seed: u64| {
        let mut b = Builder::new("dropout");
        let x = b.input("x", DType::DtypeF32, &[256], vec![]);
        let (id, outs) = b.node(
            "drop",
            "DropoutTrain",
            &[Some(x)],
            &[("y", DType::DtypeF32, &[256]), ("mask", DType::DtypeBool, &[256])],
            vec![float("ratio", 0.5), int("seed", 3)],
        );
        b.graph.nodes[id as usize].domain = "lms".into();
        b.graph.outputs.push(outs[1]);
        let mut s = session(&b, options(seed)).unwrap();
        (0..3).map(|_| s.step().unwrap().outputs[0].as_bool("mask").unwrap().to_vec()).collect::<Vec<_>>()
    };
    let first = masks(1);
    assert_ne!(first[0], first[1], "every step draws a new mask");
    assert_ne!(first[1], first[2], "every step draws a new mask");
    assert_eq!(first, masks(1), "a run is reproducible from its seed");
    assert_ne!(first[0], masks(2)[0], "another run seed, another mask");
}
