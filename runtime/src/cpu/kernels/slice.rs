//! stub
use super::Kernel;
pub(super) const KERNELS: &[(&str, Kernel)] = &[];
