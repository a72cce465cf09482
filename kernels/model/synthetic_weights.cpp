#include "kernels/model/synthetic_weights.hpp"

#include "kernels/compute/parallel_for.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

// Every value is a pure function of (seed, unit, tensor, element): a counter-based hash
// (splitmix64) gives the random bits, and the normal deviate is an Irwin–Hall sum of four
// 24-bit uniforms, which needs only integer adds and one float multiply, both exact or
// correctly rounded everywhere. No libm and no sequential generator state, so the fill can be
// split across threads, or redone by a GPU kernel, and still give the same bits.
namespace sweetspot {

namespace {

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // splitmix64's counter increment
constexpr double kInitStd = 0.02;                         // GPT-2's initialiser
constexpr double kSqrt3 = 1.7320508075688772;

// splitmix64's finaliser: a bijection on 64 bits with good avalanche.
constexpr std::uint64_t mix64(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Distinct (unit, tensor) pairs give distinct keys because mix64 is a bijection.
std::uint64_t tensor_key(std::uint64_t seed, int unit, int tensor) {
    const std::uint64_t id = (static_cast<std::uint64_t>(unit) << 8) + static_cast<std::uint64_t>(tensor) + 1;
    return mix64(mix64(seed) + kGolden * id);
}

// value = offset + deviate · scale, where `scale` folds in the target std.
struct TensorInit {
    float offset = 0.0f;
    float scale = 0.0f;
};

TensorInit normal_init(double std_dev, float offset = 0.0f) {
    // The centred integer sum below is in units of 2^-25 and has variance 1/3 (in U(0,1)
    // units), hence sqrt(3) / 2^25. Computed in double and rounded once to float.
    return {offset, static_cast<float>(kSqrt3 / 33554432.0 * std_dev)};
}

// Element `index` of the stream `key`. Each 24-bit uniform u stands for the midpoint
// (2u + 1) / 2^25 of its cell of [0, 1); four of them sum to (2·sum + 4) / 2^25, of mean 2.
// Subtracting the mean and adding one unit of 2^-25 leaves the odd numerator 2·sum + 5 − 2^26,
// which is never zero, so no parameter is zero; the bias is 2^-25·sqrt(3) standard deviations.
float synthetic_value(std::uint64_t key, std::uint64_t index, TensorInit init) {
    constexpr std::uint64_t kMask24 = 0xFFFFFF;
    const std::uint64_t h1 = mix64(key + kGolden * (2 * index + 1));
    const std::uint64_t h2 = mix64(key + kGolden * (2 * index + 2));
    const auto sum =
        static_cast<std::int32_t>((h1 >> 40) + ((h1 >> 16) & kMask24) + (h2 >> 40) + ((h2 >> 16) & kMask24));
    const std::int32_t centred = 2 * sum + 5 - (1 << 26);
    // A statement of its own so no compiler fuses it with the add into an FMA, which would
    // round differently (a GPU port must likewise use __fmul_rn and __fadd_rn).
    const float deviate = static_cast<float>(centred) * init.scale;
    return init.offset + deviate;
}

TensorInit block_init(const ModelConfig& m, int tensor) {
    switch (tensor) {
        case block_tensor::ln1_w:
        case block_tensor::ln2_w: return normal_init(kInitStd, 1.0f);
        // GPT-2 scales the projections that write into the residual stream by 1/sqrt(2·n_layer)
        // so the stream's variance does not grow with depth. sqrt is correctly rounded (IEEE).
        case block_tensor::proj_w:
        case block_tensor::fc_proj_w: return normal_init(kInitStd / std::sqrt(2.0 * m.n_layer));
        default: return normal_init(kInitStd);
    }
}

TensorInit head_init(int tensor) {
    return tensor == head_tensor::lnf_w ? normal_init(kInitStd, 1.0f) : normal_init(kInitStd);
}

TensorInit tensor_init(const ModelConfig& m, UnitKind kind, int tensor) {
    switch (kind) {
        case UnitKind::embedding: return normal_init(kInitStd);
        case UnitKind::block: return block_init(m, tensor);
        case UnitKind::head: return head_init(tensor);
    }
    throw std::logic_error("unknown unit kind");
}

// Large tensors (a 13B model's units hold up to 330M elements) are split across the host's cores.
void fill_tensor(float* dst, std::int64_t numel, std::uint64_t key, const TensorInit& init) {
    parallel_for(numel, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) dst[i] = synthetic_value(key, static_cast<std::uint64_t>(i), init);
    });
}

}  // namespace

void fill_synthetic_unit(const ModelConfig& model, const WeightLayout& layout, int unit, std::uint64_t seed,
                         std::span<float> out) {
    if (unit < 0 || unit >= static_cast<int>(layout.units.size())) {
        throw std::invalid_argument("fill_synthetic_unit: unit " + std::to_string(unit) + " is not in the layout (" +
                                    std::to_string(layout.units.size()) + " units).");
    }
    const UnitLayout& u = layout.units[static_cast<std::size_t>(unit)];
    if (static_cast<std::int64_t>(out.size()) != u.numel) {
        throw std::invalid_argument("fill_synthetic_unit: unit " + std::to_string(unit) + " has " +
                                    std::to_string(u.numel) + " elements but the buffer has " +
                                    std::to_string(out.size()) + ".");
    }
    std::int64_t filled_to = 0;  // everything before this is written; gaps up to the next tensor are padding
    for (std::size_t t = 0; t < u.tensors.size(); ++t) {
        const TensorSpec& spec = u.tensors[t];
        std::fill(out.begin() + filled_to, out.begin() + spec.offset, 0.0f);
        const int tensor = static_cast<int>(t);
        const std::uint64_t key = tensor_key(seed, unit, tensor);
        const TensorInit init = tensor_init(model, u.kind, tensor);
        fill_tensor(out.data() + spec.offset, spec.numel, key, init);
        filled_to = spec.offset + spec.numel;
    }
    std::fill(out.begin() + filled_to, out.end(), 0.0f);
}

}  // namespace sweetspot
