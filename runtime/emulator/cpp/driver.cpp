// The subset of the CUDA driver API the backend calls (through cudarc), over the emulated
// device: one device, its primary context, device memory, pinned host memory, streams,
// events, modules of prebuilt kernels and kernel launches. Work runs when it is issued
// (a valid order for any stream and event use), so a wait never blocks and an event's
// time is the wall clock when it was recorded. A kernel fault fails the launch with
// CUDA_ERROR_LAUNCH_FAILED, and cuGetErrorString then gives the fault's description.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <mutex>
#include <string>

#include "emulated_sources.h"
#include "streams.h"

extern "C" {
int lms_emu_alloc(uint64_t bytes, uint64_t* out);
int lms_emu_free(uint64_t addr);
uint64_t lms_emu_used();
int lms_emu_valid_range(uint64_t addr, uint64_t len);
long long lms_emu_kernel_index(const char* name);
size_t lms_emu_kernel_count();
const char* lms_emu_kernel_name(size_t i);
const char* lms_emu_kernel_source(size_t i);
uint64_t lms_emu_kernel_launches(size_t i);
int lms_emu_launch(long long index, const unsigned int grid[3], const unsigned int block[3], unsigned int shared_bytes,
                   void** params, uint64_t seed, char* error, size_t error_len);
}

namespace {

enum : int {
    SUCCESS = 0,
    INVALID_VALUE = 1,
    OUT_OF_MEMORY = 2,
    INVALID_DEVICE = 101,
    INVALID_IMAGE = 200,
    INVALID_HANDLE = 400,
    NOT_FOUND = 500,
    LAUNCH_FAILED = 719,
};

// The emulated device's memory: LMS_CUDA_EMULATOR_MEMORY bytes (default 4 GiB).
uint64_t capacity() {
    static uint64_t bytes = [] {
        const char* text = getenv("LMS_CUDA_EMULATOR_MEMORY");
        unsigned long long v = text ? strtoull(text, nullptr, 10) : 0;
        return v > 0 ? uint64_t(v) : (uint64_t(4) << 30);
    }();
    return bytes;
}

struct Context {
    int unused;
} the_context;

struct Stream {
    unsigned int flags;
};

struct Event {
    double ms;
};

struct Module {
    const LmsEmulatedSource* source;
};

std::mutex allocation_lock;  // capacity accounting

thread_local std::string last_fault;

double now_ms() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return double(t.tv_sec) * 1e3 + double(t.tv_nsec) / 1e6;
}

int copy(uint64_t dst, uint64_t src, size_t n, bool dst_device, bool src_device) {
    if (n == 0) return SUCCESS;
    if ((dst_device && !lms_emu_valid_range(dst, n)) || (src_device && !lms_emu_valid_range(src, n))) {
        fprintf(stderr, "lms emulated device: a copy of %zu bytes from 0x%llx to 0x%llx leaves the live allocations\n", n,
                (unsigned long long)src, (unsigned long long)dst);
        return INVALID_VALUE;
    }
    memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
    return SUCCESS;
}

// The seed of the next launch's block and thread orders: LMS_CUDA_EMULATOR_SEED (default
// 0) plus the number of launches so far.
uint64_t next_seed() {
    static std::atomic<uint64_t> launches{0};
    static uint64_t base = [] {
        const char* text = getenv("LMS_CUDA_EMULATOR_SEED");
        return text ? uint64_t(strtoull(text, nullptr, 10)) : uint64_t(0);
    }();
    return base + launches.fetch_add(1);
}

// With LMS_CUDA_EMULATOR_LAUNCHES=<file>, writes at exit one line per backend kernel:
// its source, its name and how many times this process launched it.
__attribute__((destructor)) void write_launches() {
    const char* path = getenv("LMS_CUDA_EMULATOR_LAUNCHES");
    if (path == nullptr || *path == '\0') return;
    FILE* file = fopen(path, "w");
    if (file == nullptr) return;
    for (size_t i = 0; i < lms_emu_kernel_count(); ++i) {
        if (strcmp(lms_emu_kernel_source(i), "faults.cu") == 0) continue;
        fprintf(file, "%s %s %llu\n", lms_emu_kernel_source(i), lms_emu_kernel_name(i),
                (unsigned long long)lms_emu_kernel_launches(i));
    }
    fclose(file);
}

}  // namespace

namespace lms_emu {

int enqueue(void*, const char*, Access, std::function<void()> work) {
    work();
    return 0;
}

}  // namespace lms_emu

