// Reductions: over any set of axes (ReduceSum/Mean/Max/Min, SumTo, ConvGradBias, the
// global pools), softmax and its gradients, the losses, and deterministic total sums.
// Sums accumulate in double; every tree and every partition is fixed.

enum ReduceOp { R_SUM = 0, R_MAX, R_MIN };

// Output element o reads the input at base(o) + Σ r_d · red_strides[d] over the reduced
// index space; base(o) walks the kept axes with their input strides.
struct ReduceParams {
    i64 out_rank;
    i64 red_rank;
    i64 out_count;
    i64 red_count;
    i64 out_dims[LMS_MAX_RANK];
    i64 out_strides[LMS_MAX_RANK];
    i64 red_dims[LMS_MAX_RANK];
    i64 red_strides[LMS_MAX_RANK];
};

__device__ __forceinline__ i64 walk(i64 rank, const i64* dims, const i64* strides, i64 i) {
    i64 off = 0;
    for (int d = (int)rank - 1; d >= 0; --d) {
        off += (i % dims[d]) * strides[d];
        i /= dims[d];
    }
    return off;
}

__device__ __forceinline__ double reduce_init(int op) {
    return op == R_SUM ? 0.0 : (op == R_MAX ? -(double)LMS_INF : (double)LMS_INF);
}

__device__ __forceinline__ double reduce_step(int op, double acc, double v) {
    if (op == R_SUM) return acc + v;
    if (acc != acc) return acc;
    if (v != v) return v;
    return op == R_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
}

__device__ __forceinline__ double warp_reduce(int op, double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = reduce_step(op, v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Reduces elements [begin, end) of the reduced space of output o, lanes striding by 32.
__device__ double reduce_range(int op, const ReduceParams& p, const float* x, i64 o, i64 begin, i64 end,
                               int lane) {
    i64 base = walk(p.out_rank, p.out_dims, p.out_strides, o);
    double acc = reduce_init(op);
    for (i64 r = begin + lane; r < end; r += 32)
        acc = reduce_step(op, acc, (double)x[base + walk(p.red_rank, p.red_dims, p.red_strides, r)]);
    return warp_reduce(op, acc);
}

// One warp per output element; y = result / divisor (divisor 1 but for means).
extern "C" __global__ void reduce_f32(int op, const ReduceParams p, const float* x, float* y, double divisor) {
    int lane = threadIdx.x & 31;
    i64 warps = ((i64)blockDim.x * gridDim.x) >> 5;
    for (i64 o = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; o < p.out_count; o += warps) {
        double acc = reduce_range(op, p, x, o, 0, p.red_count, lane);
        if (lane == 0) y[o] = (float)(op == R_SUM ? acc / divisor : acc);
    }
}

// For few outputs with many reduced elements: warp w of the grid reduces chunk
// (w % splits) of output (w / splits) into partial[w]; reduce_finish combines them.
extern "C" __global__ void reduce_partial_f32(int op, const ReduceParams p, i64 splits, i64 chunk,
                                              const float* x, double* partial) {
    int lane = threadIdx.x & 31;
    i64 warps = ((i64)blockDim.x * gridDim.x) >> 5;
    for (i64 w = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < p.out_count * splits; w += warps) {
        i64 o = w / splits, s = w % splits;
        i64 begin = s * chunk, end = begin + chunk < p.red_count ? begin + chunk : p.red_count;
        double acc = reduce_range(op, p, x, o, begin, end, lane);
        if (lane == 0) partial[w] = acc;
    }
}

extern "C" __global__ void reduce_finish_f32(int op, i64 outputs, i64 splits, const double* partial, float* y,
                                             double divisor) {
    GRID_STRIDE(o, outputs) {
        double acc = reduce_init(op);
        for (i64 s = 0; s < splits; ++s) acc = reduce_step(op, acc, partial[o * splits + s]);
        y[o] = (float)(op == R_SUM ? acc / divisor : acc);
    }
}

// ---- softmax over the middle axis of [outer, n, inner]; one block per (outer, inner) row ----

__device__ __forceinline__ i64 row_at(i64 row, i64 n, i64 inner, i64 j) {
    return ((row / inner) * n + j) * inner + row % inner;
}

extern "C" __global__ void softmax_f32(i64 rows, i64 n, i64 inner, int take_log, const float* x, float* y) {
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        float m = -LMS_INF;
        for (i64 j = threadIdx.x; j < n; j += blockDim.x) m = max_nan(m, x[row_at(row, n, inner, j)]);
        double max = (double)block_max(m);
        double sum = 0.0;
        for (i64 j = threadIdx.x; j < n; j += blockDim.x) sum += exp((double)x[row_at(row, n, inner, j)] - max);
        sum = block_sum(sum);
        double log_sum = log(sum);
        for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
            i64 at = row_at(row, n, inner, j);
            double s = (double)x[at] - max;
            y[at] = (float)(take_log ? s - log_sum : exp(s) / sum);
        }
    }
}

