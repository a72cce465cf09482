#pragma once
// GPU facts for a run's metadata (name, driver, memory, what Unified Memory can do there), the
// pinned host<->device bandwidth that every cell's bound is computed from, and the rates of the
// managed-memory operations the UVM backends are made of. Measured in a child process
// (`sweetspot _probe`) so the long-running sweep process never creates a CUDA context of its own.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/store/store.hpp"

namespace sweetspot {

struct GpuFacts {
    std::optional<std::string> name, driver, runtime;
    std::optional<std::int64_t> memory_bytes;
    std::optional<int> device_count;           // the GPUs this process sees (the facts are device 0's)
    std::optional<double> h2d_gbps, d2h_gbps;  // 1e9 bytes per second
    ManagedAbilities managed;
    std::vector<ManagedRate> managed_rates;    // measured with the link
    std::string note;                          // why fields are missing
};

// "key=value" lines, the probe process's output, and back.
std::string format_gpu_facts(const GpuFacts& facts);
GpuFacts parse_gpu_facts(std::string_view text);

// Runs `sweetspot _probe` (with the link measurement when `measure_link`) and reads its facts.
GpuFacts probe_gpu_in_child(bool measure_link);

#ifdef SWEETSPOT_HAVE_CUDA
// In this process: device 0's facts, and when `measure_link`, the median bandwidth of pinned
// 1 GiB copies each way and the managed-memory operations' rates (gpu_probe_cuda.cpp says which).
GpuFacts measure_gpu_facts(bool measure_link);
#endif

}  // namespace sweetspot
