// The emulated device: device memory in its own mapping with guard pages, and kernel
// launches that run each block's threads as fibers on the calling OS thread, blocks one
// after another in a seeded shuffled order. The scheduler checks what a GPU would not:
// threads of a block waiting at different barriers or exiting while others wait, a
// shuffle over a lane that has exited or does not exist, accesses outside allocations
// (through the guard pages), pointer arguments that are not device memory.
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_emulation.h"
#include "kernel_table.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define LMS_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define LMS_EMU_TSAN 1
#endif

const lms_emu::KernelEntry* const* lms_emu_sources(size_t* count);  // generated registry

namespace lms_emu {

thread_local dim3 thread_idx, block_idx, block_dim, grid_dim;

// ---- device memory ----

namespace {

constexpr uint64_t kReserved = uint64_t(1) << 40;  // address space reserved for the device
constexpr uint64_t kAlign = 256;                    // what cuMemAlloc guarantees
constexpr uint64_t kPoisonedAtMost = uint64_t(64) << 20;

struct Allocation {
    uint64_t size;
    uint64_t mapped_begin, mapped_end;  // the read-write pages
    bool live;
};

struct Memory {
    std::mutex lock;
    uint8_t* base = nullptr;
    uint64_t next = 0;  // offset of the next free page; pages are never reused
    uint64_t used = 0;
    std::map<uint64_t, Allocation> allocations;  // by address
};

Memory& memory() {
    static Memory* m = [] {
        auto* m = new Memory;
        void* p = mmap(nullptr, kReserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        m->base = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
        return m;
    }();
    return *m;
}

uint64_t page_size() {
    static uint64_t size = uint64_t(sysconf(_SC_PAGESIZE));
    return size;
}

// The live allocation holding [addr, addr + len), if any (lock held).
const Allocation* holding(Memory& m, uint64_t addr, uint64_t len, uint64_t* start) {
    auto it = m.allocations.upper_bound(addr);
    if (it == m.allocations.begin()) return nullptr;
    --it;
    if (!it->second.live || addr + len > it->first + it->second.size || addr + len < addr) return nullptr;
    *start = it->first;
    return &it->second;
}

}  // namespace

bool is_device_pointer(const void* p) {
    Memory& m = memory();
    auto a = reinterpret_cast<uintptr_t>(p);
    return m.base != nullptr && a >= uintptr_t(m.base) && a < uintptr_t(m.base) + kReserved;
}

// Describes `addr` relative to the nearest allocation at or below it.
std::string describe_address(uint64_t addr) {
    Memory& m = memory();
    std::lock_guard<std::mutex> guard(m.lock);
    char text[200];
    if (!is_device_pointer(reinterpret_cast<void*>(addr))) {
        snprintf(text, sizeof text, "0x%llx, outside device memory", (unsigned long long)addr);
        return text;
    }
    auto it = m.allocations.upper_bound(addr);
    if (it != m.allocations.begin()) {
        --it;
        long long off = (long long)(addr - it->first);
        snprintf(text, sizeof text, "0x%llx, byte %lld of a%s allocation of %llu bytes at 0x%llx",
                 (unsigned long long)addr, off, it->second.live ? "n" : " freed", (unsigned long long)it->second.size,
                 (unsigned long long)it->first);
    } else {
        snprintf(text, sizeof text, "0x%llx, before every allocation", (unsigned long long)addr);
    }
    return text;
}

}  // namespace lms_emu

using namespace lms_emu;

extern "C" {

// Allocates `bytes` of device memory, 256-aligned, its end against a guard page (the
// start is preceded by one too); 0 on success, 2 when the reservation is exhausted.
int lms_emu_alloc(uint64_t bytes, uint64_t* out) {
    Memory& m = memory();
    if (m.base == nullptr) return 2;
    std::lock_guard<std::mutex> guard(m.lock);
    uint64_t page = page_size();
    uint64_t span = (std::max<uint64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    uint64_t pages = (span + page - 1) / page * page;
    uint64_t begin = m.next + page;  // one guard page before
    if (begin + pages + page > kReserved) return 2;
    if (mprotect(m.base + begin, pages, PROT_READ | PROT_WRITE) != 0) return 2;
    m.next = begin + pages;  // the next allocation's leading guard page trails this one
    uint64_t addr = uint64_t(m.base) + begin + pages - span;
    m.allocations[addr] = Allocation{bytes, uint64_t(m.base) + begin, uint64_t(m.base) + begin + pages, true};
    m.used += bytes;
    // Fresh device memory holds garbage on a GPU: a NaN pattern here, where cheap (large
    // allocations, such as an arena, stay zero until written rather than occupy memory).
    if (pages <= kPoisonedAtMost) memset(m.base + begin, 0xff, pages);
    *out = addr;
    return 0;
}

// Frees an allocation: its pages become inaccessible and are never handed out again, so
// a later use faults. 0 on success, 1 when `addr` is not a live allocation's start.
int lms_emu_free(uint64_t addr) {
    Memory& m = memory();
    std::lock_guard<std::mutex> guard(m.lock);
    auto it = m.allocations.find(addr);
    if (it == m.allocations.end() || !it->second.live) return 1;
    Allocation& a = it->second;
    mprotect(reinterpret_cast<void*>(a.mapped_begin), a.mapped_end - a.mapped_begin, PROT_NONE);
    madvise(reinterpret_cast<void*>(a.mapped_begin), a.mapped_end - a.mapped_begin, MADV_DONTNEED);
    a.live = false;
    m.used -= a.size;
    return 0;
}

// Bytes allocated and not freed.
uint64_t lms_emu_used() {
    Memory& m = memory();
    std::lock_guard<std::mutex> guard(m.lock);
    return m.used;
}

// Whether [addr, addr + len) lies inside one live allocation.
int lms_emu_valid_range(uint64_t addr, uint64_t len) {
    Memory& m = memory();
    std::lock_guard<std::mutex> guard(m.lock);
    uint64_t start;
    return holding(m, addr, len, &start) != nullptr;
}

}  // extern "C"

// ---- fibers ----

namespace lms_emu {
namespace {

#if defined(__x86_64__) && !defined(LMS_EMU_TSAN)
// Saves the callee-saved registers on the current stack, stores the stack pointer in
// *save and resumes the fiber whose stack pointer is `to`.
extern "C" void lms_emu_switch(void** save, void* to);
asm(R"(
    .text
    .globl lms_emu_switch
    .hidden lms_emu_switch
    .type lms_emu_switch,@function
lms_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size lms_emu_switch,.-lms_emu_switch
)");
#define LMS_EMU_ASM_SWITCH 1
#endif

enum class State { Ready, AtBarrier, AtShuffle, Exited };

constexpr size_t kStack = 64 * 1024;

struct Fiber {
    dim3 idx;
    State state;
    const char* file;  // where it waits
    int line;
    uint64_t bits;   // shuffle value in, then out
    int lane_mask;
    unsigned int mask;
    int width;
    char* stack;
#ifdef LMS_EMU_ASM_SWITCH
    void* sp;
#else
    ucontext_t context;
#endif
#ifdef LMS_EMU_TSAN
    void* tsan;
#endif
};

// One launch on this OS thread.
struct Launch {
    const KernelEntry* kernel;
    void** params;
    std::vector<Fiber> fibers;
    Fiber* current = nullptr;
#ifdef LMS_EMU_ASM_SWITCH
    void* scheduler_sp = nullptr;
#else
    ucontext_t scheduler;
#endif
#ifdef LMS_EMU_TSAN
    void* scheduler_tsan;
#endif
#ifdef LMS_EMU_ASAN
    const void* scheduler_stack_bottom = nullptr;
    size_t scheduler_stack_size = 0;
#endif
    sigjmp_buf on_fault;
    std::string fault;
};

thread_local Launch* active = nullptr;

void to_scheduler() {
    Launch& l = *active;
    Fiber& f = *l.current;
#ifdef LMS_EMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(f.state == State::Exited ? nullptr : &fake, l.scheduler_stack_bottom,
                                   l.scheduler_stack_size);
#endif
#ifdef LMS_EMU_TSAN
    __tsan_switch_to_fiber(l.scheduler_tsan, 0);
#endif
#ifdef LMS_EMU_ASM_SWITCH
    lms_emu_switch(&f.sp, l.scheduler_sp);
#else
    swapcontext(&f.context, &l.scheduler);
#endif
#ifdef LMS_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

[[noreturn]] void fiber_main() {
#ifdef LMS_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &active->scheduler_stack_bottom, &active->scheduler_stack_size);
#endif
    active->kernel->invoke(active->params);
    active->current->state = State::Exited;
    to_scheduler();
    __builtin_unreachable();
}

void start_fiber(Fiber& f) {
#ifdef LMS_EMU_ASM_SWITCH
    auto top = reinterpret_cast<uintptr_t>(f.stack + kStack) & ~uintptr_t(15);
    auto* slot = reinterpret_cast<void**>(top - 16);
    slot[0] = reinterpret_cast<void*>(&fiber_main);  // where `ret` goes
    f.sp = slot - 6;                                  // six saved registers below it
    memset(f.sp, 0, 6 * sizeof(void*));
#else
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = kStack;
    f.context.uc_link = nullptr;
    makecontext(&f.context, fiber_main, 0);
#endif
#ifdef LMS_EMU_TSAN
    if (f.tsan != nullptr) __tsan_destroy_fiber(f.tsan);
    f.tsan = __tsan_create_fiber(0);
#endif
}

void run_fiber(Launch& l, Fiber& f) {
    l.current = &f;
    thread_idx = f.idx;
#ifdef LMS_EMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack, kStack);
#endif
#ifdef LMS_EMU_TSAN
    __tsan_switch_to_fiber(f.tsan, 0);
#endif
#ifdef LMS_EMU_ASM_SWITCH
    lms_emu_switch(&l.scheduler_sp, f.sp);
#else
    swapcontext(&l.scheduler, &f.context);
#endif
#ifdef LMS_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
#ifdef LMS_EMU_TSAN
    if (f.state == State::Exited) {
        __tsan_destroy_fiber(f.tsan);
        f.tsan = nullptr;
    }
#endif
}

std::string format(const char* fmt, ...) {
    char text[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof text, fmt, args);
    va_end(args);
    return text;
}

std::string where(const Fiber& f) {
    const char* slash = strrchr(f.file, '/');
    return format("%s:%d", slash ? slash + 1 : f.file, f.line);
}

std::string thread_name(const Fiber& f) { return format("thread (%u,%u,%u)", f.idx.x, f.idx.y, f.idx.z); }

// xorshift64*, seeded per launch.
struct Random {
    uint64_t s;
    uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 2685821657736338717ull;
    }
    template <typename T>
    void shuffle(std::vector<T>& v) {
        for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[next() % i]);
    }
};

// Resolves the shuffles of warps whose lanes have all arrived; returns whether any did,
// or sets the launch's fault.
bool resolve_shuffles(Launch& l, size_t threads) {
    bool any = false;
    for (size_t w = 0; w * 32 < threads; ++w) {
        size_t first = w * 32, last = std::min(threads, first + 32);
        Fiber* waiting = nullptr;
        bool all = true;
        for (size_t t = first; t < last; ++t) {
            Fiber& f = l.fibers[t];
            if (f.state == State::AtShuffle) waiting = waiting ? waiting : &f;
            else if (f.state != State::Exited) all = false;
        }
        if (waiting == nullptr || !all) continue;
        for (size_t t = first; t < last; ++t) {
            Fiber& f = l.fibers[t];
            if (f.state == State::AtShuffle && (f.file != waiting->file || f.line != waiting->line)) {
                l.fault = format("divergent shuffle: %s waits at the shuffle at %s, %s at %s", thread_name(*waiting).c_str(),
                                 where(*waiting).c_str(), thread_name(f).c_str(), where(f).c_str());
                return false;
            }
        }
        for (size_t t = first; t < last; ++t) {
            Fiber& f = l.fibers[t];
            if (f.state != State::AtShuffle) continue;
            if (f.mask != 0xffffffffu || f.width != 32) {
                l.fault = format("shuffle at %s with mask 0x%x and width %d: only the full warp is emulated",
                                 where(f).c_str(), f.mask, f.width);
                return false;
            }
            size_t lane = t - first, source = lane ^ size_t(f.lane_mask & 31);
            if (first + source >= last || l.fibers[first + source].state == State::Exited) {
                l.fault = format("shuffle at %s: %s reads lane %zu of its warp, which %s", where(f).c_str(),
                                 thread_name(f).c_str(), source, first + source >= last ? "does not exist" : "has exited");
                return false;
            }
        }
        std::vector<uint64_t> values(last - first);
        for (size_t t = first; t < last; ++t) values[t - first] = l.fibers[t].bits;
        for (size_t t = first; t < last; ++t) {
            Fiber& f = l.fibers[t];
            f.bits = values[(t - first) ^ size_t(f.lane_mask & 31)];
            f.state = State::Ready;
        }
        any = true;
    }
    return any;
}

// Releases the block barrier when every thread waits at it; returns whether it did, or
// sets the launch's fault when the threads cannot all meet at one barrier.
bool resolve_barrier(Launch& l) {
    Fiber* waiting = nullptr;
    Fiber* exited = nullptr;
    for (Fiber& f : l.fibers) {
        if (f.state == State::Ready || f.state == State::AtShuffle) return false;
        if (f.state == State::AtBarrier) waiting = waiting ? waiting : &f;
        if (f.state == State::Exited) exited = exited ? exited : &f;
    }
    if (waiting == nullptr) return false;
    if (exited != nullptr) {
        l.fault = format("barrier divergence: %s waits at the barrier at %s, %s has exited", thread_name(*waiting).c_str(),
                         where(*waiting).c_str(), thread_name(*exited).c_str());
        return false;
    }
    for (Fiber& f : l.fibers) {
        if (f.file != waiting->file || f.line != waiting->line) {
            l.fault = format("barrier divergence: %s waits at the barrier at %s, %s at %s", thread_name(*waiting).c_str(),
                             where(*waiting).c_str(), thread_name(f).c_str(), where(f).c_str());
            return false;
        }
    }
    for (Fiber& f : l.fibers) f.state = State::Ready;
    return true;
}

// What every unfinished thread waits at, for a deadlock report (first few).
std::string stuck(const Launch& l) {
    std::string text;
    int shown = 0;
    for (const Fiber& f : l.fibers) {
        if (f.state == State::Exited || f.state == State::Ready) continue;
        if (shown++ == 4) {
            text += ", ...";
            break;
        }
        text += (shown > 1 ? ", " : "") + thread_name(f) + (f.state == State::AtBarrier ? " at the barrier at " : " at the shuffle at ") + where(f);
    }
    return text;
}

// Runs one block to completion; false with the launch's fault set when it fails.
bool run_block(Launch& l, Random& random, std::vector<size_t>& order) {
    for (Fiber& f : l.fibers) {
        f.state = State::Ready;
        start_fiber(f);
    }
    for (;;) {
        random.shuffle(order);
        for (size_t t : order) {
            if (l.fibers[t].state == State::Ready) run_fiber(l, l.fibers[t]);
        }
        if (!l.fault.empty()) return false;
        bool moved = resolve_shuffles(l, l.fibers.size());
        if (!l.fault.empty()) return false;
        if (!moved) moved = resolve_barrier(l);
        if (!l.fault.empty()) return false;
        if (std::all_of(l.fibers.begin(), l.fibers.end(), [](const Fiber& f) { return f.state == State::Exited; }))
            return true;
        if (!moved) {
            l.fault = "deadlock: " + stuck(l);
            return false;
        }
    }
}

// ---- faults inside kernels ----

struct sigaction previous_segv, previous_bus;

void on_signal(int sig, siginfo_t* info, void* context) {
    Launch* l = active;
    if (l != nullptr && l->current != nullptr) {
        auto addr = reinterpret_cast<uint64_t>(info->si_addr);
        l->fault = format("%s at %s", thread_name(*l->current).c_str(), describe_address(addr).c_str());
        siglongjmp(l->on_fault, 1);
    }
    struct sigaction& prev = sig == SIGSEGV ? previous_segv : previous_bus;
    if (prev.sa_flags & SA_SIGINFO) {
        prev.sa_sigaction(sig, info, context);
    } else if (prev.sa_handler != SIG_IGN && prev.sa_handler != SIG_DFL) {
        prev.sa_handler(sig);
    } else {
        signal(sig, SIG_DFL);
        raise(sig);
    }
}

void install_fault_handler() {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_sigaction = on_signal;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&action.sa_mask);
        sigaction(SIGSEGV, &action, &previous_segv);
        sigaction(SIGBUS, &action, &previous_bus);
    });
}

