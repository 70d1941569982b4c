//! Device profiles: the peak rates and latencies the time model turns work
//! into seconds with. Profiles are JSON files; the shipped ones
//! (`compiler/profiles/*.json`: h100-sxm, h100-pcie, h200, a100, cpu) are
//! built into the binary, and any other file of the same format can be
//! given by path. A measured profile adds `op_seconds`, the time of ops keyed
//! by [`op_key`], which then replaces the roofline estimate for those ops.
//!
//! Format versions: 1, the peaks and bandwidths; 2 adds `kernel_rates`, the
//! rates `lms profile` measures per kernel class and size, which replace the
//! roofline for every kernel (a file without `format_version` is version 1).

use crate::error::{Error, Result};
use crate::ir::{Graph, NodeId};
use crate::shape::cost::KernelClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

/// The profile used when none is named.
pub const DEFAULT_PROFILE: &str = "h100-sxm";

/// Largest profile file read, and carried in a plan: 8 MiB (a measured
/// profile of a 100,000-node graph's op types is a few hundred KiB).
pub const MAX_PROFILE_BYTES: u64 = lms_proto::contract::plan::MAX_DEVICE_PROFILE_BYTES;

/// The shipped profiles: (name, JSON text).
pub const SHIPPED: &[(&str, &str)] = &[
    ("h100-sxm", include_str!("../../profiles/h100-sxm.json")),
    ("h100-pcie", include_str!("../../profiles/h100-pcie.json")),
    ("h200", include_str!("../../profiles/h200.json")),
    ("a100", include_str!("../../profiles/a100.json")),
    ("cpu", include_str!("../../profiles/cpu.json")),
];

/// The newest profile format this lms reads and the one `lms profile` writes.
pub const FORMAT_VERSION: u32 = 2;

/// Measured rates of a backend's kernels, per class and size: each a list of
/// `[size, rate]` points in increasing size — FLOPs and FLOP/s for the matrix
/// classes, bytes moved (read + written) and bytes/s for the others. A
/// kernel's rate is interpolated between the points on log scales, and held
/// at the first and last point beyond them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelRates {
    pub matmul: Vec<[f64; 2]>,
    pub conv: Vec<[f64; 2]>,
    /// True when the backend runs a convolution as im2col and a matrix
    /// product per image, and every product on one core (the CPU backend):
    /// a convolution's or matrix product's time is then that of its
    /// products, each at the `matmul` rate of a square product of its
    /// smallest side, plus its lowering's bytes at the elementwise rate
    /// ([`super::gemm`]); `conv` rates are kept for an op whose shapes do
    /// not give the products (read at the FLOPs of one image).
    #[serde(default)]
    pub conv_by_image: bool,
    pub elementwise: Vec<[f64; 2]>,
    pub reduction: Vec<[f64; 2]>,
    /// Kernels of [`KernelClass::Transcendental`]; a profile without them
    /// rates those kernels as elementwise ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transcendental: Vec<[f64; 2]>,
}

impl KernelRates {
    /// The points of `class`.
    pub fn points(&self, class: KernelClass) -> &[[f64; 2]] {
        match class {
            KernelClass::MatMul => &self.matmul,
            KernelClass::Conv => &self.conv,
            KernelClass::Elementwise => &self.elementwise,
            KernelClass::Reduction => &self.reduction,
            KernelClass::Transcendental if self.transcendental.is_empty() => &self.elementwise,
            KernelClass::Transcendental => &self.transcendental,
        }
    }

    /// The highest rate of `class` at any size.
    pub fn best(&self, class: KernelClass) -> f64 {
        self.points(class).iter().map(|p| p[1]).fold(0.0, f64::max)
    }

    /// The rate of a `class` kernel of `size` (FLOPs or bytes).
    pub fn rate(&self, class: KernelClass, size: f64) -> f64 {
        let points = self.points(class);
        let i = points.partition_point(|p| p[0] <= size);
        if i == 0 {
            return points[0][1];
        }
        if i == points.len() {
            return points[i - 1][1];
        }
        let ([s0, r0], [s1, r1]) = (points[i - 1], points[i]);
        let at = (size.ln() - s0.ln()) / (s1.ln() - s0.ln());
        (r0.ln() + at * (r1.ln() - r0.ln())).exp()
    }

