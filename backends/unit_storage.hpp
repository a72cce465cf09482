#pragma once
// Helpers the GPU backends share to lay units out in one allocation and to fill them: pure C++
// (host threads only), header-only.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <vector>

#include "backends/backend.hpp"
#include "kernels/compute/parallel_for.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

// Where a unit starts inside a device or pinned allocation: cudaMalloc's alignment, which gives
// each unit's tensors the alignment the kernels and cuBLAS expect (units are multiples of 256
// bytes in every dtype, so it costs nothing).
inline constexpr std::int64_t kUnitAlignmentBytes = 256;
// Where a unit starts inside the managed allocation: the driver migrates managed memory in 2 MiB
// blocks, so no unit shares a block with its neighbour.
inline constexpr std::int64_t kManagedUnitAlignmentBytes = std::int64_t{2} << 20;

// Where each unit starts inside one allocation that packs `unit_bytes` back to back, each unit
// starting on a multiple of `alignment` bytes.
struct PackedUnits {
    std::vector<std::int64_t> offsets;
    std::int64_t total_bytes = 0;  // the allocation size, the last unit padded too
};

inline std::int64_t round_up_bytes(std::int64_t n, std::int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

inline PackedUnits pack_units(std::span<const std::int64_t> unit_bytes, std::int64_t alignment) {
    PackedUnits packed;
    for (const auto b : unit_bytes) {
        packed.offsets.push_back(packed.total_bytes);
        packed.total_bytes += round_up_bytes(b, alignment);
    }
    return packed;
}

// memcpy with every core: the first write to a page of pinned or managed memory faults it in, and
// one thread faulting in a model's pages one after another is most of the time it takes to place
// the weights of a UVM backend.
inline void parallel_copy(void* dst, const void* src, std::size_t bytes) {
    parallel_for(static_cast<std::int64_t>(bytes), [&](std::int64_t begin, std::int64_t end) {
        std::memcpy(static_cast<std::byte*>(dst) + begin, static_cast<const std::byte*>(src) + begin,
                    static_cast<std::size_t>(end - begin));
    });
}

// Receives unit `unit`'s weights, already in the cell's dtype.
using UnitSink = std::function<void(int unit, const void* data, std::size_t bytes)>;

// Fills every unit through `fill`, converts it to `dtype` and hands it to `sink`, one unit at a
// time: the filler and the conversion spread each unit over the host's cores themselves, and one
// fp32 unit in flight keeps host memory bounded (a 13B model's embedding is ~1 GB).
inline void fill_units(const WeightLayout& layout, DType dtype, const Backend::UnitFiller& fill, const UnitSink& sink) {
    std::vector<float> values;
    std::vector<std::byte> converted;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        const auto numel = static_cast<std::size_t>(layout.units[u].numel);
        values.resize(numel);
        fill(static_cast<int>(u), values);
        if (dtype == DType::fp32) {
            sink(static_cast<int>(u), values.data(), numel * sizeof(float));
        } else {
            converted.resize(numel * dtype_size(dtype));
            convert_from_f32(values, dtype, converted.data());
            sink(static_cast<int>(u), converted.data(), converted.size());
        }
    }
}

}  // namespace sweetspot
