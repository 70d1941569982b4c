// Kernels with planted faults, for the emulator's own tests: each is a correct kernel of
// the backend's style with one mistake the emulated device must expose.

// block_sum of common.cuh without the barrier between writing the warps' partial sums
// and reading them: threads read partial sums other warps have not written yet.
__device__ double block_sum_unsynchronised(double v) {
    __shared__ double partial[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) partial[warp] = v;
    v = lane < warps ? partial[lane] : 0.0;
    v = warp_sum(v);
    __syncthreads();
    return v;
}

// Row sums, one block per row: `y[r] = Σ x[r, :]` (correct, for comparison).
extern "C" __global__ void fault_row_sum(i64 rows, i64 n, const float* x, float* y) {
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        double acc = 0.0;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) acc += (double)x[r * n + i];
        acc = block_sum(acc);
        if (threadIdx.x == 0) y[r] = (float)acc;
    }
}

// The same with the missing barrier.
extern "C" __global__ void fault_row_sum_unsynchronised(i64 rows, i64 n, const float* x, float* y) {
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        double acc = 0.0;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) acc += (double)x[r * n + i];
        acc = block_sum_unsynchronised(acc);
        if (threadIdx.x == 0) y[r] = (float)acc;
    }
}

// Threads past the end return before the block's barrier.
extern "C" __global__ void fault_early_exit(i64 n, const float* x, float* y) {
    i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double v = block_sum((double)x[i]);
    y[i] = (float)v;
}

// Odd and even threads wait at different barriers.
extern "C" __global__ void fault_divergent_barrier(float* y) {
    if (threadIdx.x & 1) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    y[threadIdx.x] = 1.0f;
}

// The upper half of each warp exits before a shuffle that reads it.
extern "C" __global__ void fault_half_warp_exit(const float* x, float* y) {
    if ((threadIdx.x & 31) >= 16) return;
    y[threadIdx.x] = (float)warp_sum((double)x[threadIdx.x]);
}

// Writes one element past the end of `y` (an off-by-one bound).
extern "C" __global__ void fault_off_by_one(i64 n, float* y) {
    GRID_STRIDE(i, n + 1) y[i] = 0.0f;
}
