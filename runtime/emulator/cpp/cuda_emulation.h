// The CUDA execution model on the host, for compiling the backend's kernel sources
// unchanged with the host C++ compiler: qualifiers mapped away, the built-in indices as
// per-OS-thread variables that the scheduler sets before running each emulated thread,
// `__syncthreads` and the full-warp shuffle as calls into the scheduler (device.cpp).
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

struct dim3 {
    unsigned int x, y, z;
};

namespace lms_emu {
extern thread_local dim3 thread_idx, block_idx, block_dim, grid_dim;

// Waits until every thread of the block reaches a barrier; `file:line` names the barrier.
void sync_threads(const char* file, int line);

// Exchanges `bits` across the warp (lane ^ `lane_mask`); the scheduler checks the mask
// and that every lane is present.
uint64_t shuffle_xor(const char* file, int line, unsigned int mask, uint64_t bits, int lane_mask, int width);

template <typename T>
inline T shfl_xor(const char* file, int line, unsigned int mask, T value, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a value wider than 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &value, sizeof(T));
    bits = shuffle_xor(file, line, mask, bits, lane_mask, width);
    memcpy(&value, &bits, sizeof(T));
    return value;
}
}  // namespace lms_emu

#define threadIdx lms_emu::thread_idx
#define blockIdx lms_emu::block_idx
#define blockDim lms_emu::block_dim
#define gridDim lms_emu::grid_dim

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
// One launch runs its blocks one after another on one OS thread, so a per-OS-thread
// static is one block's shared memory.
#define __shared__ static thread_local

#define __syncthreads() lms_emu::sync_threads(__FILE__, __LINE__)
#define __shfl_xor_sync(...) lms_emu::shfl_xor(__FILE__, __LINE__, __VA_ARGS__)

inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
inline int __float_as_int(float f) {
    int i;
    memcpy(&i, &f, sizeof i);
    return i;
}
inline double __longlong_as_double(long long i) {
    double d;
    memcpy(&d, &i, sizeof d);
    return d;
}
inline long long __double_as_longlong(double d) {
    long long i;
    memcpy(&i, &d, sizeof i);
    return i;
}
