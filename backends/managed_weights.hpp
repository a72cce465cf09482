#pragma once
// The weights of the two UVM backends: one managed allocation holding every unit, resident on the
// host once placed (as cuda-uvm-gpt2 left them), in the cell's dtype, plus the migrations and
// hints the backends apply per unit. Each unit starts on a 2 MiB boundary because the UVM driver
// migrates and tracks residency in 2 MiB chunks: units that shared a chunk would move together.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "backends/unit_storage.hpp"

namespace sweetspot {

class ManagedWeights {
public:
    // Checks the whole allocation against the free device memory first (allocate_managed throws
    // ManagedMemoryRefused before anything is allocated), then fills every unit: by kernels where
    // the filler has a device fill, each unit then migrated to the host unless `stays_on_device`
    // says the backend keeps it resident, else on host threads.
    ManagedWeights(const WeightLayout& layout, DType dtype, const Backend::UnitFiller& fill, bool allow_oversubscription,
                   const std::vector<bool>& stays_on_device = {});

    int device() const { return device_; }
    int units() const { return static_cast<int>(unit_bytes_.size()); }
    std::int64_t unit_bytes(int unit) const { return unit_bytes_[static_cast<std::size_t>(unit)]; }
    const void* unit_pointer(int unit) const { return memory_.get() + packed_.offsets[static_cast<std::size_t>(unit)]; }
    // The same for the host's writes of a training update (the pages it touches come to the host).
    void* unit_pointer(int unit) { return memory_.get() + packed_.offsets[static_cast<std::size_t>(unit)]; }

    // Stream-ordered migration of one unit to the device (cudaMemPrefetchAsync).
    void prefetch_to_device(int unit, cudaStream_t stream) const;
    // cudaMemAdviseSetReadMostly with the host as preferred location: a prefetch or fault on the
    // GPU then makes a read-only duplicate and the host copy stays valid.
    void set_read_mostly(int unit) const;
    // Takes one unit off the device the way `how` says: UvmEvict::migrate migrates it back to the
    // host on `stream` (stream-ordered); UvmEvict::read_mostly drops the GPU's read-only
    // duplicate of a unit made read-mostly by set_read_mostly, at once and not stream-ordered, so
    // the caller must know no enqueued work still reads the unit.
    void evict(int unit, UvmEvict how, cudaStream_t stream) const;
    // The same once the work recorded by `released` (the unit's last kernels) has finished: a
    // migration waits for it on `stream`, a drop on the host.
    void evict_after(int unit, const CudaEvent& released, UvmEvict how, cudaStream_t stream) const;

private:
    void prefetch_to_host(int unit, cudaStream_t stream) const;
    // Unset + set ReadMostly: the copies collapse onto the preferred location, the host.
    void drop_device_copy(int unit) const;

    int device_ = 0;
    std::vector<std::int64_t> unit_bytes_;
    PackedUnits packed_;
    ManagedMemory memory_;
};

}  // namespace sweetspot
