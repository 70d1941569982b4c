//! Forward numerics of the CPU backend against ONNX's expected outputs: every
//! pytorch-converted / pytorch-operator case whose ops lms supports runs on
//! the runtime with the case's inputs and matches its outputs to a relative
//! 1e-4 (absolute 1e-5 near zero).

use lms_compiler::frontend::{self, tensor, FrontendOptions};
use lms_proto::onnx::TensorProto;
use lms_proto::Message;
use lms_runtime::HostTensor;
use lms_tests::training::serialized;
use lms_tests::{list, onnx_data};
use std::collections::BTreeMap;
use std::path::Path;

fn load_tensor(path: &Path) -> HostTensor {
    let proto = TensorProto::decode(&*std::fs::read(path).unwrap()).unwrap();
    let data = tensor::decode(&proto, None).unwrap();
    let dtype = lms_proto::lms::DType::try_from(data.ty.dtype.code()).unwrap();
    HostTensor::from_le_bytes(dtype, &data.ty.shape, &data.bytes).unwrap()
}

fn to_f64s(t: &HostTensor) -> Vec<f64> {
    use lms_runtime::Buffer;
    match &t.data {
        Buffer::F32(v) => v.iter().map(|&x| x as f64).collect(),
        Buffer::F64(v) => v.clone(),
        Buffer::I64(v) => v.iter().map(|&x| x as f64).collect(),
        Buffer::I32(v) => v.iter().map(|&x| x as f64).collect(),
        Buffer::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
        Buffer::U8(v) => v.iter().map(|&x| x as f64).collect(),
        Buffer::I8(v) => v.iter().map(|&x| x as f64).collect(),
    }
}

fn files(case: &Path, prefix: &str) -> Vec<HostTensor> {
    list(&case.join("test_data_set_0"), |p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
        .iter()
        .map(|p| load_tensor(p))
        .collect()
}

/// Runs one case; the first mismatch, if any.
fn run_case(name: &str, case: &Path) -> Result<(), String> {
    let model = frontend::load(&case.join("model.onnx"), &FrontendOptions::default()).map_err(|e| e.to_string())?;
    let graph = serialized(&model.graph);
    let inputs = files(case, "input_");
    if inputs.len() != model.graph.inputs.len() {
        return Err(format!("{} inputs given, the graph has {}", inputs.len(), model.graph.inputs.len()));
    }
    let values: BTreeMap<String, HostTensor> =
        model.graph.inputs.iter().map(|&t| model.graph.tensor(t).name.clone()).zip(inputs).collect();
    let program = lms_runtime::Program::new(graph, name).map_err(|e| e.to_string())?;
    let options = lms_runtime::RunOptions::default();
    let mut session = lms_runtime::Session::with_values(program, lms_runtime::CpuBackend::new(), options, &values)
        .map_err(|e| e.to_string())?;
    let outputs = session.step().map_err(|e| e.to_string())?.outputs;
    let expected = files(case, "output_");
    if outputs.len() != expected.len() {
        return Err(format!("{} outputs, expected {}", outputs.len(), expected.len()));
    }
    for (i, (got, want)) in outputs.iter().zip(&expected).enumerate() {
        if got.shape != want.shape {
            return Err(format!("output {i} has shape {:?}, expected {:?}", got.shape, want.shape));
        }
        for (j, (a, b)) in to_f64s(got).iter().zip(to_f64s(want)).enumerate() {
            if (a - b).abs() > 1e-4 * b.abs() + 1e-5 {
                return Err(format!("output {i}[{j}] = {a}, expected {b}"));
            }
        }
    }
    Ok(())
}

#[test]
fn pytorch_cases_match_expected_outputs() {
    let mut passed = 0;
    let mut failures = Vec::new();
    for suite in ["pytorch-converted", "pytorch-operator"] {
        for case in list(&onnx_data(suite), |p| p.is_dir()) {
            let name = format!("{suite}/{}", case.file_name().unwrap().to_str().unwrap());
            match run_case(&name, &case) {
                Ok(()) => passed += 1,
                Err(e) => failures.push(format!("{name}: {e}")),
            }
        }
    }
    println!("{passed} cases match");
    assert!(failures.is_empty(), "{} cases fail:\n{}", failures.len(), failures.join("\n"));
    assert!(passed >= 100, "only {passed} cases ran");
}
