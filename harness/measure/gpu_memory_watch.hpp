#pragma once
// A GPU cell's measured memory, independent of the estimator's arithmetic: the device's used
// memory read (through NVML) before the cell's CUDA context exists, right after it is created,
// and then every few milliseconds on a thread of its own until the cell's iterations are done.
// The peak is the most read minus the reading before the context, so memory that other processes
// held before the cell does not count; other processes present during the cell are counted and
// reported beside it.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "harness/measure/nvml_memory.hpp"

namespace sweetspot {

struct GpuMemoryMeasurement {
    std::int64_t before_bytes = 0;   // the device's used memory before the cell's CUDA context
    std::int64_t context_bytes = 0;  // what creating the context added to it
    std::int64_t peak_bytes = 0;     // the most used memory read from then on, less before_bytes
    std::optional<std::int64_t> own_peak_bytes;  // the most NVML attributed to this process
    int other_processes = 0;                     // the most other processes listed at once
    std::int64_t other_peak_bytes = 0;           // the most memory they held at once
    int readings = 0;
    std::string error;  // why readings stopped early, if they did
    // The state the GPU ran in, where NVML reports it: the median SM clock over the readings in
    // which it was not idle (an idle GPU lowers its clocks, which says nothing of the work), the
    // most power and the highest temperature, and every throttling clock event reason seen while
    // it was busy (kThrottlingClockEvents' bits).
    std::optional<double> sm_clock_busy_mhz, power_max_w;
    std::optional<int> temperature_max_c;
    std::optional<std::uint64_t> throttling_events;
};

// The names of the throttling reasons among NVML's clock event bits, joined by ", " ("" for none).
std::string throttling_names(std::uint64_t events);

class GpuMemoryWatch {
public:
    using Reader = std::function<GpuMemoryReading()>;

    // Takes the reading before the context. `read` throws std::runtime_error when it fails.
    GpuMemoryWatch(Reader read, std::chrono::milliseconds period);
    GpuMemoryWatch(const GpuMemoryWatch&) = delete;
    GpuMemoryWatch& operator=(const GpuMemoryWatch&) = delete;
    ~GpuMemoryWatch() = default;  // thread_ goes first: stopped and joined

    // Takes the reading after the context, and starts reading every `period`. A reading that
    // fails from here on ends the readings (measurement().error says why), never the cell.
    void context_created();
    // Takes one more reading and returns the numbers so far.
    GpuMemoryMeasurement measurement();

private:
    void take(const GpuMemoryReading& r);  // with mutex_ held
    void read_now();                       // takes mutex_
    void run(std::stop_token stop);

    Reader read_;
    std::chrono::milliseconds period_;
    std::mutex mutex_;
    std::condition_variable_any wake_;
    GpuMemoryMeasurement m_;
    std::vector<int> busy_clocks_mhz_;  // the SM clock of each reading while the GPU was busy
    std::int64_t context_used_ = 0;
    std::jthread thread_;  // last, so destroyed first: stopped and joined before the members it uses
};

}  // namespace sweetspot
