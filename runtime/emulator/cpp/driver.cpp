// The subset of the CUDA driver API the backend calls (through cudarc), over the emulated
// device: one device, its primary context, device memory, pinned host memory, streams,
// events, modules of prebuilt kernels and kernel launches. Work on a stream is queued and
// runs in an adversarial order with hazard checks (streams.h); an event's time is the wall
// clock when its record was reached. Work on the default stream, and the synchronous
// calls, run at once after all queued work. A kernel fault on the default stream fails the
// launch with CUDA_ERROR_LAUNCH_FAILED; on another stream, or a hazard, it fails the device
// (every later synchronisation returns that error); cuGetErrorString then gives the fault's
// description. Copies from pageable host memory are staged when issued and copies into it
// complete before the call returns, as CUDA's do.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

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
int lms_emu_launch_check(long long index, const unsigned int grid[3], const unsigned int block[3],
                         unsigned int shared_bytes, void** params, char* error, size_t error_len);
size_t lms_emu_kernel_params(long long index, size_t* sizes, int* kinds, size_t max);
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
    NOT_READY = 600,
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

struct Module {
    const LmsEmulatedSource* source;
};

std::mutex allocation_lock;  // capacity accounting

// Every call of an allocating entry point (device or pinned host memory), counted for
// tests: their number and bytes, and one line "ENTRY_POINT BYTES" per call appended to the
// file LMS_CUDA_EMULATOR_ALLOCATIONS names, if set, so a test can read what a run allocated.
std::mutex counter_lock;
uint64_t allocations_counted = 0;
uint64_t allocated_bytes_counted = 0;

void count_allocation(const char* entry, size_t bytes) {
    std::lock_guard<std::mutex> guard(counter_lock);
    allocations_counted += 1;
    allocated_bytes_counted += bytes;
    static const char* log = getenv("LMS_CUDA_EMULATOR_ALLOCATIONS");
    if (log == nullptr || *log == 0) return;
    if (FILE* f = fopen(log, "a")) {
        fprintf(f, "%s %zu\n", entry, bytes);
        fclose(f);
    }
}

// A copy of `n` bytes from `src` to `dst` on `stream` (null: at once), named `what`; each
// side is device memory or host memory. Host memory that is not pinned is staged: a copy
// from it takes its bytes now, a copy into it completes before this returns.
int copy(const char* what, uint64_t dst, uint64_t src, size_t n, bool dst_device, bool src_device, void* stream) {
    if (n == 0) return lms_emu::failure();
    if ((dst_device && !lms_emu_valid_range(dst, n)) || (src_device && !lms_emu_valid_range(src, n))) {
        fprintf(stderr, "lms emulated device: a copy of %zu bytes from 0x%llx to 0x%llx leaves the live allocations\n", n,
                (unsigned long long)src, (unsigned long long)dst);
        return INVALID_VALUE;
    }
    lms_emu::Access access;
    if (src_device || lms_emu::pinned(src, n)) access.reads.push_back({src, src + n});
    if (dst_device || lms_emu::pinned(dst, n)) access.writes.push_back({dst, dst + n});
    char name[96];
    snprintf(name, sizeof name, "%s of %zu bytes", what, n);
    if (!src_device && !lms_emu::pinned(src, n)) {
        auto staged = std::make_shared<std::vector<uint8_t>>(reinterpret_cast<const uint8_t*>(src),
                                                             reinterpret_cast<const uint8_t*>(src) + n);
        return lms_emu::enqueue(stream, name, access, [staged, dst, n] { memcpy(reinterpret_cast<void*>(dst), staged->data(), n); });
    }
    int status = lms_emu::enqueue(stream, name, access,
                                  [dst, src, n] { memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n); });
    if (status == SUCCESS && !dst_device && !lms_emu::pinned(dst, n)) status = lms_emu::stream_synchronize(stream);
    return status;
}

