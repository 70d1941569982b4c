// The emulated device's streams, events and hazard detection (see streams.h).
//
// Ordering is tracked by vector clocks: index 0 is the host (and the default stream, which
// the host runs at once), index i > 0 stream i. A stream's clock joins the host's clock as
// it was when each piece of work was issued (work is ordered after what the host had waited
// for), and an event's clock as it was when its record was reached (a wait). Each piece of
// work ticks its stream's own entry; memory remembers, per byte range, its last writer and
// its readers since, as (clock index, tick, name). An access is ordered after an earlier one
// when they are on the same stream or the accessing stream's clock has reached the earlier
// tick, whatever order the scheduler happened to run them in.
#include "streams.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace lms_emu {
namespace {

using Clock = std::vector<uint64_t>;

void join(Clock& into, const Clock& other) {
    if (into.size() < other.size()) into.resize(other.size(), 0);
    for (size_t i = 0; i < other.size(); ++i) into[i] = into[i] > other[i] ? into[i] : other[i];
}

uint64_t at(const Clock& clock, size_t i) { return i < clock.size() ? clock[i] : 0; }

double now_ms() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return double(t.tv_sec) * 1e3 + double(t.tv_nsec) / 1e6;
}

struct EventState {
    uint64_t recorded = 0;                // records issued
    uint64_t reached = 0;                 // records reached
    std::map<uint64_t, Clock> clocks;     // per record reached: the stream's clock there
    double ms = 0;
};

struct Op {
    enum Kind { WORK, RECORD, WAIT } kind;
    std::string what;
    Access access;
    std::function<void()> work;
    std::shared_ptr<EventState> event;
    uint64_t record = 0;  // RECORD, WAIT: which record
    Clock issued;         // the host's clock when issued
};

struct StreamState {
    size_t index;
    std::deque<Op> queue;
    Clock clock;
};

// One access remembered: the clock index, its tick, and the work's name.
struct Mark {
    size_t index;
    uint64_t tick;
    uint32_t name;
};

struct Segment {
    uint64_t end = 0;
    bool written = false;
    Mark writer{};
    std::vector<Mark> readers;  // since the last write, one per clock index
};

// A deterministic generator (splitmix64) of the scheduler's choices.
struct Random {
    uint64_t state;
    uint64_t next() {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
};

struct Device {
    std::recursive_mutex lock;
    std::map<size_t, StreamState*> streams;  // by clock index, in creation order
    size_t next_index = 1;
    Clock host{0};
    std::map<uint64_t, Segment> memory;  // by start address
    std::vector<std::string> names;
    std::unordered_map<std::string, uint32_t> name_index;
    std::map<uint64_t, uint64_t> pinned;  // start → bytes
    Random random{[] {
        const char* text = getenv("LMS_CUDA_EMULATOR_SEED");
        return (text ? uint64_t(strtoull(text, nullptr, 10)) : 0) ^ 0x5eed5eed5eedull;
    }()};
    std::string failure;
    std::string last;  // the latest failure's message, kept after a default-stream fault

    uint32_t name(const std::string& what) {
        auto [it, fresh] = name_index.emplace(what, uint32_t(names.size()));
        if (fresh) names.push_back(what);
        return it->second;
    }

    std::string who(const Mark& m) const {
        std::string where = m.index == 0 ? "the host (default stream)" : "stream " + std::to_string(m.index);
        return names[m.name] + " on " + where;
    }

    // A boundary at `at` between segments.
    void split(uint64_t at) {
        auto it = memory.upper_bound(at);
        if (it == memory.begin()) return;
        --it;
        if (it->first < at && at < it->second.end) {
            Segment tail = it->second;
            it->second.end = at;
            memory.emplace(at, tail);
        }
    }

    // Calls `f(segment)` for the segments covering `r`, made where there are none.
    template <typename F>
    void each(Range r, F f) {
        if (r.begin >= r.end) return;
        split(r.begin);
        split(r.end);
        uint64_t pos = r.begin;
        auto it = memory.lower_bound(pos);
        while (pos < r.end) {
            if (it == memory.end() || it->first > pos) {
                uint64_t end = it == memory.end() || it->first > r.end ? r.end : it->first;
                Segment fresh;
                fresh.end = end;
                it = memory.emplace_hint(it, pos, fresh);
            }
            f(it->first, it->second);
            pos = it->second.end;
            ++it;
        }
    }