extern "C" {

typedef uint64_t CUdeviceptr;

int cuInit(unsigned int) { return SUCCESS; }
int cuDriverGetVersion(int* version) {
    *version = 13000;
    return SUCCESS;
}
int cuDeviceGetCount(int* count) {
    *count = 1;
    return SUCCESS;
}
int cuDeviceGet(int* device, int ordinal) {
    if (ordinal != 0) return INVALID_DEVICE;
    *device = 0;
    return SUCCESS;
}
int cuDeviceGetName(char* name, int len, int device) {
    if (device != 0) return INVALID_DEVICE;
    snprintf(name, size_t(len), "%s", "emulated device (no GPU)");
    return SUCCESS;
}
int cuDeviceTotalMem_v2(size_t* bytes, int device) {
    if (device != 0) return INVALID_DEVICE;
    *bytes = capacity();
    return SUCCESS;
}
int cuDeviceGetAttribute(int* value, int attribute, int device) {
    if (device != 0) return INVALID_DEVICE;
    switch (attribute) {
    case 1: *value = 1024; break;    // max threads per block
    case 2: *value = 1024; break;    // max block x
    case 3: *value = 1024; break;    // max block y
    case 4: *value = 64; break;      // max block z
    case 5: *value = 2147483647; break;
    case 6: *value = 65535; break;
    case 7: *value = 65535; break;
    case 8: *value = 49152; break;   // shared memory per block
    case 10: *value = 32; break;     // warp size
    case 16: *value = 4; break;      // multiprocessors
    case 41: *value = 1; break;      // unified addressing
    case 75: *value = 8; break;      // compute capability 8.0
    case 76: *value = 0; break;
    default: *value = 0; break;      // memory pools (115) and the rest: not supported
    }
    return SUCCESS;
}
int cuDevicePrimaryCtxRetain(void** context, int device) {
    if (device != 0) return INVALID_DEVICE;
    *context = &the_context;
    return SUCCESS;
}
int cuDevicePrimaryCtxRelease_v2(int) { return SUCCESS; }
int cuCtxSetCurrent(void*) { return SUCCESS; }
int cuCtxGetCurrent(void** context) {
    *context = &the_context;
    return SUCCESS;
}
int cuCtxSynchronize() { return SUCCESS; }
int cuCtxGetStreamPriorityRange(int* least, int* greatest) {
    *least = 0;
    *greatest = 0;
    return SUCCESS;
}

int cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
    uint64_t used = lms_emu_used();
    *total = capacity();
    *free_bytes = used < capacity() ? capacity() - used : 0;
    return SUCCESS;
}
int cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) {
    std::lock_guard<std::mutex> guard(allocation_lock);
    if (lms_emu_used() + bytes > capacity()) return OUT_OF_MEMORY;
    return lms_emu_alloc(bytes, ptr) == 0 ? SUCCESS : OUT_OF_MEMORY;
}
int cuMemAllocAsync(CUdeviceptr* ptr, size_t bytes, void*) { return cuMemAlloc_v2(ptr, bytes); }
int cuMemFree_v2(CUdeviceptr ptr) { return lms_emu_free(ptr) == 0 ? SUCCESS : INVALID_VALUE; }
int cuMemFreeAsync(CUdeviceptr ptr, void*) { return cuMemFree_v2(ptr); }

int cuMemHostAlloc(void** ptr, size_t bytes, unsigned int) {
    *ptr = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096 + 4096);
    return *ptr ? SUCCESS : OUT_OF_MEMORY;
}
int cuMemAllocHost_v2(void** ptr, size_t bytes) { return cuMemHostAlloc(ptr, bytes, 0); }
int cuMemFreeHost(void* ptr) {
    free(ptr);
    return SUCCESS;
}

int cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) { return copy(dst, uint64_t(src), n, true, false); }
int cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void*) { return cuMemcpyHtoD_v2(dst, src, n); }
int cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) { return copy(uint64_t(dst), src, n, false, true); }
int cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void*) { return cuMemcpyDtoH_v2(dst, src, n); }
int cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(dst, src, n, true, true); }
int cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void*) { return cuMemcpyDtoD_v2(dst, src, n); }
int cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
    if (n > 0 && !lms_emu_valid_range(dst, n)) return INVALID_VALUE;
    memset(reinterpret_cast<void*>(dst), value, n);
    return SUCCESS;
}
int cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, void*) { return cuMemsetD8_v2(dst, value, n); }
int cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t n) {
    if (n > 0 && !lms_emu_valid_range(dst, n * 4)) return INVALID_VALUE;
    auto* p = reinterpret_cast<unsigned int*>(dst);
    for (size_t i = 0; i < n; ++i) p[i] = value;
    return SUCCESS;
}
int cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t n, void*) { return cuMemsetD32_v2(dst, value, n); }

