#include "harness/measure/nvml_memory.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace sweetspot {
namespace {

// NVML's C types, declared here so that no NVML header is needed to build: the calls below are
// the stable, versioned entry points whose structures have not changed since they appeared.
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlInsufficientSize = 7;
using NvmlDeviceHandle = void*;
struct NvmlMemory {  // nvmlMemory_t
    unsigned long long total, free, used;
};
struct NvmlProcessInfoV2 {  // nvmlProcessInfo_v2_t
    unsigned int pid;
    unsigned long long used_gpu_memory;
    unsigned int gpu_instance_id, compute_instance_id;
};
// NVML reports a process's memory as this when it cannot tell (NVML_VALUE_NOT_AVAILABLE).
constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;
constexpr int kNvmlClockSm = 1;         // NVML_CLOCK_SM
constexpr int kNvmlTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU

}  // namespace

struct NvmlDevice::Api {
    NvmlReturn (*init)();
    NvmlReturn (*shutdown)();
    const char* (*error_string)(NvmlReturn);
    NvmlReturn (*by_uuid)(const char*, NvmlDeviceHandle*);
    NvmlReturn (*memory_info)(NvmlDeviceHandle, NvmlMemory*);
    NvmlReturn (*compute_processes)(NvmlDeviceHandle, unsigned int*, NvmlProcessInfoV2*);
    // The GPU's state; each may be missing from an older library (nullptr), and its reading then too.
    NvmlReturn (*clock_info)(NvmlDeviceHandle, int, unsigned int*) = nullptr;
    NvmlReturn (*power_usage)(NvmlDeviceHandle, unsigned int*) = nullptr;
    NvmlReturn (*temperature)(NvmlDeviceHandle, int, unsigned int*) = nullptr;
    NvmlReturn (*clock_events)(NvmlDeviceHandle, unsigned long long*) = nullptr;
};

std::string NvmlDevice::library_name() {
    const char* named = std::getenv("SWEETSPOT_NVML_LIBRARY");
    return named && *named ? named : "libnvidia-ml.so.1";
}

std::unique_ptr<NvmlDevice> NvmlDevice::open(const std::string& uuid, std::string& why_not) {
    const std::string name = library_name();
    void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        why_not = "NVML not available (" + name + " does not load: " + dlerror() + ")";
        return nullptr;
    }
    auto api = std::make_unique<Api>();
    const auto resolve = [&](auto& fn, const char* symbol) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(library, symbol));
        if (!fn) why_not = "NVML (" + name + ") lacks " + symbol;
        return fn != nullptr;
    };
    if (!resolve(api->init, "nvmlInit_v2") || !resolve(api->shutdown, "nvmlShutdown") ||
        !resolve(api->error_string, "nvmlErrorString") || !resolve(api->by_uuid, "nvmlDeviceGetHandleByUUID") ||
        !resolve(api->memory_info, "nvmlDeviceGetMemoryInfo") ||
        !resolve(api->compute_processes, "nvmlDeviceGetComputeRunningProcesses_v2")) {
        dlclose(library);
        return nullptr;
    }
    const auto optional = [&](auto& fn, std::initializer_list<const char*> symbols) {
        for (const char* symbol : symbols)
            if (!fn) fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(library, symbol));
    };
    optional(api->clock_info, {"nvmlDeviceGetClockInfo"});
    optional(api->power_usage, {"nvmlDeviceGetPowerUsage"});
    optional(api->temperature, {"nvmlDeviceGetTemperature"});
    // Renamed in CUDA 12 (from "throttle reasons"); the older name stays for older drivers.
    optional(api->clock_events, {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
    if (const NvmlReturn r = api->init(); r != kNvmlSuccess) {
        why_not = std::string("nvmlInit failed: ") + api->error_string(r);
        dlclose(library);
        return nullptr;
    }
    NvmlDeviceHandle device = nullptr;
    if (const NvmlReturn r = api->by_uuid(uuid.c_str(), &device); r != kNvmlSuccess) {
        why_not = "NVML finds no GPU " + uuid + ": " + api->error_string(r);
        api->shutdown();
        dlclose(library);
        return nullptr;
    }
    return std::unique_ptr<NvmlDevice>(new NvmlDevice(library, std::move(api), device));
}

NvmlDevice::NvmlDevice(void* library, std::unique_ptr<Api> api, void* device)
    : library_(library), api_(std::move(api)), device_(device) {}

NvmlDevice::~NvmlDevice() {
    api_->shutdown();
    dlclose(library_);
}

GpuMemoryReading NvmlDevice::read() const {
    const auto check = [&](NvmlReturn r, const char* call) {
        if (r != kNvmlSuccess) throw std::runtime_error(std::string(call) + " failed: " + api_->error_string(r));
    };
    GpuMemoryReading reading;
    NvmlMemory memory{};
    check(api_->memory_info(device_, &memory), "nvmlDeviceGetMemoryInfo");
    reading.used_bytes = static_cast<std::int64_t>(memory.used);

    // The list can grow between asking its size and reading it: ask again with the new size.
    std::vector<NvmlProcessInfoV2> processes(8);
    for (;;) {
        auto count = static_cast<unsigned int>(processes.size());
        const NvmlReturn r = api_->compute_processes(device_, &count, processes.data());
        if (r == kNvmlInsufficientSize) {
            processes.resize(count + 8);
            continue;
        }
        check(r, "nvmlDeviceGetComputeRunningProcesses_v2");
        processes.resize(count);
        break;
    }
    const auto self = static_cast<unsigned int>(::getpid());
    for (const NvmlProcessInfoV2& p : processes) {
        const std::int64_t bytes =
            p.used_gpu_memory == kNvmlValueNotAvailable ? 0 : static_cast<std::int64_t>(p.used_gpu_memory);
        if (p.pid == self) {
            reading.own_bytes = bytes;
        } else {
            ++reading.other_processes;
            reading.other_bytes += bytes;
        }
    }
    // A state the driver does not report leaves its field unset: it is not a failed reading.
    if (unsigned int mhz = 0; api_->clock_info && api_->clock_info(device_, kNvmlClockSm, &mhz) == kNvmlSuccess)
        reading.sm_clock_mhz = static_cast<int>(mhz);
    if (unsigned int mw = 0; api_->power_usage && api_->power_usage(device_, &mw) == kNvmlSuccess)
        reading.power_w = mw / 1000.0;
    if (unsigned int c = 0; api_->temperature && api_->temperature(device_, kNvmlTemperatureGpu, &c) == kNvmlSuccess)
        reading.temperature_c = static_cast<int>(c);
    if (unsigned long long events = 0; api_->clock_events && api_->clock_events(device_, &events) == kNvmlSuccess)
        reading.clock_events = events;
    return reading;
}

std::string gpu_uuid_string(const unsigned char (&b)[16]) {
    char text[48];
    std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                  b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return text;
}

}  // namespace sweetspot
