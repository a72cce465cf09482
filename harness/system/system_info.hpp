#pragma once
// Facts about the host a run happens on, stored with every run. (GPU facts come from a probe
// process: harness/measure/gpu_probe.hpp.)
#include <cstdint>
#include <optional>
#include <string>

namespace sweetspot {

struct SystemInfo {
    std::string host, os, cpu_model;
    int cpu_count = 0;
};

SystemInfo query_system_info();

// The memory the host can give a new process now without swapping (MemAvailable in
// /proc/meminfo), or none where the kernel does not say.
std::optional<std::int64_t> host_memory_available_bytes();

// What the host's cores are doing now: how many are online, their 1-minute load average, and their
// mean clock in MHz as /proc/cpuinfo reports it (none where the kernel does not: some VMs, ARM).
struct HostLoad {
    int cores = 0;
    std::optional<double> load_1m, mean_mhz;
};
HostLoad host_load();

// Current time as ISO 8601 UTC ("2026-11-22T09:30:00Z").
std::string utc_timestamp();

}  // namespace sweetspot
