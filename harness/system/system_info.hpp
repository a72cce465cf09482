#pragma once
// Facts about the host a run happens on, stored with every run. (GPU facts come from a probe
// process: harness/measure/gpu_probe.hpp.)
#include <string>

namespace sweetspot {

struct SystemInfo {
    std::string host, os, cpu_model;
    int cpu_count = 0;
};

SystemInfo query_system_info();

// Current time as ISO 8601 UTC ("2026-11-22T09:30:00Z").
std::string utc_timestamp();

}  // namespace sweetspot
