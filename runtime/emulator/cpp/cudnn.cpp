// The subset of cuDNN the backend calls, for the emulated device: handles bound to a
// stream, N-d tensor, filter and convolution descriptors (f32, packed or strided tensors,
// NCHW filters, cross-correlation with pads, strides, dilations and groups), the v7
// algorithm rankings, workspace sizes, and the three convolutions — forward, backward data,
// backward filter — as direct loops with cuDNN's alpha/beta semantics (y = alpha·conv +
// beta·y). Each output sums its products in double, in index order, and rounds once:
// real cuDNN sums in float in an order its algorithm chooses, so results agree with a
// GPU's only within rounding. The algorithms offered are deterministic in cuDNN: forward
// IMPLICIT_GEMM (0, no workspace) and IMPLICIT_PRECOMP_GEMM (1, one sample's lowered
// input as workspace: C/groups × kernel × output positions, f32), backward data ALGO_1
// (no workspace) and backward filter ALGO_1 (one dW as workspace: the partial sums real
// cuDNN keeps). A convolution given less workspace than its algorithm needs fails, and
// the workspace counts as memory it writes in the hazard checks. The math type is
// recorded, not used (no TF32).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <vector>

#include "streams.h"

extern "C" int lms_emu_valid_range(uint64_t addr, uint64_t len);

