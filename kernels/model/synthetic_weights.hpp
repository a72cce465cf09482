#pragma once
// Seeded synthetic weights with the model family's initialisation, bit-identical on every machine.
#include <cstdint>
#include <span>

#include "kernels/model/dtype.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

// Fill unit `unit` of `layout` (fp32, unit.numel elements, padding zeroed), each tensor with the
// normal initialiser its family declares (model_family.hpp). GPT-2's: linear and embedding
// weights ~ N(0, 0.02), residual projections (attn c_proj, mlp c_proj) scaled by 1/sqrt(2·n_layer);
// LayerNorm weights 1 + N(0, 0.02) and every bias N(0, 0.02), so that no parameter is zero and
// every term of the forward is exercised by numerical checks.
// Depends only on (seed, unit, tensor, element index): units can be filled in any order.
// The normal deviates are Irwin–Hall sums of four uniforms, so
// they are bounded at ±2·sqrt(3) standard deviations. The per-element arithmetic is in
// synthetic_value.hpp, which the GPU fill (gpu_synthetic_weights.hpp) shares.
void fill_synthetic_unit(const ModelConfig& model, const WeightLayout& layout, int unit,
                         std::uint64_t seed, std::span<float> out);

// The same unit written in `dtype` at `dst` (unit.numel elements of it, padding zeroed): the same
// bits as fill_synthetic_unit followed by convert_from_f32, in one pass over the host's cores
// that makes, rounds and stores each value. The host's counterpart of gpu::fill_synthetic_unit,
// which the GPU backends use: the tests hold the kernel to it in every dtype.
void fill_synthetic_unit_as(const ModelConfig& model, const WeightLayout& layout, int unit, std::uint64_t seed,
                            DType dtype, void* dst);

}  // namespace sweetspot
