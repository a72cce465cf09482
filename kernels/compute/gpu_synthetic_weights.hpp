#pragma once
// The synthetic weights generated where they are used: a unit written straight into device
// memory in the cell's dtype by a kernel, with the same bits as fill_synthetic_unit followed by
// convert_from_f32 on the host (synthetic_value.hpp is the arithmetic both run). A resident
// model's weights then never exist on the host and never cross the link: for GPT-2 1.5B that is
// 1.6 G values hashed on the GPU in milliseconds instead of on the host's cores in seconds.
#include <cstdint>

#include "kernels/model/dtype.hpp"
#include "kernels/model/weight_layout.hpp"

struct CUstream_st;

namespace sweetspot::gpu {

// Enqueues on `stream` the fill of unit `unit` of `layout` at `dst`: unit.numel elements of
// `dtype` in device memory, padding zeroed.
void fill_synthetic_unit(const ModelConfig& model, const WeightLayout& layout, int unit, std::uint64_t seed, DType dtype,
                         void* dst, CUstream_st* stream);

}  // namespace sweetspot::gpu
