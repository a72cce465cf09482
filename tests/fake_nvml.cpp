// A stand-in for libnvidia-ml.so.1 with the entry points NvmlDevice uses, whose answers a test
// sets (fake_nvml_set): so the NVML path is tested on machines without a GPU or its driver.
#include <cstring>
#include <vector>

namespace {

struct ProcessInfo {  // nvmlProcessInfo_v2_t
    unsigned int pid;
    unsigned long long used_gpu_memory;
    unsigned int gpu_instance_id, compute_instance_id;
};

struct State {
    unsigned long long used = 0;
    std::vector<ProcessInfo> processes;
    int fail_memory_info = 0;  // the reading that fails, counted from 1 (0: none)
    int memory_reads = 0;
    // The GPU's state; `state_supported` false answers every state query NVML_ERROR_NOT_SUPPORTED.
    bool state_supported = true;
    unsigned int sm_clock_mhz = 0, power_mw = 0, temperature_c = 0;
    unsigned long long clock_events = 0;
};
State state;

const char kUuid[] = "GPU-00112233-4455-6677-8899-aabbccddeeff";
int device_token;

}  // namespace

extern "C" {

void fake_nvml_set(unsigned long long used, const unsigned int* pids, const unsigned long long* bytes, unsigned int n,
                   int fail_memory_info) {
    state.used = used;
    state.processes.clear();
    for (unsigned int i = 0; i < n; ++i) state.processes.push_back({pids[i], bytes[i], ~0u, ~0u});
    state.fail_memory_info = fail_memory_info;
    state.memory_reads = 0;
}

void fake_nvml_set_state(int supported, unsigned int sm_clock_mhz, unsigned int power_mw, unsigned int temperature_c,
                         unsigned long long clock_events) {
    state.state_supported = supported != 0;
    state.sm_clock_mhz = sm_clock_mhz;
    state.power_mw = power_mw;
    state.temperature_c = temperature_c;
    state.clock_events = clock_events;
}

int nvmlInit_v2() { return 0; }
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int r) { return r == 13 ? "Not Found" : r == 7 ? "Insufficient Size" : "Unknown Error"; }

int nvmlDeviceGetHandleByUUID(const char* uuid, void** device) {
    if (std::strcmp(uuid, kUuid) != 0) return 13;  // NVML_ERROR_NOT_FOUND
    *device = &device_token;
    return 0;
}

int nvmlDeviceGetMemoryInfo(void* device, unsigned long long* memory) {
    if (device != &device_token) return 999;
    if (++state.memory_reads == state.fail_memory_info) return 999;
    memory[0] = 80ull << 30;
    memory[2] = state.used;
    memory[1] = memory[0] - state.used;
    return 0;
}

int nvmlDeviceGetComputeRunningProcesses_v2(void* device, unsigned int* count, ProcessInfo* infos) {
    if (device != &device_token) return 999;
    const auto n = static_cast<unsigned int>(state.processes.size());
    if (*count < n) {
        *count = n;
        return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
    }
    *count = n;
    for (unsigned int i = 0; i < n; ++i) infos[i] = state.processes[i];
    return 0;
}

constexpr int kNotSupported = 3;  // NVML_ERROR_NOT_SUPPORTED

int nvmlDeviceGetClockInfo(void* device, int clock, unsigned int* mhz) {
    if (device != &device_token || clock != 1) return 999;  // the SM clock only
    if (!state.state_supported) return kNotSupported;
    *mhz = state.sm_clock_mhz;
    return 0;
}

int nvmlDeviceGetPowerUsage(void* device, unsigned int* mw) {
    if (device != &device_token) return 999;
    if (!state.state_supported) return kNotSupported;
    *mw = state.power_mw;
    return 0;
}

int nvmlDeviceGetTemperature(void* device, int sensor, unsigned int* c) {
    if (device != &device_token || sensor != 0) return 999;  // the GPU's sensor only
    if (!state.state_supported) return kNotSupported;
    *c = state.temperature_c;
    return 0;
}

int nvmlDeviceGetCurrentClocksEventReasons(void* device, unsigned long long* reasons) {
    if (device != &device_token) return 999;
    if (!state.state_supported) return kNotSupported;
    *reasons = state.clock_events;
    return 0;
}

}  // extern "C"
