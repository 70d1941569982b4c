// Work queued on the emulated device's streams (driver.cpp), for the libraries over it
// (cuBLAS, cuDNN): what a call reads and writes of device memory, and the work itself.
#pragma once

#include <stdint.h>

#include <functional>
#include <vector>

namespace lms_emu {

// [begin, end) of device memory.
struct Range {
    uint64_t begin, end;
};

// What one piece of work reads and writes.
struct Access {
    std::vector<Range> reads, writes;
};

// Queues `work` on `stream` (null: the default stream), named `what` in reports; returns
// 0, or nonzero when the device has failed.
int enqueue(void* stream, const char* what, Access access, std::function<void()> work);

}  // namespace lms_emu
