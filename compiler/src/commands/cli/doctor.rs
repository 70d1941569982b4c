//! `lms doctor`: whether this machine can run `--device cuda`.

use crate::Error;

/// Runs `lms doctor`.
pub(crate) fn command() -> Result<(), Error> {
    let diagnosis = lms_runtime::backend::cuda::doctor();
    out!("{}", diagnosis.facts);
    diagnosis.problem.map_or(Ok(()), |problem| Err(Error::Usage(problem)))
}
