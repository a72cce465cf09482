#include "backends/managed_weights.hpp"


#include "backends/residency_plan.hpp"

namespace sweetspot {
namespace {

cudaMemLocation host_location() { return cudaMemLocation{cudaMemLocationTypeHost, 0}; }

}  // namespace

ManagedWeights::ManagedWeights(const WeightLayout& layout, DType dtype, const Backend::UnitFiller& fill,
                               bool allow_oversubscription, const std::vector<bool>& stays_on_device)
    : device_(current_device()), unit_bytes_(sweetspot::unit_bytes(layout, dtype)), packed_(pack_units(unit_bytes_, kManagedUnitAlignmentBytes)),
      memory_(allocate_managed_memory(packed_.total_bytes, allow_oversubscription)) {
    std::byte* base = memory_.get();
    const auto dst_of = [&](int unit) { return base + packed_.offsets[static_cast<std::size_t>(unit)]; };
    if (!fill.fills_device()) {
        // Host threads write the weights straight into managed memory, in its dtype: its pages are
        // first touched, and so resident, on the host, and the faults are spread over the cores.
        fill_units_in_place(layout, dtype, fill, dst_of);
        return;
    }
    // Kernels make each unit on the GPU, and a migration takes every unit that does not stay there
    // to the host: many times faster than the host's cores filling them. Each unit's pages are
    // first made on the GPU by a prefetch, in bulk, which costs far less than the fill kernel's
    // page faults making them (docs/benchmarks-history.md, "Where the weights phase went").
    const CudaStream stream;
    for (int u = 0; u < units(); ++u) {
        prefetch_to_device(u, stream.get());
        fill.fill_device(u, dtype, dst_of(u), stream.get());
        const auto i = static_cast<std::size_t>(u);
        if (i >= stays_on_device.size() || !stays_on_device[i]) prefetch_to_host(u, stream.get());
    }
    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
}

void ManagedWeights::prefetch_to_device(int unit, cudaStream_t stream) const {
    CUDA_CHECK(cudaMemPrefetchAsync(unit_pointer(unit), static_cast<std::size_t>(unit_bytes(unit)),
                                    cudaMemLocation{cudaMemLocationTypeDevice, device_}, 0, stream));
}

void ManagedWeights::prefetch_to_host(int unit, cudaStream_t stream) const {
    CUDA_CHECK(cudaMemPrefetchAsync(unit_pointer(unit), static_cast<std::size_t>(unit_bytes(unit)), host_location(), 0,
                                    stream));
}

void ManagedWeights::set_read_mostly(int unit) const {
    const auto bytes = static_cast<std::size_t>(unit_bytes(unit));
    // The preferred location decides where unsetting ReadMostly collapses the copies (see
    // drop_device_copy): onto the host, whose copy stays valid, so a drop moves no bytes
    // (docs/benchmarks-history.md has what the refill and the drop cost).
    CUDA_CHECK(cudaMemAdvise(unit_pointer(unit), bytes, cudaMemAdviseSetPreferredLocation, host_location()));
    CUDA_CHECK(cudaMemAdvise(unit_pointer(unit), bytes, cudaMemAdviseSetReadMostly, host_location()));
}

void ManagedWeights::drop_device_copy(int unit) const {
    const auto bytes = static_cast<std::size_t>(unit_bytes(unit));
    CUDA_CHECK(cudaMemAdvise(unit_pointer(unit), bytes, cudaMemAdviseUnsetReadMostly, host_location()));
    CUDA_CHECK(cudaMemAdvise(unit_pointer(unit), bytes, cudaMemAdviseSetReadMostly, host_location()));
}

void ManagedWeights::evict(int unit, UvmEvict how, cudaStream_t stream) const {
    if (how == UvmEvict::migrate)
        prefetch_to_host(unit, stream);
    else
        drop_device_copy(unit);
}

void ManagedWeights::evict_after(int unit, const CudaEvent& released, UvmEvict how, cudaStream_t stream) const {
    if (how == UvmEvict::migrate) {
        released.wait_on(stream);
    } else {
        // Host wait, unavoidable: cudaMemAdvise is not stream-ordered, so the read-only duplicate
        // may only be dropped once the kernels that read it have finished.
        released.synchronize();
    }
    evict(unit, how, stream);
}

}  // namespace sweetspot