namespace {

enum : int { SUCCESS = 0, NOT_INITIALIZED = 1, BAD_PARAM = 3, NOT_SUPPORTED = 9, EXECUTION_FAILED = 8 };
enum : int { DATA_FLOAT = 0, CROSS_CORRELATION = 1, DETERMINISTIC = 1, TENSOR_NCHW = 0 };
constexpr int MAX_DIMS = 8;

struct Handle {
    void* stream;
};

struct Tensor {
    int dims = 0;
    long long shape[MAX_DIMS] = {};
    long long strides[MAX_DIMS] = {};
};

struct Convolution {
    int spatial = 0;
    int pads[MAX_DIMS] = {}, strides[MAX_DIMS] = {}, dilations[MAX_DIMS] = {};
    int groups = 1;
    int math = 0;
};

// A convolution's geometry, checked: X [n, c, in...], W [k, c/groups, r...], Y [n, k, out...].
// Held by value: the work runs after the descriptors may be destroyed.
struct Geometry {
    Tensor x, w, y;
    Convolution conv;
    long long n, c, k, groups, spatial;
    long long in[MAX_DIMS], kernel[MAX_DIMS], out[MAX_DIMS];
};


// The geometry of X `x`, W `w` (filter: packed) and Y `y` under `conv`, or false when
// they do not describe one convolution.
bool geometry(const Tensor* x, const Tensor* w, const Tensor* y, const Convolution* conv, Geometry* g) {
    if (!x || !w || !y || !conv) return false;
    int s = conv->spatial;
    if (s < 1 || x->dims != s + 2 || w->dims != s + 2 || y->dims != s + 2) return false;
    *g = Geometry{*x, *w, *y, *conv, x->shape[0], x->shape[1], w->shape[0], conv->groups, s, {}, {}, {}};
    if (g->groups < 1 || g->c % g->groups != 0 || g->k % g->groups != 0 || w->shape[1] * g->groups != g->c) return false;
    if (y->shape[0] != g->n || y->shape[1] != g->k) return false;
    for (int d = 0; d < s; ++d) {
        g->in[d] = x->shape[2 + d];
        g->kernel[d] = w->shape[2 + d];
        long long span = (long long)conv->dilations[d] * (g->kernel[d] - 1) + 1;
        long long padded = g->in[d] + 2LL * conv->pads[d];
        if (padded < span) return false;
        g->out[d] = (padded - span) / conv->strides[d] + 1;
        if (y->shape[2 + d] != g->out[d]) return false;
    }
    return true;
}

// Packed strides of a filter of `dims` dimensions.
void pack(Tensor* t) {
    long long stride = 1;
    for (int d = t->dims - 1; d >= 0; --d) {
        t->strides[d] = stride;
        stride *= t->shape[d];
    }
}

long long at(const Tensor& t, const long long* index) {
    long long offset = 0;
    for (int d = 0; d < t.dims; ++d) offset += index[d] * t.strides[d];
    return offset;
}

// Visits every (output position, kernel position, input position) of the convolution
// for batch item `ni`, output channel `ki` and input channel `ci` in index order, calling
// `f(y offset, w offset, x offset)` where the input position lies inside X (not in a pad).
template <typename F>
void each_tap(const Geometry& g, long long ni, long long ki, long long ci, const long long* out_pos, F f) {
    const Convolution& cv = g.conv;
    long long kernel_count = 1;
    for (int d = 0; d < g.spatial; ++d) kernel_count *= g.kernel[d];
    long long xi[MAX_DIMS], wi[MAX_DIMS];
    xi[0] = ni;
    xi[1] = ci;
    wi[0] = ki;
    wi[1] = ci % (g.c / g.groups);
    for (long long r = 0; r < kernel_count; ++r) {
        long long rest = r;
        bool inside_x = true;
        for (int d = int(g.spatial) - 1; d >= 0; --d) {
            long long kd = rest % g.kernel[d];
            rest /= g.kernel[d];
            wi[2 + d] = kd;
            long long pos = out_pos[d] * cv.strides[d] - cv.pads[d] + kd * cv.dilations[d];
            inside_x = inside_x && pos >= 0 && pos < g.in[d];
            xi[2 + d] = pos;
        }
        if (inside_x) f(at(g.w, wi), at(g.x, xi));
    }
}

// Calls `f(index)` for every index of the spatial shape `dims` (`count` axes), row-major.
template <typename F>
void each_position(const long long* dims, long long count, F f) {
    long long total = 1;
    for (long long d = 0; d < count; ++d) total *= dims[d];
    long long pos[MAX_DIMS];
    for (long long i = 0; i < total; ++i) {
        long long rest = i;
        for (long long d = count - 1; d >= 0; --d) {
            pos[d] = rest % dims[d];
            rest /= dims[d];
        }
        f(pos);
    }
}

long long span(const Tensor& t);

// Whether the tensor's elements all lie in one device allocation at `p`.
bool inside(const void* p, const Tensor& t) {
    return lms_emu_valid_range(uint64_t(p), uint64_t(span(t)) * sizeof(float)) != 0;
}

float blend(float alpha, double sum, float beta, float old) {
    return beta == 0.0f ? alpha * float(sum) : alpha * float(sum) + beta * old;
}

void forward(const Geometry& g, float alpha, const float* x, const float* w, float beta, float* y) {
    long long cg = g.c / g.groups, kg = g.k / g.groups;
    for (long long ni = 0; ni < g.n; ++ni)
        for (long long ki = 0; ki < g.k; ++ki)
            each_position(g.out, g.spatial, [&](const long long* pos) {
                double sum = 0;
                long long first = (ki / kg) * cg;
                for (long long ci = first; ci < first + cg; ++ci)
                    each_tap(g, ni, ki, ci, pos, [&](long long wo, long long xo) { sum += double(w[wo]) * x[xo]; });
                long long yi[MAX_DIMS] = {ni, ki};
                for (long long d = 0; d < g.spatial; ++d) yi[2 + d] = pos[d];
                float& out = y[at(g.y, yi)];
                out = blend(alpha, sum, beta, out);
            });
}

// The offset just past the last element of `t` (its span in elements).
long long span(const Tensor& t) {
    long long last = 0;
    for (int d = 0; d < t.dims; ++d) last += (t.shape[d] - 1) * t.strides[d];
    return last + 1;
}

// dx = alpha·(the transpose of the forward conv applied to dy) + beta·dx: every input
// element sums the taps that read it, in the order of the output positions.
void backward_data(const Geometry& g, float alpha, const float* w, const float* dy, float beta, float* dx) {
    std::vector<double> sums(size_t(span(g.x)), 0.0);
    long long cg = g.c / g.groups, kg = g.k / g.groups;
    for (long long ni = 0; ni < g.n; ++ni)
        for (long long ki = 0; ki < g.k; ++ki)
            each_position(g.out, g.spatial, [&](const long long* pos) {
                long long yi[MAX_DIMS] = {ni, ki};
                for (long long d = 0; d < g.spatial; ++d) yi[2 + d] = pos[d];
                double grad = dy[at(g.y, yi)];
                long long first = (ki / kg) * cg;
                for (long long ci = first; ci < first + cg; ++ci)
                    each_tap(g, ni, ki, ci, pos, [&](long long wo, long long xo) { sums[size_t(xo)] += double(w[wo]) * grad; });
            });
    each_position(g.x.shape, g.x.dims, [&](const long long* index) {
        long long offset = at(g.x, index);
        dx[offset] = blend(alpha, sums[size_t(offset)], beta, dx[offset]);
    });
}

// dw = alpha·(the correlation of x with dy over the batch and output positions) + beta·dw.
void backward_filter(const Geometry& g, float alpha, const float* x, const float* dy, float beta, float* dw) {
    long long cg = g.c / g.groups, kg = g.k / g.groups;
    long long kernel_count = 1;
    for (int d = 0; d < g.spatial; ++d) kernel_count *= g.kernel[d];
    for (long long ki = 0; ki < g.k; ++ki)
        for (long long cj = 0; cj < cg; ++cj)
            for (long long r = 0; r < kernel_count; ++r) {
                long long wi[MAX_DIMS] = {ki, cj}, kd[MAX_DIMS];
                long long rest = r;
                for (int d = int(g.spatial) - 1; d >= 0; --d) {
                    kd[d] = rest % g.kernel[d];
                    rest /= g.kernel[d];
                    wi[2 + d] = kd[d];
                }
                long long ci = (ki / kg) * cg + cj;
                double sum = 0;
                for (long long ni = 0; ni < g.n; ++ni)
                    each_position(g.out, g.spatial, [&](const long long* pos) {
                        long long xi[MAX_DIMS] = {ni, ci}, yi[MAX_DIMS] = {ni, ki};
                        for (long long d = 0; d < g.spatial; ++d) {
                            long long p = pos[d] * g.conv.strides[d] - g.conv.pads[d] + kd[d] * g.conv.dilations[d];
                            if (p < 0 || p >= g.in[d]) return;
                            xi[2 + d] = p;
                            yi[2 + d] = pos[d];
                        }
                        sum += double(x[at(g.x, xi)]) * dy[at(g.y, yi)];
                    });
                float& out = dw[at(g.w, wi)];
                out = blend(alpha, sum, beta, out);
            }
}

// An entry of the v7 rankings (cudnnConvolution*AlgoPerf_t: all three directions share
// the layout).
struct Perf {
    int algo;
    int status;
    float time;
    size_t memory;
    int determinism;
    int mathType;
    int reserved[3];
};

enum Direction : int { FORWARD = 0, BACKWARD_DATA = 1, BACKWARD_FILTER = 2 };

// Whether `algo` is offered in `direction`.
bool offered(int direction, int algo) { return algo == 1 || (direction == FORWARD && algo == 0); }

// Bytes every workspace needs beyond its algorithm's (`LMS_CUDA_EMULATOR_WORKSPACE_EXTRA`,
// test only: a library that needs more than a plan gives), read once.
size_t workspace_extra() {
    static const size_t extra = [] {
        const char* value = getenv("LMS_CUDA_EMULATOR_WORKSPACE_EXTRA");
        return value ? size_t(strtoull(value, nullptr, 10)) : size_t(0);
    }();
    return extra;
}

// The workspace bytes `algo` needs in `direction` for `g` (an offered one).
size_t workspace_bytes(const Geometry& g, int direction, int algo) {
    if (direction == BACKWARD_DATA || (direction == FORWARD && algo == 0)) return workspace_extra();
    size_t bytes = sizeof(float) * size_t(g.c / g.groups);
    for (int d = 0; d < g.spatial; ++d)
        bytes *= size_t(g.kernel[d]) * (direction == FORWARD ? size_t(g.out[d]) : size_t(1));
    if (direction == FORWARD) return bytes + workspace_extra();
    // Backward filter: what cuDNN 9.14's ALGO_1 asked for on an H100, a copy of X, of dY
    // and of dW and 16 to 32 bytes more (32 here).
    size_t x = sizeof(float) * size_t(g.n) * size_t(g.c), dy = sizeof(float) * size_t(g.n) * size_t(g.k);
    for (int d = 0; d < g.spatial; ++d) {
        x *= size_t(g.in[d]);
        dy *= size_t(g.out[d]);
    }
    return x + dy + bytes * size_t(g.k) + 32 + workspace_extra();
}

// The offered algorithms of `direction`, fastest first as cuDNN would rank them.
int rank(int requested, int* returned, Perf* perf, const Geometry& g, int direction) {
    if (requested < 1 || returned == nullptr || perf == nullptr) return BAD_PARAM;
    int count = 0;
    for (int algo : {1, 0}) {
        if (count == requested || !offered(direction, algo)) continue;
        size_t bytes = workspace_bytes(g, direction, algo);
        perf[count++] = Perf{algo, SUCCESS, 0.0f, bytes, DETERMINISTIC, g.conv.math, {0, 0, 0}};
    }
    *returned = count;
    return SUCCESS;
}

// The elements of `t` at `p`, as a range of device memory.
lms_emu::Range range(const void* p, const Tensor& t) {
    uint64_t begin = uint64_t(p);
    return {begin, begin + uint64_t(span(t)) * sizeof(float)};
}

// Queues `work` on the handle's stream, named `what`: it reads the tensors `a` and `b`
// and writes `out` (reading it too when beta is not 0) and the `workspace` (of `given`
// bytes, `needed` of them used). Checks first that every operand lies in device memory
// and that the workspace is large enough.
int issue(Handle* h, const char* what, const void* a, const Tensor& ta, const void* b, const Tensor& tb, void* out,
          const Tensor& tout, float beta, void* workspace, size_t given, size_t needed, std::function<void()> work) {
    if (given < needed) {
        fprintf(stderr, "lms emulated device: %s given a workspace of %zu bytes, its algorithm needs %zu\n", what, given,
                needed);
        return BAD_PARAM;
    }
    bool workspace_inside = needed == 0 || lms_emu_valid_range(uint64_t(workspace), needed) != 0;
    if (!inside(a, ta) || !inside(b, tb) || !inside(out, tout) || !workspace_inside) {
        fprintf(stderr, "lms emulated device: %s reads or writes outside the device allocations\n", what);
        return BAD_PARAM;
    }
    lms_emu::Access access;
    access.reads = {range(a, ta), range(b, tb)};
    if (beta != 0.0f) access.reads.push_back(range(out, tout));
    access.writes = {range(out, tout)};
    if (needed > 0) access.writes.push_back({uint64_t(workspace), uint64_t(workspace) + needed});
    return lms_emu::enqueue(h->stream, what, std::move(access), std::move(work)) == 0 ? SUCCESS : EXECUTION_FAILED;
}

}  // namespace

