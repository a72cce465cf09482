#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "harness/gpu_probe.hpp"
#include "kernels/cuda_check.hpp"

namespace sweetspot {
namespace {

constexpr std::size_t kProbeBytes = std::size_t{1} << 30;
constexpr int kProbeWarmups = 2;
constexpr int kProbeCopies = 10;

struct HostFree {
    void operator()(void* p) const { cudaFreeHost(p); }
};
struct DeviceFree {
    void operator()(void* p) const { cudaFree(p); }
};
struct EventDestroy {
    void operator()(CUevent_st* e) const { cudaEventDestroy(e); }
};
struct StreamDestroy {
    void operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
};

std::unique_ptr<CUevent_st, EventDestroy> make_event() {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    return std::unique_ptr<CUevent_st, EventDestroy>(e);
}

// Median GB/s of kProbeCopies copies of kProbeBytes from `src` to `dst` on `stream`.
double copy_bandwidth(void* dst, const void* src, cudaMemcpyKind kind, cudaStream_t stream) {
    auto start = make_event(), stop = make_event();
    std::vector<double> gbps;
    for (int i = 0; i < kProbeWarmups + kProbeCopies; ++i) {
        CUDA_CHECK(cudaEventRecord(start.get(), stream));
        CUDA_CHECK(cudaMemcpyAsync(dst, src, kProbeBytes, kind, stream));
        CUDA_CHECK(cudaEventRecord(stop.get(), stream));
        CUDA_CHECK(cudaEventSynchronize(stop.get()));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
        if (i >= kProbeWarmups) gbps.push_back(static_cast<double>(kProbeBytes) / (static_cast<double>(ms) * 1e6));
    }
    std::nth_element(gbps.begin(), gbps.begin() + static_cast<long>(gbps.size() / 2), gbps.end());
    return gbps[gbps.size() / 2];
}

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

}  // namespace

GpuFacts measure_gpu_facts(bool measure_link) {
    GpuFacts f;
    int count = 0;
    if (const auto err = cudaGetDeviceCount(&count); err != cudaSuccess || count == 0) {
        f.note = err != cudaSuccess ? std::string("no usable GPU: ") + cudaGetErrorString(err) : "no GPU found";
        return f;
    }
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    f.name = prop.name;
    f.memory_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
    int driver = 0, runtime = 0;
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    f.driver = "CUDA " + version_text(driver);
    f.runtime = version_text(runtime);
    if (!measure_link) return f;

    void* host_raw = nullptr;
    void* dev_raw = nullptr;
    CUDA_CHECK(cudaHostAlloc(&host_raw, kProbeBytes, cudaHostAllocDefault));
    std::unique_ptr<void, HostFree> host(host_raw);
    CUDA_CHECK(cudaMalloc(&dev_raw, kProbeBytes));
    std::unique_ptr<void, DeviceFree> dev(dev_raw);
    std::memset(host.get(), 0x5a, kProbeBytes);  // touched and non-zero: no lazy pages in the timing
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::unique_ptr<CUstream_st, StreamDestroy> stream(s);
    f.h2d_gbps = copy_bandwidth(dev.get(), host.get(), cudaMemcpyHostToDevice, stream.get());
    f.d2h_gbps = copy_bandwidth(host.get(), dev.get(), cudaMemcpyDeviceToHost, stream.get());
    return f;
}

}  // namespace sweetspot
