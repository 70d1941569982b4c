// Indexing kernels: Pad, Gather, Trilu, and GatherGrad's deterministic scatter-add (indices
// sorted with a bitonic sort, then each distinct index sums its rows in position order).

// ---- Pad (constant, reflect, edge, wrap), by element size ----

enum PadMode { P_CONSTANT = 0, P_REFLECT, P_EDGE, P_WRAP };

struct PadParams {
    i64 rank;
    i64 mode;
    i64 count;
    i64 out_dims[LMS_MAX_RANK];
    i64 in_dims[LMS_MAX_RANK];
    i64 in_strides[LMS_MAX_RANK];
    i64 begin[LMS_MAX_RANK];
};

// The input coordinate that output coordinate `o` reads on an axis, or -1 for the constant.
__device__ __forceinline__ i64 pad_source(i64 o, i64 begin, i64 n, i64 mode) {
    i64 i = o - begin;
    if (i >= 0 && i < n) return i;
    switch (mode) {
    case P_EDGE: return i < 0 ? 0 : n - 1;
    case P_WRAP: return ((i % n) + n) % n;
    case P_REFLECT: {
        if (n == 1) return 0;
        i64 period = 2 * (n - 1);
        i64 m = ((i % period) + period) % period;
        return m >= n ? period - m : m;
    }
    default: return -1;
    }
}

#define PAD(NAME, T)                                                                      \
    extern "C" __global__ void NAME(const PadParams p, const T* x, T* y, u64 value) {     \
        GRID_STRIDE(i, p.count) {                                                         \
            i64 rest = i, src = 0;                                                        \
            bool constant = false;                                                        \
            for (int d = (int)p.rank - 1; d >= 0; --d) {                                  \
                i64 o = rest % p.out_dims[d];                                             \
                rest /= p.out_dims[d];                                                    \
                i64 s = pad_source(o, p.begin[d], p.in_dims[d], p.mode);                  \
                if (s < 0) constant = true;                                               \
                else src += s * p.in_strides[d];                                          \
            }                                                                             \
            y[i] = constant ? (T)value : x[src];                                          \
        }                                                                                 \
    }
PAD(pad_1, u8)
PAD(pad_2, u16)
PAD(pad_4, u32)
PAD(pad_8, u64)

// ---- Gather along an axis: data [outer, dim, inner], indices (i64 or i32, negative
// wrap), out [outer, count, inner]; an out-of-range index reads zeros ----

__device__ __forceinline__ i64 load_index(const void* idx, int idx64, i64 i) {
    return idx64 ? ((const i64*)idx)[i] : (i64)((const int*)idx)[i];
}

#define GATHER(NAME, T)                                                                        \
    extern "C" __global__ void NAME(i64 outer, i64 dim, i64 inner, i64 count, const void* idx, \
                                    int idx64, const T* x, T* y) {                             \
        GRID_STRIDE(e, outer * count * inner) {                                                \
            i64 in = e % inner, j = (e / inner) % count, o = e / (inner * count);              \
            i64 r = load_index(idx, idx64, j);                                                 \
            if (r < 0) r += dim;                                                               \
            y[e] = (r >= 0 && r < dim) ? x[(o * dim + r) * inner + in] : (T)0;                 \
        }                                                                                      \
    }
GATHER(gather_1, u8)
GATHER(gather_2, u16)
GATHER(gather_4, u32)
GATHER(gather_8, u64)

// ---- GatherElements: the indices' shape iterated by l (operand 0: indices and out,
// operand 1: data with stride 0 along the axis); data is read at index * stride along
// it; an out-of-range index reads zeros ----

// ---- Trilu: each matrix of the last two axes keeps element (i, j) where j - i >= k (upper)
// or <= k (lower); the others are zero. By element size. ----

#define TRILU(NAME, T)                                                                          \
    extern "C" __global__ void NAME(i64 count, i64 rows, i64 cols, i64 k, int upper, const T* x, \
                                    T* y) {                                                     \
        GRID_STRIDE(e, count) {                                                                 \
            i64 diagonal = e % cols - (e / cols) % rows;                                        \
            y[e] = (upper ? diagonal >= k : diagonal <= k) ? x[e] : (T)0;                       \
        }                                                                                       \
    }
