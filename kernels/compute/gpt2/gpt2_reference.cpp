#include "kernels/compute/gpt2/gpt2_reference.hpp"

#include "kernels/compute/reference_ops.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"

namespace sweetspot::gpt2 {
namespace {

using reference::causal_self_attention;
using reference::causal_self_attention_backward;
using reference::dense;
using reference::dense_backward;
using reference::Dims;
using reference::gelu_tanh;
using reference::gelu_tanh_derivative;
using reference::gradient_of;
using reference::layer_norm;
using reference::layer_norm_backward;
using reference::row_dropout;
using reference::Rows;
using reference::tensor_of;
using reference::TensorView;

// x = (wte[token] + wpe[position]) with the embedding dropout, [seq, c]; and its backward, which
// adds dloss/dwte and dloss/dwpe to the embedding unit's gradient.
Rows embed(std::span<const std::int32_t> tokens, const float* unit, const UnitLayout& ul, const Dims& d) {
    const TensorView wte = tensor_of(unit, ul, embed_tensor::wte), wpe = tensor_of(unit, ul, embed_tensor::wpe);
    const std::uint32_t site = Dropout::site_word(DropoutSite::embedding, 0);
    const std::size_t seq = tokens.size();
    Rows x(seq * d.c);
    for (std::size_t t = 0; t < seq; ++t) {
        const auto tok = static_cast<std::size_t>(tokens[t]);
        for (std::size_t i = 0; i < d.c; ++i)
            x[t * d.c + i] = (wte[tok * d.c + i] + wpe[t * d.c + i]) * row_dropout(d, seq, site, t * d.c + i);
    }
    return x;
}

void embed_backward(std::span<const std::int32_t> tokens, const Rows& dx, const UnitLayout& ul, const Dims& d,
                    std::vector<double>& grad) {
    const std::uint32_t site = Dropout::site_word(DropoutSite::embedding, 0);
    const std::size_t seq = tokens.size();
    double* dwte = gradient_of(grad, ul, embed_tensor::wte);
    double* dwpe = gradient_of(grad, ul, embed_tensor::wpe);
    for (std::size_t t = 0; t < seq; ++t) {
        const auto tok = static_cast<std::size_t>(tokens[t]);
        for (std::size_t i = 0; i < d.c; ++i) {
            const double g = dx[t * d.c + i] * row_dropout(d, seq, site, t * d.c + i);
            dwte[tok * d.c + i] += g;
            dwpe[t * d.c + i] += g;
        }
    }
}

// What one block's backward needs of its forward: its input and the inner activations.
struct BlockTape {
    Rows x_in, h1, qkv, probs, attn, x_mid, h2, fc, gelu;
};

// One GPT-2 block over the residual stream x ([seq, c]), in place; the activations kept in
// `keep` where given (a training step), else dropped as the block ends (the forward alone).
void block_forward(Rows& x, const Dims& d, int layer, const float* unit, const UnitLayout& ul, BlockTape* keep) {
    const std::size_t seq = x.size() / d.c;
    const auto t = [&](int tensor) { return tensor_of(unit, ul, tensor); };
    const TensorView qkv_b = t(block_tensor::qkv_b), proj_b = t(block_tensor::proj_b);
    const TensorView fc_b = t(block_tensor::fc_b), fc_proj_b = t(block_tensor::fc_proj_b);
    // Without a tape to keep, the activations live in a local one, one block at a time.
    BlockTape local;
    BlockTape& tape = keep != nullptr ? *keep : local;
    tape.x_in = x;
    tape.h1 = layer_norm(x, d.c, t(block_tensor::ln1_w), t(block_tensor::ln1_b), d.eps);
    tape.qkv = dense(tape.h1, d.c, 3 * d.c, t(block_tensor::qkv_w), &qkv_b);
    tape.attn = causal_self_attention(tape.qkv, d, Dropout::site_word(DropoutSite::attention_probs, layer),
                                      keep != nullptr ? &tape.probs : nullptr);
    const Rows proj = dense(tape.attn, d.c, d.c, t(block_tensor::proj_w), &proj_b);
    const std::uint32_t attn_site = Dropout::site_word(DropoutSite::attention_residual, layer);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += proj[i] * row_dropout(d, seq, attn_site, i);
    tape.x_mid = x;
    tape.h2 = layer_norm(x, d.c, t(block_tensor::ln2_w), t(block_tensor::ln2_b), d.eps);
    tape.fc = dense(tape.h2, d.c, 4 * d.c, t(block_tensor::fc_w), &fc_b);
    tape.gelu = tape.fc;
    for (double& a : tape.gelu) a = gelu_tanh(a);
    const Rows mlp = dense(tape.gelu, 4 * d.c, d.c, t(block_tensor::fc_proj_w), &fc_proj_b);
    const std::uint32_t mlp_site = Dropout::site_word(DropoutSite::mlp_residual, layer);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += mlp[i] * row_dropout(d, seq, mlp_site, i);
}

// dx: dloss/d(block output) in, dloss/d(block input) out; the block's gradients added to `grad`.
void block_backward(Rows& dx, const BlockTape& tape, const Dims& d, int layer, const float* unit,
                    const UnitLayout& ul, std::vector<double>& grad) {
    const std::size_t seq = dx.size() / d.c;
    const auto t = [&](int tensor) { return tensor_of(unit, ul, tensor); };
    const auto g = [&](int tensor) { return gradient_of(grad, ul, tensor); };

    // x_out = x_mid + dropout(mlp): the residual passes dx on; the MLP branch gets it through the mask.
    const std::uint32_t mlp_site = Dropout::site_word(DropoutSite::mlp_residual, layer);
    Rows dmlp(dx.size());
    for (std::size_t i = 0; i < dx.size(); ++i) dmlp[i] = dx[i] * row_dropout(d, seq, mlp_site, i);
    Rows dgelu = dense_backward(tape.gelu, dmlp, 4 * d.c, d.c, t(block_tensor::fc_proj_w), g(block_tensor::fc_proj_w),
                                g(block_tensor::fc_proj_b));
    for (std::size_t i = 0; i < dgelu.size(); ++i) dgelu[i] *= gelu_tanh_derivative(tape.fc[i]);
    const Rows dh2 =
        dense_backward(tape.h2, dgelu, d.c, 4 * d.c, t(block_tensor::fc_w), g(block_tensor::fc_w), g(block_tensor::fc_b));
    const Rows dln2 = layer_norm_backward(tape.x_mid, dh2, d.c, t(block_tensor::ln2_w), d.eps, g(block_tensor::ln2_w),
                                          g(block_tensor::ln2_b));
    for (std::size_t i = 0; i < dx.size(); ++i) dx[i] += dln2[i];

    // x_mid = x_in + dropout(proj(attention(qkv(ln1(x_in))))).
    const std::uint32_t attn_site = Dropout::site_word(DropoutSite::attention_residual, layer);
    Rows dproj(dx.size());
    for (std::size_t i = 0; i < dx.size(); ++i) dproj[i] = dx[i] * row_dropout(d, seq, attn_site, i);
    const Rows dattn = dense_backward(tape.attn, dproj, d.c, d.c, t(block_tensor::proj_w), g(block_tensor::proj_w),
                                      g(block_tensor::proj_b));
    const Rows dqkv = causal_self_attention_backward(tape.qkv, tape.probs, dattn, d,
                                                     Dropout::site_word(DropoutSite::attention_probs, layer));
    const Rows dh1 = dense_backward(tape.h1, dqkv, d.c, 3 * d.c, t(block_tensor::qkv_w), g(block_tensor::qkv_w),
                                    g(block_tensor::qkv_b));
    const Rows dln1 = layer_norm_backward(tape.x_in, dh1, d.c, t(block_tensor::ln1_w), d.eps, g(block_tensor::ln1_w),
                                          g(block_tensor::ln1_b));
    for (std::size_t i = 0; i < dx.size(); ++i) dx[i] += dln1[i];
}

// The residual stream after the blocks, each block's activations kept in `tapes` where given.
Rows body(const ModelConfig& m, const WeightLayout& layout, std::span<const float* const> units,
          std::span<const std::int32_t> tokens, const Dims& d, std::vector<BlockTape>* tapes) {
    Rows x = embed(tokens, units[0], layout.units[0], d);
    for (int l = 0; l < m.n_layer; ++l) {
        const auto u = static_cast<std::size_t>(WeightLayout::block_unit(l));
        block_forward(x, d, l, units[u], layout.units[u], tapes != nullptr ? &tapes->emplace_back() : nullptr);
    }
    return x;
}

Dims sequence_dims(const ModelConfig& m, const Dropout& dropout, std::size_t sequence) {
    Dims d = reference::dims_of(m, dropout);
    d.sequence = sequence;
    return d;
}

}  // namespace

std::vector<double> reference_sequence(const ModelConfig& m, const WeightLayout& layout,
                                       std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                       const Dropout& dropout, std::size_t sequence) {
    const Dims d = sequence_dims(m, dropout, sequence);
    const Rows x = body(m, layout, units, tokens, d, nullptr);
    const auto hu = static_cast<std::size_t>(layout.head_unit());
    const float* head = units[hu];
    const UnitLayout& hl = layout.units[hu];
    const Rows xf = layer_norm(x, d.c, tensor_of(head, hl, head_tensor::lnf_w), tensor_of(head, hl, head_tensor::lnf_b), d.eps);
    return dense(xf, d.c, d.vocab, tensor_of(head, hl, head_tensor::lm_head), nullptr);
}

double reference_sequence_gradients(const ModelConfig& m, const WeightLayout& layout,
                                    std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                    std::span<const std::int32_t> targets, const Dropout& dropout,
                                    std::size_t sequence, double per_target, const ReferenceGradientSink& sink) {
    const Dims d = sequence_dims(m, dropout, sequence);
    std::vector<BlockTape> tapes;
    const Rows x = body(m, layout, units, tokens, d, &tapes);
    const auto hu = static_cast<std::size_t>(layout.head_unit());
    const UnitLayout& hl = layout.units[hu];
    const TensorView lnf_w = tensor_of(units[hu], hl, head_tensor::lnf_w);
    const Rows xf = layer_norm(x, d.c, lnf_w, tensor_of(units[hu], hl, head_tensor::lnf_b), d.eps);
    Rows dlogits = dense(xf, d.c, d.vocab, tensor_of(units[hu], hl, head_tensor::lm_head), nullptr);
    const double loss = reference::cross_entropy(dlogits, targets, d.vocab, per_target);

    std::vector<double>& head_grads = sink.buffer(hu);
    const Rows dxf = dense_backward(xf, dlogits, d.c, d.vocab, tensor_of(units[hu], hl, head_tensor::lm_head),
                                    gradient_of(head_grads, hl, head_tensor::lm_head), nullptr);
    Rows dx = layer_norm_backward(x, dxf, d.c, lnf_w, d.eps, gradient_of(head_grads, hl, head_tensor::lnf_w),
                                  gradient_of(head_grads, hl, head_tensor::lnf_b));
    sink.finished(hu);
    for (int l = m.n_layer - 1; l >= 0; --l) {
        const auto u = static_cast<std::size_t>(WeightLayout::block_unit(l));
        block_backward(dx, tapes[static_cast<std::size_t>(l)], d, l, units[u], layout.units[u], sink.buffer(u));
        sink.finished(u);
    }
    embed_backward(tokens, dx, layout.units[0], d, sink.buffer(0));
    sink.finished(0);
    return loss;
}

}  // namespace sweetspot::gpt2