    // Whether `earlier` is ordered before work at clock index `index` with clock `clock`.
    static bool ordered(const Mark& earlier, size_t index, const Clock& clock) {
        return earlier.index == index || at(clock, earlier.index) >= earlier.tick;
    }

    // Checks `access` by the work `m` (whose stream has clock `clock`) against what memory
    // remembers, then remembers it. Returns the first hazard, or "".
    std::string check(const Access& access, const Mark& m, const Clock& clock) {
        std::string hazard;
        auto note = [&](const char* verb, uint64_t begin, const Mark& other, const char* other_verb) {
            if (!hazard.empty()) return;
            char where[64];
            snprintf(where, sizeof where, "0x%llx", (unsigned long long)begin);
            hazard = "hazard: " + who(m) + " " + verb + " memory at " + where + " that " + who(other) + " " +
                     other_verb + ", with no event wait ordering that before it";
        };
        for (const Range& r : access.reads)
            each(r, [&](uint64_t begin, Segment& s) {
                if (s.written && !ordered(s.writer, m.index, clock)) note("reads", begin, s.writer, "writes");
            });
        for (const Range& r : access.writes)
            each(r, [&](uint64_t begin, Segment& s) {
                if (s.written && !ordered(s.writer, m.index, clock)) note("writes", begin, s.writer, "writes");
                for (const Mark& reader : s.readers)
                    if (!ordered(reader, m.index, clock)) note("writes", begin, reader, "reads");
            });
        for (const Range& r : access.reads)
            each(r, [&](uint64_t, Segment& s) {
                for (Mark& reader : s.readers)
                    if (reader.index == m.index) {
                        reader = m;
                        return;
                    }
                s.readers.push_back(m);
            });
        for (const Range& r : access.writes)
            each(r, [&](uint64_t, Segment& s) {
                s.written = true;
                s.writer = m;
                s.readers.clear();
            });
        return hazard;
    }

    void fail(const std::string& message) {
        if (!failure.empty()) return;
        failure = message;
        last = message;
        fprintf(stderr, "lms emulated device: %s\n", message.c_str());
        for (auto& [index, stream] : streams) stream->queue.clear();
    }

    // Runs `work` by clock index `index` with clock `clock` (ticked first).
    void run(size_t index, Clock& clock, const std::string& what, const Access& access,
             const std::function<void()>& work) {
        if (clock.size() <= index) clock.resize(index + 1, 0);
        clock[index] += 1;
        Mark m{index, clock[index], name(what)};
        std::string hazard = check(access, m, clock);
        if (!hazard.empty()) {
            fail(hazard);
            return;
        }
        if (work) work();
    }

    bool runnable(const StreamState& s) const {
        const Op& op = s.queue.front();
        return op.kind != Op::WAIT || op.event->reached >= op.record;
    }

    // Runs the head of `s`'s queue.
    void step(StreamState& s) {
        Op op = std::move(s.queue.front());
        s.queue.pop_front();
        join(s.clock, op.issued);
        switch (op.kind) {
        case Op::WORK: run(s.index, s.clock, op.what, op.access, op.work); break;
        case Op::RECORD:
            op.event->reached = op.event->reached > op.record ? op.event->reached : op.record;
            op.event->clocks[op.record] = s.clock;
            op.event->ms = now_ms();
            break;
        case Op::WAIT: join(s.clock, op.event->clocks[op.record]); break;
        }
    }

    // Runs queued work, a random runnable stream's next piece at a time, until `done()`
    // or the device fails.
    template <typename Done>
    void drain(Done done) {
        std::vector<StreamState*> ready;
        while (failure.empty() && !done()) {
            ready.clear();
            bool pending = false;
            for (auto& [index, s] : streams) {
                if (s->queue.empty()) continue;
                pending = true;
                if (runnable(*s)) ready.push_back(s);
            }
            if (ready.empty()) {
                if (pending) fail("deadlock: every stream with work waits for an event no stream will reach");
                return;
            }
            step(*ready[random.next() % ready.size()]);
        }
    }