TRILU(trilu_1, u8)
TRILU(trilu_2, u16)
TRILU(trilu_4, u32)
TRILU(trilu_8, u64)

#define GATHER_ELEMENTS(NAME, T)                                                                \
    extern "C" __global__ void NAME(const Layout l, i64 dim, i64 stride, const void* idx, int idx64, \
                                    const T* x, T* y) {                                         \
        GRID_STRIDE(e, l.count) {                                                               \
            i64 off[2];                                                                         \
            layout_offsets<2>(l, e, off);                                                       \
            i64 r = load_index(idx, idx64, off[0]);                                             \
            if (r < 0) r += dim;                                                                \
            y[off[0]] = (r >= 0 && r < dim) ? x[off[1] + r * stride] : (T)0;                    \
        }                                                                                       \
    }
GATHER_ELEMENTS(gather_elements_1, u8)
GATHER_ELEMENTS(gather_elements_2, u16)
GATHER_ELEMENTS(gather_elements_4, u32)
GATHER_ELEMENTS(gather_elements_8, u64)

// GatherElementsGrad over the elements of dData the indices reach (operand 0: dData,
// operand 1: indices and dY with stride 0 along the axis, operand 2: the coordinate
// along the axis): each sums in index order, in double, the dY positions along the
// axis whose index names it. dData must be zeroed first.
extern "C" __global__ void gather_elements_grad_f32(const Layout l, i64 dim, i64 count, i64 stride,
                                                    const void* idx, int idx64, const float* dy, float* dx) {
    GRID_STRIDE(e, l.count) {
        i64 off[3];
        layout_offsets<3>(l, e, off);
        double sum = 0.0;
        for (i64 i = 0; i < count; ++i) {
            i64 at = off[1] + i * stride;
            i64 r = load_index(idx, idx64, at);
            if (r < 0) r += dim;
            if (r == off[2]) sum += (double)dy[at];
        }
        dx[off[0]] = (float)sum;
    }
}

// ---- GatherGrad ----

// keys[j] = (wrapped index << 32) | j for j < count, and all ones for the padding up to
// `padded` (a power of two); an out-of-range index sorts last and is skipped.
extern "C" __global__ void index_keys(i64 count, i64 padded, i64 dim, const void* idx, int idx64, u64* keys) {
    GRID_STRIDE(j, padded) {
        u64 key = ~0ull;
        if (j < count) {
            i64 r = load_index(idx, idx64, j);
            if (r < 0) r += dim;
            if (r >= 0 && r < dim) key = ((u64)r << 32) | (u64)j;
        }
        keys[j] = key;
    }
}

// One compare-exchange pass of a bitonic sort (ascending) of `padded` keys.
extern "C" __global__ void bitonic_step(i64 padded, i64 j, i64 k, u64* keys) {
    GRID_STRIDE(i, padded) {
        i64 l = i ^ j;
        if (l > i) {
            u64 a = keys[i], b = keys[l];
            bool ascending = (i & k) == 0;
            if ((a > b) == ascending) {
                keys[i] = b;
                keys[l] = a;
            }
        }
    }
}

// Block b handles the run of equal indices that starts at sorted position b: it sums the
// rows of dY at those positions (ascending, in double) into dData's row of that index.
// dData must be zeroed first; rows of indices never gathered stay zero.
extern "C" __global__ void gather_grad_f32(i64 count, i64 outer, i64 dim, i64 inner, const u64* keys,
                                           const float* dy, float* dx) {
    for (i64 b = blockIdx.x; b < count; b += gridDim.x) {
        u64 key = keys[b];
        if (key == ~0ull) continue;
        u64 row = key >> 32;
        if (b > 0 && (keys[b - 1] >> 32) == row) continue;
        i64 end = b + 1;
        while (end < count && keys[end] != ~0ull && (keys[end] >> 32) == row) ++end;
        for (i64 c = threadIdx.x; c < outer * inner; c += blockDim.x) {
            i64 o = c / inner, in = c % inner;
            double sum = 0.0;
            for (i64 s = b; s < end; ++s) {
                i64 j = (i64)(keys[s] & 0xffffffffull);
                sum += (double)dy[(o * count + j) * inner + in];
            }
            dx[(o * dim + (i64)row) * inner + in] = (float)sum;
        }
    }
}
