#include "harness/measure/gpu_memory_watch.hpp"

#include <algorithm>
#include <exception>
#include <stdexcept>

namespace sweetspot {

GpuMemoryWatch::GpuMemoryWatch(Reader read, std::chrono::milliseconds period) : read_(std::move(read)), period_(period) {
    const GpuMemoryReading before = read_();
    m_.before_bytes = before.used_bytes;
    m_.readings = 1;
    // Processes present before the cell are counted among the others it ran beside.
    m_.other_processes = before.other_processes;
    m_.other_peak_bytes = before.other_bytes;
}

void GpuMemoryWatch::context_created() {
    try {
        const GpuMemoryReading r = read_();
        const std::lock_guard lock(mutex_);
        m_.context_bytes = r.used_bytes - m_.before_bytes;
        take(r);
    } catch (const std::exception& e) {
        const std::lock_guard lock(mutex_);
        m_.error = e.what();
        return;
    }
    thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
}

std::string throttling_names(std::uint64_t events) {
    std::string names;
    for (const ClockEvent& e : kThrottlingClockEvents)
        if (events & e.bit) names += (names.empty() ? "" : ", ") + std::string(e.name);
    return names;
}

GpuMemoryMeasurement GpuMemoryWatch::measurement() {
    read_now();
    const std::lock_guard lock(mutex_);
    GpuMemoryMeasurement m = m_;
    if (!busy_clocks_mhz_.empty()) {
        std::vector<int> clocks = busy_clocks_mhz_;
        const auto middle = clocks.begin() + static_cast<std::ptrdiff_t>(clocks.size() / 2);
        std::nth_element(clocks.begin(), middle, clocks.end());
        m.sm_clock_busy_mhz = *middle;
    }
    return m;
}

void GpuMemoryWatch::take(const GpuMemoryReading& r) {
    ++m_.readings;
    m_.peak_bytes = std::max(m_.peak_bytes, r.used_bytes - m_.before_bytes);
    if (r.own_bytes) m_.own_peak_bytes = std::max(m_.own_peak_bytes.value_or(0), *r.own_bytes);
    m_.other_processes = std::max(m_.other_processes, r.other_processes);
    m_.other_peak_bytes = std::max(m_.other_peak_bytes, r.other_bytes);
    if (r.power_w) m_.power_max_w = std::max(m_.power_max_w.value_or(0), *r.power_w);
    if (r.temperature_c) m_.temperature_max_c = std::max(m_.temperature_max_c.value_or(0), *r.temperature_c);
    // Without event reasons every reading counts as busy: the clocks are still what NVML read.
    const bool busy = !r.clock_events || !(*r.clock_events & kClockEventGpuIdle);
    if (!busy) return;
    if (r.sm_clock_mhz) busy_clocks_mhz_.push_back(*r.sm_clock_mhz);
    if (r.clock_events) {
        std::uint64_t throttling = 0;
        for (const ClockEvent& e : kThrottlingClockEvents) throttling |= *r.clock_events & e.bit;
        m_.throttling_events = m_.throttling_events.value_or(0) | throttling;
    }
}

void GpuMemoryWatch::read_now() {
    {
        const std::lock_guard lock(mutex_);
        if (!m_.error.empty()) return;
    }
    try {
        const GpuMemoryReading r = read_();
        const std::lock_guard lock(mutex_);
        take(r);
    } catch (const std::exception& e) {
        const std::lock_guard lock(mutex_);
        m_.error = e.what();
    }
}

void GpuMemoryWatch::run(std::stop_token stop) {
    std::mutex sleep_mutex;
    std::unique_lock sleep(sleep_mutex);
    while (!stop.stop_requested()) {
        read_now();
        // Returns at the period's end, or at once when the watch is destroyed (its jthread asks
        // the thread to stop, which wakes this wait).
        wake_.wait_for(sleep, stop, period_, [] { return false; });
    }
}

}  // namespace sweetspot
