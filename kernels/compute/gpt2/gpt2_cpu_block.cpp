#include "kernels/compute/gpt2/gpt2_cpu_block.hpp"

#include <algorithm>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"

namespace sweetspot::gpt2 {
namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

}  // namespace

void block_forward(float* x, const BlockActivations& a, const float* unit, const UnitLayout& ul, const BlockShape& s) {
    const auto w = [&](int tensor) { return ul.tensor(unit, tensor); };
    const int bt = static_cast<int>(s.shape.rows());
    const int c = s.c;
    const std::int64_t elems = static_cast<std::int64_t>(bt) * c;

    cpu::layernorm(a.ln1, x, w(block_tensor::ln1_w), w(block_tensor::ln1_b), bt, c, s.eps);
    cpu::linear(a.qkv, a.ln1, w(block_tensor::qkv_w), w(block_tensor::qkv_b), bt, c, 3 * c);
    cpu::attention(a.att, a.scores, a.qkv, s.shape, c, s.n_head, s.dropout,
                   Dropout::site_word(DropoutSite::attention_probs, s.layer));
    cpu::linear(a.y, a.att, w(block_tensor::proj_w), w(block_tensor::proj_b), bt, c, c);
    cpu::dropout_rows(a.y, bt, c, s.dropout, Dropout::site_word(DropoutSite::attention_residual, s.layer));
    cpu::residual_add(x, a.y, elems);
    if (a.x_mid != nullptr) std::copy(x, x + elems, a.x_mid);

    cpu::layernorm(a.ln2, x, w(block_tensor::ln2_w), w(block_tensor::ln2_b), bt, c, s.eps);
    float* fc_out = a.fc_pre != nullptr ? a.fc_pre : a.fc;
    cpu::linear(fc_out, a.ln2, w(block_tensor::fc_w), w(block_tensor::fc_b), bt, c, 4 * c);
    if (a.fc_pre != nullptr) std::copy(a.fc_pre, a.fc_pre + 4 * elems, a.fc);
    cpu::gelu_tanh(a.fc, 4 * elems);
    cpu::linear(a.y, a.fc, w(block_tensor::fc_proj_w), w(block_tensor::fc_proj_b), bt, 4 * c, c);
    cpu::dropout_rows(a.y, bt, c, s.dropout, Dropout::site_word(DropoutSite::mlp_residual, s.layer));
    cpu::residual_add(x, a.y, elems);
}

BlockGradScratch::BlockGradScratch(const BatchShape& shape, int c) {
    const std::size_t bt = as_size(shape.rows()), width = as_size(c), s = as_size(shape.stride());
    for (auto* v : {&dy, &dln, &datt}) v->resize(bt * width);
    dqkv.resize(bt * 3 * width);
    dfc.resize(bt * 4 * width);
    for (auto* v : {&probs, &grad}) v->resize(s * s);
}

void block_backward(float* dx, float* grad, const float* x_in, const BlockActivations& a, const float* unit,
                    const UnitLayout& ul, const BlockShape& s, BlockGradScratch& t) {
    const auto w = [&](int tensor) { return ul.tensor(unit, tensor); };
    const auto g = [&](int tensor) { return ul.tensor(grad, tensor); };
    const int bt = static_cast<int>(s.shape.rows());
    const int c = s.c;
    const std::int64_t elems = static_cast<std::int64_t>(bt) * c;

    // x_out = x_mid + dropout(mlp): the residual passes dx on; the MLP gets it through the mask.
    std::copy(dx, dx + elems, t.dy.data());
    cpu::dropout_rows(t.dy.data(), bt, c, s.dropout, Dropout::site_word(DropoutSite::mlp_residual, s.layer));
    cpu::linear_backward(t.dfc.data(), g(block_tensor::fc_proj_w), g(block_tensor::fc_proj_b), t.dy.data(), a.fc,
                         w(block_tensor::fc_proj_w), bt, 4 * c, c);
    cpu::gelu_tanh_backward(t.dfc.data(), a.fc_pre, 4 * elems);
    cpu::linear_backward(t.dln.data(), g(block_tensor::fc_w), g(block_tensor::fc_b), t.dfc.data(), a.ln2,
                         w(block_tensor::fc_w), bt, c, 4 * c);
    cpu::layernorm_backward(dx, g(block_tensor::ln2_w), g(block_tensor::ln2_b), t.dln.data(), a.x_mid, w(block_tensor::ln2_w),
                            bt, c, s.eps);

    // x_mid = x_in + dropout(c_proj(attention(c_attn(ln_1(x_in))))).
    std::copy(dx, dx + elems, t.dy.data());
    cpu::dropout_rows(t.dy.data(), bt, c, s.dropout, Dropout::site_word(DropoutSite::attention_residual, s.layer));
    cpu::linear_backward(t.datt.data(), g(block_tensor::proj_w), g(block_tensor::proj_b), t.dy.data(), a.att,
                         w(block_tensor::proj_w), bt, c, c);
    cpu::attention_backward(t.dqkv.data(), t.probs.data(), t.grad.data(), t.datt.data(), a.qkv, s.shape, c, s.n_head,
                            s.dropout, Dropout::site_word(DropoutSite::attention_probs, s.layer));
    cpu::linear_backward(t.dln.data(), g(block_tensor::qkv_w), g(block_tensor::qkv_b), t.dqkv.data(), a.ln1,
                         w(block_tensor::qkv_w), bt, c, 3 * c);
    cpu::layernorm_backward(dx, g(block_tensor::ln1_w), g(block_tensor::ln1_b), t.dln.data(), x_in, w(block_tensor::ln1_w), bt,
                            c, s.eps);
}

}  // namespace sweetspot::gpt2
