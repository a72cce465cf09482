#include "kernels/compute/cpu_gradients.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"

namespace sweetspot {
namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

const float* tensor_ptr(const float* unit, const UnitLayout& ul, int tensor) {
    return unit + ul.tensors[as_size(tensor)].offset;
}

void check_ids(std::span<const std::int32_t> ids, const ModelConfig& model, std::size_t count, const char* what) {
    if (ids.size() != count)
        throw std::invalid_argument(std::string("CpuBackprop: expected batch × seq ") + what + ", got " +
                                    std::to_string(ids.size()) + ".");
    for (const auto id : ids)
        if (id < 0 || id >= model.vocab_size)
            throw std::invalid_argument(std::string("CpuBackprop: ") + what + " id " + std::to_string(id) +
                                        " is outside the vocabulary.");
}

// Sizes of the buffers CpuBackprop holds, in floats: the one place both the allocation and
// buffer_bytes_for read.
struct BufferSizes {
    std::size_t per_block, activations, scratch;
    BufferSizes(const ModelConfig& m, int batch, int seq) {
        const std::size_t bt = as_size(batch) * as_size(seq), c = as_size(m.n_embd), s = as_size(seq);
        // x_in, ln1, att, x_mid, ln2: c each; qkv 3c; fc_pre, fc 4c each.
        per_block = bt * (5 * c + 3 * c + 8 * c);
        // x, y, xf, dxf, dx [bt, c]; scores [seq, seq]; logits [bt, vocab].
        activations = 5 * bt * c + s * s + bt * as_size(m.vocab_size);
        // BlockGradScratch: dy, dln, datt [bt, c]; dqkv [bt, 3c]; dfc [bt, 4c]; probs, grad [seq, seq].
        scratch = bt * (3 * c + 3 * c + 4 * c) + 2 * s * s;
    }
};

}  // namespace

CpuBackprop::KeptBlock::KeptBlock(std::size_t bt, std::size_t c)
    : x_in(bt * c), ln1(bt * c), qkv(bt * 3 * c), att(bt * c), x_mid(bt * c), ln2(bt * c), fc_pre(bt * 4 * c),
      fc(bt * 4 * c) {}

cpu::BlockActivations CpuBackprop::KeptBlock::activations(float* y, float* scores) {
    return {.ln1 = ln1.data(), .qkv = qkv.data(), .att = att.data(), .y = y, .x_mid = x_mid.data(),
            .ln2 = ln2.data(), .fc_pre = fc_pre.data(), .fc = fc.data(), .scores = scores};
}

CpuBackprop::CpuBackprop(const ModelConfig& model, const WeightLayout& layout, int batch, int seq, const Dropout& dropout)
    : model_(model),
      layout_(layout),
      batch_(batch),
      seq_(seq),
      dropout_(dropout.for_shape(seq, model.max_positions)),
      scratch_(batch * seq, model.n_embd, seq) {
    require_layout_for(model, layout, "CpuBackprop");
    if (batch < 1 || seq < 1 || seq > model.max_positions) throw std::invalid_argument("CpuBackprop: bad batch × seq.");
    const std::size_t bt = as_size(batch) * as_size(seq), c = as_size(model.n_embd);
    for (int l = 0; l < model.n_layer; ++l) kept_.emplace_back(bt, c);
    x_.resize(bt * c);
    y_.resize(bt * c);
    xf_.resize(bt * c);
    dxf_.resize(bt * c);
    dx_.resize(bt * c);
    scores_.resize(as_size(seq) * as_size(seq));
    logits_.resize(bt * as_size(model.vocab_size));
}

cpu::BlockShape CpuBackprop::block_shape(int layer) const {
    return {batch_, seq_, model_.n_embd, model_.n_head, model_.ln_eps, dropout_, layer};
}

std::int64_t CpuBackprop::buffer_bytes_for(const ModelConfig& model, int batch, int seq) {
    const BufferSizes s(model, batch, seq);
    return static_cast<std::int64_t>((s.per_block * as_size(model.n_layer) + s.activations + s.scratch) * sizeof(float));
}

std::int64_t CpuBackprop::buffer_bytes() const { return buffer_bytes_for(model_, batch_, seq_); }

