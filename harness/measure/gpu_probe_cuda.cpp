#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "harness/measure/gpu_probe.hpp"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"

namespace sweetspot {
namespace {

constexpr std::size_t kProbeBytes = std::size_t{1} << 30;
constexpr int kProbeWarmups = 2;
constexpr int kProbeCopies = 10;

// Median GB/s of kProbeCopies copies of kProbeBytes from `src` to `dst` on `stream`.
double copy_bandwidth(void* dst, const void* src, cudaMemcpyKind kind, cudaStream_t stream) {
    const CudaEvent start(CudaEvent::Timing::on), stop(CudaEvent::Timing::on);
    std::vector<double> gbps;
    for (int i = 0; i < kProbeWarmups + kProbeCopies; ++i) {
        start.record(stream);
        CUDA_CHECK(cudaMemcpyAsync(dst, src, kProbeBytes, kind, stream));
        stop.record(stream);
        stop.synchronize();
        const double ms = stop.ms_since(start);
        if (i >= kProbeWarmups) gbps.push_back(static_cast<double>(kProbeBytes) / (ms * 1e6));
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

    const PinnedHostMemory host = allocate_pinned(kProbeBytes);
    const DeviceMemory dev = allocate_device(kProbeBytes);
    std::memset(host.get(), 0x5a, kProbeBytes);  // touched and non-zero: no lazy pages in the timing
    const CudaStream stream;
    f.h2d_gbps = copy_bandwidth(dev.get(), host.get(), cudaMemcpyHostToDevice, stream.get());
    f.d2h_gbps = copy_bandwidth(host.get(), dev.get(), cudaMemcpyDeviceToHost, stream.get());
    return f;
}

}  // namespace sweetspot