extern "C" {

size_t cudnnGetVersion() { return 91000; }
const char* cudnnGetErrorString(int status) { return status == SUCCESS ? "CUDNN_STATUS_SUCCESS" : "CUDNN_STATUS_ERROR"; }

int cudnnCreate(void** handle) {
    *handle = new Handle{nullptr};
    return SUCCESS;
}
int cudnnDestroy(void* handle) {
    delete static_cast<Handle*>(handle);
    return SUCCESS;
}
int cudnnSetStream(void* handle, void* stream) {
    if (handle == nullptr) return NOT_INITIALIZED;
    static_cast<Handle*>(handle)->stream = stream;
    return SUCCESS;
}

int cudnnCreateTensorDescriptor(void** desc) {
    *desc = new Tensor;
    return SUCCESS;
}
int cudnnDestroyTensorDescriptor(void* desc) {
    delete static_cast<Tensor*>(desc);
    return SUCCESS;
}
int cudnnSetTensorNdDescriptor(void* desc, int type, int dims, const int* shape, const int* strides) {
    if (desc == nullptr || type != DATA_FLOAT || dims < 3 || dims > MAX_DIMS) return type != DATA_FLOAT ? NOT_SUPPORTED : BAD_PARAM;
    auto* t = static_cast<Tensor*>(desc);
    t->dims = dims;
    for (int d = 0; d < dims; ++d) {
        if (shape[d] < 1 || strides[d] < 1) return BAD_PARAM;
        t->shape[d] = shape[d];
        t->strides[d] = strides[d];
    }
    return SUCCESS;
}

int cudnnCreateFilterDescriptor(void** desc) {
    *desc = new Tensor;
    return SUCCESS;
}
int cudnnDestroyFilterDescriptor(void* desc) {
    delete static_cast<Tensor*>(desc);
    return SUCCESS;
}
int cudnnSetFilterNdDescriptor(void* desc, int type, int format, int dims, const int* shape) {
    if (type != DATA_FLOAT || format != TENSOR_NCHW) return NOT_SUPPORTED;
    if (desc == nullptr || dims < 3 || dims > MAX_DIMS) return BAD_PARAM;
    auto* t = static_cast<Tensor*>(desc);
    t->dims = dims;
    for (int d = 0; d < dims; ++d) {
        if (shape[d] < 1) return BAD_PARAM;
        t->shape[d] = shape[d];
    }
    pack(t);
    return SUCCESS;
}

int cudnnCreateConvolutionDescriptor(void** desc) {
    *desc = new Convolution;
    return SUCCESS;
}
int cudnnDestroyConvolutionDescriptor(void* desc) {
    delete static_cast<Convolution*>(desc);
    return SUCCESS;
}
int cudnnSetConvolutionNdDescriptor(void* desc, int length, const int* pads, const int* strides, const int* dilations,
                                    int mode, int type) {
    if (mode != CROSS_CORRELATION || type != DATA_FLOAT) return NOT_SUPPORTED;
    if (desc == nullptr || length < 1 || length > MAX_DIMS - 2) return BAD_PARAM;
    auto* c = static_cast<Convolution*>(desc);
    c->spatial = length;
    for (int d = 0; d < length; ++d) {
        if (pads[d] < 0 || strides[d] < 1 || dilations[d] < 1) return BAD_PARAM;
        c->pads[d] = pads[d];
        c->strides[d] = strides[d];
        c->dilations[d] = dilations[d];
    }
    return SUCCESS;
}
int cudnnSetConvolutionGroupCount(void* desc, int groups) {
    if (desc == nullptr || groups < 1) return BAD_PARAM;
    static_cast<Convolution*>(desc)->groups = groups;
    return SUCCESS;
}
int cudnnSetConvolutionMathType(void* desc, int math) {
    if (desc == nullptr) return BAD_PARAM;
    static_cast<Convolution*>(desc)->math = math;
    return SUCCESS;
}

// The geometry of a query for X `x`, W `w`, Y `y` under `conv`, into `g`.
int query(void* handle, void* x, void* w, void* conv, void* y, Geometry* g) {
    if (handle == nullptr) return NOT_INITIALIZED;
    if (!geometry(static_cast<Tensor*>(x), static_cast<Tensor*>(w), static_cast<Tensor*>(y),
                  static_cast<Convolution*>(conv), g))
        return BAD_PARAM;
    return SUCCESS;
}

int cudnnGetConvolutionForwardAlgorithm_v7(void* handle, void* x, void* w, void* conv, void* y, int requested,
                                           int* returned, Perf* perf) {
    Geometry g;
    int status = query(handle, x, w, conv, y, &g);
    return status != SUCCESS ? status : rank(requested, returned, perf, g, FORWARD);
}
int cudnnGetConvolutionBackwardDataAlgorithm_v7(void* handle, void* w, void* dy, void* conv, void* dx, int requested,
                                                int* returned, Perf* perf) {
    Geometry g;
    int status = query(handle, dx, w, conv, dy, &g);
    return status != SUCCESS ? status : rank(requested, returned, perf, g, BACKWARD_DATA);
}
int cudnnGetConvolutionBackwardFilterAlgorithm_v7(void* handle, void* x, void* dy, void* conv, void* dw,
                                                  int requested, int* returned, Perf* perf) {
    Geometry g;
    int status = query(handle, x, dw, conv, dy, &g);
    return status != SUCCESS ? status : rank(requested, returned, perf, g, BACKWARD_FILTER);
}

// The workspace of `algo` in `direction`, written to `bytes`.
int workspace_size(void* handle, void* x, void* w, void* conv, void* y, int algo, int direction, size_t* bytes) {
    Geometry g;
    int status = query(handle, x, w, conv, y, &g);
    if (status != SUCCESS) return status;
    if (!offered(direction, algo)) return NOT_SUPPORTED;
    *bytes = workspace_bytes(g, direction, algo);
    return SUCCESS;
}

int cudnnGetConvolutionForwardWorkspaceSize(void* handle, void* x, void* w, void* conv, void* y, int algo,
                                            size_t* bytes) {
    return workspace_size(handle, x, w, conv, y, algo, FORWARD, bytes);
}
int cudnnGetConvolutionBackwardDataWorkspaceSize(void* handle, void* w, void* dy, void* conv, void* dx, int algo,
                                                 size_t* bytes) {
    return workspace_size(handle, dx, w, conv, dy, algo, BACKWARD_DATA, bytes);
}
int cudnnGetConvolutionBackwardFilterWorkspaceSize(void* handle, void* x, void* dy, void* conv, void* dw, int algo,
                                                   size_t* bytes) {
    return workspace_size(handle, x, dw, conv, dy, algo, BACKWARD_FILTER, bytes);
}

int cudnnConvolutionForward(void* handle, const float* alpha, void* xd, const float* x, void* wd, const float* w,
                            void* conv, int algo, void* workspace, size_t given, const float* beta, void* yd, float* y) {
    Geometry g;
    if (handle == nullptr) return NOT_INITIALIZED;
    if (!offered(FORWARD, algo)) return NOT_SUPPORTED;
    if (!geometry(static_cast<Tensor*>(xd), static_cast<Tensor*>(wd), static_cast<Tensor*>(yd),
                  static_cast<Convolution*>(conv), &g))
        return BAD_PARAM;
    float a = *alpha, b = *beta;
    return issue(static_cast<Handle*>(handle), "cudnnConvolutionForward", x, g.x, w, g.w, y, g.y, b,
                 workspace, given, workspace_bytes(g, FORWARD, algo),
                 [g, a, x, w, b, y] { forward(g, a, x, w, b, y); });
}
int cudnnConvolutionBackwardData(void* handle, const float* alpha, void* wd, const float* w, void* dyd,
                                 const float* dy, void* conv, int algo, void* workspace, size_t given,
                                 const float* beta, void* dxd, float* dx) {
    Geometry g;
    if (handle == nullptr) return NOT_INITIALIZED;
    if (!offered(BACKWARD_DATA, algo)) return NOT_SUPPORTED;
    if (!geometry(static_cast<Tensor*>(dxd), static_cast<Tensor*>(wd), static_cast<Tensor*>(dyd),
                  static_cast<Convolution*>(conv), &g))
        return BAD_PARAM;
    float a = *alpha, b = *beta;
    return issue(static_cast<Handle*>(handle), "cudnnConvolutionBackwardData", w, g.w, dy, g.y, dx, g.x, b,
                 workspace, given, workspace_bytes(g, BACKWARD_DATA, algo),
                 [g, a, w, dy, b, dx] { backward_data(g, a, w, dy, b, dx); });
}
int cudnnConvolutionBackwardFilter(void* handle, const float* alpha, void* xd, const float* x, void* dyd,
                                   const float* dy, void* conv, int algo, void* workspace, size_t given,
                                   const float* beta, void* dwd, float* dw) {
    Geometry g;
    if (handle == nullptr) return NOT_INITIALIZED;
    if (!offered(BACKWARD_FILTER, algo)) return NOT_SUPPORTED;
    if (!geometry(static_cast<Tensor*>(xd), static_cast<Tensor*>(dwd), static_cast<Tensor*>(dyd),
                  static_cast<Convolution*>(conv), &g))
        return BAD_PARAM;
    float a = *alpha, b = *beta;
    return issue(static_cast<Handle*>(handle), "cudnnConvolutionBackwardFilter", x, g.x, dy, g.y, dw, g.w, b,
                 workspace, given, workspace_bytes(g, BACKWARD_FILTER, algo),
                 [g, a, x, dy, b, dw] { backward_filter(g, a, x, dy, b, dw); });
}

}  // extern "C"