    /// Every class has points, sizes rising, every size and rate positive.
    fn check(&self, profile: &str) -> Result<()> {
        let classes = [
            ("matmul", KernelClass::MatMul),
            ("conv", KernelClass::Conv),
            ("elementwise", KernelClass::Elementwise),
            ("reduction", KernelClass::Reduction),
            ("transcendental", KernelClass::Transcendental),
        ];
        for (field, class) in classes {
            let points = self.points(class);
            let positive = points.iter().flatten().all(|v| v.is_finite() && *v > 0.0);
            let rising = points.windows(2).all(|w| w[0][0] < w[1][0]);
            if points.is_empty() || !positive || !rising {
                return Err(Error::Usage(format!(
                    "profile '{profile}': kernel_rates.{field} must be [size, rate] points of positive numbers, \
                     sizes rising"
                )));
            }
        }
        Ok(())
    }
}

/// Peak arithmetic rates, FLOP/s (2 FLOPs per multiply-add), dense.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeakFlops {
    pub fp32: f64,
    pub tf32: f64,
    pub bf16: f64,
}

/// The precision whose peak convolutions and matrix products run at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    Fp32,
    Tf32,
    Bf16,
}

/// A device's rates, as read from a profile file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    /// The profile format ([`FORMAT_VERSION`]); 1 when the file has none.
    #[serde(default = "first_format")]
    pub format_version: u32,
    /// Short name, written into the plan (e.g. `h100-sxm`).
    pub name: String,
    /// What the device is and where the figures come from.
    pub description: String,
    pub peak_flops: PeakFlops,
    /// The peak that `Conv`, `ConvTranspose`, `Gemm`, `MatMul` and their
    /// gradients run at: the precision the runtime computes them in.
    pub matrix_precision: Precision,
    /// Why that precision (the runtime's TF32 policy).
    #[serde(default)]
    pub matrix_precision_note: String,
    /// Device memory bandwidth, bytes/s.
    pub memory_bytes_per_second: f64,
    /// The link to host memory, in words.
    #[serde(default)]
    pub host_link: String,
    /// Copy bandwidth host → device (swap-ins), bytes/s.
    pub host_to_device_bytes_per_second: f64,
    /// Copy bandwidth device → host (swap-outs), bytes/s.
    pub device_to_host_bytes_per_second: f64,
    /// Fixed time added to every kernel launch and copy, seconds.
    pub launch_seconds: f64,
    /// Time added per input and output of a kernel, seconds (format 2; the
    /// CPU backend reads each input out of its arena block and writes each
    /// output into its own; a swap's copy does neither).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tensor_seconds: f64,
    /// Time added to every scheduled node that is not a parameterized vertex
    /// or a swap, views included, seconds (format 2): what a node of a training step
    /// takes beyond its kernel's time as chains of one kind of op measure it
    /// (the executor's work around it, code and data a step no longer holds
    /// in cache).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub node_seconds: f64,
    /// True when copies run on their own streams beside compute (GPUs);
    /// false when the backend runs them in line with compute, in schedule
    /// order (the CPU backend).
    pub copies_overlap_compute: bool,
    /// Measured seconds per op, keyed by [`op_key`]; these replace the
    /// roofline estimate.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub op_seconds: BTreeMap<String, f64>,
    /// Measured kernel rates (format 2): they replace the roofline of the
    /// peaks and memory bandwidth for every kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_rates: Option<KernelRates>,
}

fn is_zero(value: &f64) -> bool {
    *value == 0.0
}

/// The format of a profile file that names none.
fn first_format() -> u32 {
    1
}

impl DeviceProfile {
    /// The file `name_or_file` names when it is not a shipped profile's
    /// name: an input the command's outputs must not overwrite.
    pub fn file(name_or_file: &str) -> Option<&Path> {
        let shipped = SHIPPED.iter().any(|(name, _)| *name == name_or_file);
        (!shipped && !name_or_file.is_empty()).then(|| Path::new(name_or_file))
    }

