// The CUPTI collector on a GPU, with a managed-memory workload whose traffic is known: a kernel
// reading 256 MiB of managed memory first touched on the host must migrate ~256 MiB host to
// device and fault on demand; after a full prefetch it must neither migrate nor fault; the host
// reading the pages back must fault on the CPU and migrate them device to host.
//
// What the H100 and H200 VMs used so far show (driver 580.159.04, CUDA 13.0, 2026-11-22; the
// same on both): kernels, NVTX ranges, prefetch-driven migrations, CPU faults and device-to-host
// migrations are recorded exactly. Host-to-device migrations driven by GPU faults are not: with
// the counters configured before the allocation and enabled after it (how cells use them) 70-83 %
// of the bytes arrive, varying from run to run (and on one fresh machine none at all for the first
// test's pass, 80 % for the next), and nothing more after later flushes, in either
// counter scope; enabled before the allocation, 217 to 447 MB for 256 MiB; configured after the
// allocation, none. GPU page-fault records arrive for pages that had been on the GPU and were
// migrated back to the host (603-631 faults here, and in every uvm cell, whose residency is reset
// that way), never for the first GPU touch of pages that were only ever on the host. The cases
// that depend on these are [!mayfail]: reported, not failing the run.

#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

#include "harness/collect/cupti_collector.hpp"
#include "harness/collect/cupti_records.hpp"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/managed_memory.hpp"
#include "kernels/compute/nvtx.hpp"
#include "gpu_test_support.hpp"

using namespace sweetspot;
using sweetspot::test::require_gpu;

