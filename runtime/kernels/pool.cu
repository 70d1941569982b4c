// Pooling over 1 to 3 spatial axes, stored as 3-D (leading axes of size 1): MaxPool and
// AveragePool, and their gradients computed per input element (a gather, no atomics).
// A max window picks its first maximum in window order, like the CPU backend.

struct Window {
    i64 input[3];
    i64 kernel[3];
    i64 output[3];
    i64 stride[3];
    i64 dilation[3];
    i64 pad_begin[3];
    i64 pad_end[3];
};

__device__ __forceinline__ i64 plane_size(const i64* dims) { return dims[0] * dims[1] * dims[2]; }

// The first maximum of output window (oz, oy, ox) of `plane`: its value and plane offset
// (-inf and -1 for a window that reads nothing). As on the CPU, NaN never wins: a window
// of NaN and -inf gives -inf at its first read.
__device__ void window_max(const Window& w, const float* plane, const i64 o[3], float* best, i64* at) {
    *best = -LMS_INF;
    *at = -1;
    for (i64 kz = 0; kz < w.kernel[0]; ++kz) {
        i64 z = o[0] * w.stride[0] + kz * w.dilation[0] - w.pad_begin[0];
        if (z < 0 || z >= w.input[0]) continue;
        for (i64 ky = 0; ky < w.kernel[1]; ++ky) {
            i64 y = o[1] * w.stride[1] + ky * w.dilation[1] - w.pad_begin[1];
            if (y < 0 || y >= w.input[1]) continue;
            for (i64 kx = 0; kx < w.kernel[2]; ++kx) {
                i64 x = o[2] * w.stride[2] + kx * w.dilation[2] - w.pad_begin[2];
                if (x < 0 || x >= w.input[2]) continue;
                i64 p = (z * w.input[1] + y) * w.input[2] + x;
                if (*at < 0) *at = p;
                if (plane[p] > *best) { *best = plane[p]; *at = p; }
            }
        }
    }
}

// The taps of window `o` on axis d inside the input (reads) and inside the padded extent.
__device__ void axis_taps(const Window& w, int d, i64 o, i64* reads, i64* padded) {
    i64 end = w.pad_begin[d] + w.input[d] + w.pad_end[d];
    *reads = 0;
    *padded = 0;
    for (i64 k = 0; k < w.kernel[d]; ++k) {
        i64 at = o * w.stride[d] + k * w.dilation[d];
        if (at < end) ++*padded;
        i64 i = at - w.pad_begin[d];
        if (i >= 0 && i < w.input[d]) ++*reads;
    }
}

__device__ i64 window_count(const Window& w, const i64 o[3], int include_pad) {
    i64 count = 1;
    for (int d = 0; d < 3; ++d) {
        i64 reads, padded;
        axis_taps(w, d, o[d], &reads, &padded);
        count *= include_pad ? padded : reads;
    }
    return count > 0 ? count : 1;
}

__device__ __forceinline__ void unflatten(i64 i, const i64* dims, i64 out[3]) {
    out[2] = i % dims[2];
    out[1] = (i / dims[2]) % dims[1];
    out[0] = i / (dims[2] * dims[1]);
}

// Y (and the Indices when `indices` is not null: row-major flat offsets, or column-major
// ones when `column_major`, as MaxPool's storage_order asks) over `planes` planes.
extern "C" __global__ void max_pool_f32(i64 planes, const Window w, int column_major, const float* x, float* y,
                                        i64* indices) {
    i64 in_sp = plane_size(w.input), out_sp = plane_size(w.output);
    GRID_STRIDE(e, planes * out_sp) {
        i64 p = e / out_sp, o[3];
        unflatten(e % out_sp, w.output, o);
        float best;
        i64 at;
        window_max(w, x + p * in_sp, o, &best, &at);
        y[e] = best;
        if (indices) {
            i64 a = at < 0 ? 0 : at;
            if (column_major) {
                i64 z = a / (w.input[1] * w.input[2]), yy = a / w.input[2] % w.input[1], xx = a % w.input[2];
                a = (xx * w.input[1] + yy) * w.input[0] + z;
            }
            indices[e] = p * in_sp + a;
        }
    }
}