    /// The profile named `name_or_file`: a shipped profile's name, or the
    /// path of a profile file.
    pub fn load(name_or_file: &str) -> Result<DeviceProfile> {
        if let Some((_, text)) = SHIPPED.iter().find(|(name, _)| *name == name_or_file) {
            return DeviceProfile::parse(text).map_err(|e| e.in_file(format!("{name_or_file} (shipped profile)")));
        }
        let path = Path::new(name_or_file);
        if !path.exists() {
            let names: Vec<&str> = SHIPPED.iter().map(|(name, _)| *name).collect();
            return Err(Error::Usage(format!(
                "unknown device profile '{name_or_file}': not a file and not one of {}",
                names.join(", ")
            )));
        }
        let in_file = |e: Error| e.in_file(path);
        let bytes = lms_proto::input::read_regular(path, MAX_PROFILE_BYTES).map_err(|e| in_file(e.into()))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| in_file(Error::Usage("not a device profile: not UTF-8 text".into())))?;
        DeviceProfile::parse(&text).map_err(in_file)
    }

    /// The profile a plan was made with: the one it carries (from a file),
    /// else the shipped profile it names (older files: the file it names),
    /// else the default.
    pub fn of_plan(plan: &crate::ir::Plan) -> Result<DeviceProfile> {
        let loaded = match (&plan.device_profile_json, plan.device_profile.as_str()) {
            (Some(json), _) => DeviceProfile::parse(json),
            (None, "") => DeviceProfile::load(DEFAULT_PROFILE),
            (None, name) => DeviceProfile::load(name),
        };
        loaded.map_err(|e| Error::Usage(format!("the plan's device profile: {e}")))
    }

    /// Parses and checks a profile's JSON text.
    pub fn parse(text: &str) -> Result<DeviceProfile> {
        let profile: DeviceProfile =
            serde_json::from_str(text).map_err(|e| Error::Usage(format!("not a device profile: {e}")))?;
        profile.check()?;
        Ok(profile)
    }

    /// The peak of the matrix precision, FLOP/s.
    pub fn matrix_flops(&self) -> f64 {
        match self.matrix_precision {
            Precision::Fp32 => self.peak_flops.fp32,
            Precision::Tf32 => self.peak_flops.tf32,
            Precision::Bf16 => self.peak_flops.bf16,
        }
    }

    /// Every rate must be positive and finite, every time non-negative.
    fn check(&self) -> Result<()> {
        let rates = [
            ("peak_flops.fp32", self.peak_flops.fp32),
            ("peak_flops.tf32", self.peak_flops.tf32),
            ("peak_flops.bf16", self.peak_flops.bf16),
            ("memory_bytes_per_second", self.memory_bytes_per_second),
            ("host_to_device_bytes_per_second", self.host_to_device_bytes_per_second),
            ("device_to_host_bytes_per_second", self.device_to_host_bytes_per_second),
        ];
        for (field, value) in rates {
            if !(value.is_finite() && value > 0.0) {
                return Err(Error::Usage(format!("profile '{}': {field} must be a positive number", self.name)));
            }
        }
        let times = [
            ("launch_seconds", self.launch_seconds),
            ("tensor_seconds", self.tensor_seconds),
            ("node_seconds", self.node_seconds),
        ]
        .into_iter()
        .chain(self.op_seconds.iter().map(|(key, &s)| (key.as_str(), s)));
        for (what, value) in times {
            if !(value.is_finite() && value >= 0.0) {
                return Err(Error::Usage(format!(
                    "profile '{}': {what} must be a non-negative number of seconds",
                    self.name
                )));
            }
        }
        if self.name.is_empty() {
            return Err(Error::Usage("profile has an empty name".into()));
        }
        if !(1..=FORMAT_VERSION).contains(&self.format_version) {
            return Err(Error::Usage(format!(
                "profile '{}': format_version {} is not one this lms reads (1 to {FORMAT_VERSION})",
                self.name, self.format_version
            )));
        }
        if let Some(rates) = &self.kernel_rates {
            if self.format_version < 2 {
                return Err(Error::Usage(format!("profile '{}': kernel_rates need format_version 2", self.name)));
            }
            rates.check(&self.name)?;
        }
        Ok(())
    }
}

