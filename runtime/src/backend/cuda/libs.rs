//! Handles of the CUDA libraries the backend calls: cuBLAS (matrix products) and cuDNN
//! (convolutions), both bound to the compute stream.

use super::error::CudaError;
use super::memory::DeviceBlock;
use cudarc::cublas::{result as blas, sys as blas_sys, CudaBlas};
use cudarc::cudnn::{result as dnn, sys as dnn_sys};
use cudarc::driver::CudaStream;
use lms_proto::ops::scratch::ConvDirection;
use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// A batch of row-major matrix products C = alpha·op(A)·op(B) + beta·C, where op
/// transposes when asked; A, B, C are device addresses of f32 data and the strides count
/// elements between consecutive matrices of the batch.
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    /// Rows of op(A) and C.
    pub m: usize,
    /// Columns of op(B) and C.
    pub n: usize,
    /// Columns of op(A), rows of op(B).
    pub k: usize,
    /// A is stored `[k, m]` and used transposed.
    pub trans_a: bool,
    /// B is stored `[n, k]` and used transposed.
    pub trans_b: bool,
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of C's previous contents.
    pub beta: f32,
    /// Device addresses.
    pub a: u64,
    /// Device address of B.
    pub b: u64,
    /// Device address of C.
    pub c: u64,
    /// Number of products.
    pub batch: usize,
    /// Elements between the A matrices (0: shared).
    pub stride_a: usize,
    /// Elements between the B matrices (0: shared).
    pub stride_b: usize,
    /// Elements between the C matrices.
    pub stride_c: usize,
}

/// An integer cuBLAS and cuDNN accept.
pub fn int(v: usize, what: &str) -> Result<c_int, CudaError> {
    c_int::try_from(v).map_err(|_| CudaError::TooLarge(format!("{what} {v}")))
}

/// cuBLAS on the compute stream, with its workspace in the arena.
pub struct Blas {
    blas: CudaBlas,
    /// Kept alive for cuBLAS, which uses it on the compute stream.
    _workspace: DeviceBlock,
}

impl Blas {
    /// A handle on `stream` using `workspace`; FP32 math unless `tf32`.
    pub fn new(stream: &Arc<CudaStream>, workspace: DeviceBlock, tf32: bool) -> Result<Blas, CudaError> {
        let blas = CudaBlas::new(Arc::clone(stream))?;
        let mode = if tf32 {
            blas_sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH
        };
        // SAFETY: the handle is live; the workspace block outlives it (same struct, and it
        // is only reused after the compute stream's last use of it).
        unsafe {
            blas_sys::cublasSetWorkspace_v2(
                *blas.handle(),
                workspace.ptr() as *mut std::ffi::c_void,
                workspace.bytes() as usize,
            )
            .result()?;
            blas_sys::cublasSetMathMode(*blas.handle(), mode).result()?;
        }
        Ok(Blas { blas, _workspace: workspace })
    }

    /// Issues `g` on the compute stream.
    ///
    /// # Safety
    /// The addresses must hold the matrices `g` describes, live until the stream's work
    /// on them completes.
    pub unsafe fn gemm(&self, g: &Gemm) -> Result<(), CudaError> {
        use blas_sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
        let op = |t: bool| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
        // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: B comes first.
        let lda = if g.trans_a { g.m } else { g.k };
        let ldb = if g.trans_b { g.k } else { g.n };
        let stride = |s: usize| i64::try_from(s).map_err(|_| CudaError::TooLarge(format!("stride {s}")));
        blas::sgemm_strided_batched(
            *self.blas.handle(),
            op(g.trans_b),
            op(g.trans_a),
            int(g.n, "GEMM size")?,
            int(g.m, "GEMM size")?,
            int(g.k, "GEMM size")?,
            &g.alpha,
            g.b as *const f32,
            int(ldb.max(1), "leading dimension")?,
            stride(g.stride_b)?,
            g.a as *const f32,
            int(lda.max(1), "leading dimension")?,
            stride(g.stride_a)?,
            &g.beta,
            g.c as *mut f32,
            int(g.n.max(1), "leading dimension")?,
            stride(g.stride_c)?,
            int(g.batch, "GEMM batch")?,
        )?;
        Ok(())
    }
}

/// A convolution algorithm of one of the three directions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algo {
    /// Forward.
    Forward(dnn_sys::cudnnConvolutionFwdAlgo_t),
    /// Gradient with respect to the input.
    Data(dnn_sys::cudnnConvolutionBwdDataAlgo_t),
    /// Gradient with respect to the weights.
    Filter(dnn_sys::cudnnConvolutionBwdFilterAlgo_t),
}

impl Algo {
    /// cuDNN's algorithm `number` of `direction` (the plan's record,
    /// `lms_proto::ops::scratch::conv_algorithm`), or `None` for a number cuDNN does
    /// not have.
    pub fn of_plan(direction: ConvDirection, number: i32) -> Option<Algo> {
        use dnn_sys::cudnnConvolutionBwdDataAlgo_t as D;
        use dnn_sys::cudnnConvolutionBwdFilterAlgo_t as F;
        use dnn_sys::cudnnConvolutionFwdAlgo_t as Y;
        Some(match direction {
            ConvDirection::Forward => Algo::Forward(match number {
                0 => Y::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                1 => Y::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                2 => Y::CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                3 => Y::CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
                4 => Y::CUDNN_CONVOLUTION_FWD_ALGO_FFT,
                5 => Y::CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
                6 => Y::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
                7 => Y::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
                _ => return None,
            }),
            ConvDirection::BackwardData => Algo::Data(match number {
                0 => D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                1 => D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                2 => D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT,
                3 => D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
                4 => D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD,
                5 => D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
                _ => return None,
            }),
            ConvDirection::BackwardFilter => Algo::Filter(match number {
                0 => F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                1 => F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                2 => F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT,
                3 => F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3,
                4 => F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD,
                5 => F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED,
                6 => F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING,
                _ => return None,
            }),
        })
    }
}

/// cuDNN on the compute stream.
pub struct Dnn {
    /// The handle.
    pub handle: dnn_sys::cudnnHandle_t,
}

impl Dnn {
    /// A handle on `stream`, or why cuDNN cannot be used.
    pub fn new(stream: &Arc<CudaStream>) -> Result<Dnn, String> {
        if let Err(missing) = super::loader::load(super::loader::CudaLibrary::Cudnn) {
            return Err(format!("convolutions need cuDNN: {}", super::loader::missing_line(&[Err(missing)])));
        }
        let created = catch_unwind(AssertUnwindSafe(|| -> Result<Dnn, CudaError> {
            let handle = dnn::create_handle()?;
            // SAFETY: the handle was just created and the stream is live.
            unsafe { dnn::set_stream(handle, stream.cu_stream() as _) }?;
            Ok(Dnn { handle })
        }));
        match created {
            Ok(Ok(dnn)) => Ok(dnn),
            Ok(Err(e)) => Err(format!("cuDNN failed to start: {e}")),
            Err(_) => Err("cuDNN lacks a function this build expects (cuDNN 9 is)".to_string()),
        }
    }
}

impl Drop for Dnn {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `Dnn::new` and is destroyed once.
        let _ = unsafe { dnn::destroy_handle(self.handle) };
    }
}
