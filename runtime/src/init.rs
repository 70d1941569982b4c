//! Initial values of the parameterized vertices: variables by their `init` attribute
//! (`proto/OPS.md`) and synthetic inputs, drawn from the run's seed.
//!
//! Every random draw comes from a ChaCha8 stream keyed by the run's seed and selected by
//! the vertex's name, so a value depends on (seed, name) only, never on the order in which
//! vertices are initialised. Normal draws use Box–Muller with `libm`'s functions, so they
//! are the same on every platform.

use crate::attrs::Attrs;
use crate::error::RuntimeError;
use crate::tensor::{dispatch, numel, Elem, HostTensor};
use lms_proto::contract::{Program, TensorType, INPUT_OP};
use lms_proto::lms::DType;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// Integer inputs without a `range` attribute are drawn in [0, 2).
pub const DEFAULT_INPUT_RANGE: i64 = 2;

/// The initial value of parameterized node `node` of `program` in a run seeded by `seed`.
///
/// An `Input` gets a synthetic value: standard normal floats, or integers uniform in
/// [0, `range`). A `Variable` follows its `init` attribute: `data` (the default; the
/// tensor's stored bytes), `zeros`, `ones`, `he` (normal with std √(2/`fan_in`)) or
/// `xavier` (uniform in ±√(6/(`fan_in`+`fan_out`))).
pub fn initial_value(program: &Program, node: usize, seed: u64) -> Result<HostTensor, RuntimeError> {
    let n = program.node(node);
    let fail = |message: String| RuntimeError::Init { node: n.name.clone(), message };
    let tensor =
        *program.node_outputs(node).first().ok_or_else(|| fail("a parameterized vertex has no output".into()))?;
    let ty = program.tensor_type(tensor);
    let attrs = Attrs::new(&n.attributes);
    let mut rng = stream(seed, &n.name);
    let value = if n.op == INPUT_OP {
        synthetic_input(&attrs, ty, &mut rng)
    } else {
        variable_value(&attrs, &program.graph().tensors[tensor].data, ty, &mut rng)
    };
    value.map_err(fail)
}

/// A synthetic input: standard normal floats, integers uniform in [0, `range`).
fn synthetic_input(attrs: &Attrs<'_>, ty: &TensorType, rng: &mut ChaCha8Rng) -> Result<HostTensor, String> {
    let count = numel(&ty.shape);
    if is_float(ty.dtype) {
        return from_f64s(ty, normals(rng, count));
    }
    let range = attrs.int("range", DEFAULT_INPUT_RANGE).map_err(|e| e.to_string())?;
    let range = u64::try_from(range).ok().filter(|&r| r > 0).ok_or(format!("range {range} is not positive"))?;
    let values = (0..count).map(|_| below(rng, range) as i64).collect();
    from_i64s(ty, values)
}

/// A variable's value from its `init` attribute.
fn variable_value(attrs: &Attrs<'_>, data: &[u8], ty: &TensorType, rng: &mut ChaCha8Rng) -> Result<HostTensor, String> {
    let init = attrs.string("init", "data").map_err(|e| e.to_string())?;
    let count = numel(&ty.shape);
    let fan = |name: &str| -> Result<f64, String> {
        match attrs.int_opt(name).map_err(|e| e.to_string())? {
            Some(v) if v > 0 => Ok(v as f64),
            Some(v) => Err(format!("init '{init}': {name} {v} is not positive")),
            None => Err(format!("init '{init}' needs the {name} attribute")),
        }
    };
    let need_float = || {
        if is_float(ty.dtype) {
            Ok(())
        } else {
            Err(format!("init '{init}' needs a float tensor, not {}", crate::tensor::dtype_name(ty.dtype)))
        }
    };
    match init {
        "data" if data.len() as u64 != ty.bytes => {
            Err(format!("init 'data', but the tensor stores {} bytes and its type takes {}", data.len(), ty.bytes))
        }
        "data" => HostTensor::from_le_bytes(ty.dtype, &ty.shape, data).map_err(|e| e.to_string()),
        "zeros" => HostTensor::zeros(ty.dtype, &ty.shape).map_err(|e| e.to_string()),
        "ones" => from_i64s(ty, vec![1; count]),
        "he" => {
            need_float()?;
            let std = libm::sqrt(2.0 / fan("fan_in")?);
            from_f64s(ty, normals(rng, count).into_iter().map(|z| z * std).collect())
        }
        "xavier" => {
            need_float()?;
            let limit = libm::sqrt(6.0 / (fan("fan_in")? + fan("fan_out")?));
            from_f64s(ty, (0..count).map(|_| (2.0 * uniform(rng) - 1.0) * limit).collect())
        }
        other => Err(format!("unknown init '{other}' (expected data, he, xavier, zeros or ones)")),
    }
}

