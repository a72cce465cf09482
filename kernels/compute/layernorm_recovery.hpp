#pragma once
// The inplace_ln variant's one piece of arithmetic (Tempo's in-place LayerNorm), shared by the CPU
// reference (cpu::layernorm_backward_from_output) and the GPU kernel
// (gpu::launch_layernorm_backward_from_output): the backward recovers the normalised input
// x̂ = (x − mean) · rstd from the LayerNorm's output y = x̂ · w + b, which the next GEMM's weight
// gradient keeps anyway, instead of reading the input x, which then need not be kept.
//
// The recovery divides by w: where y carries a rounding error of u·|y| (u the unit roundoff of the
// dtype y is kept in), x̂ carries u·|y| / |w|, plus a few fp32 roundings of |y| + |b| over |w|.
// A channel whose |w| is below kInplaceLnMinWeight (x̂'s error then over a thousand times y's,
// and infinite at w = 0) is not recovered: the kernels report it and the training step refuses
// to update on such a gradient.
#include "base/host_device.hpp"

namespace sweetspot {

inline constexpr float kInplaceLnMinWeight = 1e-3f;

// Whether a channel's x̂ is recoverable from its output: |w| ≥ kInplaceLnMinWeight (NaN is not).
SWEETSPOT_HOST_DEVICE inline bool ln_weight_recoverable(float w) {
    return w >= kInplaceLnMinWeight || w <= -kInplaceLnMinWeight;
}

// x̂ of one element from the LayerNorm's output y and the channel's weight w and bias b.
SWEETSPOT_HOST_DEVICE inline float ln_normalized_from_output(float y, float w, float b) { return (y - b) / w; }

}  // namespace sweetspot
