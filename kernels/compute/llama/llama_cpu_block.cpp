#include "kernels/compute/llama/llama_cpu_block.hpp"

#include <algorithm>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/rope_frequencies.hpp"
#include "kernels/model/llama/llama_tensors.hpp"

namespace sweetspot::llama {
namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

// `cols` columns of `rows` rows from a matrix whose rows are src_ld apart into one whose rows are
// dst_ld apart: a projection's output into its place in the packed qkv rows, and back.
void copy_columns(float* dst, int dst_ld, const float* src, int src_ld, int rows, int cols) {
    for (std::size_t r = 0; r < as_size(rows); ++r)
        std::copy_n(src + r * as_size(src_ld), cols, dst + r * as_size(dst_ld));
}

// The q, k and v projections' output widths and their first columns in the packed qkv row.
struct QkvPart {
    int tensor, width, column;
};

std::vector<QkvPart> qkv_parts(const ModelConfig& m) {
    const int c = m.n_embd, kv = m.kv_heads() * m.head_dim();
    return {{block_tensor::q_w, c, 0}, {block_tensor::k_w, kv, c}, {block_tensor::v_w, kv, c + kv}};
}

}  // namespace

int qkv_width(const ModelConfig& m) { return (m.n_head + 2 * m.kv_heads()) * m.head_dim(); }

RotaryTables::RotaryTables(const ModelConfig& model, const BatchShape& shape)
    : positions(shape.positions()),
      inv_freq(rope_inv_frequencies_f32(model.head_dim(), model.rope_theta, model.rope_scaling)) {}

std::int64_t RotaryTables::bytes() const {
    return static_cast<std::int64_t>(positions.size() * sizeof(std::int32_t) + inv_freq.size() * sizeof(float));
}

void block_forward(float* x, const BlockActivations& a, const float* unit, const UnitLayout& ul, const BlockShape& s) {
    const auto w = [&](int tensor) { return ul.tensor(unit, tensor); };
    const ModelConfig& m = s.model;
    const int bt = static_cast<int>(s.shape.rows()), c = m.n_embd, f = m.ffn_width(), width = qkv_width(m);
    const std::int64_t elems = static_cast<std::int64_t>(bt) * c;

    cpu::rmsnorm(a.ln1, x, w(block_tensor::attn_norm), bt, c, m.ln_eps);
    // q, k and v side by side in each row, the layout rope and the attention read.
    for (const QkvPart& part : qkv_parts(m)) {
        cpu::linear(a.projection, a.ln1, w(part.tensor), nullptr, bt, c, part.width);
        copy_columns(a.qkv + part.column, width, a.projection, part.width, bt, part.width);
    }
    cpu::rope(a.qkv, s.rotary.positions.data(), s.rotary.inv_freq.data(), bt, m.n_head, m.kv_heads(), m.head_dim());
    cpu::grouped_attention(a.att, a.scores, a.qkv, s.shape, m.n_head, m.kv_heads(), m.head_dim());
    cpu::linear(a.y, a.att, w(block_tensor::o_w), nullptr, bt, c, c);
    cpu::residual_add(x, a.y, elems);
    if (a.x_mid != nullptr) std::copy(x, x + elems, a.x_mid);

    cpu::rmsnorm(a.ln2, x, w(block_tensor::mlp_norm), bt, c, m.ln_eps);
    cpu::linear(a.gate, a.ln2, w(block_tensor::gate_w), nullptr, bt, c, f);
    cpu::linear(a.up, a.ln2, w(block_tensor::up_w), nullptr, bt, c, f);
    cpu::swiglu(a.act, a.gate, a.up, static_cast<std::int64_t>(bt) * f);
    cpu::linear(a.y, a.act, w(block_tensor::down_w), nullptr, bt, f, c);
    cpu::residual_add(x, a.y, elems);
}

