// The emulated device's streams and events (streams.cpp), for the driver and the libraries
// over it (cuBLAS, cuDNN). Work is queued per stream and runs only when the host must wait
// for it (a synchronisation, a synchronous copy, a free), then in a seeded random order of
// the streams that every event wait permits. Each piece of work names the device memory it
// reads and writes; a vector clock per stream records which work an event wait orders
// before it, and an access to memory whose last writer (or, for a write, last readers) on
// another stream is not ordered before it is a hazard: it fails the device as a fault
// does, naming both pieces of work.
#pragma once

#include <stdint.h>

#include <functional>
#include <string>
#include <vector>

namespace lms_emu {

// [begin, end) of device (or pinned host) memory.
struct Range {
    uint64_t begin, end;
};

// What one piece of work reads and writes.
struct Access {
    std::vector<Range> reads, writes;
};

// The error a failed device reports from then on (CUDA_ERROR_LAUNCH_FAILED).
constexpr int DEVICE_FAILED = 719;

// Queues `work` on `stream` (null: the default stream, which runs it at once after all
// queued work), named `what` in reports. Returns 0, or the device's error once it has
// failed (a fault or a hazard); work on the default stream returns its own fault.
int enqueue(void* stream, std::string what, Access access, std::function<void()> work);

// Fails the device with `message` (a kernel's fault): queued work is dropped, and every
// later synchronisation returns DEVICE_FAILED.
void fail(const std::string& message);

// The device's error (0 while none), and the message of the latest failure (kept after a
// default-stream fault, which is returned rather than kept).
int failure();
std::string failure_message();

void* stream_create();
// Runs the stream's queued work, then destroys it.
int stream_destroy(void* stream);
// Runs work until `stream`'s queue is empty.
int stream_synchronize(void* stream);
bool stream_idle(void* stream);

void* event_create();
void event_destroy(void* event);
int event_record(void* event, void* stream);
// Queues on `stream` a wait for the event's latest record.
int stream_wait(void* stream, void* event);
// Runs work until the event's latest record has been reached.
int event_synchronize(void* event);
bool event_done(void* event);
// When the event's latest record was reached, in milliseconds.
double event_ms(void* event);

// Runs all queued work.
int synchronize_all();

// Pinned host memory (its copies are queued; copies from other host memory are staged).
void pinned_add(uint64_t begin, uint64_t bytes);
bool pinned(uint64_t begin, uint64_t bytes);
void pinned_remove(uint64_t begin);

// Forgets the accesses recorded in `range` (freed memory).
void forget(Range range);

}  // namespace lms_emu
