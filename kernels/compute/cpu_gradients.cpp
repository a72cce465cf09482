#include "kernels/compute/cpu_gradients.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/compute/cpu_block.hpp"
#include "kernels/compute/cpu_ops.hpp"

namespace sweetspot {
namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

const float* tensor_ptr(const float* unit, const UnitLayout& ul, int tensor) {
    return unit + ul.tensors[as_size(tensor)].offset;
}

// One block's kept activations: its input and what its backward reads.
struct KeptBlock {
    std::vector<float> x_in, ln1, qkv, att, x_mid, ln2, fc_pre, fc;
    KeptBlock(std::size_t bt, std::size_t c)
        : x_in(bt * c), ln1(bt * c), qkv(bt * 3 * c), att(bt * c), x_mid(bt * c), ln2(bt * c), fc_pre(bt * 4 * c),
          fc(bt * 4 * c) {}
    cpu::BlockActivations activations(float* y, float* scores) {
        return {.ln1 = ln1.data(), .qkv = qkv.data(), .att = att.data(), .y = y, .x_mid = x_mid.data(),
                .ln2 = ln2.data(), .fc_pre = fc_pre.data(), .fc = fc.data(), .scores = scores};
    }
};

void check_ids(std::span<const std::int32_t> ids, const ModelConfig& model, std::size_t count, const char* what) {
    if (ids.size() != count)
        throw std::invalid_argument(std::string("cpu_gradients: expected batch × seq ") + what + ", got " +
                                    std::to_string(ids.size()) + ".");
    for (const auto id : ids)
        if (id < 0 || id >= model.vocab_size)
            throw std::invalid_argument(std::string("cpu_gradients: ") + what + " id " + std::to_string(id) +
                                        " is outside the vocabulary.");
}

}  // namespace

CpuGradients cpu_gradients(const ModelConfig& model, const WeightLayout& layout, std::span<const float* const> units,
                           std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, int batch,
                           int seq, const Dropout& dropout) {
    require_layout_for(model, layout, "cpu_gradients");
    if (units.size() != layout.units.size()) throw std::invalid_argument("cpu_gradients: one pointer per unit is needed.");
    if (batch < 1 || seq < 1 || seq > model.max_positions) throw std::invalid_argument("cpu_gradients: bad batch × seq.");
    const std::size_t bt = as_size(batch) * as_size(seq), c = as_size(model.n_embd), vocab = as_size(model.vocab_size);
    check_ids(tokens, model, bt, "tokens");
    check_ids(targets, model, bt, "targets");
    const Dropout d = dropout.for_shape(seq, model.max_positions);
    const int rows = static_cast<int>(bt);

    CpuGradients out;
    for (const UnitLayout& unit : layout.units) out.units.emplace_back(as_size(unit.numel), 0.0f);

    // Forward, keeping each block's activations.
    const UnitLayout& el = layout.units[0];
    std::vector<float> x(bt * c), y(bt * c), scores(as_size(seq) * as_size(seq));
    cpu::embedding(x.data(), tokens.data(), tensor_ptr(units[0], el, embed_tensor::wte),
                   tensor_ptr(units[0], el, embed_tensor::wpe), batch, seq, model.n_embd);
    const std::uint32_t embedding_site = Dropout::site_word(DropoutSite::embedding, 0);
    cpu::dropout_rows(x.data(), rows, model.n_embd, d, embedding_site);
    std::vector<KeptBlock> kept;
    for (int l = 0; l < model.n_layer; ++l) {
        KeptBlock& k = kept.emplace_back(bt, c);
        std::copy(x.begin(), x.end(), k.x_in.begin());
        const auto u = as_size(WeightLayout::block_unit(l));
        cpu::block_forward(x.data(), k.activations(y.data(), scores.data()), units[u], layout.units[u],
                           {batch, seq, model.n_embd, model.n_head, model.ln_eps, d, l});
    }
    const auto hu = as_size(layout.head_unit());
    const UnitLayout& hl = layout.units[hu];
    std::vector<float> xf(bt * c), logits(bt * vocab);
    cpu::layernorm(xf.data(), x.data(), tensor_ptr(units[hu], hl, head_tensor::lnf_w),
                   tensor_ptr(units[hu], hl, head_tensor::lnf_b), rows, model.n_embd, model.ln_eps);
    cpu::linear(logits.data(), xf.data(), tensor_ptr(units[hu], hl, head_tensor::lm_head), nullptr, rows, model.n_embd,
                model.vocab_size);
    const float per_target = 1.0f / static_cast<float>(bt);
    out.loss = cpu::cross_entropy(logits.data(), targets.data(), rows, model.vocab_size, per_target) /
               static_cast<double>(bt);

    // Backward: the head, the blocks in reverse, the embedding.
    float* head_grad = out.units[hu].data();
    const auto head_g = [&](int tensor) { return head_grad + hl.tensors[as_size(tensor)].offset; };
    std::vector<float> dxf(bt * c), dx(bt * c, 0.0f);
    cpu::linear_backward(dxf.data(), head_g(head_tensor::lm_head), nullptr, logits.data(), xf.data(),
                         tensor_ptr(units[hu], hl, head_tensor::lm_head), rows, model.n_embd, model.vocab_size);
    cpu::layernorm_backward(dx.data(), head_g(head_tensor::lnf_w), head_g(head_tensor::lnf_b), dxf.data(), x.data(),
                            tensor_ptr(units[hu], hl, head_tensor::lnf_w), rows, model.n_embd, model.ln_eps);
    cpu::BlockGradScratch scratch(rows, model.n_embd, seq);
    for (int l = model.n_layer - 1; l >= 0; --l) {
        KeptBlock& k = kept[as_size(l)];
        const auto u = as_size(WeightLayout::block_unit(l));
        cpu::block_backward(dx.data(), out.units[u].data(), k.x_in.data(), k.activations(y.data(), scores.data()),
                            units[u], layout.units[u], {batch, seq, model.n_embd, model.n_head, model.ln_eps, d, l},
                            scratch);
    }
    cpu::dropout_rows(dx.data(), rows, model.n_embd, d, embedding_site);
    cpu::embedding_backward(out.units[0].data() + el.tensors[embed_tensor::wte].offset,
                            out.units[0].data() + el.tensors[embed_tensor::wpe].offset, dx.data(), tokens.data(), batch,
                            seq, model.n_embd);
    return out;
}

}  // namespace sweetspot
