#include "harness/measure/gpu_probe.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "harness/system/child_process.hpp"

namespace sweetspot {

std::string format_gpu_facts(const GpuFacts& f) {
    std::ostringstream out;
    if (f.name) out << "name=" << *f.name << "\n";
    if (f.driver) out << "driver=" << *f.driver << "\n";
    if (f.runtime) out << "runtime=" << *f.runtime << "\n";
    if (f.memory_bytes) out << "memory_bytes=" << *f.memory_bytes << "\n";
    char buf[64];
    if (f.h2d_gbps) {
        std::snprintf(buf, sizeof buf, "%.3f", *f.h2d_gbps);
        out << "h2d_gbps=" << buf << "\n";
    }
    if (f.d2h_gbps) {
        std::snprintf(buf, sizeof buf, "%.3f", *f.d2h_gbps);
        out << "d2h_gbps=" << buf << "\n";
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
            else if (k == "h2d_gbps") f.h2d_gbps = std::stod(v);
            else if (k == "d2h_gbps") f.d2h_gbps = std::stod(v);
            else if (k == "note") f.note = v;
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
