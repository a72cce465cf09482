#pragma once
// Helpers the GPU backends share to lay units out in one allocation and to fill them: pure C++
// (host threads only), header-only.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "backends/backend.hpp"
#include "kernels/compute/pinned_memory.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

// Where a unit starts inside a device allocation: cudaMalloc's alignment, which gives
// each unit's tensors the alignment the kernels and cuBLAS expect (units are multiples of 256
// bytes in every dtype, so it costs nothing).
inline constexpr std::int64_t kUnitAlignmentBytes = 256;
// Where a unit starts inside explicit-copy's page-locked copy: each unit is registered on its own
// (PinnedHostMemory's pieces, so that the kernels filling one unit run while the next is pinned),
// and two registrations may not share a page.
inline constexpr std::int64_t kPinnedUnitAlignmentBytes = kPinnedPieceAlignmentBytes;
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

// The page-locked staging of a training step whose optimizer runs on the host: kHostUpdateSlots
// slots (layer_source.hpp), each one unit's gradient (going to the host) and its new weights
// (coming back), in the dtype, sized for the largest unit. Unit u uses slot u % 2, so one unit's
// copies run while the other's update does. Each buffer starts on a huge page (kPinnedUnitAlignmentBytes), so the four fill the
// page-locked mapping exactly.
inline std::int64_t host_update_buffer_bytes(std::span<const std::int64_t> unit_bytes) {
    std::int64_t largest = 0;
    for (const auto b : unit_bytes) largest = std::max(largest, b);
    return round_up_bytes(largest, kPinnedUnitAlignmentBytes);
}
inline std::int64_t host_update_staging_bytes(std::span<const std::int64_t> unit_bytes) {
    return 2 * kHostUpdateSlots * host_update_buffer_bytes(unit_bytes);
}

inline PackedUnits pack_units(std::span<const std::int64_t> unit_bytes, std::int64_t alignment) {
    PackedUnits packed;
    for (const auto b : unit_bytes) {
        packed.offsets.push_back(packed.total_bytes);
        packed.total_bytes += round_up_bytes(b, alignment);
    }
    return packed;
}

// Writes unit `unit` in `dtype` into host memory at `dst`: in fp32 (into `scratch` unless the
// dtype is fp32) and converted into place over the host's cores.
inline void fill_unit_as(const WeightLayout& layout, DType dtype, const Backend::UnitFiller& fill, int unit, void* dst,
                         std::vector<float>& scratch) {
    const auto numel = static_cast<std::size_t>(layout.units[static_cast<std::size_t>(unit)].numel);
    if (dtype == DType::fp32) {
        fill(unit, std::span<float>(static_cast<float*>(dst), numel));
        return;
    }
    scratch.resize(numel);
    fill(unit, scratch);
    convert_from_f32(scratch, dtype, dst);
}

// Fills every unit in `dtype` straight into the host memory it stays in (pinned, managed, or the
// host backend's): `dst_of(unit)` says where each goes.
inline void fill_units_in_place(const WeightLayout& layout, DType dtype, const Backend::UnitFiller& fill,
                                const std::function<void*(int unit)>& dst_of) {
    std::vector<float> scratch;
    for (int u = 0; u < static_cast<int>(layout.units.size()); ++u) fill_unit_as(layout, dtype, fill, u, dst_of(u), scratch);
}

// Receives unit `unit`'s weights, already in the cell's dtype.
using UnitSink = std::function<void(int unit, const void* data, std::size_t bytes)>;

// Fills every unit in `dtype` into a host buffer and hands it to `sink` (which copies it to where
// the host cannot write, device memory), one unit at a time: one unit in flight keeps host memory
// bounded (a 13B model's embedding is ~1 GB).
inline void fill_units(const WeightLayout& layout, DType dtype, const Backend::UnitFiller& fill, const UnitSink& sink) {
    std::vector<float> scratch;
    std::vector<std::byte> staged;
    for (int u = 0; u < static_cast<int>(layout.units.size()); ++u) {
        staged.resize(static_cast<std::size_t>(layout.units[static_cast<std::size_t>(u)].numel) * dtype_size(dtype));
        fill_unit_as(layout, dtype, fill, u, staged.data(), scratch);
        sink(u, staged.data(), staged.size());
    }
}

}  // namespace sweetspot
