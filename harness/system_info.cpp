#include "harness/system_info.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <thread>

#ifdef SWEETSPOT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

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

std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

void query_gpu(SystemInfo& info) {
#ifdef SWEETSPOT_HAVE_CUDA
    int count = 0;
    if (const auto err = cudaGetDeviceCount(&count); err != cudaSuccess || count == 0) {
        info.gpu_note = err != cudaSuccess ? std::string("no usable GPU: ") + cudaGetErrorString(err) : "no GPU found";
        return;
    }
    cudaDeviceProp prop{};
    if (const auto err = cudaGetDeviceProperties(&prop, 0); err != cudaSuccess) {
        info.gpu_note = std::string("cannot read GPU properties: ") + cudaGetErrorString(err);
        return;
    }
    info.gpu_name = prop.name;
    int driver = 0, runtime = 0;
    if (cudaDriverGetVersion(&driver) == cudaSuccess) info.gpu_driver = "CUDA " + cuda_version_text(driver);
    if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) info.cuda_runtime = cuda_version_text(runtime);
#else
    info.gpu_note = "built without CUDA";
#endif
}

}  // namespace

SystemInfo query_system_info() {
    SystemInfo info;
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) info.host = host;
    utsname u{};
    if (uname(&u) == 0) info.os = std::string(u.sysname) + " " + u.release + " " + u.machine;
    info.cpu_model = cpu_model_name();
    info.cpu_count = static_cast<int>(std::thread::hardware_concurrency());
    query_gpu(info);
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