    StreamState* stream(void* handle) { return static_cast<StreamState*>(handle); }
};

Device& device() {
    static Device* d = new Device;
    return *d;
}

struct EventHandle {
    std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

}  // namespace

int enqueue(void* stream, std::string what, Access access, std::function<void()> work) {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    if (!d.failure.empty()) return DEVICE_FAILED;
    if (stream == nullptr) {
        d.drain([&] { return false; });
        for (auto& [index, s] : d.streams) join(d.host, s->clock);
        if (!d.failure.empty()) return DEVICE_FAILED;
        d.run(0, d.host, what, access, work);
        if (d.failure.empty()) return 0;
        d.failure.clear();  // the default stream's own faults are returned, not kept
        return DEVICE_FAILED;
    }
    Op op{Op::WORK, std::move(what), std::move(access), std::move(work), nullptr, 0, d.host};
    d.host[0] += 1;
    d.stream(stream)->queue.push_back(std::move(op));
    return 0;
}

void fail(const std::string& message) {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    d.fail(message);
}

int failure() {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    return d.failure.empty() ? 0 : DEVICE_FAILED;
}

std::string failure_message() {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    return d.last;
}

void* stream_create() {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    auto* s = new StreamState{d.next_index++, {}, {}};
    d.streams[s->index] = s;
    return s;
}

int stream_destroy(void* stream) {
    int status = stream_synchronize(stream);
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    StreamState* s = d.stream(stream);
    d.streams.erase(s->index);
    delete s;
    return status;
}

int stream_synchronize(void* stream) {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    if (stream == nullptr) return synchronize_all();
    StreamState* s = d.stream(stream);
    d.drain([&] { return s->queue.empty(); });
    join(d.host, s->clock);
    return failure();
}

bool stream_idle(void* stream) {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    if (stream == nullptr) {
        for (auto& [index, s] : d.streams)
            if (!s->queue.empty()) return false;
        return true;
    }
    return d.stream(stream)->queue.empty();
}

void* event_create() { return new EventHandle; }

void event_destroy(void* event) { delete static_cast<EventHandle*>(event); }

int event_record(void* event, void* stream) {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    auto& state = static_cast<EventHandle*>(event)->state;
    uint64_t record = ++state->recorded;
    if (stream == nullptr) {
        synchronize_all();
        state->reached = record;
        state->clocks[record] = d.host;
        state->ms = now_ms();
        return failure();
    }
    d.stream(stream)->queue.push_back(Op{Op::RECORD, "", {}, nullptr, state, record, d.host});
    d.host[0] += 1;
    return failure();
}

int stream_wait(void* stream, void* event) {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    auto& state = static_cast<EventHandle*>(event)->state;
    if (state->recorded == 0) return failure();  // a wait for an event never recorded is none
    if (stream == nullptr) {
        d.drain([&] { return state->reached >= state->recorded; });
        join(d.host, state->clocks[state->recorded]);
        return failure();
    }
    d.stream(stream)->queue.push_back(Op{Op::WAIT, "", {}, nullptr, state, state->recorded, d.host});
    d.host[0] += 1;
    return failure();
}

int event_synchronize(void* event) {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    auto& state = static_cast<EventHandle*>(event)->state;
    if (state->recorded == 0) return failure();
    d.drain([&] { return state->reached >= state->recorded; });
    join(d.host, state->clocks[state->recorded]);
    return failure();
}

bool event_done(void* event) {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    auto& state = static_cast<EventHandle*>(event)->state;
    return state->reached >= state->recorded;
}

double event_ms(void* event) {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    return static_cast<EventHandle*>(event)->state->ms;
}

int synchronize_all() {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    d.drain([&] {
        for (auto& [index, s] : d.streams)
            if (!s->queue.empty()) return false;
        return true;
    });
    for (auto& [index, s] : d.streams) join(d.host, s->clock);
    return failure();
}

void pinned_add(uint64_t begin, uint64_t bytes) {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    d.pinned[begin] = bytes;
}

bool pinned(uint64_t begin, uint64_t bytes) {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    auto it = d.pinned.upper_bound(begin);
    if (it == d.pinned.begin()) return false;
    --it;
    return begin + bytes <= it->first + it->second;
}

void pinned_remove(uint64_t begin) {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    auto it = d.pinned.find(begin);
    if (it == d.pinned.end()) return;
    uint64_t end = begin + it->second;
    d.pinned.erase(it);
    forget({begin, end});
}

void forget(Range range) {
    Device& d = device();
    std::lock_guard<std::recursive_mutex> guard(d.lock);
    d.split(range.begin);
    d.split(range.end);
    d.memory.erase(d.memory.lower_bound(range.begin), d.memory.lower_bound(range.end));
}

}  // namespace lms_emu
