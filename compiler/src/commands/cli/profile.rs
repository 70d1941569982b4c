//! `lms profile`: its flags, and the profile file it writes.

use super::DeviceArg;
use crate::commands::run::DeviceKind;
use crate::{emit, Error};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub(crate) struct ProfileArgs {
    /// Backend to measure.
    #[arg(long, value_enum, default_value = "cpu")]
    pub(crate) device: DeviceArg,
    /// The profile file to write (JSON, the format `--device-profile` reads).
    #[arg(short = 'o', long = "output", value_name = "FILE.json")]
    pub(crate) output: PathBuf,
    /// The profile's name (default: the device's, with `-measured`).
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Small sizes and few steps: seconds instead of under a minute, rough rates.
    #[arg(long)]
    pub(crate) quick: bool,
}

/// Runs `lms profile`.
pub(crate) fn command(args: &ProfileArgs) -> Result<(), Error> {
    let (device, word) = match args.device {
        DeviceArg::Cpu => (DeviceKind::Cpu, "cpu"),
        DeviceArg::Cuda => (DeviceKind::Cuda, "cuda"),
    };
    let name = args.name.clone().unwrap_or_else(|| format!("{word}-measured"));
    let options = crate::commands::profile::ProfileOptions { quick: args.quick };
    let profile = crate::commands::profile::measure(device, &name, options)?;
    let json = serde_json::to_string_pretty(&profile).map_err(|e| Error::Usage(e.to_string()))?;
    emit::output::write_atomically(&args.output, format!("{json}\n").as_bytes())?;
    out!(
        "wrote {}: per-op overhead {:.2} us, swap copies {:.2} GB/s to host and {:.2} GB/s to device\n",
        args.output.display(),
        profile.launch_seconds * 1e6,
        profile.device_to_host_bytes_per_second / 1e9,
        profile.host_to_device_bytes_per_second / 1e9
    );
    Ok(())
}