BlockGradScratch::BlockGradScratch(const ModelConfig& m, const BatchShape& shape) {
    const std::size_t bt = as_size(shape.rows()), c = as_size(m.n_embd), f = as_size(m.ffn_width());
    for (auto* v : {&dln, &dln_part, &datt, &dprojection}) v->resize(bt * c);
    dqkv.resize(bt * as_size(qkv_width(m)));
    for (auto* v : {&dact, &dgate, &dup}) v->resize(bt * f);
    for (auto* v : {&probs, &grad}) v->resize(as_size(shape.stride()) * as_size(shape.stride()));
}

std::int64_t BlockGradScratch::bytes() const {
    std::size_t floats = 0;
    for (const auto* v : {&dln, &dln_part, &datt, &dprojection, &dqkv, &dact, &dgate, &dup, &probs, &grad})
        floats += v->size();
    return static_cast<std::int64_t>(floats * sizeof(float));
}

void block_backward(float* dx, float* grad, const float* x_in, const BlockActivations& a, const float* unit,
                    const UnitLayout& ul, const BlockShape& s, BlockGradScratch& t) {
    const auto w = [&](int tensor) { return ul.tensor(unit, tensor); };
    const auto g = [&](int tensor) { return ul.tensor(grad, tensor); };
    const ModelConfig& m = s.model;
    const int bt = static_cast<int>(s.shape.rows());
    const int c = m.n_embd, f = m.ffn_width(), width = qkv_width(m);
    const std::int64_t elems = static_cast<std::int64_t>(bt) * c;

    // x_out = x_mid + down(silu(gate) · up): the residual passes dx on, and the MLP's input
    // gradient, the sum of gate's and up's, adds to it through mlp_norm.
    cpu::linear_backward(t.dact.data(), g(block_tensor::down_w), nullptr, dx, a.act, w(block_tensor::down_w), bt, f, c);
    cpu::swiglu_backward(t.dgate.data(), t.dup.data(), t.dact.data(), a.gate, a.up, static_cast<std::int64_t>(bt) * f);
    cpu::linear_backward(t.dln.data(), g(block_tensor::gate_w), nullptr, t.dgate.data(), a.ln2, w(block_tensor::gate_w),
                         bt, c, f);
    cpu::linear_backward(t.dln_part.data(), g(block_tensor::up_w), nullptr, t.dup.data(), a.ln2, w(block_tensor::up_w),
                         bt, c, f);
    cpu::residual_add(t.dln.data(), t.dln_part.data(), elems);
    cpu::rmsnorm_backward(dx, g(block_tensor::mlp_norm), t.dln.data(), a.x_mid, w(block_tensor::mlp_norm), bt, c,
                          m.ln_eps);

    // x_mid = x_in + o_proj(attention(rope(q, k), v)), q, k and v projected from attn_norm(x_in):
    // the rotation's backward turns dq and dk back, and the three projections' input gradients add.
    cpu::linear_backward(t.datt.data(), g(block_tensor::o_w), nullptr, dx, a.att, w(block_tensor::o_w), bt, c, c);
    cpu::grouped_attention_backward(t.dqkv.data(), t.probs.data(), t.grad.data(), t.datt.data(), a.qkv, s.shape,
                                    m.n_head, m.kv_heads(), m.head_dim());
    cpu::rope_backward(t.dqkv.data(), s.rotary.positions.data(), s.rotary.inv_freq.data(), bt, m.n_head, m.kv_heads(),
                       m.head_dim());
    bool first = true;
    for (const QkvPart& part : qkv_parts(m)) {
        copy_columns(t.dprojection.data(), part.width, t.dqkv.data() + part.column, width, bt, part.width);
        float* din = first ? t.dln.data() : t.dln_part.data();
        cpu::linear_backward(din, g(part.tensor), nullptr, t.dprojection.data(), a.ln1, w(part.tensor), bt, c,
                             part.width);
        if (!first) cpu::residual_add(t.dln.data(), t.dln_part.data(), elems);
        first = false;
    }
    cpu::rmsnorm_backward(dx, g(block_tensor::attn_norm), t.dln.data(), x_in, w(block_tensor::attn_norm), bt, c,
                          m.ln_eps);
}

}  // namespace sweetspot::llama
