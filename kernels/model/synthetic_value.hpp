#pragma once
// The element-wise core of the synthetic weights (synthetic_weights.hpp), shared by the host fill
// and the GPU's (gpu_synthetic_weights.cu), which must give the same bits. Every value is a pure
// function of (seed, unit, tensor, element): a counter-based hash (splitmix64) gives the random
// bits, and the normal deviate is an Irwin–Hall sum of four 24-bit uniforms, which needs only
// integer adds, one int → float conversion, one float multiply and one add, each correctly
// rounded on every machine. No libm and no sequential generator state, so the fill can be split
// across threads or done by a GPU kernel.
#include <cstdint>

#include "base/host_device.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot::synthetic {

inline constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // splitmix64's counter increment

// splitmix64's finaliser: a bijection on 64 bits with good avalanche.
SWEETSPOT_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// value = offset + deviate · scale, where `scale` folds in the target std.
struct TensorInit {
    float offset = 0.0f;
    float scale = 0.0f;
};

// Element `index` of the stream `key`. Each 24-bit uniform u stands for the midpoint
// (2u + 1) / 2^25 of its cell of [0, 1); four of them sum to (2·sum + 4) / 2^25, of mean 2.
// Subtracting the mean and adding one unit of 2^-25 leaves the odd numerator 2·sum + 5 − 2^26,
// which is never zero, so no parameter is zero; the bias is 2^-25·sqrt(3) standard deviations.
SWEETSPOT_HOST_DEVICE inline float value(std::uint64_t key, std::uint64_t index, TensorInit init) {
    constexpr std::uint64_t kMask24 = 0xFFFFFF;
    const std::uint64_t h1 = mix64(key + kGolden * (2 * index + 1));
    const std::uint64_t h2 = mix64(key + kGolden * (2 * index + 2));
    const auto sum =
        static_cast<std::int32_t>((h1 >> 40) + ((h1 >> 16) & kMask24) + (h2 >> 40) + ((h2 >> 16) & kMask24));
    const std::int32_t centred = 2 * sum + 5 - (1 << 26);
    // The multiply and the add rounded separately: contracted into one fused multiply-add they
    // would round once and differ in the last bit between compilers and devices.
#ifdef __CUDA_ARCH__
    return __fadd_rn(init.offset, __fmul_rn(__int2float_rn(centred), init.scale));
#else
    const float deviate = static_cast<float>(centred) * init.scale;  // a statement of its own: no FMA
    return init.offset + deviate;
#endif
}

// The stream of tensor `tensor` of unit `unit`; distinct (unit, tensor) pairs give distinct keys
// because mix64 is a bijection.
std::uint64_t tensor_key(std::uint64_t seed, int unit, int tensor);

// Unit `unit` of `layout`; throws std::invalid_argument naming `caller` when there is none.
const UnitLayout& checked_unit(const WeightLayout& layout, int unit, const char* caller);

// GPT-2's initialisation of a tensor (synthetic_weights.hpp says which).
TensorInit tensor_init(const ModelConfig& model, UnitKind kind, int tensor);

}  // namespace sweetspot::synthetic
