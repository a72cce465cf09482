#pragma once
// Facts about the machine a run happens on, stored with every run.
#include <optional>
#include <string>

namespace sweetspot {

struct SystemInfo {
    std::string host, os, cpu_model;
    int cpu_count = 0;
    // Filled only in CUDA builds on a machine with a visible GPU.
    std::optional<std::string> gpu_name, gpu_driver, cuda_runtime;
    std::string gpu_note;  // why the GPU fields are empty, for the user
};

SystemInfo query_system_info();

// Current time as ISO 8601 UTC ("2026-11-22T09:30:00Z").
std::string utc_timestamp();

}  // namespace sweetspot