// ---- the kernels ----

struct Registry {
    std::vector<const KernelEntry*> kernels;
    std::map<std::string, size_t> index;
    std::vector<std::atomic<uint64_t>> launches;
    explicit Registry(std::vector<const KernelEntry*> all) : kernels(std::move(all)), launches(kernels.size()) {
        for (size_t i = 0; i < kernels.size(); ++i) index[kernels[i]->name] = i;
    }
};

Registry& registry() {
    static Registry* r = [] {
        size_t count = 0;
        const KernelEntry* const* sources = lms_emu_sources(&count);
        std::vector<const KernelEntry*> all;
        for (size_t s = 0; s < count; ++s)
            for (const KernelEntry* e = sources[s]; e->name != nullptr; ++e) all.push_back(e);
        return new Registry(std::move(all));
    }();
    return *r;
}

// Runs the blocks in `block_order`; false with the launch's fault set when one fails. An
// invalid access inside a kernel jumps back here from the signal handler.
__attribute__((noinline)) bool run_grid(Launch& launch, const std::vector<uint32_t>& block_order, Random& random,
                                        std::vector<size_t>& order, const unsigned int grid[3]) {
    if (sigsetjmp(launch.on_fault, 1) != 0) {
        launch.fault = format("block (%u,%u,%u): invalid memory access by ", block_idx.x, block_idx.y, block_idx.z) +
                       launch.fault;
        return false;
    }
    for (uint32_t b : block_order) {
        block_idx = dim3{b % grid[0], b / grid[0] % grid[1], unsigned(b / (uint64_t(grid[0]) * grid[1]))};
        if (!run_block(launch, random, order)) {
            launch.fault = format("block (%u,%u,%u): ", block_idx.x, block_idx.y, block_idx.z) + launch.fault;
            return false;
        }
    }
    return true;
}

