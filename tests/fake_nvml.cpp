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

}  // extern "C"