extern "C" __global__ void avg_pool_f32(i64 planes, const Window w, int include_pad, const float* x, float* y) {
    i64 in_sp = plane_size(w.input), out_sp = plane_size(w.output);
    GRID_STRIDE(e, planes * out_sp) {
        i64 p = e / out_sp, o[3];
        unflatten(e % out_sp, w.output, o);
        const float* plane = x + p * in_sp;
        double sum = 0.0;
        for (i64 kz = 0; kz < w.kernel[0]; ++kz) {
            i64 z = o[0] * w.stride[0] + kz * w.dilation[0] - w.pad_begin[0];
            if (z < 0 || z >= w.input[0]) continue;
            for (i64 ky = 0; ky < w.kernel[1]; ++ky) {
                i64 yy = o[1] * w.stride[1] + ky * w.dilation[1] - w.pad_begin[1];
                if (yy < 0 || yy >= w.input[1]) continue;
                for (i64 kx = 0; kx < w.kernel[2]; ++kx) {
                    i64 xx = o[2] * w.stride[2] + kx * w.dilation[2] - w.pad_begin[2];
                    if (xx < 0 || xx >= w.input[2]) continue;
                    sum += (double)plane[(z * w.input[1] + yy) * w.input[2] + xx];
                }
            }
        }
        y[e] = (float)(sum / (double)window_count(w, o, include_pad));
    }
}

// The output positions on axis d whose windows read input coordinate i: [*lo, *hi].
__device__ void covering(const Window& w, int d, i64 i, i64* lo, i64* hi) {
    i64 span = (w.kernel[d] - 1) * w.dilation[d];
    i64 first = i + w.pad_begin[d] - span;
    *lo = first <= 0 ? 0 : (first + w.stride[d] - 1) / w.stride[d];
    i64 last = (i + w.pad_begin[d]) / w.stride[d];
    *hi = last < w.output[d] - 1 ? last : w.output[d] - 1;
}

// Whether window position o on axis d reads input coordinate i (a tap lands on it).
__device__ __forceinline__ bool reads(const Window& w, int d, i64 o, i64 i) {
    i64 delta = i + w.pad_begin[d] - o * w.stride[d];
    return delta >= 0 && delta % w.dilation[d] == 0 && delta / w.dilation[d] < w.kernel[d];
}

// dX at each input element: the sum, in output order, of dY over the windows whose first
// maximum (max) or whose taps (average, dY / count) land on it.
__device__ double pool_grad_at(const Window& w, int max, int include_pad, const float* plane_x,
                               const float* plane_dy, const i64 i[3], i64 at) {
    i64 lo[3], hi[3];
    for (int d = 0; d < 3; ++d) covering(w, d, i[d], &lo[d], &hi[d]);
    double sum = 0.0;
    for (i64 oz = lo[0]; oz <= hi[0]; ++oz) {
        if (!reads(w, 0, oz, i[0])) continue;
        for (i64 oy = lo[1]; oy <= hi[1]; ++oy) {
            if (!reads(w, 1, oy, i[1])) continue;
            for (i64 ox = lo[2]; ox <= hi[2]; ++ox) {
                if (!reads(w, 2, ox, i[2])) continue;
                i64 o[3] = {oz, oy, ox};
                double d = plane_dy[(oz * w.output[1] + oy) * w.output[2] + ox];
                if (max) {
                    float best;
                    i64 first;
                    window_max(w, plane_x, o, &best, &first);
                    if (first == at) sum += d;
                } else {
                    sum += d / (double)window_count(w, o, include_pad);
                }
            }
        }
    }
    return sum;
}

extern "C" __global__ void pool_grad_f32(i64 planes, const Window w, int max, int include_pad, const float* dy,
                                         const float* x, float* dx) {
    i64 in_sp = plane_size(w.input), out_sp = plane_size(w.output);
    GRID_STRIDE(e, planes * in_sp) {
        i64 p = e / in_sp, at = e % in_sp, i[3];
        unflatten(at, w.input, i);
        const float* plane_x = max ? x + p * in_sp : x;
        dx[e] = (float)pool_grad_at(w, max, include_pad, plane_x, dy + p * out_sp, i, at);
    }
}
