#pragma once
// The synthetic weights generated where they are used: a unit written by a kernel straight into
// the memory it stays in (device, managed, or page-locked host memory), in the cell's dtype, with
// the same bits as fill_synthetic_unit followed by convert_from_f32 on the host
// (synthetic_value.hpp is the arithmetic both run). For GPT-2 1.5B that is 1.6 G values hashed on
// the GPU in milliseconds instead of on the host's cores in seconds (docs/benchmarks-history.md, "Where
// the weights phase went", has the host's cost per value).
#include <cstdint>

#include "kernels/model/dtype.hpp"
#include "kernels/model/weight_layout.hpp"

struct CUstream_st;

namespace sweetspot::gpu {

// Enqueues on `stream` the fill of unit `unit` of `layout` at `dst`: unit.numel elements of
// `dtype` in memory kernels can write, padding zeroed.
void fill_synthetic_unit(const ModelConfig& model, const WeightLayout& layout, int unit, std::uint64_t seed, DType dtype,
                         void* dst, CUstream_st* stream);

}  // namespace sweetspot::gpu