// Sets `n` elements of `size` bytes at `dst` to `value` on `stream` (null: at once).
int fill(uint64_t dst, unsigned int value, size_t size, size_t n, void* stream) {
    if (n > 0 && !lms_emu_valid_range(dst, n * size)) return INVALID_VALUE;
    lms_emu::Access access;
    access.writes.push_back({dst, dst + n * size});
    return lms_emu::enqueue(stream, size == 1 ? "cuMemsetD8" : "cuMemsetD32", access, [dst, value, size, n] {
        if (size == 1) {
            memset(reinterpret_cast<void*>(dst), int(value), n);
        } else {
            auto* p = reinterpret_cast<unsigned int*>(dst);
            for (size_t i = 0; i < n; ++i) p[i] = value;
        }
    });
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
int cuCtxSynchronize() { return lms_emu::synchronize_all(); }
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
// Device memory of `bytes` at `*ptr`, within the capacity.
int device_alloc(CUdeviceptr* ptr, size_t bytes) {
    std::lock_guard<std::mutex> guard(allocation_lock);
    if (lms_emu_used() + bytes > capacity()) return OUT_OF_MEMORY;
    return lms_emu_alloc(bytes, ptr) == 0 ? SUCCESS : OUT_OF_MEMORY;
}
// Page-locked host memory of `bytes` at `*ptr`.
int host_alloc(void** ptr, size_t bytes) {
    size_t rounded = (bytes + 4095) / 4096 * 4096 + 4096;
    *ptr = aligned_alloc(4096, rounded);
    if (*ptr == nullptr) return OUT_OF_MEMORY;
    lms_emu::pinned_add(uint64_t(*ptr), rounded);
    return SUCCESS;
}
int cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) {
    count_allocation("cuMemAlloc_v2", bytes);
    return device_alloc(ptr, bytes);
}
int cuMemAllocAsync(CUdeviceptr* ptr, size_t bytes, void*) {
    count_allocation("cuMemAllocAsync", bytes);
    return device_alloc(ptr, bytes);
}
// Freeing waits for all queued work, as cuMemFree synchronises the device.
int cuMemFree_v2(CUdeviceptr ptr) {
    lms_emu::synchronize_all();
    if (lms_emu_free(ptr) != 0) return INVALID_VALUE;
    return SUCCESS;
}
int cuMemFreeAsync(CUdeviceptr ptr, void*) { return cuMemFree_v2(ptr); }

int cuMemHostAlloc(void** ptr, size_t bytes, unsigned int) {
    count_allocation("cuMemHostAlloc", bytes);
    return host_alloc(ptr, bytes);
}
int cuMemAllocHost_v2(void** ptr, size_t bytes) {
    count_allocation("cuMemAllocHost_v2", bytes);
    return host_alloc(ptr, bytes);
}
int cuMemFreeHost(void* ptr) {
    lms_emu::synchronize_all();
    lms_emu::pinned_remove(uint64_t(ptr));
    free(ptr);
    return SUCCESS;
}

int cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
    return copy("cuMemcpyHtoD", dst, uint64_t(src), n, true, false, nullptr);
}
int cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* stream) {
    return copy("cuMemcpyHtoDAsync", dst, uint64_t(src), n, true, false, stream);
}
int cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
    return copy("cuMemcpyDtoH", uint64_t(dst), src, n, false, true, nullptr);
}
int cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* stream) {
    return copy("cuMemcpyDtoHAsync", uint64_t(dst), src, n, false, true, stream);
}
int cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    return copy("cuMemcpyDtoD", dst, src, n, true, true, nullptr);
}
int cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void* stream) {
    return copy("cuMemcpyDtoDAsync", dst, src, n, true, true, stream);
}
int cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) { return fill(dst, value, 1, n, nullptr); }
int cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, void* stream) { return fill(dst, value, 1, n, stream); }
int cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t n) { return fill(dst, value, 4, n, nullptr); }
int cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t n, void* stream) { return fill(dst, value, 4, n, stream); }

int cuStreamCreate(void** stream, unsigned int) {
    *stream = lms_emu::stream_create();
    return SUCCESS;
}
int cuStreamCreateWithPriority(void** stream, unsigned int flags, int) { return cuStreamCreate(stream, flags); }
int cuStreamDestroy_v2(void* stream) { return stream ? lms_emu::stream_destroy(stream) : INVALID_HANDLE; }
int cuStreamSynchronize(void* stream) { return lms_emu::stream_synchronize(stream); }
int cuStreamQuery(void* stream) {
    if (int failed = lms_emu::failure()) return failed;
    return lms_emu::stream_idle(stream) ? SUCCESS : NOT_READY;
}
int cuStreamWaitEvent(void* stream, void* event, unsigned int) {
    return event ? lms_emu::stream_wait(stream, event) : INVALID_HANDLE;
}
int cuLaunchHostFunc(void* stream, void (*fn)(void*), void* data) {
    return lms_emu::enqueue(stream, "a host function", {}, [fn, data] { fn(data); });
}

