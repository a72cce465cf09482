#include "kernels/compute/cpu_forward.hpp"

#include <stdexcept>
#include <string>

#include "kernels/compute/cpu_block.hpp"
#include "kernels/compute/cpu_ops.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"

namespace sweetspot {

namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

const float* tensor_ptr(const float* unit, const UnitLayout& unit_layout, int tensor) {
    return unit + unit_layout.tensors[as_size(tensor)].offset;
}

}  // namespace

CpuForward::CpuForward(const ModelConfig& model, const WeightLayout& layout, int batch, int seq, const Dropout& dropout)
    : model_(model), layout_(layout), batch_(batch), seq_(seq), dropout_(dropout.for_shape(seq, model.max_positions)) {
    check_batch_shape("CpuForward", model, layout, batch, seq);
    const std::size_t bt = as_size(batch) * as_size(seq);
    const std::size_t c = as_size(model.n_embd);
    x_.resize(bt * c);
    ln_.resize(bt * c);
    qkv_.resize(bt * 3 * c);
    att_.resize(bt * c);
    y_.resize(bt * c);
    fc_.resize(bt * 4 * c);
    scores_.resize(as_size(seq) * as_size(seq));
}

std::int64_t CpuForward::activation_bytes() const {
    const std::size_t floats =
        x_.size() + ln_.size() + qkv_.size() + att_.size() + y_.size() + fc_.size() + scores_.size();
    return static_cast<std::int64_t>(floats * sizeof(float));
}

std::int64_t CpuForward::activation_bytes_for(const ModelConfig& model, int batch, int seq) {
    // x, ln, att and y of n_embd, qkv of 3 · n_embd and fc of 4 · n_embd per token; one head's scores.
    const std::size_t bt = as_size(batch) * as_size(seq);
    const std::size_t floats = bt * 11 * as_size(model.n_embd) + as_size(seq) * as_size(seq);
    return static_cast<std::int64_t>(floats * sizeof(float));
}

void CpuForward::run(LayerSource& weights, std::span<const std::int32_t> tokens, std::span<float> logits) {
    const std::size_t bt = as_size(batch_) * as_size(seq_);
    check_batch_ids("CpuForward", model_, tokens, static_cast<std::int64_t>(bt), "token");
    if (logits.size() != bt * as_size(model_.vocab_size)) {
        throw std::invalid_argument("CpuForward: the logits buffer must hold " +
                                    std::to_string(bt * as_size(model_.vocab_size)) +
                                    " floats (batch × seq × vocab), got " + std::to_string(logits.size()) + ".");
    }

    // Each unit is held only while it is computed with, so a backend can page the rest out.
    embed(static_cast<const float*>(weights.acquire(0)), tokens);
    weights.release(0);
    for (int l = 0; l < model_.n_layer; ++l) {
        const int unit = WeightLayout::block_unit(l);
        block(l, static_cast<const float*>(weights.acquire(unit)), layout_.units[as_size(unit)]);
        weights.release(unit);
    }
    const int head_unit = layout_.head_unit();
    head(static_cast<const float*>(weights.acquire(head_unit)), logits);
    weights.release(head_unit);
}

// x[b, t, :] = wte[token] + wpe[t]
void CpuForward::embed(const float* unit, std::span<const std::int32_t> tokens) {
    const UnitLayout& u = layout_.units[0];
    cpu::embedding(x_.data(), tokens.data(), tensor_ptr(unit, u, gpt2::embed_tensor::wte),
                   tensor_ptr(unit, u, gpt2::embed_tensor::wpe), batch_, seq_, model_.n_embd);
    cpu::dropout_rows(x_.data(), static_cast<std::int64_t>(batch_) * seq_, model_.n_embd, dropout_,
                      Dropout::site_word(DropoutSite::embedding, 0));
}

// Pre-LN block (cpu_block.hpp): one ln_ buffer for both LayerNorms, GELU in fc_ in place.
void CpuForward::block(int layer, const float* unit, const UnitLayout& unit_layout) {
    const cpu::BlockActivations a{.ln1 = ln_.data(), .qkv = qkv_.data(), .att = att_.data(), .y = y_.data(),
                                  .x_mid = nullptr, .ln2 = ln_.data(), .fc_pre = nullptr, .fc = fc_.data(),
                                  .scores = scores_.data()};
    cpu::block_forward(x_.data(), a, unit, unit_layout,
                       {batch_, seq_, model_.n_embd, model_.n_head, model_.ln_eps, dropout_, layer});
}

// logits = ln_f(x) · lm_headᵀ, written straight into the caller's buffer.
void CpuForward::head(const float* unit, std::span<float> logits) {
    const UnitLayout& u = layout_.units[as_size(layout_.head_unit())];
    const int bt = batch_ * seq_;
    const int c = model_.n_embd;
    cpu::layernorm(ln_.data(), x_.data(), tensor_ptr(unit, u, gpt2::head_tensor::lnf_w),
                   tensor_ptr(unit, u, gpt2::head_tensor::lnf_b), bt, c, model_.ln_eps);
    cpu::linear(logits.data(), ln_.data(), tensor_ptr(unit, u, gpt2::head_tensor::lm_head), nullptr, bt, c,
                model_.vocab_size);
}

}  // namespace sweetspot
