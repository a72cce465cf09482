#include "harness/system/system_info.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <ctime>
#include <fstream>
#include <thread>

namespace sweetspot {
namespace {

std::string cpu_model_name() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
        }
    }
    return "unknown";
}

}  // namespace

std::optional<std::int64_t> host_memory_available_bytes() {
    std::ifstream f("/proc/meminfo");
    std::string name, unit;
    std::int64_t kib = 0;
    while (f >> name >> kib >> unit)
        if (name == "MemAvailable:" && unit == "kB") return kib * 1024;
    return std::nullopt;
}

HostLoad host_load() {
    HostLoad h;
    h.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    if (double load = 0; getloadavg(&load, 1) == 1) h.load_1m = load;
    std::ifstream f("/proc/cpuinfo");
    double sum = 0;
    int n = 0;
    for (std::string line; std::getline(f, line);) {
        const auto colon = line.find(':');
        if (line.rfind("cpu MHz", 0) != 0 || colon == std::string::npos) continue;
        try {
            sum += std::stod(line.substr(colon + 1));
            ++n;
        } catch (const std::exception&) {
            // A line the kernel wrote otherwise says nothing about the clock.
        }
    }
    if (n > 0) h.mean_mhz = sum / n;
    return h;
}

SystemInfo query_system_info() {
    SystemInfo info;
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) info.host = host;
    utsname u{};
    if (uname(&u) == 0) info.os = std::string(u.sysname) + " " + u.release + " " + u.machine;
    info.cpu_model = cpu_model_name();
    info.cpu_count = static_cast<int>(std::thread::hardware_concurrency());
    return info;
}

std::string utc_timestamp() {
    const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

}  // namespace sweetspot
