#include "kernels/compute/cpu_forward.hpp"

#include <stdexcept>
#include <string>

namespace sweetspot {

namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

}  // namespace

CpuForward::CpuForward(const ModelConfig& model, const WeightLayout& layout, const BatchShape& shape,
                       const Dropout& dropout)
    : model_(model), layout_(layout), shape_(shape) {
    check_batch_shape("CpuForward", model, layout, shape);
    check_dropout("CpuForward", model, shape, dropout);
    family_ = compute_of(model.family).cpu_forward(model, shape, dropout.for_shape(shape.stride(), model.max_positions));
}

CpuForward::~CpuForward() = default;
CpuForward::CpuForward(CpuForward&&) noexcept = default;
CpuForward& CpuForward::operator=(CpuForward&&) noexcept = default;

std::int64_t CpuForward::activation_bytes() const { return family_->activation_bytes(); }

std::int64_t CpuForward::activation_bytes_for(const ModelConfig& model, const BatchShape& shape) {
    return compute_of(model.family).cpu_activation_bytes(model, shape);
}

void CpuForward::run(LayerSource& weights, std::span<const std::int32_t> tokens, std::span<float> logits) {
    const std::size_t rows = as_size(shape_.rows());
    check_batch_ids("CpuForward", model_, tokens, shape_.rows(), "token");
    if (logits.size() != rows * as_size(model_.vocab_size)) {
        throw std::invalid_argument("CpuForward: the logits buffer must hold " +
                                    std::to_string(rows * as_size(model_.vocab_size)) +
                                    " floats (rows × vocab), got " + std::to_string(logits.size()) + ".");
    }

    // Each unit is held only while it is computed with, so a backend can page the rest out.
    family_->embed(static_cast<const float*>(weights.acquire(0)), layout_.units[0], tokens);
    weights.release(0);
    for (int l = 0; l < model_.n_layer; ++l) {
        const int unit = WeightLayout::block_unit(l);
        family_->block(l, static_cast<const float*>(weights.acquire(unit)), layout_.units[as_size(unit)]);
        weights.release(unit);
    }
    const int head_unit = layout_.head_unit();
    family_->head(static_cast<const float*>(weights.acquire(head_unit)), layout_.units[as_size(head_unit)], logits);
    weights.release(head_unit);
}

}  // namespace sweetspot
