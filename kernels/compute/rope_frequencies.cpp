#include "kernels/compute/rope_frequencies.hpp"

#include <cmath>
#include <cstddef>
#include <numbers>
#include <stdexcept>
#include <string>

namespace sweetspot {

namespace {

void check(int head_dim, double theta, const RopeScaling& scaling) {
    const auto fail = [](const char* why) { throw std::invalid_argument(std::string("rope_inv_frequencies: ") + why); };
    if (head_dim <= 0 || head_dim % 2 != 0) fail("the head dimension must be even and positive.");
    if (!(theta > 0.0)) fail("theta must be positive.");
    if (!scaling.enabled) return;
    if (!(scaling.factor > 0.0)) fail("the scaling factor must be positive.");
    if (scaling.original_max_positions <= 0) fail("original_max_positions must be positive.");
    if (!(scaling.high_freq_factor > scaling.low_freq_factor)) fail("high_freq_factor must exceed low_freq_factor.");
}

double llama3_scaled(double inv_freq, const RopeScaling& s) {
    const double original = static_cast<double>(s.original_max_positions);
    const double wavelength = 2.0 * std::numbers::pi / inv_freq;
    if (wavelength > original / s.low_freq_factor) return inv_freq / s.factor;
    if (wavelength < original / s.high_freq_factor) return inv_freq;
    const double smooth = (original / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    return (1.0 - smooth) * inv_freq / s.factor + smooth * inv_freq;
}

}  // namespace

std::vector<double> rope_inv_frequencies(int head_dim, double theta, const RopeScaling& scaling) {
    check(head_dim, theta, scaling);
    std::vector<double> inv_freq(static_cast<std::size_t>(head_dim / 2));
    for (std::size_t i = 0; i < inv_freq.size(); ++i) {
        inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
        if (scaling.enabled) inv_freq[i] = llama3_scaled(inv_freq[i], scaling);
    }
    return inv_freq;
}

std::vector<float> rope_inv_frequencies_f32(int head_dim, double theta, const RopeScaling& scaling) {
    const std::vector<double> exact = rope_inv_frequencies(head_dim, theta, scaling);
    return {exact.begin(), exact.end()};
}

}  // namespace sweetspot
