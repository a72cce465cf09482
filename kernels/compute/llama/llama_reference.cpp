#include "kernels/compute/llama/llama_reference.hpp"

#include "kernels/compute/reference_ops.hpp"
#include "kernels/compute/rope_frequencies.hpp"
#include "kernels/model/llama/llama_tensors.hpp"

namespace sweetspot::llama {
namespace {

using reference::dense;
using reference::dense_backward;
using reference::gradient_of;
using reference::QkvHeads;
using reference::rms_norm;
using reference::rms_norm_backward;
using reference::Rows;
using reference::tensor_of;
using reference::TensorView;

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

// The model's sizes and the rotation's tables for one sequence of `seq` positions.
struct Shape {
    std::size_t seq, c, f, kv, vocab;
    double eps;
    QkvHeads heads;
    std::vector<double> inv_freq;
    std::vector<std::int32_t> positions;

    Shape(const ModelConfig& m, std::size_t sequence_length)
        : seq(sequence_length), c(as_size(m.n_embd)), f(as_size(m.ffn_width())),
          kv(as_size(m.kv_heads()) * as_size(m.head_dim())), vocab(as_size(m.vocab_size)), eps(m.ln_eps),
          heads{as_size(m.n_head), as_size(m.kv_heads()), as_size(m.head_dim())},
          inv_freq(rope_inv_frequencies(m.head_dim(), m.rope_theta, m.rope_scaling)), positions(sequence_length) {
        for (std::size_t t = 0; t < seq; ++t) positions[t] = static_cast<std::int32_t>(t);
    }
    std::size_t width() const { return c + 2 * kv; }
};

// q [seq, c], k and v [seq, kv] side by side in each row of qkv [seq, c + 2·kv], and back.
Rows pack_qkv(const Rows& q, const Rows& k, const Rows& v, const Shape& s) {
    Rows qkv(s.seq * s.width());
    for (std::size_t t = 0; t < s.seq; ++t) {
        for (std::size_t i = 0; i < s.c; ++i) qkv[t * s.width() + i] = q[t * s.c + i];
        for (std::size_t i = 0; i < s.kv; ++i) {
            qkv[t * s.width() + s.c + i] = k[t * s.kv + i];
            qkv[t * s.width() + s.c + s.kv + i] = v[t * s.kv + i];
        }
    }
    return qkv;
}

// Columns [first, first + width) of every row of qkv.
Rows qkv_columns(const Rows& qkv, std::size_t first, std::size_t width, const Shape& s) {
    Rows out(s.seq * width);
    for (std::size_t t = 0; t < s.seq; ++t)
        for (std::size_t i = 0; i < width; ++i) out[t * width + i] = qkv[t * s.width() + first + i];
    return out;
}

void add(Rows& to, const Rows& from) {
    for (std::size_t i = 0; i < to.size(); ++i) to[i] += from[i];
}

// What one block's backward needs of its forward: its input and the inner activations.
struct BlockTape {
    Rows x_in, h1, qkv, attn, x_mid, h2, gate, up, mixed;  // qkv with q and k rotated
};

// One block over the residual stream x ([seq, c]), in place, its activations left in `tape`.
void block_forward(Rows& x, const Shape& s, const float* unit, const UnitLayout& ul, BlockTape& tape) {
    const auto w = [&](int tensor) { return tensor_of(unit, ul, tensor); };
    tape.x_in = x;
    tape.h1 = rms_norm(x, s.c, w(block_tensor::attn_norm), s.eps);
    const Rows qkv = pack_qkv(dense(tape.h1, s.c, s.c, w(block_tensor::q_w), nullptr),
                              dense(tape.h1, s.c, s.kv, w(block_tensor::k_w), nullptr),
                              dense(tape.h1, s.c, s.kv, w(block_tensor::v_w), nullptr), s);
    tape.qkv = reference::rope(qkv, s.positions, s.heads, s.inv_freq);
    tape.attn = reference::grouped_causal_attention(tape.qkv, s.heads);
    add(x, dense(tape.attn, s.c, s.c, w(block_tensor::o_w), nullptr));
    tape.x_mid = x;
    tape.h2 = rms_norm(x, s.c, w(block_tensor::mlp_norm), s.eps);
    tape.gate = dense(tape.h2, s.c, s.f, w(block_tensor::gate_w), nullptr);
    tape.up = dense(tape.h2, s.c, s.f, w(block_tensor::up_w), nullptr);
    tape.mixed = reference::swiglu(tape.gate, tape.up);
    add(x, dense(tape.mixed, s.f, s.c, w(block_tensor::down_w), nullptr));
}

// dx: dloss/d(block output) in, dloss/d(block input) out; the block's gradients added to `grad`.
void block_backward(Rows& dx, const BlockTape& tape, const Shape& s, const float* unit, const UnitLayout& ul,
                    std::vector<double>& grad) {
    const auto w = [&](int tensor) { return tensor_of(unit, ul, tensor); };
    const auto g = [&](int tensor) { return gradient_of(grad, ul, tensor); };

    // x_out = x_mid + down(silu(gate) · up): the residual passes dx on.
    const Rows dmixed = dense_backward(tape.mixed, dx, s.f, s.c, w(block_tensor::down_w), g(block_tensor::down_w), nullptr);
    const reference::SwigluGradients dswiglu = reference::swiglu_backward(tape.gate, tape.up, dmixed);
    Rows dh2 = dense_backward(tape.h2, dswiglu.dgate, s.c, s.f, w(block_tensor::gate_w), g(block_tensor::gate_w), nullptr);
    add(dh2, dense_backward(tape.h2, dswiglu.dup, s.c, s.f, w(block_tensor::up_w), g(block_tensor::up_w), nullptr));
    add(dx, rms_norm_backward(tape.x_mid, dh2, s.c, w(block_tensor::mlp_norm), s.eps, g(block_tensor::mlp_norm)));

    // x_mid = x_in + o_proj(attention(rope(q, k), v)), q, k and v projected from h1.
    const Rows dattn = dense_backward(tape.attn, dx, s.c, s.c, w(block_tensor::o_w), g(block_tensor::o_w), nullptr);
    const Rows dqkv = reference::rope_backward(reference::grouped_causal_attention_backward(tape.qkv, dattn, s.heads),
                                               s.positions, s.heads, s.inv_freq);
    Rows dh1 = dense_backward(tape.h1, qkv_columns(dqkv, 0, s.c, s), s.c, s.c, w(block_tensor::q_w),
                              g(block_tensor::q_w), nullptr);
    add(dh1, dense_backward(tape.h1, qkv_columns(dqkv, s.c, s.kv, s), s.c, s.kv, w(block_tensor::k_w),
                            g(block_tensor::k_w), nullptr));
    add(dh1, dense_backward(tape.h1, qkv_columns(dqkv, s.c + s.kv, s.kv, s), s.c, s.kv, w(block_tensor::v_w),
                            g(block_tensor::v_w), nullptr));
    add(dx, rms_norm_backward(tape.x_in, dh1, s.c, w(block_tensor::attn_norm), s.eps, g(block_tensor::attn_norm)));
}

// The residual stream after the blocks, each block's activations kept in `tapes` where given (a
// training step), else dropped as the block ends (the forward alone).
Rows body(const ModelConfig& m, const WeightLayout& layout, std::span<const float* const> units,
          std::span<const std::int32_t> tokens, const Shape& s, std::vector<BlockTape>* tapes) {
    const TensorView table = tensor_of(units[0], layout.units[0], embed_tensor::tokens);
    Rows x(s.seq * s.c);
    for (std::size_t t = 0; t < s.seq; ++t)
        for (std::size_t i = 0; i < s.c; ++i) x[t * s.c + i] = table[as_size(tokens[t]) * s.c + i];
    BlockTape local;
    for (int l = 0; l < m.n_layer; ++l) {
        const auto u = as_size(WeightLayout::block_unit(l));
        block_forward(x, s, units[u], layout.units[u], tapes != nullptr ? tapes->emplace_back() : local);
    }
    return x;
}

}  // namespace

std::vector<double> reference_sequence(const ModelConfig& m, const WeightLayout& layout,
                                       std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                       const Dropout&, std::size_t) {
    const Shape s(m, tokens.size());
    const Rows x = body(m, layout, units, tokens, s, nullptr);
    const auto hu = as_size(layout.head_unit());
    const Rows xf = rms_norm(x, s.c, tensor_of(units[hu], layout.units[hu], head_tensor::norm), s.eps);
    return dense(xf, s.c, s.vocab, tensor_of(units[hu], layout.units[hu], head_tensor::lm_head), nullptr);
}

double reference_sequence_gradients(const ModelConfig& m, const WeightLayout& layout,
                                    std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                    std::span<const std::int32_t> targets, const Dropout&, std::size_t,
                                    double per_target, const ReferenceGradientSink& sink) {
    const Shape s(m, tokens.size());
    std::vector<BlockTape> tapes;
    const Rows x = body(m, layout, units, tokens, s, &tapes);
    const auto hu = as_size(layout.head_unit());
    const UnitLayout& hl = layout.units[hu];
    const TensorView norm = tensor_of(units[hu], hl, head_tensor::norm);
    const TensorView lm_head = tensor_of(units[hu], hl, head_tensor::lm_head);
    const Rows xf = rms_norm(x, s.c, norm, s.eps);
    Rows dlogits = dense(xf, s.c, s.vocab, lm_head, nullptr);
    const double loss = reference::cross_entropy(dlogits, targets, s.vocab, per_target);

    std::vector<double>& head_grads = sink.buffer(hu);
    const Rows dxf = dense_backward(xf, dlogits, s.c, s.vocab, lm_head, gradient_of(head_grads, hl, head_tensor::lm_head),
                                    nullptr);
    Rows dx = rms_norm_backward(x, dxf, s.c, norm, s.eps, gradient_of(head_grads, hl, head_tensor::norm));
    sink.finished(hu);
    for (int l = m.n_layer - 1; l >= 0; --l) {
        const auto u = as_size(WeightLayout::block_unit(l));
        block_backward(dx, tapes[as_size(l)], s, units[u], layout.units[u], sink.buffer(u));
        sink.finished(u);
    }
    // The token table's rows take their tokens' gradients; there is no position table.
    std::vector<double>& embed_grads = sink.buffer(0);
    double* dtable = gradient_of(embed_grads, layout.units[0], embed_tensor::tokens);
    for (std::size_t t = 0; t < s.seq; ++t)
        for (std::size_t i = 0; i < s.c; ++i) dtable[as_size(tokens[t]) * s.c + i] += dx[t * s.c + i];
    sink.finished(0);
    return loss;
}

}  // namespace sweetspot::llama
