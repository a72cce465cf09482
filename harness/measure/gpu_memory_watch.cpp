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

GpuMemoryMeasurement GpuMemoryWatch::measurement() {
    read_now();
    const std::lock_guard lock(mutex_);
    return m_;
}

void GpuMemoryWatch::take(const GpuMemoryReading& r) {
    ++m_.readings;
    m_.peak_bytes = std::max(m_.peak_bytes, r.used_bytes - m_.before_bytes);
    if (r.own_bytes) m_.own_peak_bytes = std::max(m_.own_peak_bytes.value_or(0), *r.own_bytes);
    m_.other_processes = std::max(m_.other_processes, r.other_processes);
    m_.other_peak_bytes = std::max(m_.other_peak_bytes, r.other_bytes);
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