namespace {

constexpr std::int64_t kBytes = std::int64_t{256} << 20;
constexpr int kLaunches = 3;

// Reads every word (grid-stride) so that every page is touched by the GPU.
__global__ void read_all(const std::uint32_t* data, std::int64_t n, std::uint32_t* out) {
    std::uint32_t acc = 0;
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
        acc ^= data[i];
    if (acc == 0xFFFFFFFFu) *out = acc;  // keeps the loads; never true for the data below
}

// `launches` passes of read_all over the kBytes at `data`, waited for.
void read_all_pages(const std::uint32_t* data, std::uint32_t* out, cudaStream_t stream, int launches = kLaunches) {
    for (int i = 0; i < launches; ++i) {
        read_all<<<528, 256, 0, stream>>>(data, kBytes / 4, out);
        CUDA_CHECK_LAUNCH();
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

CellEvents run_traced(const std::uint32_t* data, std::uint32_t* out, cudaStream_t stream) {
    CuptiCollector collector;
    collector.start();
    {
        const NvtxRange range("micro-workload");
        read_all_pages(data, out, stream);
    }
    return collector.finish();
}

std::int64_t migrated(const CellEvents& e, std::int32_t kind) {
    std::int64_t bytes = 0;
    for (const auto& m : e.memcpys)
        if (m.copy_kind == kind) bytes += m.bytes;
    return bytes;
}

std::int64_t gpu_faults(const CellEvents& e) {
    std::int64_t n = 0;
    for (const auto& f : e.gpu_page_faults) n += f.faults;
    return n;
}

}  // namespace

TEST_CASE("the collector records kernels, NVTX ranges and known Unified Memory traffic", "[gpu][collector][!mayfail]") {
    require_gpu();
    prepare_nvtx_injection();
    CUDA_CHECK(cudaFree(nullptr));  // the runtime must be up before UM counters are enabled
    const CudaStream stream;
    const ManagedMemory managed(allocate_managed(kBytes, false));
    const DeviceMemory out = allocate_device(sizeof(std::uint32_t));
    auto* data = reinterpret_cast<std::uint32_t*>(managed.get());
    std::memset(data, 0x5a, static_cast<std::size_t>(kBytes));  // first touch on the host

    const CellEvents on_demand = run_traced(data, reinterpret_cast<std::uint32_t*>(out.get()), stream.get());
    INFO("UM profiling: " << (on_demand.um_supported ? "supported" : on_demand.um_note));
    REQUIRE(on_demand.um_supported);
    CHECK(on_demand.dropped_records == 0);
    const auto htod = migrated(on_demand, kUnifiedHtoD);
    WARN("on demand: " << htod << " bytes host to device in " << on_demand.memcpys.size() << " records, "
                       << gpu_faults(on_demand) << " GPU faults in " << on_demand.gpu_page_faults.size()
                       << " groups, " << on_demand.cpu_page_faults.size() << " CPU faults");
    CHECK(htod >= kBytes * 95 / 100);
    CHECK(htod <= kBytes * 105 / 100);
    CHECK(gpu_faults(on_demand) > 0);
    int launches = 0;
    for (const auto& k : on_demand.kernels) launches += k.name.find("read_all") != std::string::npos;
    CHECK(launches == kLaunches);
    bool range_seen = false;
    for (const auto& r : on_demand.ranges) range_seen |= r.text == "micro-workload" && r.end_ns > r.start_ns;
    CHECK(range_seen);

    // Resident after a full prefetch: the same kernels neither migrate nor fault.
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaMemPrefetchAsync(data, static_cast<std::size_t>(kBytes),
                                    cudaMemLocation{cudaMemLocationTypeDevice, device}, 0, stream.get()));
    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    const CellEvents resident = run_traced(data, reinterpret_cast<std::uint32_t*>(out.get()), stream.get());
    WARN("after prefetch: " << migrated(resident, kUnifiedHtoD) << " bytes host to device, " << gpu_faults(resident)
                            << " GPU faults");
    CHECK(migrated(resident, kUnifiedHtoD) < kBytes / 100);
    CHECK(gpu_faults(resident) <= gpu_faults(on_demand) / 100);
}

TEST_CASE("Unified Memory traffic of an allocation made while the collector runs", "[gpu][collector][!mayfail]") {
    require_gpu();
    prepare_nvtx_injection();
    CUDA_CHECK(cudaFree(nullptr));
    const CudaStream stream;
    const DeviceMemory out = allocate_device(sizeof(std::uint32_t));
    CuptiCollector collector;
    collector.start();
    const ManagedMemory managed(allocate_managed(kBytes, false));
    auto* data = reinterpret_cast<std::uint32_t*>(managed.get());
    std::memset(data, 0x5a, static_cast<std::size_t>(kBytes));
    read_all_pages(data, reinterpret_cast<std::uint32_t*>(out.get()), stream.get());
    const CellEvents e = collector.finish();
    WARN("allocated under collection: " << migrated(e, kUnifiedHtoD) << " bytes host to device, " << gpu_faults(e)
                                        << " GPU faults, " << e.cpu_page_faults.size() << " CPU faults");
    CHECK(migrated(e, kUnifiedHtoD) >= kBytes * 95 / 100);
    CHECK(gpu_faults(e) > 0);
}

// How cells use the collector: configured before the managed allocation, started only for the
// traced iterations (so the timed ones run without collection).
TEST_CASE("Unified Memory traffic with the counters configured before the allocation, enabled after",
          "[gpu][collector][!mayfail]") {
    require_gpu();
    prepare_nvtx_injection();
    CUDA_CHECK(cudaFree(nullptr));
    const CudaStream stream;
    const DeviceMemory out = allocate_device(sizeof(std::uint32_t));
    CuptiCollector collector;
    const ManagedMemory managed(allocate_managed(kBytes, false));
    auto* data = reinterpret_cast<std::uint32_t*>(managed.get());
    std::memset(data, 0x5a, static_cast<std::size_t>(kBytes));
    collector.start();
    read_all_pages(data, reinterpret_cast<std::uint32_t*>(out.get()), stream.get());
    const CellEvents e = collector.finish();
    WARN("configured before, enabled after the allocation: " << migrated(e, kUnifiedHtoD) << " bytes host to device, "
                                                              << gpu_faults(e) << " GPU faults");
    CHECK(migrated(e, kUnifiedHtoD) >= kBytes * 95 / 100);
    CHECK(gpu_faults(e) > 0);
}

// The host reading managed pages that live on the GPU: CPU faults (one record each, the value a
// PC) and device-to-host migration of every page read.
TEST_CASE("the collector records CPU faults and device-to-host migrations when the host reads managed memory back",
          "[gpu][collector]") {
    require_gpu();
    prepare_nvtx_injection();
    CUDA_CHECK(cudaFree(nullptr));
    const CudaStream stream;
    const ManagedMemory managed(allocate_managed(kBytes, false));
    auto* data = reinterpret_cast<std::uint32_t*>(managed.get());
    std::memset(data, 0x5a, static_cast<std::size_t>(kBytes));
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaMemPrefetchAsync(data, static_cast<std::size_t>(kBytes),
                                    cudaMemLocation{cudaMemLocationTypeDevice, device}, 0, stream.get()));
    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    CuptiCollector collector;
    collector.start();
    std::uint64_t sum = 0;
    for (std::int64_t i = 0; i < kBytes / 4; i += 1024) sum += data[i];  // one word per 4 KiB page
    const CellEvents e = collector.finish();
    CHECK(sum == static_cast<std::uint64_t>(kBytes / 4096) * 0x5a5a5a5au);
    WARN("host read-back: " << migrated(e, kUnifiedDtoH) << " bytes device to host, " << e.cpu_page_faults.size()
                            << " CPU faults");
    CHECK(e.dropped_records == 0);
    CHECK(migrated(e, kUnifiedDtoH) >= kBytes * 95 / 100);
    CHECK(migrated(e, kUnifiedDtoH) <= kBytes * 105 / 100);
    CHECK(e.cpu_page_faults.size() > 0);
}

// How a uvm cell's iterations see their weights: on the GPU once, migrated back to the host by
// the residency reset, then faulted in again by the kernels.
TEST_CASE("GPU faults on managed memory migrated back to the host after a first GPU use", "[gpu][collector][!mayfail]") {
    require_gpu();
    prepare_nvtx_injection();
    CUDA_CHECK(cudaFree(nullptr));
    const CudaStream stream;
    const ManagedMemory managed(allocate_managed(kBytes, false));
    const DeviceMemory out = allocate_device(sizeof(std::uint32_t));
    auto* data = reinterpret_cast<std::uint32_t*>(managed.get());
    std::memset(data, 0x5a, static_cast<std::size_t>(kBytes));
    read_all_pages(data, reinterpret_cast<std::uint32_t*>(out.get()), stream.get(), 1);  // a first GPU use
    CUDA_CHECK(cudaMemPrefetchAsync(data, static_cast<std::size_t>(kBytes), cudaMemLocation{cudaMemLocationTypeHost, 0},
                                    0, stream.get()));
    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    const CellEvents e = run_traced(data, reinterpret_cast<std::uint32_t*>(out.get()), stream.get());
    WARN("re-faulted after migrating back: " << migrated(e, kUnifiedHtoD) << " bytes host to device, " << gpu_faults(e)
                                             << " GPU faults in " << e.gpu_page_faults.size() << " groups");
    CHECK(gpu_faults(e) > 0);
    CHECK(migrated(e, kUnifiedHtoD) >= kBytes * 95 / 100);
}
