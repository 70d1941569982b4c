//! The one error type of the contract: a `.lms` file is not a valid lms program.

use std::fmt;

/// Why a `.lms` file (or serialized graph) breaks the contract. Displayed as one line,
/// `FILE: WHAT: REASON`, where WHAT names the tensor, node, edge or plan entry at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContractError {
    /// The file, or the name the caller gave the bytes.
    pub file: String,
    /// What is wrong, naming the tensor or node at fault.
    pub message: String,
}

impl fmt::Display for ContractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.message)
    }
}

impl std::error::Error for ContractError {}
