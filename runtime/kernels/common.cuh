// Shared by every kernel source of the CUDA backend: NVRTC compiles each source with this
// header prepended (no file system includes), so it holds only types and device helpers.
//
// Conventions: element counts and offsets are 64-bit; kernels loop grid-stride over their
// elements, so any grid size is correct; float sums accumulate in double in a fixed order,
// so results do not depend on scheduling (no floating-point atomics anywhere).

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

#define LMS_MAX_RANK 8
#define LMS_MAX_OPERANDS 4
#define LMS_INF __int_as_float(0x7f800000)

// An iteration shape and each operand's strided view of it (`Layout` in layout.rs).
struct Layout {
    i64 rank;
    i64 count;
    i64 dims[LMS_MAX_RANK];
    i64 strides[LMS_MAX_OPERANDS][LMS_MAX_RANK];
    i64 offsets[LMS_MAX_OPERANDS];
};

#define GRID_STRIDE(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)

// The element offsets of the first N operands of `l` at flat index `i`.
template <int N>
__device__ __forceinline__ void layout_offsets(const Layout& l, i64 i, i64 (&off)[N]) {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = l.offsets[k];
    if (l.rank == 1) {
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += i * l.strides[k][0];
        return;
    }
    for (int d = (int)l.rank - 1; d >= 0; --d) {
        i64 n = l.dims[d];
        i64 idx = i % n;
        i /= n;
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += idx * l.strides[k][d];
    }
}

__device__ __forceinline__ bool is_nan(float x) { return x != x; }

// max and min that propagate NaN, like the CPU backend's max_nan and min_nan.
__device__ __forceinline__ float max_nan(float a, float b) { return is_nan(a) || is_nan(b) ? a + b : fmaxf(a, b); }
__device__ __forceinline__ float min_nan(float a, float b) { return is_nan(a) || is_nan(b) ? a + b : fminf(a, b); }

// Sum over a warp; every lane gets the result.
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over a block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. The tree is fixed, so the result depends only on the values.
__device__ double block_sum(double v) {
    __shared__ double partial[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < warps ? partial[lane] : 0.0;
    v = warp_sum(v);
    __syncthreads();
    return v;
}

// Maximum over a block (NaN propagates); every thread gets the result.
__device__ float block_max(float v) {
    __shared__ float partial[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < warps ? partial[lane] : -LMS_INF;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    return v;
}
