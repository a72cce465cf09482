#pragma once
// A GPU's memory as NVML (the driver's management library) reports it: the device's used memory,
// which counts every process and the driver's own reservations, and the memory of each process
// NVML lists on it; and beside it the state the GPU ran in (SM clock, power, temperature, what
// held its clocks down). NVML comes with the driver, not the CUDA toolkit, so it is opened at run
// time (dlopen): sweetspot builds without it and, where it is missing, loses only these numbers.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace sweetspot {

// One reading of one GPU.
struct GpuMemoryReading {
    std::int64_t used_bytes = 0;
    // This process's memory, where NVML lists its pid (inside a container with its own pid
    // namespace NVML lists host pids, and this process is not found).
    std::optional<std::int64_t> own_bytes;
    // The processes other than this one that NVML lists on the GPU, and their memory. Without this
    // process's pid in the list, every process listed counts here.
    int other_processes = 0;
    std::int64_t other_bytes = 0;
    // Where the driver answers (a GPU or driver may not support each query): the SM clock, the
    // power draw, the temperature, and NVML's clock event reasons (a bitmask, kClockEvent*).
    std::optional<int> sm_clock_mhz, temperature_c;
    std::optional<double> power_w;
    std::optional<std::uint64_t> clock_events;
};

// NVML's clock event reasons (nvmlClocksEventReason*): the GPU was idle, and the ones that held
// its clocks below what the work asked for.
inline constexpr std::uint64_t kClockEventGpuIdle = 0x1;
struct ClockEvent {
    std::uint64_t bit;
    const char* name;
};
inline constexpr ClockEvent kThrottlingClockEvents[] = {{0x4, "sw_power_cap"},
                                                        {0x8, "hw_slowdown"},
                                                        {0x20, "sw_thermal_slowdown"},
                                                        {0x40, "hw_thermal_slowdown"},
                                                        {0x80, "hw_power_brake_slowdown"}};

class NvmlDevice {
public:
    // The library sweetspot opens: libnvidia-ml.so.1, or the file SWEETSPOT_NVML_LIBRARY names
    // (the tests point it at a stand-in library).
    static std::string library_name();
    // The GPU whose UUID is `uuid` ("GPU-" and 32 hex digits in groups, as nvidia-smi -L prints
    // it), or nullptr with `why_not` saying why (no library, no such GPU, an NVML error).
    static std::unique_ptr<NvmlDevice> open(const std::string& uuid, std::string& why_not);

    NvmlDevice(const NvmlDevice&) = delete;
    NvmlDevice& operator=(const NvmlDevice&) = delete;
    ~NvmlDevice();

    // Throws std::runtime_error naming the NVML call that failed.
    GpuMemoryReading read() const;

    struct Api;  // the NVML entry points, resolved from the library

private:
    NvmlDevice(void* library, std::unique_ptr<Api> api, void* device);
    void* library_;
    std::unique_ptr<Api> api_;
    void* device_;
};

// The UUID string of a GPU from the 16 bytes CUDA reports (cudaDeviceProp::uuid), in NVML's form.
std::string gpu_uuid_string(const unsigned char (&bytes)[16]);

}  // namespace sweetspot