void write_error(char* out, size_t len, const std::string& text) {
    if (len == 0) return;
    snprintf(out, len, "%s", text.c_str());
}

}  // namespace

void sync_threads(const char* file, int line) {
    Fiber& f = *active->current;
    f.state = State::AtBarrier;
    f.file = file;
    f.line = line;
    to_scheduler();
}

uint64_t shuffle_xor(const char* file, int line, unsigned int mask, uint64_t bits, int lane_mask, int width) {
    Fiber& f = *active->current;
    f.state = State::AtShuffle;
    f.file = file;
    f.line = line;
    f.bits = bits;
    f.mask = mask;
    f.lane_mask = lane_mask;
    f.width = width;
    to_scheduler();
    return f.bits;
}

}  // namespace lms_emu

extern "C" {

// The number of kernels, and the name and source file of kernel `i`.
size_t lms_emu_kernel_count() { return registry().kernels.size(); }
const char* lms_emu_kernel_name(size_t i) { return registry().kernels[i]->name; }
const char* lms_emu_kernel_source(size_t i) { return registry().kernels[i]->source; }
// How many times kernel `i` was launched in this process.
uint64_t lms_emu_kernel_launches(size_t i) { return registry().launches[i].load(); }

// Index of kernel `name`, or -1.
long long lms_emu_kernel_index(const char* name) {
    Registry& r = registry();
    auto it = r.index.find(name);
    return it == r.index.end() ? -1 : (long long)it->second;
}

// The number of parameters of kernel `index`; when at most `max`, each one's size and
// kind (`ParamKind`) in `sizes` and `kinds`.
size_t lms_emu_kernel_params(long long index, size_t* sizes, int* kinds, size_t max) {
    return registry().kernels[size_t(index)]->describe(sizes, kinds, max);
}

// Checks a launch of kernel `index` before it runs: its configuration, and that every
// pointer argument at `params` is null or device memory. 0 when it may run; otherwise 1
// with the reason in `error`.
int lms_emu_launch_check(long long index, const unsigned int grid[3], const unsigned int block[3],
                         unsigned int shared_bytes, void** params, char* error, size_t error_len) {
    Registry& r = registry();
    if (index < 0 || size_t(index) >= r.kernels.size()) {
        write_error(error, error_len, "no such kernel");
        return 1;
    }
    const KernelEntry* kernel = r.kernels[size_t(index)];
    uint64_t threads = uint64_t(block[0]) * block[1] * block[2];
    uint64_t blocks = uint64_t(grid[0]) * grid[1] * grid[2];
    if (threads == 0 || threads > 1024 || block[2] > 64 || blocks == 0 || grid[1] > 65535 || grid[2] > 65535) {
        write_error(error, error_len,
                    format("%s: invalid launch configuration: grid (%u,%u,%u), block (%u,%u,%u)", kernel->name, grid[0],
                           grid[1], grid[2], block[0], block[1], block[2]));
        return 1;
    }
    if (shared_bytes > 48 * 1024) {
        write_error(error, error_len, format("%s: %u bytes of dynamic shared memory, more than 48 KiB", kernel->name, shared_bytes));
        return 1;
    }
    char why[256] = {0};
    if (kernel->check(params, why, sizeof why) != 0) {
        write_error(error, error_len, format("%s: %s", kernel->name, why));
        return 1;
    }
    return 0;
}

// Launches kernel `index` over `grid` blocks of `block` threads, the blocks in an order
// shuffled by `seed`, with its arguments at `params` (driver style). 0 on success;
// otherwise 1 (bad configuration or arguments, `lms_emu_launch_check`) or 2 (a fault
// while running) with the reason in `error`.
int lms_emu_launch(long long index, const unsigned int grid[3], const unsigned int block[3], unsigned int shared_bytes,
                   void** params, uint64_t seed, char* error, size_t error_len) {
    if (int refused = lms_emu_launch_check(index, grid, block, shared_bytes, params, error, error_len)) return refused;
    Registry& r = registry();
    const KernelEntry* kernel = r.kernels[size_t(index)];
    uint64_t threads = uint64_t(block[0]) * block[1] * block[2];
    uint64_t blocks = uint64_t(grid[0]) * grid[1] * grid[2];
    if (active != nullptr) {
        write_error(error, error_len, format("%s: launched from inside a kernel", kernel->name));
        return 1;
    }
    install_fault_handler();
    r.launches[size_t(index)].fetch_add(1);

    Launch launch;
    launch.kernel = kernel;
    launch.params = params;
    launch.fibers.resize(threads);
    char* stacks = static_cast<char*>(
        mmap(nullptr, threads * kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (stacks == MAP_FAILED) {
        write_error(error, error_len, format("%s: cannot map the threads' stacks", kernel->name));
        return 1;
    }
    for (uint64_t t = 0; t < threads; ++t) {
        Fiber& f = launch.fibers[t];
        f.idx = dim3{unsigned(t % block[0]), unsigned(t / block[0] % block[1]), unsigned(t / (uint64_t(block[0]) * block[1]))};
        f.stack = stacks + t * kStack;
        f.file = "";
        f.line = 0;
    }
    std::vector<size_t> order(threads);
    for (size_t t = 0; t < threads; ++t) order[t] = t;
    std::vector<uint32_t> block_order(blocks);
    for (uint64_t b = 0; b < blocks; ++b) block_order[b] = uint32_t(b);
    Random random{seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull};
    random.shuffle(block_order);

    block_dim = dim3{block[0], block[1], block[2]};
    grid_dim = dim3{grid[0], grid[1], grid[2]};
#ifdef LMS_EMU_TSAN
    launch.scheduler_tsan = __tsan_get_current_fiber();
    for (Fiber& f : launch.fibers) f.tsan = nullptr;
#endif
    active = &launch;
    bool ok = run_grid(launch, block_order, random, order, grid);
    active = nullptr;
#ifdef LMS_EMU_TSAN
    for (Fiber& f : launch.fibers)
        if (f.tsan != nullptr) __tsan_destroy_fiber(f.tsan);
#endif
    munmap(stacks, threads * kStack);
    if (!ok) {
        write_error(error, error_len, std::string(kernel->name) + ": " + launch.fault);
        return 2;
    }
    return 0;
}

}  // extern "C"
