#include "kernels/model/synthetic_weights.hpp"

#include "base/parallel_for.hpp"
#include "kernels/model/model_family.hpp"
#include "kernels/model/synthetic_value.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace sweetspot {

namespace synthetic {

namespace {

constexpr double kSqrt3 = 1.7320508075688772;

TensorInit normal_init(double std_dev, float offset = 0.0f) {
    // The centred integer sum of `value` is in units of 2^-25 and has variance 1/3 (in U(0,1)
    // units), hence sqrt(3) / 2^25. Computed in double and rounded once to float.
    return {offset, static_cast<float>(kSqrt3 / 33554432.0 * std_dev)};
}

}  // namespace

std::uint64_t tensor_key(std::uint64_t seed, int unit, int tensor) {
    const std::uint64_t id = (static_cast<std::uint64_t>(unit) << 8) + static_cast<std::uint64_t>(tensor) + 1;
    return mix64(mix64(seed) + kGolden * id);
}

TensorInit tensor_init(const ModelConfig& m, UnitKind kind, int tensor) {
    const std::vector<TensorDecl> decls = family_of(m).unit_tensors(m, kind, 0);
    if (tensor < 0 || tensor >= static_cast<int>(decls.size()))
        throw std::invalid_argument("synthetic::tensor_init: no tensor " + std::to_string(tensor) + " in that unit kind");
    const NormalInit init = decls[static_cast<std::size_t>(tensor)].init;
    return normal_init(init.std_dev, init.mean);
}

const UnitLayout& checked_unit(const WeightLayout& layout, int unit, const char* caller) {
    if (unit < 0 || unit >= static_cast<int>(layout.units.size())) {
        throw std::invalid_argument(std::string(caller) + ": unit " + std::to_string(unit) + " is not in the layout (" +
                                    std::to_string(layout.units.size()) + " units).");
    }
    return layout.units[static_cast<std::size_t>(unit)];
}

}  // namespace synthetic

namespace {

// Large tensors (a 13B model's units hold up to 330M elements) are split across the host's cores.
// `store(i, value)` writes element i of the tensor.
template <class Store>
void fill_tensor(std::int64_t numel, std::uint64_t key, const synthetic::TensorInit& init, const Store& store) {
    parallel_for(numel, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) store(i, synthetic::value(key, static_cast<std::uint64_t>(i), init));
    });
}

// Unit `u` as T at `out`: each value made, then `convert`ed; the padding between and after the
// tensors zero.
template <class T, class Convert>
void fill_unit_as(const ModelConfig& model, const UnitLayout& u, int unit, std::uint64_t seed, T* out,
                  const Convert& convert) {
    std::int64_t filled_to = 0;  // everything before this is written; gaps up to the next tensor are padding
    for (std::size_t t = 0; t < u.tensors.size(); ++t) {
        const TensorSpec& spec = u.tensors[t];
        std::fill(out + filled_to, out + spec.offset, T{});
        const int tensor = static_cast<int>(t);
        T* dst = out + spec.offset;
        fill_tensor(spec.numel, synthetic::tensor_key(seed, unit, tensor), synthetic::tensor_init(model, u.kind, tensor),
                    [&](std::int64_t i, float v) { dst[i] = convert(v); });
        filled_to = spec.offset + spec.numel;
    }
    std::fill(out + filled_to, out + u.numel, T{});
}

}  // namespace

void fill_synthetic_unit(const ModelConfig& model, const WeightLayout& layout, int unit, std::uint64_t seed,
                         std::span<float> out) {
    const UnitLayout& u = synthetic::checked_unit(layout, unit, "fill_synthetic_unit");
    if (static_cast<std::int64_t>(out.size()) != u.numel) {
        throw std::invalid_argument("fill_synthetic_unit: unit " + std::to_string(unit) + " has " +
                                    std::to_string(u.numel) + " elements but the buffer has " +
                                    std::to_string(out.size()) + ".");
    }
    fill_synthetic_unit_as(model, layout, unit, seed, DType::fp32, out.data());
}

void fill_synthetic_unit_as(const ModelConfig& model, const WeightLayout& layout, int unit, std::uint64_t seed,
                            DType dtype, void* dst) {
    const UnitLayout& u = synthetic::checked_unit(layout, unit, "fill_synthetic_unit_as");
    switch (dtype) {
        case DType::fp32: fill_unit_as(model, u, unit, seed, static_cast<float*>(dst), [](float v) { return v; }); return;
        case DType::fp16: fill_unit_as(model, u, unit, seed, static_cast<std::uint16_t*>(dst), float_to_fp16_bits); return;
        case DType::bf16: fill_unit_as(model, u, unit, seed, static_cast<std::uint16_t*>(dst), float_to_bf16_bits); return;
    }
}

}  // namespace sweetspot
