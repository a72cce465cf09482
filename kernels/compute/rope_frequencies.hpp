#pragma once
// RoPE's rotation frequencies, computed once on the host in double: the float64 reference reads
// them as they are, the fp32 CPU op and the GPU kernels read the same values rounded to fp32, so
// that a difference between those two is never one of frequencies. Plain C++, no CUDA.
#include <vector>

#include "kernels/model/model_config.hpp"

namespace sweetspot {

// inv_freq[i] = theta^(−2i / head_dim) for i < head_dim / 2, then, with scaling enabled, as
// transformers' _compute_llama3_parameters: wavelength λ = 2π / inv_freq; λ above
// original_max_positions / low_freq_factor: inv_freq / factor; λ below original_max_positions /
// high_freq_factor: unchanged; between: (1 − s) · inv_freq / factor + s · inv_freq with
// s = (original_max_positions / λ − low_freq_factor) / (high_freq_factor − low_freq_factor).
// Throws std::invalid_argument for an odd or non-positive head_dim, theta ≤ 0, or (enabled)
// factor ≤ 0, original_max_positions ≤ 0 or high_freq_factor ≤ low_freq_factor.
std::vector<double> rope_inv_frequencies(int head_dim, double theta, const RopeScaling& scaling = {});

// rope_inv_frequencies rounded to fp32: the table cpu::rope and gpu::launch_rope read.
std::vector<float> rope_inv_frequencies_f32(int head_dim, double theta, const RopeScaling& scaling = {});

}  // namespace sweetspot
