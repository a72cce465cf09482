#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "harness/measure/gpu_probe.hpp"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/fault_in_kernel.hpp"
#include "kernels/compute/managed_memory.hpp"

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

// The managed-memory probe: one range about the size of a large model's layer (GPT-2 1.5B's fp32
// layer is 118 MB, GPT-3 6.7B's 805 MB), each operation timed kManagedCalls times after one
// warm-up, medians kept.
constexpr std::size_t kManagedBytes = std::size_t{512} << 20;
constexpr int kManagedCalls = 5;

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
    return v[v.size() / 2];
}

// The samples of one operation: its rate and the time each call held the calling thread.
class OperationSamples {
public:
    explicit OperationSamples(std::string operation) : operation_(std::move(operation)) {}
    void add(double active_ms, double host_ms) {
        gbps_.push_back(static_cast<double>(kManagedBytes) / (active_ms * 1e6));
        host_ms_.push_back(host_ms);
    }
    ManagedRate rate() const {
        return ManagedRate{operation_, static_cast<std::int64_t>(kManagedBytes), static_cast<int>(gbps_.size()),
                           median(gbps_), median(host_ms_)};
    }

private:
    std::string operation_;
    std::vector<double> gbps_, host_ms_;
};

// A stream-ordered operation: the GPU's time between events around it, and the host's time in
// the call itself.
template <class Call>
void time_on_stream(OperationSamples* samples, cudaStream_t stream, Call call) {
    const CudaEvent start(CudaEvent::Timing::on), stop(CudaEvent::Timing::on);
    start.record(stream);
    const auto t0 = Clock::now();
    call();
    const auto t1 = Clock::now();
    stop.record(stream);
    stop.synchronize();
    if (samples) samples->add(stop.ms_since(start), ms_between(t0, t1));
}

// The operations the UVM backends are made of, on one managed range that starts on the host:
//   prefetch_to_gpu               cudaMemPrefetchAsync to the GPU, no advice (`uvm` with prefetch)
//   evict_to_host                 cudaMemPrefetchAsync back to the host: eviction by migration
//   read_mostly_prefetch_to_gpu   the same prefetch of a read-mostly range whose GPU copy was
//                                 dropped: the steady state of `uvm-prefetch`, after the first
//   drop_read_mostly_copy         dropping that GPU copy (advice, not stream-ordered: host time)
//   fault_in                      a kernel reading the host-resident range, pages migrating on
//                                 first touch (`uvm` without prefetch)
std::vector<ManagedRate> measure_managed_rates(int device) {
    const ManagedMemory range = allocate_managed_memory(static_cast<std::int64_t>(kManagedBytes), false);
    std::memset(range.get(), 0x5a, kManagedBytes);  // first touched, and so resident, on the host
    const CudaStream stream;
    const cudaMemLocation gpu{cudaMemLocationTypeDevice, device}, host{cudaMemLocationTypeHost, 0};
    const auto prefetch = [&](cudaMemLocation to) {
        CUDA_CHECK(cudaMemPrefetchAsync(range.get(), kManagedBytes, to, 0, stream.get()));
    };
    OperationSamples to_gpu("prefetch_to_gpu"), to_host("evict_to_host"), read_mostly("read_mostly_prefetch_to_gpu"),
        drop("drop_read_mostly_copy"), fault("fault_in");

    for (int i = 0; i <= kManagedCalls; ++i) {  // call 0 warms up
        time_on_stream(i > 0 ? &to_gpu : nullptr, stream.get(), [&] { prefetch(gpu); });
        time_on_stream(i > 0 ? &to_host : nullptr, stream.get(), [&] { prefetch(host); });
    }

    const DeviceMemory sink = allocate_device(sizeof(float));
    const auto* data = reinterpret_cast<const float*>(range.get());
    const auto n = static_cast<std::int64_t>(kManagedBytes / sizeof(float));
    for (int i = 0; i <= kManagedCalls; ++i) {
        time_on_stream(i > 0 ? &fault : nullptr, stream.get(), [&] {
            gpu::launch_read_every_element(data, n, reinterpret_cast<float*>(sink.get()), stream.get());
        });
        time_on_stream(nullptr, stream.get(), [&] { prefetch(host); });
    }

    // As ManagedWeights does: preferred on the host, read-mostly; the first prefetch makes the GPU
    // copy, and unsetting and setting ReadMostly drops it.
    CUDA_CHECK(cudaMemAdvise(range.get(), kManagedBytes, cudaMemAdviseSetPreferredLocation, host));
    CUDA_CHECK(cudaMemAdvise(range.get(), kManagedBytes, cudaMemAdviseSetReadMostly, host));
    for (int i = 0; i <= kManagedCalls; ++i) {
        time_on_stream(i > 0 ? &read_mostly : nullptr, stream.get(), [&] { prefetch(gpu); });
        const auto t0 = Clock::now();
        CUDA_CHECK(cudaMemAdvise(range.get(), kManagedBytes, cudaMemAdviseUnsetReadMostly, host));
        CUDA_CHECK(cudaMemAdvise(range.get(), kManagedBytes, cudaMemAdviseSetReadMostly, host));
        const double drop_ms = ms_between(t0, Clock::now());
        if (i > 0) drop.add(drop_ms, drop_ms);
    }
    return {to_gpu.rate(), read_mostly.rate(), to_host.rate(), drop.rate(), fault.rate()};
}

