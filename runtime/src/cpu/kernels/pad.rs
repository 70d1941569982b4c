//! Pad in constant, reflect, edge and wrap modes; pads (possibly negative, which crops)
//! given as an attribute (opset < 11) or an input, optionally on selected axes.

use super::{Ctx, Kernel};
use crate::error::{KernelError, Result};
use crate::geometry::layout::norm_axes;
use crate::tensor::{dispatch, numel, Elem, HostTensor};

/// The pad kernel.
pub(super) const KERNELS: &[(&str, Kernel)] = &[("Pad", pad)];

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

/// For each output coordinate on one axis, the input coordinate it reads (`None`: the
/// constant).
fn axis_map(dim: usize, begin: i64, out: usize, mode: Mode) -> Result<Vec<Option<usize>>> {
    if dim == 0 && mode != Mode::Constant && out > 0 {
        return Err(KernelError::invalid("cannot pad an empty axis except with a constant"));
    }
    let n = dim as i128;
    Ok((0..out as i128)
        .map(|o| {
            let i = o - i128::from(begin);
            let j = match mode {
                _ if (0..n).contains(&i) => i,
                Mode::Constant => return None,
                Mode::Edge => i.max(0).min(n - 1),
                Mode::Wrap => i.rem_euclid(n),
                Mode::Reflect if n == 1 => 0,
                Mode::Reflect => {
                    let m = i.rem_euclid(2 * (n - 1));
                    if m >= n {
                        2 * (n - 1) - m
                    } else {
                        m
                    }
                }
            };
            Some(j as usize)
        })
        .collect())
}

fn pad(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "data")?;
    let mode = match ctx.attrs.string("mode", "constant")? {
        "constant" => Mode::Constant,
        "reflect" => Mode::Reflect,
        "edge" => Mode::Edge,
        "wrap" => Mode::Wrap,
        other => return Err(KernelError::attr("mode", format!("unknown value `{other}`"))),
    };
    let pads = ctx.ints_attr_or_input("pads", 1, "pads")?.ok_or_else(|| KernelError::MissingInput("pads".into()))?;
    let axes = match ctx.opt_input(3) {
        Some(t) => norm_axes(&t.to_i64s("input axes")?, x.rank(), "axis")?,
        None => (0..x.rank()).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(KernelError::invalid(format!("{} pads for {} axes", pads.len(), axes.len())));
    }
    let (mut begin, mut end) = (vec![0i64; x.rank()], vec![0i64; x.rank()]);
    for (k, &a) in axes.iter().enumerate() {
        (begin[a], end[a]) = (pads[k], pads[k + axes.len()]);
    }
    let shape = (0..x.rank())
        .map(|d| {
            usize::try_from(x.shape[d] as i128 + i128::from(begin[d]) + i128::from(end[d]))
                .map_err(|_| KernelError::invalid(format!("pads {pads:?} do not fit axis {d}")))
        })
        .collect::<Result<Vec<_>>>()?;
    ctx.check_declared(0, &shape)?;
    let maps = (0..x.rank()).map(|d| axis_map(x.shape[d], begin[d], shape[d], mode)).collect::<Result<Vec<_>>>()?;
    let data = dispatch!(x.dtype(), T => {
        let value = match (ctx.opt_input(2), ctx.attrs.float_opt("value")?) {
            (Some(t), _) => *t.view::<T>("input constant_value")?.first().ok_or_else(|| KernelError::shape("input constant_value", "is empty"))?,
            (None, Some(v)) => T::from_f64(f64::from(v)),
            (None, None) => T::default(),
        };
        Ok(T::wrap(gather_padded(x.view::<T>("input data")?, &x.shape, &shape, &maps, value)))
    })?;
    Ok(vec![HostTensor::new(shape, data)?])
}

/// Builds the padded tensor: each output element reads the input at the per-axis mapped
/// coordinates, or is `value` when any axis maps to the constant.
fn gather_padded<T: Copy>(
    xs: &[T],
    in_shape: &[usize],
    shape: &[usize],
    maps: &[Vec<Option<usize>>],
    value: T,
) -> Vec<T> {
    let total = numel(shape);
    let mut out = Vec::with_capacity(total);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..total {
        let mut offset = Some(0usize);
        for (d, &i) in idx.iter().enumerate() {
            offset = offset.zip(maps[d][i]).map(|(o, j)| o * in_shape[d] + j);
        }
        out.push(offset.map_or(value, |o| xs[o]));
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use lms_proto::lms::DType::*;

    #[test]
    fn pad_modes() {
        let x = tensor(&[1, 3], vec![1.0f32, 2.0, 3.0]);
        let pads = tensor(&[4], vec![0i64, 2, 0, 3]);
        let run_mode = |mode: &str| f32s(&run1("Pad", &[string("mode", mode)], &[&x, &pads], DtypeF32, &[1, 8]));
        assert_eq!(run_mode("constant"), vec![0.0, 0.0, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0]);
        assert_eq!(run_mode("edge"), vec![1.0, 1.0, 1.0, 2.0, 3.0, 3.0, 3.0, 3.0]);
        assert_eq!(run_mode("reflect"), vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0, 2.0]);
        assert_eq!(run_mode("wrap"), vec![2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    }

    #[test]
    fn pad_value_forms_axes_and_cropping() {
        let x = tensor(&[2, 2], vec![1i64, 2, 3, 4]);
        let y = run("Pad", 2, &[ints("pads", &[1, 0, 0, 1]), float("value", 9.0)], &[&x], &[(DtypeI64, vec![3, 3])])
            .unwrap();
        assert_eq!(y[0].as_i64("y").unwrap(), &[9, 9, 9, 1, 2, 9, 3, 4, 9]);
        let pads = tensor(&[2], vec![1i64, -1]);
        let value = tensor::<i64>(&[], vec![7]);
        let axes = tensor(&[1], vec![-1i64]);
        let y = run("Pad", 18, &[], &[&x, &pads, &value, &axes], &[(DtypeI64, vec![2, 2])]).unwrap();
        assert_eq!(y[0].as_i64("y").unwrap(), &[7, 1, 7, 3]);
        let too_much = tensor(&[4], vec![0i64, -3, 0, 0]);
        assert!(run("Pad", 13, &[], &[&x, &too_much], &[(DtypeI64, vec![2, 0])]).is_err());
    }
}
