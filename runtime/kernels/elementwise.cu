// Elementwise kernels: unary maps, their gradients, broadcast binary arithmetic,
// comparisons and logic, Where, Cast, fills and broadcast copies with a divisor.
// Op codes are the discriminants of the enums in ops/elementwise.rs.

// ---- unary (f32) ----

enum UnaryOp {
    U_RELU = 0, U_NEG, U_ABS, U_LEAKY_RELU, U_SIGMOID, U_TANH, U_ELU, U_SELU, U_SOFTPLUS,
    U_SOFTSIGN, U_HARD_SIGMOID, U_GELU_ERF, U_GELU_TANH, U_EXP, U_LOG, U_RECIPROCAL, U_ERF,
    U_SQRT, U_FLOOR, U_CEIL, U_CLIP, U_DIV_BY, U_COS, U_SIN,
    U_HARD_SWISH, U_ROUND, U_MISH
};

__device__ __forceinline__ float sigmoid_of(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

__device__ float unary_op(int op, float x, float a, float b) {
    switch (op) {
    case U_RELU: return is_nan(x) ? x : fmaxf(x, 0.0f);
    case U_NEG: return -x;
    case U_ABS: return fabsf(x);
    case U_LEAKY_RELU: return x < 0.0f ? a * x : x;
    case U_SIGMOID: return sigmoid_of(x);
    case U_TANH: return tanhf(x);
    case U_ELU: return x > 0.0f ? x : a * (expf(x) - 1.0f);
    case U_SELU: return b * (x > 0.0f ? x : a * (expf(x) - 1.0f));
    case U_SOFTPLUS: return (x > 0.0f ? x : 0.0f) + log1pf(expf(-fabsf(x)));
    case U_SOFTSIGN: return x / (1.0f + fabsf(x));
    case U_HARD_SIGMOID: return min_nan(max_nan(a * x + b, 0.0f), 1.0f);
    case U_GELU_ERF: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case U_GELU_TANH: return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case U_EXP: return expf(x);
    case U_LOG: return logf(x);
    case U_RECIPROCAL: return 1.0f / x;
    case U_ERF: return erff(x);
    case U_SQRT: return sqrtf(x);
    case U_FLOOR: return floorf(x);
    case U_CEIL: return ceilf(x);
    case U_CLIP: return min_nan(max_nan(x, a), b);
    case U_DIV_BY: return x / a;
    case U_COS: return cosf(x);
    case U_SIN: return sinf(x);
    case U_HARD_SWISH: return x * min_nan(max_nan((1.0f / 6.0f) * x + 0.5f, 0.0f), 1.0f);
    case U_ROUND: return rintf(x);  // halves to even in the default rounding mode
    case U_MISH: return x * tanhf((x > 0.0f ? x : 0.0f) + log1pf(expf(-fabsf(x))));
    default: return x;
    }
}

extern "C" __global__ void unary_f32(int op, i64 n, const float* x, float* y, float a, float b) {
    GRID_STRIDE(i, n) y[i] = unary_op(op, x[i], a, b);
}

extern "C" __global__ void not_bool(i64 n, const u8* x, u8* y) {
    GRID_STRIDE(i, n) y[i] = x[i] ? 0 : 1;
}

// IsNaN and IsInf: y = x is NaN (when nan), +inf (when positive) or -inf (when negative).
extern "C" __global__ void classify_f32(i64 n, const float* x, u8* y, int nan, int positive, int negative) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        y[i] = (nan && is_nan(v)) || (positive && v == LMS_INF) || (negative && v == -LMS_INF) ? 1 : 0;
    }
}