fn is_float(dtype: DType) -> bool {
    matches!(dtype, DType::DtypeF32 | DType::DtypeF64 | DType::DtypeF16 | DType::DtypeBf16)
}

/// A tensor of `ty` from f64 values, converted like a C cast.
fn from_f64s(ty: &TensorType, values: Vec<f64>) -> Result<HostTensor, String> {
    let data = dispatch!(ty.dtype, T => Ok(T::wrap(values.into_iter().map(T::from_f64).collect())))
        .map_err(|e| e.to_string())?;
    HostTensor::new(ty.shape.clone(), data).map_err(|e| e.to_string())
}

/// A tensor of `ty` from i64 values (non-zero is true).
fn from_i64s(ty: &TensorType, values: Vec<i64>) -> Result<HostTensor, String> {
    let data = dispatch!(ty.dtype, T => Ok(T::wrap(values.into_iter().map(T::from_i64).collect())))
        .map_err(|e| e.to_string())?;
    HostTensor::new(ty.shape.clone(), data).map_err(|e| e.to_string())
}

/// The random stream of vertex `name` in a run seeded by `seed`.
fn stream(seed: u64, name: &str) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(fnv1a(name.as_bytes()));
    rng
}

/// 64-bit FNV-1a hash: a stable stream id for a name.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// A uniform draw in [0, 1) with 53 random bits.
fn uniform(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A draw in [0, n) by multiply-shift (bias below 2⁻⁶⁴·n).
fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    ((u128::from(rng.next_u64()) * u128::from(n)) >> 64) as u64
}

/// `count` standard normal draws (Box–Muller, both values of each pair used).
fn normals(rng: &mut ChaCha8Rng, count: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let (u1, u2) = (1.0 - uniform(rng), uniform(rng));
        let r = libm::sqrt(-2.0 * libm::log(u1));
        let theta = 2.0 * std::f64::consts::PI * u2;
        out.push(r * libm::cos(theta));
        if out.len() < count {
            out.push(r * libm::sin(theta));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_depend_on_seed_and_name_only() {
        let a: Vec<u64> = (0..4).map(|_| stream(7, "w").next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(stream(7, "w").next_u64(), stream(8, "w").next_u64());
        assert_ne!(stream(7, "w").next_u64(), stream(7, "v").next_u64());
    }

    #[test]
    fn normal_and_uniform_statistics() {
        let mut rng = stream(1, "x");
        let z = normals(&mut rng, 20_001);
        assert_eq!(z.len(), 20_001);
        let mean = z.iter().sum::<f64>() / z.len() as f64;
        let var = z.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / z.len() as f64;
        assert!(mean.abs() < 0.03 && (var - 1.0).abs() < 0.05, "mean {mean} var {var}");
        let k: Vec<u64> = (0..1000).map(|_| below(&mut rng, 10)).collect();
        assert!(k.iter().all(|&v| v < 10) && (0..10).all(|v| k.contains(&v)));
        assert!((0..1000).map(|_| uniform(&mut rng)).all(|u| (0.0..1.0).contains(&u)));
    }
}
