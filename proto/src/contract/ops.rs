//! The lms op names (`proto/OPS.md`) and what each kind of node does at run time.

/// Op type of a variable: a parameterized vertex written only through update edges.
pub const VARIABLE_OP: &str = "Variable";
/// Op type of an input: a parameterized vertex fed from outside (data inputs, labels).
pub const INPUT_OP: &str = "Input";
/// Op type of the device → host copy (domain [`LMS_DOMAIN`]).
pub const SWAP_OUT_OP: &str = "SwapOut";
/// Op type of the host → device copy (domain [`LMS_DOMAIN`]).
pub const SWAP_IN_OP: &str = "SwapIn";
/// Op type of one part of a split tensor (domain [`LMS_DOMAIN`]).
pub const SPLIT_PART_OP: &str = "SplitPart";
/// Op type of an overlapping window of a tensor, read by a part of a spatial (halo) split
/// (domain [`LMS_DOMAIN`]).
pub const SPLIT_WINDOW_OP: &str = "SplitWindow";
/// Op type of the merge that adds the parts' windows into one tensor where they overlap
/// (domain [`LMS_DOMAIN`]).
pub const OVERLAP_ADD_OP: &str = "OverlapAdd";
/// Op type of one batch part's per-channel statistics (count, mean, M2) (domain [`LMS_DOMAIN`]).
pub const BATCH_NORM_STATISTICS_OP: &str = "BatchNormStatistics";
/// Op type of the merge of the parts' statistics into the batch's (domain [`LMS_DOMAIN`]).
pub const BATCH_NORM_MERGE_OP: &str = "BatchNormMerge";
/// Op type of one batch part normalized with the batch's statistics (domain [`LMS_DOMAIN`]).
pub const BATCH_NORM_APPLY_OP: &str = "BatchNormApply";
/// Op type of one batch part's sums of the batch-norm gradient (domain [`LMS_DOMAIN`]).
pub const BATCH_NORM_GRAD_SUMS_OP: &str = "BatchNormGradSums";
/// Op type of the merge of the parts' gradient sums (domain [`LMS_DOMAIN`]).
pub const BATCH_NORM_GRAD_MERGE_OP: &str = "BatchNormGradMerge";
/// Op type of one batch part's input gradient from the batch's sums (domain [`LMS_DOMAIN`]).
pub const BATCH_NORM_GRAD_DATA_OP: &str = "BatchNormGradData";
/// Domain of the ops that `proto/OPS.md` defines.
pub const LMS_DOMAIN: &str = "lms";
/// The version of the `lms` domain that its ops are run at.
pub const LMS_DOMAIN_VERSION: i64 = 1;
/// The domains a node may name: ONNX's default domain (empty or `ai.onnx`) and [`LMS_DOMAIN`].
pub const KNOWN_DOMAINS: [&str; 3] = ["", "ai.onnx", LMS_DOMAIN];

/// What the executor does with a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// A variable or an input: its tensor is resident from the start; running it does nothing.
    Parameter,
    /// `SwapOut`: a copy from device to host memory on the device-to-host queue.
    SwapOut,
    /// `SwapIn`: a copy from host to device memory on the host-to-device queue.
    SwapIn,
    /// Any other op: a kernel on the compute queue.
    Kernel,
}

impl NodeKind {
    /// The kind of a node with op type `op` in `domain`; `Err` says why the combination with
    /// `parameterized` is not allowed.
    pub fn of(domain: &str, op: &str, parameterized: bool) -> Result<NodeKind, String> {
        match (domain, op) {
            (_, VARIABLE_OP | INPUT_OP) if !parameterized => Err(format!("a {op} must be parameterized")),
            ("", VARIABLE_OP | INPUT_OP) => Ok(NodeKind::Parameter),
            _ if parameterized => Err("only Variable and Input nodes are parameterized".into()),
            (LMS_DOMAIN, SWAP_OUT_OP) => Ok(NodeKind::SwapOut),
            (LMS_DOMAIN, SWAP_IN_OP) => Ok(NodeKind::SwapIn),
            _ if KNOWN_DOMAINS.contains(&domain) => Ok(NodeKind::Kernel),
            _ => Err(format!("unknown domain '{domain}'")),
        }
    }
}