// f'(x) for UnaryGrad, in double like the CPU backend.
__device__ double unary_derivative(int op, double x, double alpha, double gamma) {
    switch (op) {
    case U_RELU: return x > 0.0 ? 1.0 : 0.0;
    case U_LEAKY_RELU: return x < 0.0 ? alpha : 1.0;
    case U_SIGMOID: {
        double s = x >= 0.0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
        return s * (1.0 - s);
    }
    case U_TANH: { double t = tanh(x); return 1.0 - t * t; }
    case U_ELU: return x > 0.0 ? 1.0 : alpha * exp(x);
    case U_SELU: return x > 0.0 ? gamma : gamma * alpha * exp(x);
    case U_SOFTPLUS: return x >= 0.0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
    case U_SOFTSIGN: { double d = 1.0 + fabs(x); return 1.0 / (d * d); }
    case U_EXP: return exp(x);
    case U_LOG: return 1.0 / x;
    case U_SQRT: return 0.5 / sqrt(x);
    case U_ERF: return 1.1283791670955126 * exp(-x * x);
    case U_ABS: return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0);
    case U_NEG: return -1.0;
    case U_RECIPROCAL: return -1.0 / (x * x);
    case U_CLIP: return x >= alpha && x <= gamma ? 1.0 : 0.0;  // alpha = min, gamma = max
    case U_COS: return -sin(x);
    case U_HARD_SIGMOID: { double v = alpha * x + gamma; return v > 0.0 && v < 1.0 ? alpha : 0.0; }  // gamma = beta
    case U_HARD_SWISH: return x < -3.0 ? 0.0 : (x <= 3.0 ? x / 3.0 + 0.5 : 1.0);
    case U_SIN: return cos(x);
    case U_MISH: {  // tanh(sp) + x (1 - tanh^2(sp)) sigmoid(x), sp = softplus(x)
        double t = tanh((x > 0.0 ? x : 0.0) + log1p(exp(-fabs(x))));
        double s = x >= 0.0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
        return t + x * (1.0 - t * t) * s;
    }
    default: return 0.0;
    }
}

extern "C" __global__ void unary_grad_f32(int op, i64 n, const float* dy, const float* x, float* dx,
                                          double alpha, double gamma) {
    GRID_STRIDE(i, n) dx[i] = (float)((double)dy[i] * unary_derivative(op, (double)x[i], alpha, gamma));
}

// PReluGrad's dX over X's shape; operands: 0 dX, 1 dY, 2 X, 3 the slope broadcast.
extern "C" __global__ void prelu_grad_data_f32(const Layout l, float* dx, const float* dy, const float* x,
                                               const float* s) {
    GRID_STRIDE(i, l.count) {
        i64 off[4];
        layout_offsets<4>(l, i, off);
        double k = x[off[2]] < 0.0f ? (double)s[off[3]] : 1.0;
        dx[off[0]] = (float)((double)dy[off[1]] * k);
    }
}

// PReluGrad's dSlope: one slope element per index of `outer` (operand 0: its offset in
// dSlope, 1: the offset of its first X position), summing in X's order, in double,
// dY * X where X < 0 over the positions of `inner` (operand 0: offsets from the first).
extern "C" __global__ void prelu_grad_slope_f32(const Layout outer, const Layout inner, float* ds, const float* dy,
                                                const float* x) {
    GRID_STRIDE(j, outer.count) {
        i64 o[2];
        layout_offsets<2>(outer, j, o);
        double sum = 0.0;
        for (i64 k = 0; k < inner.count; ++k) {
            i64 in[1];
            layout_offsets<1>(inner, k, in);
            float v = x[o[1] + in[0]];
            if (v < 0.0f) sum += (double)dy[o[1] + in[0]] * (double)v;
        }
        ds[o[0]] = (float)sum;
    }
}

// ---- binary arithmetic with broadcasting; operands: 0 out, 1 A, 2 B ----

enum BinaryOp { B_ADD = 0, B_SUB, B_MUL, B_DIV, B_POW, B_MAX, B_MIN, B_PRELU };

__device__ __forceinline__ float binary_op(int op, float a, float b) {
    switch (op) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_POW: return powf(a, b);
    case B_MAX: return is_nan(a) || a > b ? a : b;
    case B_MIN: return is_nan(a) || a < b ? a : b;
    case B_PRELU: return a < 0.0f ? b * a : a;
    default: return a;
    }
}

// Integer arithmetic wraps, like the CPU's wrapping ops: division truncates and the
// minimum divided by -1 is the minimum (a / -1 is -a, wrapped). A zero divisor gives 0
// and sets *error (when given), which the runtime turns into the CPU's error.
template <typename T>
__device__ __forceinline__ T binary_int(int op, T a, T b, int* error) {
    switch (op) {
    case B_ADD: return (T)((u64)a + (u64)b);
    case B_SUB: return (T)((u64)a - (u64)b);
    case B_MUL: return (T)((u64)a * (u64)b);
    case B_DIV:
        if (b == 0) {
            if (error) *error = 1;
            return (T)0;
        }
        return b == (T)-1 ? (T)(0 - (u64)a) : a / b;
    case B_MAX: return a > b ? a : b;
    case B_MIN: return a < b ? a : b;
    default: return a;
    }
}