int cuStreamCreate(void** stream, unsigned int flags) {
    *stream = new Stream{flags};
    return SUCCESS;
}
int cuStreamCreateWithPriority(void** stream, unsigned int flags, int) { return cuStreamCreate(stream, flags); }
int cuStreamDestroy_v2(void* stream) {
    delete static_cast<Stream*>(stream);
    return SUCCESS;
}
int cuStreamSynchronize(void*) { return SUCCESS; }
int cuStreamQuery(void*) { return SUCCESS; }
int cuStreamWaitEvent(void*, void* event, unsigned int) { return event ? SUCCESS : INVALID_HANDLE; }
int cuLaunchHostFunc(void*, void (*fn)(void*), void* data) {
    fn(data);
    return SUCCESS;
}

int cuEventCreate(void** event, unsigned int) {
    *event = new Event{now_ms()};
    return SUCCESS;
}
int cuEventRecord(void* event, void*) {
    if (!event) return INVALID_HANDLE;
    static_cast<Event*>(event)->ms = now_ms();
    return SUCCESS;
}
int cuEventRecordWithFlags(void* event, void* stream, unsigned int) { return cuEventRecord(event, stream); }
int cuEventSynchronize(void* event) { return event ? SUCCESS : INVALID_HANDLE; }
int cuEventQuery(void* event) { return event ? SUCCESS : INVALID_HANDLE; }
int cuEventElapsedTime(float* ms, void* start, void* end) {
    if (!start || !end) return INVALID_HANDLE;
    *ms = float(static_cast<Event*>(end)->ms - static_cast<Event*>(start)->ms);
    return SUCCESS;
}
int cuEventElapsedTime_v2(float* ms, void* start, void* end) { return cuEventElapsedTime(ms, start, end); }
int cuEventDestroy_v2(void* event) {
    delete static_cast<Event*>(event);
    return SUCCESS;
}

// An image from the emulated NVRTC: its magic, the source's name and the hash of the
// text it was compiled from; anything else is refused.
int cuModuleLoadData(void** module, const void* image) {
    const LmsEmulatedSource* source = lms_emulated_image_source(static_cast<const char*>(image));
    if (source == nullptr) {
        fprintf(stderr, "lms emulated device: a module image that the emulated NVRTC did not make\n");
        return INVALID_IMAGE;
    }
    *module = new Module{source};
    return SUCCESS;
}
int cuModuleUnload(void* module) {
    delete static_cast<Module*>(module);
    return SUCCESS;
}
int cuModuleGetFunction(void** function, void* module, const char* name) {
    long long index = lms_emu_kernel_index(name);
    if (index < 0 || strcmp(lms_emu_kernel_source(size_t(index)), static_cast<Module*>(module)->source->name) != 0)
        return NOT_FOUND;
    *function = reinterpret_cast<void*>(uintptr_t(index + 1));
    return SUCCESS;
}
int cuFuncGetAttribute(int* value, int attribute, void*) {
    *value = attribute == 0 ? 1024 : 0;  // max threads per block
    return SUCCESS;
}
int cuFuncSetAttribute(void*, int, int) { return SUCCESS; }
int cuFuncSetCacheConfig(void*, int) { return SUCCESS; }

int cuLaunchKernel(void* function, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                   unsigned int bz, unsigned int shared_bytes, void*, void** params, void** extra) {
    if (extra != nullptr || function == nullptr) return INVALID_VALUE;
    const unsigned int grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    char error[1024] = {0};
    int code = lms_emu_launch((long long)(reinterpret_cast<uintptr_t>(function) - 1), grid, block, shared_bytes, params,
                              next_seed(), error, sizeof error);
    if (code == 0) return SUCCESS;
    last_fault = error;
    fprintf(stderr, "lms emulated device: %s\n", error);
    return code == 1 ? INVALID_VALUE : LAUNCH_FAILED;
}

int cuGetErrorName(int error, const char** name) {
    switch (error) {
    case SUCCESS: *name = "CUDA_SUCCESS"; break;
    case INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
    case INVALID_IMAGE: *name = "CUDA_ERROR_INVALID_IMAGE"; break;
    case INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; break;
    case NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; break;
    case LAUNCH_FAILED: *name = "CUDA_ERROR_LAUNCH_FAILED"; break;
    default: *name = "CUDA_ERROR_UNKNOWN"; return INVALID_VALUE;
    }
    return SUCCESS;
}
int cuGetErrorString(int error, const char** text) {
    if (error == LAUNCH_FAILED && !last_fault.empty()) {
        *text = last_fault.c_str();
        return SUCCESS;
    }
    return cuGetErrorName(error, text);
}

}  // extern "C"
