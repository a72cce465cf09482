#include "harness/measure/gpu_probe.hpp"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "harness/system/child_process.hpp"

namespace sweetspot {
namespace {

// The probe output's key of each managed-memory ability.
const std::array<std::pair<std::string_view, std::optional<int> ManagedAbilities::*>, 4>& managed_ability_keys() {
    static const std::array<std::pair<std::string_view, std::optional<int> ManagedAbilities::*>, 4> keys = {{
        {"concurrent_managed_access", &ManagedAbilities::concurrent_managed_access},
        {"pageable_memory_access", &ManagedAbilities::pageable_memory_access},
        {"pageable_memory_access_uses_host_page_tables", &ManagedAbilities::pageable_memory_access_uses_host_page_tables},
        {"direct_managed_mem_access_from_host", &ManagedAbilities::direct_managed_mem_access_from_host},
    }};
    return keys;
}

// "operation,bytes,calls,gbps,host_ms"
ManagedRate parse_managed_rate(const std::string& v) {
    std::vector<std::string> parts;
    std::istringstream in(v);
    for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
    if (parts.size() != 5) throw std::invalid_argument("managed_rate needs 5 fields");
    return ManagedRate{parts[0], std::stoll(parts[1]), std::stoi(parts[2]), std::stod(parts[3]), std::stod(parts[4])};
}

}  // namespace

std::string format_gpu_facts(const GpuFacts& f) {
    std::ostringstream out;
    if (f.name) out << "name=" << *f.name << "\n";
    if (f.driver) out << "driver=" << *f.driver << "\n";
    if (f.runtime) out << "runtime=" << *f.runtime << "\n";
    if (f.memory_bytes) out << "memory_bytes=" << *f.memory_bytes << "\n";
    if (f.device_count) out << "device_count=" << *f.device_count << "\n";
    char buf[64];
    if (f.h2d_gbps) {
        std::snprintf(buf, sizeof buf, "%.3f", *f.h2d_gbps);
        out << "h2d_gbps=" << buf << "\n";
    }
    if (f.d2h_gbps) {
        std::snprintf(buf, sizeof buf, "%.3f", *f.d2h_gbps);
        out << "d2h_gbps=" << buf << "\n";
    }
    for (const auto& [key, member] : managed_ability_keys())
        if (f.managed.*member) out << key << "=" << *(f.managed.*member) << "\n";
    for (const ManagedRate& m : f.managed_rates) {
        std::snprintf(buf, sizeof buf, ",%d,%.3f,%.3f", m.calls, m.gbps, m.host_ms);
        out << "managed_rate=" << m.operation << "," << m.bytes << buf << "\n";
    }
    if (!f.note.empty()) out << "note=" << f.note << "\n";
    return out.str();
}

GpuFacts parse_gpu_facts(std::string_view text) {
    GpuFacts f;
    std::istringstream in{std::string(text)};
    std::string line;
    while (std::getline(in, line)) {
        const auto eq = line.find('=');
        if (eq == std::string::npos) continue;
        const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
        try {
            if (k == "name") f.name = v;
            else if (k == "driver") f.driver = v;
            else if (k == "runtime") f.runtime = v;
            else if (k == "memory_bytes") f.memory_bytes = std::stoll(v);
            else if (k == "device_count") f.device_count = std::stoi(v);
            else if (k == "h2d_gbps") f.h2d_gbps = std::stod(v);
            else if (k == "d2h_gbps") f.d2h_gbps = std::stod(v);
            else if (k == "note") f.note = v;
            else if (k == "managed_rate") f.managed_rates.push_back(parse_managed_rate(v));
            else
                for (const auto& [key, member] : managed_ability_keys())
                    if (k == key) f.managed.*member = std::stoi(v);
        } catch (const std::exception&) {
            f.note = "unreadable probe output: " + line;
        }
    }
    return f;
}

GpuFacts probe_gpu_in_child(bool measure_link) {
    const auto log = (std::filesystem::temp_directory_path() /
                      ("sweetspot-probe-" + std::to_string(::getpid()) + ".txt")).string();
    ChildSpec spec;
    spec.argv = {self_executable(), "_probe"};
    if (measure_link) spec.argv.push_back("--link");
    spec.log_path = log;
    spec.timeout_s = 120;
    const std::atomic<bool> never{false};
    const ChildResult r = run_child(spec, never);
    GpuFacts facts = parse_gpu_facts(file_tail(log, 16384));
    std::filesystem::remove(log);
    if (r.exit_code != 0 && facts.note.empty()) facts.note = "GPU probe " + r.describe();
    return facts;
}

}  // namespace sweetspot
