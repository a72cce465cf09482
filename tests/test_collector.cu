// The CUPTI collector on a GPU, with managed-memory and copy workloads whose traffic is known.
// The tests assert what the driver delivers exactly: kernels, NVTX ranges, pinned copies, no
// traffic for memory already prefetched, the CPU faults and device-to-host migrations of the host
// reading pages back.
//
// What it does not deliver exactly is measured, not asserted: the host-to-device migrations of
// managed memory, driven by GPU faults or by prefetches, and GPU page-fault records. On the H100
// and H200 VMs (driver 580.159.04, CUDA 13.0) 0-90 % of the fault-driven bytes were reported,
// varying from run to run and with when the counters were configured and enabled
// (docs/benchmarks-history.md, "Fault-driven migrations"); the tests print what they see.

#include <catch2/catch_test_macros.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

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

// Managed memory first touched on the host, as cells place their weights.
struct HostTouched {
    ManagedMemory managed;
    std::uint32_t* data;
    HostTouched() : managed(allocate_managed(kBytes, false)), data(reinterpret_cast<std::uint32_t*>(managed.get())) {
        std::memset(data, 0x5a, static_cast<std::size_t>(kBytes));
    }
};

void prefetch(const std::uint32_t* data, cudaMemLocation to, cudaStream_t stream) {
    CUDA_CHECK(cudaMemPrefetchAsync(data, static_cast<std::size_t>(kBytes), to, 0, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

cudaMemLocation on_device() { return cudaMemLocation{cudaMemLocationTypeDevice, current_device()}; }

int kernels_named(const CellEvents& e, const std::string& name) {
    int n = 0;
    for (const auto& k : e.kernels) n += k.name.find(name) != std::string::npos;
    return n;
}

}  // namespace

TEST_CASE("the collector records every kernel and the NVTX ranges around them", "[gpu][collector]") {
    require_gpu();
    prepare_nvtx_injection();
    CUDA_CHECK(cudaFree(nullptr));  // the runtime must be up before UM counters are enabled
    const CudaStream stream;
    const DeviceMemory out = allocate_device(sizeof(std::uint32_t));
    const HostTouched weights;
    const CellEvents e = run_traced(weights.data, reinterpret_cast<std::uint32_t*>(out.get()), stream.get());
    INFO("UM profiling: " << (e.um_supported ? "supported" : e.um_note));
    CHECK(e.um_supported);
    CHECK(e.dropped_records == 0);
    CHECK(kernels_named(e, "read_all") == kLaunches);
    int ranges = 0;
    for (const auto& r : e.ranges) ranges += r.text == "micro-workload" && r.end_ns > r.start_ns;
    REQUIRE(ranges == 1);

    // What projects the range onto the GPU (nvtx_gpu_proj_trace): each kernel's launch call, found
    // by its correlation id, was made inside the range on the range's thread.
    const auto range = *std::find_if(e.ranges.begin(), e.ranges.end(),
                                     [](const RangeRecord& r) { return r.text == "micro-workload"; });
    int launched_in_range = 0;
    for (const auto& k : e.kernels) {
        if (k.name.find("read_all") == std::string::npos) continue;
        for (const auto& call : e.api_calls)
            if (call.correlation_id == k.correlation_id && call.thread_id == range.thread_id &&
                call.start_ns >= range.start_ns && call.start_ns <= range.end_ns) {
                ++launched_in_range;
                break;
            }
    }
    CHECK(launched_in_range == kLaunches);
}

TEST_CASE("pinned copies are recorded with their exact size and direction", "[gpu][collector]") {
    require_gpu();
    prepare_nvtx_injection();
    CUDA_CHECK(cudaFree(nullptr));
    const CudaStream stream;
    constexpr std::int64_t kCopyBytes = std::int64_t{48} << 20;
    const PinnedHostMemory host = allocate_pinned(kCopyBytes);
    const DeviceMemory device = allocate_device(kCopyBytes);
    std::memset(host.get(), 0x3c, static_cast<std::size_t>(kCopyBytes));
    CuptiCollector collector;
    collector.start();
    CUDA_CHECK(cudaMemcpyAsync(device.get(), host.get(), kCopyBytes, cudaMemcpyHostToDevice, stream.get()));
    CUDA_CHECK(cudaMemcpyAsync(host.get(), device.get(), kCopyBytes / 2, cudaMemcpyDeviceToHost, stream.get()));
    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    const CellEvents e = collector.finish();
    CHECK(e.dropped_records == 0);
    REQUIRE(e.memcpys.size() == 2);
    constexpr std::int32_t kHtoD = 1, kDtoH = 2;  // CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, _DTOH
    CHECK(e.memcpys[0].copy_kind == kHtoD);
    CHECK(e.memcpys[0].bytes == kCopyBytes);
    CHECK(e.memcpys[1].copy_kind == kDtoH);
    CHECK(e.memcpys[1].bytes == kCopyBytes / 2);
}

TEST_CASE("memory prefetched to the GPU neither migrates nor faults when kernels read it", "[gpu][collector]") {
    require_gpu();
    prepare_nvtx_injection();
    CUDA_CHECK(cudaFree(nullptr));
    const CudaStream stream;
    const DeviceMemory out = allocate_device(sizeof(std::uint32_t));
    CuptiCollector collector;  // configured before the allocation, as a cell does
    const HostTouched weights;
    collector.start();
    prefetch(weights.data, on_device(), stream.get());
    const CellEvents e = collector.finish();
    CHECK(e.dropped_records == 0);
    // Not exact either: 483,590,144 bytes reported for these 268,435,456 on the H100 (2026-11-23).
    WARN("prefetch-driven migrations: " << migrated(e, kUnifiedHtoD) << " of " << kBytes << " bytes reported");

    const CellEvents resident = run_traced(weights.data, reinterpret_cast<std::uint32_t*>(out.get()), stream.get());
    CHECK(kernels_named(resident, "read_all") == kLaunches);
    CHECK(migrated(resident, kUnifiedHtoD) == 0);
    CHECK(gpu_faults(resident) == 0);
}

// The host reading managed pages that live on the GPU: CPU faults (one record each, the value a
// PC) and device-to-host migration of every page read.
TEST_CASE("the collector records CPU faults and device-to-host migrations when the host reads managed memory back",
          "[gpu][collector]") {
    require_gpu();
    prepare_nvtx_injection();
    CUDA_CHECK(cudaFree(nullptr));
    const CudaStream stream;
    const HostTouched weights;
    const std::uint32_t* data = weights.data;
    prefetch(data, on_device(), stream.get());
    CuptiCollector collector;
    collector.start();
    std::uint64_t sum = 0;
    for (std::int64_t i = 0; i < kBytes / 4; i += 1024) sum += data[i];  // one word per 4 KiB page
    const CellEvents e = collector.finish();
    CHECK(sum == static_cast<std::uint64_t>(kBytes / 4096) * 0x5a5a5a5au);
    CHECK(e.dropped_records == 0);
    CHECK(migrated(e, kUnifiedDtoH) >= kBytes * 95 / 100);
    CHECK(migrated(e, kUnifiedDtoH) <= kBytes * 105 / 100);
    CHECK(e.cpu_page_faults.size() > 0);
}

// How a uvm cell's iterations see their weights: on the GPU once, migrated back to the host by
// the residency reset, then faulted in again by the kernels. Fault records arrived for such pages
// in some runs (599-631 faults) and not in others (none on the H100, 2026-11-23): measured.
TEST_CASE("pages that were on the GPU before: kernels recorded, faults measured", "[gpu][collector]") {
    require_gpu();
    prepare_nvtx_injection();
    CUDA_CHECK(cudaFree(nullptr));
    const CudaStream stream;
    const DeviceMemory out = allocate_device(sizeof(std::uint32_t));
    const HostTouched weights;
    read_all_pages(weights.data, reinterpret_cast<std::uint32_t*>(out.get()), stream.get(), 1);  // a first GPU use
    prefetch(weights.data, cudaMemLocation{cudaMemLocationTypeHost, 0}, stream.get());
    const CellEvents e = run_traced(weights.data, reinterpret_cast<std::uint32_t*>(out.get()), stream.get());
    CHECK(e.dropped_records == 0);
    CHECK(kernels_named(e, "read_all") == kLaunches);
    WARN("re-faulted after migrating back: " << gpu_faults(e) << " GPU faults in " << e.gpu_page_faults.size()
                                             << " groups, " << migrated(e, kUnifiedHtoD) << " bytes host to device");
}

// The measurement the tests above leave out: how many of the bytes that GPU faults migrate host
// to device the driver reports, with the counters configured and enabled at the three moments a
// user of CUPTI might choose. Printed for docs/benchmarks-history.md; asserted is only what is exact.
TEST_CASE("fault-driven host-to-device migrations: the share of the bytes reported", "[gpu][collector]") {
    require_gpu();
    prepare_nvtx_injection();
    CUDA_CHECK(cudaFree(nullptr));
    const CudaStream stream;
    const DeviceMemory out = allocate_device(sizeof(std::uint32_t));
    auto* sink = reinterpret_cast<std::uint32_t*>(out.get());
    const auto report = [](const char* when, const CellEvents& e) {
        WARN("fault-driven migrations, " << when << ": " << migrated(e, kUnifiedHtoD) << " of " << kBytes
                                         << " bytes reported (" << 100 * migrated(e, kUnifiedHtoD) / kBytes << " %), "
                                         << gpu_faults(e) << " GPU faults in " << e.gpu_page_faults.size() << " groups");
        CHECK(e.dropped_records == 0);
        CHECK(kernels_named(e, "read_all") == kLaunches);
    };
    {
        const HostTouched weights;  // the collector configured after the allocation
        report("configured after the allocation", run_traced(weights.data, sink, stream.get()));
    }
    {
        CuptiCollector collector;  // configured before the allocation, enabled after: how cells do it
        const HostTouched weights;
        collector.start();
        read_all_pages(weights.data, sink, stream.get());
        report("configured before, enabled after the allocation", collector.finish());
    }
    {
        CuptiCollector collector;
        collector.start();  // enabled before the allocation
        const HostTouched weights;
        read_all_pages(weights.data, sink, stream.get());
        report("enabled before the allocation", collector.finish());
    }
}