// SoftmaxGrad: dX = Y·(dY − Σ dY·Y); LogSoftmaxGrad: dX = dY − exp(Y)·Σ dY.
extern "C" __global__ void softmax_grad_f32(i64 rows, i64 n, i64 inner, int take_log, const float* dy,
                                            const float* y, float* dx) {
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        double sum = 0.0;
        for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
            i64 at = row_at(row, n, inner, j);
            sum += take_log ? (double)dy[at] : (double)dy[at] * (double)y[at];
        }
        sum = block_sum(sum);
        for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
            i64 at = row_at(row, n, inner, j);
            double d = dy[at], v = y[at];
            dx[at] = (float)(take_log ? d - exp(v) * sum : v * (d - sum));
        }
    }
}

// ---- SoftmaxCrossEntropy over rows of K logits; labels i64 or i32 ----

__device__ __forceinline__ i64 load_label(const void* labels, int labels64, i64 i) {
    return labels64 ? ((const i64*)labels)[i] : (i64)((const int*)labels)[i];
}

// The row's max and Σ exp(x − max).
__device__ void row_logsumexp(const float* row, i64 k, double* max_out, double* sum_out) {
    float m = -LMS_INF;
    for (i64 j = threadIdx.x; j < k; j += blockDim.x) m = max_nan(m, row[j]);
    double max = (double)block_max(m);
    double sum = 0.0;
    for (i64 j = threadIdx.x; j < k; j += blockDim.x) sum += exp((double)row[j] - max);
    *max_out = max;
    *sum_out = block_sum(sum);
}

// Whether a label is a class of K; one outside [0, K) sets *error, which the runtime reads
// back after the op and turns into the CPU's error (naming the first such position).
__device__ __forceinline__ bool label_in_range(i64 label, i64 k, int* error) {
    if (label >= 0 && label < k) return true;
    *error = 1;
    return false;
}

// loss[r] = max + log Σ exp(x − max) − x[label]; NaN (and *error) for a label outside [0, K).
extern "C" __global__ void xent_rows_f32(i64 rows, i64 k, const float* logits, const void* labels, int labels64,
                                         double* loss, int* error) {
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = logits + r * k;
        double max, sum;
        row_logsumexp(row, k, &max, &sum);
        if (threadIdx.x == 0) {
            i64 label = load_label(labels, labels64, r);
            loss[r] = label_in_range(label, k, error) ? max + log(sum) - (double)row[label] : (double)LMS_INF - LMS_INF;
        }
    }
}

// dX = (softmax − onehot(label)) / positions; *error for a label outside [0, K).
extern "C" __global__ void xent_grad_f32(i64 rows, i64 k, double positions, const float* logits,
                                         const void* labels, int labels64, float* dx, int* error) {
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = logits + r * k;
        double max, sum;
        row_logsumexp(row, k, &max, &sum);
        i64 label = load_label(labels, labels64, r);
        if (threadIdx.x == 0) label_in_range(label, k, error);
        for (i64 j = threadIdx.x; j < k; j += blockDim.x) {
            double softmax = exp((double)row[j] - max) / sum;
            dx[r * k + j] = (float)((softmax - (j == label ? 1.0 : 0.0)) / positions);
        }
    }
}

// ---- total sums: a fixed grid writes one partial per block, one block finishes ----

enum SumMode { S_F32 = 0, S_SQUARED_DIFF, S_F64 };

extern "C" __global__ void sum_partial(int mode, i64 n, const float* a, const float* b, const double* d,
                                       double* partial) {
    double acc = 0.0;
    GRID_STRIDE(i, n) {
        if (mode == S_F32) acc += (double)a[i];
        else if (mode == S_SQUARED_DIFF) { double diff = (double)a[i] - (double)b[i]; acc += diff * diff; }
        else acc += d[i];
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// out[0] = Σ partial / divisor (launch with one block).
extern "C" __global__ void sum_finish(i64 n, const double* partial, double divisor, float* out) {
    double acc = 0.0;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) out[0] = (float)(acc / divisor);
}

// MeanSquaredErrorGrad: 2·(p − t)/count.
extern "C" __global__ void mse_grad_f32(i64 n, double count, const float* p, const float* t, float* dp) {
    GRID_STRIDE(i, n) dp[i] = (float)(2.0 * ((double)p[i] - (double)t[i]) / count);
}
