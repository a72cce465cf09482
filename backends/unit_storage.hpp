#pragma once
// Helpers the GPU backends share to lay units out in one allocation and to fill them: pure C++
// (host threads only), header-only.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "backends/backend.hpp"
#include "kernels/dtype.hpp"
#include "kernels/weight_layout.hpp"

namespace sweetspot {

// Where each unit starts inside one allocation that packs `unit_bytes` back to back, each unit
// starting on a multiple of `alignment` bytes.
struct PackedUnits {
    std::vector<std::int64_t> offsets;
    std::int64_t total_bytes = 0;  // the allocation size, the last unit padded too
};

inline std::int64_t round_up_bytes(std::int64_t n, std::int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

inline PackedUnits pack_units(const std::vector<std::int64_t>& unit_bytes, std::int64_t alignment) {
    PackedUnits packed;
    for (const auto b : unit_bytes) {
        packed.offsets.push_back(packed.total_bytes);
        packed.total_bytes += round_up_bytes(b, alignment);
    }
    return packed;
}

// Receives unit `unit`'s weights, already in the cell's dtype, on a worker thread.
using UnitSink = std::function<void(int unit, const void* data, std::size_t bytes)>;

// Fills every unit through `fill` on host worker threads, converts it to `dtype` and hands it to
// `sink` (which must be safe to call from several threads for different units). Synthetic
// weights of a 13B model take minutes on one core. Each worker holds one fp32 unit (plus its
// conversion), so the thread count is capped to keep host memory bounded for models whose
// embedding is ~1 GB. The first exception of any worker is rethrown after all have stopped.
inline void fill_units(const WeightLayout& layout, DType dtype, const Backend::UnitFiller& fill, const UnitSink& sink) {
    constexpr unsigned kMaxFillThreads = 8;
    const int n_units = static_cast<int>(layout.units.size());
    const unsigned n_threads = std::clamp(std::thread::hardware_concurrency(), 1u, kMaxFillThreads);

    std::atomic<int> next_unit{0};
    std::atomic<bool> failed{false};
    std::exception_ptr first_error;
    std::mutex error_mutex;

    auto worker = [&] {
        std::vector<float> values;
        std::vector<std::byte> converted;
        try {
            for (int u = next_unit++; u < n_units && !failed; u = next_unit++) {
                const auto numel = static_cast<std::size_t>(layout.units[static_cast<std::size_t>(u)].numel);
                values.resize(numel);
                fill(u, values);
                if (dtype == DType::fp32) {
                    sink(u, values.data(), numel * sizeof(float));
                } else {
                    converted.resize(numel * dtype_size(dtype));
                    convert_from_f32(values, dtype, converted.data());
                    sink(u, converted.data(), converted.size());
                }
            }
        } catch (...) {
            std::lock_guard lock(error_mutex);
            if (!first_error) first_error = std::current_exception();
            failed = true;
        }
    };

    std::vector<std::thread> threads;
    for (unsigned t = 1; t < std::min<unsigned>(n_threads, static_cast<unsigned>(std::max(n_units, 1))); ++t) {
        try {
            threads.emplace_back(worker);
        } catch (const std::system_error&) {
            break;  // no more threads to be had: the ones running (and this one) do the work
        }
    }
    worker();  // the calling thread works too
    for (auto& t : threads) t.join();
    if (first_error) std::rethrow_exception(first_error);
}

}  // namespace sweetspot
