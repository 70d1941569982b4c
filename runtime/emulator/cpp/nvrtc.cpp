// The subset of NVRTC the backend calls, for the emulated device: the kernels are already
// compiled (by the build, from the same files), so "compiling" a program checks that its
// text is exactly one of the sources they were built from and hands back an image naming
// it. A text that differs (a kernel edited after the emulator was built) is refused with
// a log saying so: the emulated device never runs stale kernels.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>

#include "emulated_sources.h"

namespace {

enum : int { SUCCESS = 0, INVALID_INPUT = 3, INVALID_PROGRAM = 4, COMPILATION = 6 };

struct Program {
    std::string text;
    std::string name;
    std::string log;
    std::string image;
};

}  // namespace

const LmsEmulatedSource* lms_emulated_image_source(const char* image) {
    size_t magic = strlen(LMS_EMULATED_IMAGE_MAGIC);
    if (image == nullptr || strncmp(image, LMS_EMULATED_IMAGE_MAGIC, magic) != 0) return nullptr;
    const char* name = image + magic;
    const char* hash = name + strlen(name) + 1;
    size_t count = 0;
    const LmsEmulatedSource* sources = lms_emulated_sources(&count);
    for (size_t i = 0; i < count; ++i) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)sources[i].hash);
        if (strcmp(sources[i].name, name) == 0 && strcmp(hex, hash) == 0) return &sources[i];
    }
    return nullptr;
}

extern "C" {

const char* nvrtcGetErrorString(int result) {
    switch (result) {
    case SUCCESS: return "NVRTC_SUCCESS";
    case INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
    case INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
    case COMPILATION: return "NVRTC_ERROR_COMPILATION";
    default: return "NVRTC_ERROR";
    }
}

int nvrtcVersion(int* major, int* minor) {
    *major = 13;
    *minor = 0;
    return SUCCESS;
}

int nvrtcGetNumSupportedArchs(int* count) {
    *count = 2;
    return SUCCESS;
}

int nvrtcGetSupportedArchs(int* archs) {
    archs[0] = 80;
    archs[1] = 90;
    return SUCCESS;
}

int nvrtcCreateProgram(void** program, const char* text, const char* name, int headers, const char* const*,
                       const char* const*) {
    if (program == nullptr || text == nullptr || headers != 0) return INVALID_INPUT;
    *program = new Program{text, name ? name : "default_program", "", ""};
    return SUCCESS;
}

int nvrtcDestroyProgram(void** program) {
    if (program == nullptr || *program == nullptr) return INVALID_PROGRAM;
    delete static_cast<Program*>(*program);
    *program = nullptr;
    return SUCCESS;
}

int nvrtcCompileProgram(void* handle, int, const char* const*) {
    auto* p = static_cast<Program*>(handle);
    if (p == nullptr) return INVALID_PROGRAM;
    size_t count = 0;
    const LmsEmulatedSource* sources = lms_emulated_sources(&count);
    uint64_t hash = lms_emulated_hash(p->text.data(), p->text.size());
    for (size_t i = 0; i < count; ++i) {
        if (p->name != sources[i].name) continue;
        if (sources[i].hash != hash) {
            p->log = p->name + ": the emulated device was built from another version of this source "
                               "(rebuild lms-cuda-emulator); refusing stale kernels";
            return COMPILATION;
        }
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)hash);
        p->image = std::string(LMS_EMULATED_IMAGE_MAGIC) + p->name + '\0' + hex + '\0';
        return SUCCESS;
    }
    p->log = p->name + ": not a kernel source the emulated device was built from";
    return COMPILATION;
}

int nvrtcGetProgramLogSize(void* handle, size_t* size) {
    auto* p = static_cast<Program*>(handle);
    if (p == nullptr) return INVALID_PROGRAM;
    *size = p->log.size() + 1;
    return SUCCESS;
}

int nvrtcGetProgramLog(void* handle, char* log) {
    auto* p = static_cast<Program*>(handle);
    if (p == nullptr) return INVALID_PROGRAM;
    memcpy(log, p->log.c_str(), p->log.size() + 1);
    return SUCCESS;
}

int nvrtcGetCUBINSize(void* handle, size_t* size) {
    auto* p = static_cast<Program*>(handle);
    if (p == nullptr || p->image.empty()) return INVALID_PROGRAM;
    *size = p->image.size();
    return SUCCESS;
}

int nvrtcGetCUBIN(void* handle, char* image) {
    auto* p = static_cast<Program*>(handle);
    if (p == nullptr || p->image.empty()) return INVALID_PROGRAM;
    memcpy(image, p->image.data(), p->image.size());
    return SUCCESS;
}

int nvrtcGetPTXSize(void* handle, size_t* size) { return nvrtcGetCUBINSize(handle, size); }
int nvrtcGetPTX(void* handle, char* image) { return nvrtcGetCUBIN(handle, image); }

}  // extern "C"