int cuEventCreate(void** event, unsigned int) {
    *event = lms_emu::event_create();
    return SUCCESS;
}
int cuEventRecord(void* event, void* stream) { return event ? lms_emu::event_record(event, stream) : INVALID_HANDLE; }
int cuEventRecordWithFlags(void* event, void* stream, unsigned int) { return cuEventRecord(event, stream); }
int cuEventSynchronize(void* event) { return event ? lms_emu::event_synchronize(event) : INVALID_HANDLE; }
int cuEventQuery(void* event) {
    if (!event) return INVALID_HANDLE;
    if (int failed = lms_emu::failure()) return failed;
    return lms_emu::event_done(event) ? SUCCESS : NOT_READY;
}
// Waits for both records first (CUDA would answer CUDA_ERROR_NOT_READY).
int cuEventElapsedTime(float* ms, void* start, void* end) {
    if (!start || !end) return INVALID_HANDLE;
    if (int failed = lms_emu::event_synchronize(start) | lms_emu::event_synchronize(end)) return failed;
    *ms = float(lms_emu::event_ms(end) - lms_emu::event_ms(start));
    return SUCCESS;
}
int cuEventElapsedTime_v2(float* ms, void* start, void* end) { return cuEventElapsedTime(ms, start, end); }
int cuEventDestroy_v2(void* event) {
    if (!event) return INVALID_HANDLE;
    lms_emu::event_destroy(event);
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

// The arguments are copied when the launch is queued (the caller may reuse its own); each
// pointer argument counts as an access of the byte it points at (a read through a pointer to
// const, a read and a write otherwise), which is what the hazard checks see of a kernel.
int cuLaunchKernel(void* function, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                   unsigned int bz, unsigned int shared_bytes, void* stream, void** params, void** extra) {
    if (extra != nullptr || function == nullptr) return INVALID_VALUE;
    long long index = (long long)(reinterpret_cast<uintptr_t>(function) - 1);
    const std::array<unsigned int, 3> grid = {gx, gy, gz}, block = {bx, by, bz};
    char error[1024] = {0};
    if (lms_emu_launch_check(index, grid.data(), block.data(), shared_bytes, params, error, sizeof error) != 0) {
        fprintf(stderr, "lms emulated device: %s\n", error);
        return INVALID_VALUE;
    }
    constexpr size_t MAX_PARAMS = 64;
    size_t sizes[MAX_PARAMS];
    int kinds[MAX_PARAMS];
    size_t count = lms_emu_kernel_params(index, sizes, kinds, MAX_PARAMS);
    if (count > MAX_PARAMS) return INVALID_VALUE;
    std::vector<std::vector<uint64_t>> values(count);
    lms_emu::Access access;
    for (size_t i = 0; i < count; ++i) {
        values[i].assign((sizes[i] + 7) / 8, 0);
        memcpy(values[i].data(), params[i], sizes[i]);
        if (kinds[i] == 0) continue;
        uint64_t p = values[i][0];
        if (p == 0) continue;
        access.reads.push_back({p, p + 1});
        if (kinds[i] == 2) access.writes.push_back({p, p + 1});
    }
    std::string what = std::string("kernel ") + lms_emu_kernel_name(size_t(index));
    uint64_t seed = next_seed();
    return lms_emu::enqueue(stream, what, std::move(access), [index, grid, block, shared_bytes, values, seed]() mutable {
        std::vector<void*> args(values.size());
        for (size_t i = 0; i < values.size(); ++i) args[i] = values[i].data();
        char fault[1024] = {0};
        if (lms_emu_launch(index, grid.data(), block.data(), shared_bytes, args.data(), seed, fault, sizeof fault) != 0)
            lms_emu::fail(fault);
    });
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
    case NOT_READY: *name = "CUDA_ERROR_NOT_READY"; break;
    case LAUNCH_FAILED: *name = "CUDA_ERROR_LAUNCH_FAILED"; break;
    default: *name = "CUDA_ERROR_UNKNOWN"; return INVALID_VALUE;
    }
    return SUCCESS;
}
int cuGetErrorString(int error, const char** text) {
    static thread_local std::string message;
    if (error == LAUNCH_FAILED && !(message = lms_emu::failure_message()).empty()) {
        *text = message.c_str();
        return SUCCESS;
    }
    return cuGetErrorName(error, text);
}

// How many allocating calls this process made so far (device and pinned host memory,
// every entry point), and their bytes in `*bytes`.
uint64_t lms_emu_allocations(uint64_t* bytes) {
    std::lock_guard<std::mutex> guard(counter_lock);
    *bytes = allocated_bytes_counted;
    return allocations_counted;
}

}  // extern "C"
