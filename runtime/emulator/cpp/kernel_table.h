// A launchable entry per kernel: calls the kernel with its parameters read from a
// driver-style `void** params` (each entry points at one argument's value), checks first
// that every pointer argument is null or device memory, and describes its parameters (so
// the driver can copy a launch's arguments and know which pointers it writes).
#pragma once

#include <stddef.h>
#include <stdio.h>
#include <type_traits>
#include <utility>

namespace lms_emu {

struct KernelEntry {
    const char* name;
    const char* source;
    void (*invoke)(void** params);
    // 0 when the arguments are acceptable, else writes why into `why`.
    int (*check)(void** params, char* why, size_t len);
    // The number of parameters; when at most `max`, each one's size and kind in `sizes`
    // and `kinds` (see `ParamKind`).
    size_t (*describe)(size_t* sizes, int* kinds, size_t max);
};

// What a parameter is: a value, a pointer to const (read), a pointer to mutable (written,
// and perhaps read).
enum ParamKind : int { VALUE = 0, READ = 1, WRITE = 2 };

bool is_device_pointer(const void* p);

template <typename... A, size_t... I>
void invoke_with(void (*f)(A...), void** p, std::index_sequence<I...>) {
    f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(p[I])...);
}

template <typename... A>
void invoke_all(void (*f)(A...), void** params) {
    invoke_with(f, params, std::index_sequence_for<A...>{});
}

template <typename A>
int check_one(void** params, size_t i, char* why, size_t len) {
    if constexpr (std::is_pointer_v<A>) {
        const void* p = *static_cast<void* const*>(params[i]);
        if (p != nullptr && !is_device_pointer(p)) {
            snprintf(why, len, "argument %zu is %p, not device memory (a host pointer passed to a kernel)", i, p);
            return 1;
        }
    }
    return 0;
}

template <typename... A, size_t... I>
int check_with(void (*)(A...), void** params, char* why, size_t len, std::index_sequence<I...>) {
    return (check_one<A>(params, I, why, len) || ...);
}

template <typename... A>
int check_all(void (*f)(A...), void** params, char* why, size_t len) {
    return check_with(f, params, why, len, std::index_sequence_for<A...>{});
}

template <typename A>
constexpr int kind_of() {
    if constexpr (std::is_pointer_v<A>) {
        return std::is_const_v<std::remove_pointer_t<A>> ? READ : WRITE;
    } else {
        return VALUE;
    }
}

template <typename... A>
size_t describe_all(void (*)(A...), size_t* sizes, int* kinds, size_t max) {
    size_t count = sizeof...(A);
    if (count <= max) {
        size_t i = 0;
        ((sizes[i] = sizeof(std::remove_cv_t<std::remove_reference_t<A>>), kinds[i] = kind_of<A>(), ++i), ...);
    }
    return count;
}

}  // namespace lms_emu

#define LMS_EMU_ENTRY(NAME, SOURCE)                                                            \
    {#NAME, SOURCE, [](void** p) { lms_emu::invoke_all(NAME, p); },                             \
     [](void** p, char* why, size_t len) { return lms_emu::check_all(NAME, p, why, len); },     \
     [](size_t* sizes, int* kinds, size_t max) { return lms_emu::describe_all(NAME, sizes, kinds, max); }}
