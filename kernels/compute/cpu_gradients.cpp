#include "kernels/compute/cpu_gradients.hpp"

#include <algorithm>
#include <stdexcept>

#include "kernels/compute/cpu_ops.hpp"

namespace sweetspot {
namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

std::int64_t logits_bytes(const ModelConfig& model, const BatchShape& shape) {
    return shape.rows() * model.vocab_size * std::int64_t{sizeof(float)};
}

}  // namespace

CpuBackprop::CpuBackprop(const ModelConfig& model, const WeightLayout& layout, const BatchShape& shape,
                         const Dropout& dropout)
    : model_(model), layout_(layout), shape_(shape) {
    check_batch_shape("CpuBackprop", model, layout, shape);
    check_dropout("CpuBackprop", model, shape, dropout);
    logits_.resize(as_size(shape.rows()) * as_size(model.vocab_size));
    family_ = compute_of(model.family).cpu_backprop(model, shape, dropout.for_shape(shape.stride(), model.max_positions));
}

CpuBackprop::~CpuBackprop() = default;
CpuBackprop::CpuBackprop(CpuBackprop&&) noexcept = default;
CpuBackprop& CpuBackprop::operator=(CpuBackprop&&) noexcept = default;

std::int64_t CpuBackprop::buffer_bytes_for(const ModelConfig& model, const BatchShape& shape) {
    return compute_of(model.family).cpu_backprop_bytes(model, shape) + logits_bytes(model, shape);
}

std::int64_t CpuBackprop::buffer_bytes() const {
    return family_->buffer_bytes() + static_cast<std::int64_t>(logits_.size() * sizeof(float));
}

double CpuBackprop::forward(LayerSource& weights, std::span<const std::int32_t> tokens,
                            std::span<const std::int32_t> targets) {
    check_batch_ids("CpuBackprop", model_, tokens, shape_.rows(), "token");
    check_batch_ids("CpuBackprop", model_, targets, shape_.rows(), "target");
    tokens_.assign(tokens.begin(), tokens.end());

    family_->embed(static_cast<const float*>(weights.acquire(0)), layout_.units[0], tokens);
    weights.release(0);
    for (int l = 0; l < model_.n_layer; ++l) {
        const int u = WeightLayout::block_unit(l);
        family_->block(l, static_cast<const float*>(weights.acquire(u)), layout_.units[as_size(u)]);
        weights.release(u);
    }
    const int hu = layout_.head_unit();
    family_->head(static_cast<const float*>(weights.acquire(hu)), layout_.units[as_size(hu)], logits_);
    weights.release(hu);
    const std::int64_t real = shape_.real_tokens();
    const float per_target = 1.0f / static_cast<float>(real);
    return cpu::cross_entropy(logits_.data(), targets.data(), shape_, model_.vocab_size, per_target) /
           static_cast<double>(real);
}

double CpuBackprop::backward(LayerSource& weights) {
    const auto gradient_of = [&](int unit) {
        auto* g = static_cast<float*>(weights.gradient(unit));
        std::fill_n(g, layout_.units[as_size(unit)].numel, 0.0f);  // the family's backward adds to it
        return g;
    };
    const auto squares_of = [&](const float* g, int unit) {
        return cpu::squared_norm(g, layout_.units[as_size(unit)].numel);
    };
    double squares = 0.0;

    const int hu = layout_.head_unit();
    const auto* head = static_cast<const float*>(weights.acquire(hu));
    float* head_grad = gradient_of(hu);
    family_->head_backward(head, layout_.units[as_size(hu)], logits_, head_grad);
    squares += squares_of(head_grad, hu);
    weights.release(hu);

    for (int l = model_.n_layer - 1; l >= 0; --l) {
        const int u = WeightLayout::block_unit(l);
        const auto* unit = static_cast<const float*>(weights.acquire(u));
        float* grad = gradient_of(u);
        family_->block_backward(l, unit, layout_.units[as_size(u)], grad);
        squares += squares_of(grad, u);
        weights.release(u);
    }

    // The embedding's backward reads no weight, but the unit is held while its gradient is written.
    weights.acquire(0);
    float* embed_grad = gradient_of(0);
    family_->embed_backward(layout_.units[0], tokens_, embed_grad);
    squares += squares_of(embed_grad, 0);
    weights.release(0);
    return squares;
}

namespace {

// Unit pointers as a weight source, with a gradient buffer per unit.
class PointerSource final : public LayerSource {
public:
    PointerSource(std::span<const float* const> units, const WeightLayout& layout) : units_(units) {
        for (const UnitLayout& u : layout.units) gradients_.emplace_back(as_size(u.numel));
    }
    const void* acquire(int unit) override { return units_[as_size(unit)]; }
    void release(int) override {}
    void* gradient(int unit) override { return gradients_[as_size(unit)].data(); }
    std::vector<std::vector<float>> take_gradients() { return std::move(gradients_); }

private:
    std::span<const float* const> units_;
    std::vector<std::vector<float>> gradients_;
};

}  // namespace

CpuGradients cpu_gradients(const ModelConfig& model, const WeightLayout& layout, std::span<const float* const> units,
                           std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
                           const BatchShape& shape, const Dropout& dropout) {
    require_layout_for(model, layout, "cpu_gradients");
    if (units.size() != layout.units.size()) throw std::invalid_argument("cpu_gradients: one pointer per unit is needed.");
    PointerSource source(units, layout);
    CpuBackprop backprop(model, layout, shape, dropout);
    CpuGradients out;
    out.loss = backprop.forward(source, tokens, targets);
    backprop.backward(source);
    out.units = source.take_gradients();
    return out;
}

}  // namespace sweetspot