// The range as `n` equal pieces (kManagedBytes is a multiple of n · 2 MiB, so no piece shares a
// migration chunk with the next): the pointers and sizes the batch calls take.
struct Pieces {
    std::vector<void*> pointers;
    std::vector<std::size_t> sizes;
};
Pieces pieces_of(void* range, int n) {
    Pieces p;
    const std::size_t size = kManagedBytes / static_cast<std::size_t>(n);
    for (int i = 0; i < n; ++i) {
        p.pointers.push_back(static_cast<char*>(range) + static_cast<std::size_t>(i) * size);
        p.sizes.push_back(size);
    }
    return p;
}

// How many pieces a batch call gets, and how many streams a chunked prefetch uses: a layer's
// tensors, and the look-ahead streams a backend would spread them over.
constexpr int kBatchPieces = 8;
constexpr int kChunkStreams = 4;

// The newer managed-memory calls (CUDA 12.8 on), on a range like the one above, to see whether
// the UVM backends' per-unit cudaMemPrefetchAsync leaves rate or host time on the table:
//   batch_prefetch_to_gpu              cudaMemPrefetchBatchAsync of the range as kBatchPieces ranges in one call
//   batch_evict_to_host                the same back to the host
//   chunked_prefetch_to_gpu            the range as kChunkStreams chunks, each prefetched on a stream of
//                                      its own (the GPU's time from the first start to the last end)
//   batch_read_mostly_prefetch_to_gpu  the batch prefetch of the read-mostly range whose GPU copy was
//                                      dropped (uvm-prefetch's steady state)
//   discard_on_gpu                     cudaMemDiscardBatchAsync of the range resident on the GPU: what
//                                      freeing dead managed activations costs
//   discard_and_prefetch_to_gpu        cudaMemDiscardAndPrefetchBatchAsync of the host-resident range
//                                      to the GPU: room for activations without moving stale contents
// Each timed kManagedCalls times after one warm-up, as measure_managed_rates does.
std::vector<ManagedRate> measure_newer_managed_calls(int device) {
    const ManagedMemory range = allocate_managed_memory(static_cast<std::int64_t>(kManagedBytes), false);
    std::memset(range.get(), 0x5a, kManagedBytes);
    const CudaStream stream;
    std::vector<CudaStream> chunk_streams(kChunkStreams);
    cudaMemLocation gpu{cudaMemLocationTypeDevice, device}, host{cudaMemLocationTypeHost, 0};
    Pieces batch = pieces_of(range.get(), kBatchPieces);
    std::size_t first_piece = 0;  // every piece goes to the one location
    const auto batch_prefetch = [&](cudaMemLocation& to) {
        CUDA_CHECK(cudaMemPrefetchBatchAsync(batch.pointers.data(), batch.sizes.data(), batch.pointers.size(), &to,
                                             &first_piece, 1, 0, stream.get()));
    };
    const auto plain_prefetch = [&](cudaMemLocation to) {
        CUDA_CHECK(cudaMemPrefetchAsync(range.get(), kManagedBytes, to, 0, stream.get()));
    };
    OperationSamples batch_to_gpu("batch_prefetch_to_gpu"), batch_to_host("batch_evict_to_host"),
        chunked("chunked_prefetch_to_gpu"), batch_read_mostly("batch_read_mostly_prefetch_to_gpu"),
        discard("discard_on_gpu"), discard_prefetch("discard_and_prefetch_to_gpu");

    for (int i = 0; i <= kManagedCalls; ++i) {
        time_on_stream(i > 0 ? &batch_to_gpu : nullptr, stream.get(), [&] { batch_prefetch(gpu); });
        time_on_stream(i > 0 ? &batch_to_host : nullptr, stream.get(), [&] { batch_prefetch(host); });
    }

    // The chunks' streams start after an event on the main stream and the main stream waits for
    // each of them, so the events around the call time all the chunks.
    const Pieces chunks = pieces_of(range.get(), kChunkStreams);
    std::vector<CudaEvent> chunk_done(kChunkStreams);
    const CudaEvent chunks_start;
    for (int i = 0; i <= kManagedCalls; ++i) {
        time_on_stream(i > 0 ? &chunked : nullptr, stream.get(), [&] {
            chunks_start.record(stream.get());
            for (int c = 0; c < kChunkStreams; ++c) {
                const cudaStream_t s = chunk_streams[static_cast<std::size_t>(c)].get();
                chunks_start.wait_on(s);
                CUDA_CHECK(cudaMemPrefetchAsync(chunks.pointers[static_cast<std::size_t>(c)],
                                                chunks.sizes[static_cast<std::size_t>(c)], gpu, 0, s));
                chunk_done[static_cast<std::size_t>(c)].record(s);
                chunk_done[static_cast<std::size_t>(c)].wait_on(stream.get());
            }
        });
        time_on_stream(nullptr, stream.get(), [&] { plain_prefetch(host); });
    }

    CUDA_CHECK(cudaMemAdvise(range.get(), kManagedBytes, cudaMemAdviseSetPreferredLocation, host));
    CUDA_CHECK(cudaMemAdvise(range.get(), kManagedBytes, cudaMemAdviseSetReadMostly, host));
    for (int i = 0; i <= kManagedCalls; ++i) {
        time_on_stream(i > 0 ? &batch_read_mostly : nullptr, stream.get(), [&] { batch_prefetch(gpu); });
        CUDA_CHECK(cudaMemAdvise(range.get(), kManagedBytes, cudaMemAdviseUnsetReadMostly, host));
        CUDA_CHECK(cudaMemAdvise(range.get(), kManagedBytes, cudaMemAdviseSetReadMostly, host));
    }
    CUDA_CHECK(cudaMemAdvise(range.get(), kManagedBytes, cudaMemAdviseUnsetReadMostly, host));

    // Discarding, last: the range's contents are indeterminate from the first discard on.
    for (int i = 0; i <= kManagedCalls; ++i) {
        time_on_stream(nullptr, stream.get(), [&] { plain_prefetch(gpu); });
        time_on_stream(i > 0 ? &discard : nullptr, stream.get(), [&] {
            CUDA_CHECK(cudaMemDiscardBatchAsync(batch.pointers.data(), batch.sizes.data(), batch.pointers.size(), 0,
                                                stream.get()));
        });
        time_on_stream(nullptr, stream.get(), [&] { plain_prefetch(host); });
        time_on_stream(i > 0 ? &discard_prefetch : nullptr, stream.get(), [&] {
            CUDA_CHECK(cudaMemDiscardAndPrefetchBatchAsync(batch.pointers.data(), batch.sizes.data(),
                                                           batch.pointers.size(), &gpu, &first_piece, 1, 0,
                                                           stream.get()));
        });
    }
    return {batch_to_gpu.rate(),      batch_to_host.rate(), chunked.rate(), batch_read_mostly.rate(),
            discard.rate(),           discard_prefetch.rate()};
}

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

}  // namespace