extern "C" __global__ void binary_f32(int op, const Layout l, float* y, const float* a, const float* b) {
    GRID_STRIDE(i, l.count) {
        i64 off[3];
        layout_offsets<3>(l, i, off);
        y[off[0]] = binary_op(op, a[off[1]], b[off[2]]);
    }
}

#define BINARY_INT(NAME, T)                                                                             \
    extern "C" __global__ void NAME(int op, const Layout l, T* y, const T* a, const T* b, int* error) { \
        GRID_STRIDE(i, l.count) {                                                                       \
            i64 off[3];                                                                                 \
            layout_offsets<3>(l, i, off);                                                               \
            y[off[0]] = binary_int<T>(op, a[off[1]], b[off[2]], error);                                 \
        }                                                                                               \
    }
BINARY_INT(binary_i64, i64)
BINARY_INT(binary_i32, int)

// ---- comparisons (bool out) and logic ----

enum CompareOp { C_EQUAL = 0, C_LESS, C_LESS_OR_EQUAL, C_GREATER, C_GREATER_OR_EQUAL };

template <typename T>
__device__ __forceinline__ u8 compare_op(int op, T a, T b) {
    switch (op) {
    case C_EQUAL: return a == b;
    case C_LESS: return a < b;
    case C_LESS_OR_EQUAL: return a <= b;
    case C_GREATER: return a > b;
    case C_GREATER_OR_EQUAL: return a >= b;
    default: return 0;
    }
}

#define COMPARE(NAME, T)                                                                     \
    extern "C" __global__ void NAME(int op, const Layout l, u8* y, const T* a, const T* b) { \
        GRID_STRIDE(i, l.count) {                                                            \
            i64 off[3];                                                                      \
            layout_offsets<3>(l, i, off);                                                    \
            y[off[0]] = compare_op<T>(op, a[off[1]], b[off[2]]);                             \
        }                                                                                    \
    }
COMPARE(compare_f32, float)
COMPARE(compare_i64, i64)
COMPARE(compare_i32, int)
COMPARE(compare_u8, u8)

enum LogicOp { L_AND = 0, L_OR, L_XOR };

extern "C" __global__ void logic_bool(int op, const Layout l, u8* y, const u8* a, const u8* b) {
    GRID_STRIDE(i, l.count) {
        i64 off[3];
        layout_offsets<3>(l, i, off);
        bool p = a[off[1]] != 0, q = b[off[2]] != 0;
        y[off[0]] = op == L_AND ? (p && q) : (op == L_OR ? (p || q) : (p != q));
    }
}

// ---- Where (operands: 0 out, 1 condition, 2 X, 3 Y), by element size ----

#define WHERE(NAME, T)                                                                            \
    extern "C" __global__ void NAME(const Layout l, T* out, const u8* c, const T* x, const T* y) { \
        GRID_STRIDE(i, l.count) {                                                                 \
            i64 off[4];                                                                           \
            layout_offsets<4>(l, i, off);                                                         \
            out[off[0]] = c[off[1]] ? x[off[2]] : y[off[3]];                                      \
        }                                                                                         \
    }
WHERE(where_1, u8)
WHERE(where_2, u16)
WHERE(where_4, u32)
WHERE(where_8, u64)

// ---- strided copies (operands: 0 destination, 1 source), by element size ----

#define COPY(NAME, T)                                                           \
    extern "C" __global__ void NAME(const Layout l, T* dst, const T* src) {     \
        GRID_STRIDE(i, l.count) {                                               \
            i64 off[2];                                                         \
            layout_offsets<2>(l, i, off);                                       \
            dst[off[0]] = src[off[1]];                                          \
        }                                                                       \
    }
COPY(copy_1, u8)
COPY(copy_2, u16)
COPY(copy_4, u32)
COPY(copy_8, u64)

// dst = src / divisor, rounded once from double (ReduceGrad, GlobalAveragePoolGrad).
extern "C" __global__ void copy_div_f32(const Layout l, float* dst, const float* src, double divisor) {
    GRID_STRIDE(i, l.count) {
        i64 off[2];
        layout_offsets<2>(l, i, off);
        dst[off[0]] = (float)((double)src[off[1]] / divisor);
    }
}