double CpuBackprop::forward(LayerSource& weights, std::span<const std::int32_t> tokens,
                            std::span<const std::int32_t> targets) {
    const std::size_t bt = as_size(batch_) * as_size(seq_);
    check_ids(tokens, model_, bt, "tokens");
    check_ids(targets, model_, bt, "targets");
    tokens_.assign(tokens.begin(), tokens.end());
    const int rows = static_cast<int>(bt);

    const UnitLayout& el = layout_.units[0];
    const auto* embed = static_cast<const float*>(weights.acquire(0));
    cpu::embedding(x_.data(), tokens.data(), tensor_ptr(embed, el, gpt2::embed_tensor::wte),
                   tensor_ptr(embed, el, gpt2::embed_tensor::wpe), batch_, seq_, model_.n_embd);
    weights.release(0);
    cpu::dropout_rows(x_.data(), rows, model_.n_embd, dropout_, Dropout::site_word(DropoutSite::embedding, 0));
    for (int l = 0; l < model_.n_layer; ++l) {
        KeptBlock& k = kept_[as_size(l)];
        std::copy(x_.begin(), x_.end(), k.x_in.begin());
        const int u = WeightLayout::block_unit(l);
        cpu::block_forward(x_.data(), k.activations(y_.data(), scores_.data()),
                           static_cast<const float*>(weights.acquire(u)), layout_.units[as_size(u)], block_shape(l));
        weights.release(u);
    }
    const int hu = layout_.head_unit();
    const UnitLayout& hl = layout_.units[as_size(hu)];
    const auto* head = static_cast<const float*>(weights.acquire(hu));
    cpu::layernorm(xf_.data(), x_.data(), tensor_ptr(head, hl, gpt2::head_tensor::lnf_w), tensor_ptr(head, hl, gpt2::head_tensor::lnf_b),
                   rows, model_.n_embd, model_.ln_eps);
    cpu::linear(logits_.data(), xf_.data(), tensor_ptr(head, hl, gpt2::head_tensor::lm_head), nullptr, rows, model_.n_embd,
                model_.vocab_size);
    weights.release(hu);
    const float per_target = 1.0f / static_cast<float>(bt);
    return cpu::cross_entropy(logits_.data(), targets.data(), rows, model_.vocab_size, per_target) /
           static_cast<double>(bt);
}

double CpuBackprop::backward(LayerSource& weights) {
    const int rows = batch_ * seq_;
    const auto gradient_of = [&](int unit) {
        auto* g = static_cast<float*>(weights.gradient(unit));
        std::fill_n(g, layout_.units[as_size(unit)].numel, 0.0f);  // the ops below add to it
        return g;
    };
    const auto squares_of = [&](const float* g, int unit) {
        return cpu::squared_norm(g, layout_.units[as_size(unit)].numel);
    };
    double squares = 0.0;

    const int hu = layout_.head_unit();
    const UnitLayout& hl = layout_.units[as_size(hu)];
    const auto* head = static_cast<const float*>(weights.acquire(hu));
    float* head_grad = gradient_of(hu);
    const auto head_g = [&](int tensor) { return head_grad + hl.tensors[as_size(tensor)].offset; };
    std::fill(dx_.begin(), dx_.end(), 0.0f);
    cpu::linear_backward(dxf_.data(), head_g(gpt2::head_tensor::lm_head), nullptr, logits_.data(), xf_.data(),
                         tensor_ptr(head, hl, gpt2::head_tensor::lm_head), rows, model_.n_embd, model_.vocab_size);
    cpu::layernorm_backward(dx_.data(), head_g(gpt2::head_tensor::lnf_w), head_g(gpt2::head_tensor::lnf_b), dxf_.data(), x_.data(),
                            tensor_ptr(head, hl, gpt2::head_tensor::lnf_w), rows, model_.n_embd, model_.ln_eps);
    squares += squares_of(head_grad, hu);
    weights.release(hu);

    for (int l = model_.n_layer - 1; l >= 0; --l) {
        KeptBlock& k = kept_[as_size(l)];
        const int u = WeightLayout::block_unit(l);
        const auto* unit = static_cast<const float*>(weights.acquire(u));
        float* grad = gradient_of(u);
        cpu::block_backward(dx_.data(), grad, k.x_in.data(), k.activations(y_.data(), scores_.data()), unit,
                            layout_.units[as_size(u)], block_shape(l), scratch_);
        squares += squares_of(grad, u);
        weights.release(u);
    }

    weights.acquire(0);
    const UnitLayout& el = layout_.units[0];
    float* embed_grad = gradient_of(0);
    cpu::dropout_rows(dx_.data(), rows, model_.n_embd, dropout_, Dropout::site_word(DropoutSite::embedding, 0));
    cpu::embedding_backward(embed_grad + el.tensors[gpt2::embed_tensor::wte].offset,
                            embed_grad + el.tensors[gpt2::embed_tensor::wpe].offset, dx_.data(), tokens_.data(), batch_, seq_,
                            model_.n_embd);
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
                           std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, int batch,
                           int seq, const Dropout& dropout) {
    require_layout_for(model, layout, "cpu_gradients");
    if (units.size() != layout.units.size()) throw std::invalid_argument("cpu_gradients: one pointer per unit is needed.");
    PointerSource source(units, layout);
    CpuBackprop backprop(model, layout, batch, seq, dropout);
    CpuGradients out;
    out.loss = backprop.forward(source, tokens, targets);
    backprop.backward(source);
    out.units = source.take_gradients();
    return out;
}

}  // namespace sweetspot