GpuFacts measure_gpu_facts(bool measure_link) {
    GpuFacts f;
    if (f.note = gpu_unavailable_reason(); !f.note.empty()) return f;
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    f.device_count = count;
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    f.name = prop.name;
    f.memory_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
    int driver = 0, runtime = 0;
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    f.driver = "CUDA " + version_text(driver);
    f.runtime = version_text(runtime);
    const auto attribute = [](cudaDeviceAttr a) {
        int v = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&v, a, 0));
        return v;
    };
    f.managed.concurrent_managed_access = attribute(cudaDevAttrConcurrentManagedAccess);
    f.managed.pageable_memory_access = attribute(cudaDevAttrPageableMemoryAccess);
    f.managed.pageable_memory_access_uses_host_page_tables = attribute(cudaDevAttrPageableMemoryAccessUsesHostPageTables);
    f.managed.direct_managed_mem_access_from_host = attribute(cudaDevAttrDirectManagedMemAccessFromHost);
    if (!measure_link) return f;

    const PinnedHostMemory host = allocate_pinned(kProbeBytes);
    const DeviceMemory dev = allocate_device(kProbeBytes);
    std::memset(host.get(), 0x5a, kProbeBytes);  // touched and non-zero: no lazy pages in the timing
    const CudaStream stream;
    f.h2d_gbps = copy_bandwidth(dev.get(), host.get(), cudaMemcpyHostToDevice, stream.get());
    f.d2h_gbps = copy_bandwidth(host.get(), dev.get(), cudaMemcpyDeviceToHost, stream.get());
    // Only where the GPU migrates managed pages on demand, and only within the free memory (the
    // managed-memory guard refuses more).
    if (*f.managed.concurrent_managed_access == 1) {
        try {
            f.managed_rates = measure_managed_rates(0);
        } catch (const ManagedMemoryRefused& e) {
            f.note = std::string("managed-memory probe not run: ") + e.what();
        }
        // The newer calls apart: where this driver lacks or refuses one, the run keeps the rates
        // above and says why these are missing.
        if (!f.managed_rates.empty()) {
            try {
                for (ManagedRate& r : measure_newer_managed_calls(0)) f.managed_rates.push_back(std::move(r));
            } catch (const std::exception& e) {
                f.note = std::string("the newer managed-memory calls not probed: ") + e.what();
            }
        }
    }
    return f;
}

}  // namespace sweetspot
