// The subset of cuBLAS the backend calls, for the emulated device: handles, their stream,
// workspace and math mode (recorded, not used), and single-precision GEMM, plain and
// strided-batched, column-major with cuBLAS's exact argument semantics, queued on the
// handle's stream (streams.h). Each product
// accumulates in float in index order; real cuBLAS chooses another order (and TF32 when
// asked), so results agree with a GPU's only within rounding.
#include <stdint.h>
#include <stdio.h>

#include "streams.h"

extern "C" int lms_emu_valid_range(uint64_t addr, uint64_t len);

namespace {

enum : int { SUCCESS = 0, NOT_INITIALIZED = 1, INVALID_VALUE = 7, EXECUTION_FAILED = 13 };
enum : int { OP_N = 0, OP_T = 1, OP_C = 2 };

struct Handle {
    void* stream;
    int math_mode;
};

// The memory of the `rows` x `cols` column-major matrix at `p` with leading dimension `ld`.
lms_emu::Range span(const float* p, long long rows, long long cols, long long ld) {
    uint64_t bytes = rows == 0 || cols == 0 ? 0 : uint64_t((cols - 1) * ld + rows) * sizeof(float);
    return {uint64_t(p), uint64_t(p) + bytes};
}

// Whether the range lies inside one device allocation.
bool inside(lms_emu::Range r) { return r.begin == r.end || lms_emu_valid_range(r.begin, r.end - r.begin) != 0; }

// C = alpha·op(A)·op(B) + beta·C for each of `batch` products, summed in float in index order.
void products(bool at, bool bt, int m, int n, int k, float alpha, const float* a, int lda, long long sa, const float* b,
              int ldb, long long sb, float beta, float* c, int ldc, long long sc, int batch) {
    for (int p = 0; p < batch; ++p) {
        const float* A = a + p * sa;
        const float* B = b + p * sb;
        float* C = c + p * sc;
        for (int j = 0; j < n; ++j) {
            for (int i = 0; i < m; ++i) {
                float sum = 0.0f;
                for (int l = 0; l < k; ++l) {
                    float x = at ? A[l + (long long)i * lda] : A[i + (long long)l * lda];
                    float y = bt ? B[j + (long long)l * ldb] : B[l + (long long)j * ldb];
                    sum += x * y;
                }
                float& out = C[i + (long long)j * ldc];
                out = beta == 0.0f ? alpha * sum : alpha * sum + beta * out;
            }
        }
    }
}

int gemm(void* handle, int ta, int tb, int m, int n, int k, const float* alpha, const float* a, int lda, long long sa,
         const float* b, int ldb, long long sb, const float* beta, float* c, int ldc, long long sc, int batch) {
    if (handle == nullptr) return NOT_INITIALIZED;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || ta < OP_N || ta > OP_C || tb < OP_N || tb > OP_C) return INVALID_VALUE;
    bool at = ta != OP_N, bt = tb != OP_N;
    if (lda < (at ? (k > 1 ? k : 1) : (m > 1 ? m : 1)) || ldb < (bt ? (n > 1 ? n : 1) : (k > 1 ? k : 1)) ||
        ldc < (m > 1 ? m : 1))
        return INVALID_VALUE;
    lms_emu::Access access;
    for (int p = 0; p < batch; ++p) {
        lms_emu::Range A = span(a + p * sa, at ? k : m, at ? m : k, lda), B = span(b + p * sb, bt ? n : k, bt ? k : n, ldb);
        lms_emu::Range C = span(c + p * sc, m, n, ldc);
        if ((k > 0 && (!inside(A) || !inside(B))) || !inside(C)) {
            fprintf(stderr, "lms emulated device: sgemm product %d reads or writes outside the device allocations\n", p);
            return INVALID_VALUE;
        }
        if (k > 0) access.reads.insert(access.reads.end(), {A, B});
        if (*beta != 0.0f) access.reads.push_back(C);
        access.writes.push_back(C);
    }
    float alpha_value = *alpha, beta_value = *beta;
    int status = lms_emu::enqueue(static_cast<Handle*>(handle)->stream, "cublasSgemm", std::move(access), [=] {
        products(at, bt, m, n, k, alpha_value, a, lda, sa, b, ldb, sb, beta_value, c, ldc, sc, batch);
    });
    return status == 0 ? SUCCESS : EXECUTION_FAILED;
}

}  // namespace

extern "C" {

int cublasCreate_v2(void** handle) {
    *handle = new Handle{nullptr, 0};
    return SUCCESS;
}
int cublasDestroy_v2(void* handle) {
    delete static_cast<Handle*>(handle);
    return SUCCESS;
}
int cublasSetStream_v2(void* handle, void* stream) {
    if (handle == nullptr) return NOT_INITIALIZED;
    static_cast<Handle*>(handle)->stream = stream;
    return SUCCESS;
}
int cublasGetStream_v2(void* handle, void** stream) {
    if (handle == nullptr) return NOT_INITIALIZED;
    *stream = static_cast<Handle*>(handle)->stream;
    return SUCCESS;
}
int cublasSetWorkspace_v2(void* handle, void*, size_t) { return handle ? SUCCESS : NOT_INITIALIZED; }
int cublasSetMathMode(void* handle, int mode) {
    if (handle == nullptr) return NOT_INITIALIZED;
    static_cast<Handle*>(handle)->math_mode = mode;
    return SUCCESS;
}
int cublasGetMathMode(void* handle, int* mode) {
    if (handle == nullptr) return NOT_INITIALIZED;
    *mode = static_cast<Handle*>(handle)->math_mode;
    return SUCCESS;
}
int cublasGetProperty(int type, int* value) {
    *value = type == 0 ? 13 : 0;  // version 13.0.0
    return SUCCESS;
}
int cublasGetVersion_v2(void*, int* version) {
    *version = 130000;
    return SUCCESS;
}
const char* cublasGetStatusString(int status) { return status == SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_ERROR"; }

int cublasSgemm_v2(void* handle, int ta, int tb, int m, int n, int k, const float* alpha, const float* a, int lda,
                   const float* b, int ldb, const float* beta, float* c, int ldc) {
    return gemm(handle, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

int cublasSgemmStridedBatched(void* handle, int ta, int tb, int m, int n, int k, const float* alpha, const float* a,
                              int lda, long long sa, const float* b, int ldb, long long sb, const float* beta, float* c,
                              int ldc, long long sc, int batch) {
    return gemm(handle, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
}

}  // extern "C"