// ---- fills ----

#define FILL(NAME, T) \
    extern "C" __global__ void NAME(i64 n, T* y, u64 bits) { GRID_STRIDE(i, n) y[i] = (T)bits; }
FILL(fill_1, u8)
FILL(fill_2, u16)
FILL(fill_4, u32)
FILL(fill_8, u64)

// ---- Cast: through double when a float type is involved, through i64 otherwise ----

enum DtypeCode { D_F32 = 0, D_F64, D_I64, D_I32, D_BOOL, D_U8, D_I8 };

__device__ __forceinline__ bool is_float_code(int code) { return code == D_F32 || code == D_F64; }

__device__ double load_double(int code, const void* p, i64 i) {
    switch (code) {
    case D_F32: return ((const float*)p)[i];
    case D_F64: return ((const double*)p)[i];
    case D_I64: return (double)((const i64*)p)[i];
    case D_I32: return ((const int*)p)[i];
    case D_BOOL: return ((const u8*)p)[i] ? 1.0 : 0.0;
    case D_U8: return ((const u8*)p)[i];
    default: return ((const signed char*)p)[i];
    }
}

__device__ i64 load_int(int code, const void* p, i64 i) {
    switch (code) {
    case D_I64: return ((const i64*)p)[i];
    case D_I32: return ((const int*)p)[i];
    case D_BOOL: return ((const u8*)p)[i] ? 1 : 0;
    case D_U8: return ((const u8*)p)[i];
    default: return ((const signed char*)p)[i];
    }
}

// Float to integer truncates toward zero and saturates (NaN gives 0), like Rust's `as`.
// [lo, hi) holds the values whose truncation fits T: lo is T's minimum and hi its maximum
// plus one, both powers of two and exact as doubles, so no conversion is out of range
// (undefined behaviour in C++: 2^63 converted to i64 may give INT64_MIN).
template <typename T>
__device__ __forceinline__ T saturate(double v, double lo, double hi, T min, T max) {
    return v != v ? (T)0 : (v < lo ? min : (v >= hi ? max : (T)v));
}

__device__ void store_double(int code, void* p, i64 i, double v) {
    switch (code) {
    case D_F32: ((float*)p)[i] = (float)v; break;
    case D_F64: ((double*)p)[i] = v; break;
    case D_I64: {
        const i64 max = 9223372036854775807LL;
        ((i64*)p)[i] = saturate<i64>(v, -9223372036854775808.0, 9223372036854775808.0, -max - 1, max);
        break;
    }
    case D_I32: ((int*)p)[i] = saturate<int>(v, -2147483648.0, 2147483648.0, -2147483647 - 1, 2147483647); break;
    case D_BOOL: ((u8*)p)[i] = v != 0.0; break;
    case D_U8: ((u8*)p)[i] = saturate<u8>(v, 0.0, 256.0, 0, 255); break;
    default: ((signed char*)p)[i] = saturate<signed char>(v, -128.0, 128.0, -128, 127); break;
    }
}

__device__ void store_int(int code, void* p, i64 i, i64 v) {
    switch (code) {
    case D_I64: ((i64*)p)[i] = v; break;
    case D_I32: ((int*)p)[i] = (int)v; break;
    case D_BOOL: ((u8*)p)[i] = v != 0; break;
    case D_U8: ((u8*)p)[i] = (u8)v; break;
    default: ((signed char*)p)[i] = (signed char)v; break;
    }
}

extern "C" __global__ void cast(i64 n, int from, int to, const void* x, void* y) {
    bool via_float = is_float_code(from) || is_float_code(to);
    GRID_STRIDE(i, n) {
        if (via_float) store_double(to, y, i, load_double(from, x, i));
        else store_int(to, y, i, load_int(from, x, i));
    }
}

// ---- PowGrad: out = dY · P · X^(P−1) over the broadcast shape (operands: out, dY, X, P) ----

extern "C" __global__ void pow_grad_f32(const Layout l, float* out, const float* dy, const float* x,
                                        const float* p) {
    GRID_STRIDE(i, l.count) {
        i64 off[4];
        layout_offsets<4>(l, i, off);
        double e = p[off[3]];
        out[off[0]] = (float)((double)dy[off[1]] * (e * pow((double)x[off[2]], e - 1.0)));
    }
}