/// The key of a node in a measured profile's `op_seconds`: the op and the
/// types of its inputs and outputs, e.g.
/// `Conv(f32[8,3,224,224],f32[64,3,7,7])->f32[8,64,112,112]`; an omitted
/// input is `_`.
pub fn op_key(g: &Graph, id: NodeId) -> String {
    let node = g.node(id);
    let mut key = String::with_capacity(64);
    key.push_str(&node.op);
    key.push('(');
    for (i, input) in node.inputs.iter().enumerate() {
        if i > 0 {
            key.push(',');
        }
        match input {
            Some(t) => {
                let _ = write!(key, "{}", g.tensor(*t).ty);
            }
            None => key.push('_'),
        }
    }
    key.push_str(")->");
    for (i, t) in node.outputs.iter().enumerate() {
        if i > 0 {
            key.push(',');
        }
        let _ = write!(key, "{}", g.tensor(*t).ty);
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_profiles_parse_and_name_themselves() {
        for (name, _) in SHIPPED {
            let p = DeviceProfile::load(name).unwrap();
            assert_eq!(p.name, *name);
            assert_eq!(p.format_version, 1, "{name}: the shipped profiles are roofline profiles");
            assert!(p.peak_flops.fp32 <= p.peak_flops.tf32 || p.name == "cpu", "{name}: TF32 below FP32");
        }
        let h100 = DeviceProfile::load(DEFAULT_PROFILE).unwrap();
        assert_eq!((h100.matrix_precision, h100.matrix_flops()), (Precision::Fp32, 67e12));
        assert!(h100.copies_overlap_compute);
        assert!(!DeviceProfile::load("cpu").unwrap().copies_overlap_compute);
    }

    #[test]
    fn kernel_rates_interpolate_on_log_scales_and_hold_at_the_ends() {
        let rates = KernelRates {
            matmul: vec![[1e3, 1e9], [1e5, 1e11]],
            conv: vec![[1.0, 5.0]],
            conv_by_image: false,
            elementwise: vec![[1e3, 2e9], [1e6, 2e9]],
            reduction: vec![[1e3, 1e8], [1e5, 4e8]],
            transcendental: vec![],
        };
        // Without transcendental points, those kernels run at the elementwise rate.
        assert!((rates.rate(KernelClass::Transcendental, 1e4) - 2e9).abs() < 1.0);
        assert_eq!(rates.rate(KernelClass::MatMul, 10.0), 1e9);
        assert!((rates.rate(KernelClass::MatMul, 1e4) - 1e10).abs() < 1.0);
        assert_eq!(rates.rate(KernelClass::MatMul, 1e9), 1e11);
        assert!((rates.rate(KernelClass::Reduction, 1e4) - 2e8).abs() < 1e-3);
        assert_eq!(rates.rate(KernelClass::Conv, 1e9), 5.0);

        let mut value: serde_json::Value = serde_json::from_str(SHIPPED[4].1).unwrap();
        value["kernel_rates"] = serde_json::to_value(&rates).unwrap();
        let err = DeviceProfile::parse(&value.to_string()).unwrap_err().to_string();
        assert_eq!(err, "profile 'cpu': kernel_rates need format_version 2");
        value["format_version"] = serde_json::json!(2);
        assert_eq!(DeviceProfile::parse(&value.to_string()).unwrap().kernel_rates, Some(rates.clone()));
        value["kernel_rates"]["reduction"] = serde_json::json!([[1e5, 1e8], [1e3, 4e8]]);
        let err = DeviceProfile::parse(&value.to_string()).unwrap_err().to_string();
        assert!(err.starts_with("profile 'cpu': kernel_rates.reduction must be [size, rate] points"), "{err}");
        value["format_version"] = serde_json::json!(3);
        let err = DeviceProfile::parse(&value.to_string()).unwrap_err().to_string();
        assert_eq!(err, "profile 'cpu': format_version 3 is not one this lms reads (1 to 2)");
    }

    #[test]
    fn bad_profiles_are_refused_with_the_field() {
        let err = DeviceProfile::load("h100-sxn").unwrap_err().to_string();
        assert!(err.starts_with("unknown device profile 'h100-sxn': not a file and not one of h100-sxm,"), "{err}");
        let mut value: serde_json::Value = serde_json::from_str(SHIPPED[0].1).unwrap();
        value["memory_bytes_per_second"] = serde_json::json!(0);
        let err = DeviceProfile::parse(&value.to_string()).unwrap_err().to_string();
        assert_eq!(err, "profile 'h100-sxm': memory_bytes_per_second must be a positive number");
        value["memory_bytes_per_second"] = serde_json::json!(1e12);
        value["op_seconds"] = serde_json::json!({ "Relu(f32[2])->f32[2]": -1.0 });
        let err = DeviceProfile::parse(&value.to_string()).unwrap_err().to_string();
        assert!(err.contains("Relu(f32[2])->f32[2] must be a non-negative"), "{err}");
        value["hbm"] = serde_json::json!(1);
        let err = DeviceProfile::parse(&value.to_string()).unwrap_err().to_string();
        assert!(err.starts_with("not a device profile: unknown field `hbm`"), "{err}");
    }
}
