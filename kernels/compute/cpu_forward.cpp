#include "kernels/compute/cpu_forward.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace sweetspot {

namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

const float* tensor_ptr(const float* unit, const UnitLayout& unit_layout, int tensor) {
    return unit + unit_layout.tensors[as_size(tensor)].offset;
}

// out[rows, c] = (in − mean) / sqrt(var + eps) · w + b per row, with the biased variance as in
// nn.LayerNorm. Two passes (mean, then centred squares) avoid the cancellation of E[x²] − E[x]².
void layernorm(float* out, const float* in, const float* w, const float* b, int rows, int c, float eps) {
    for (int r = 0; r < rows; ++r) {
        const float* x = in + as_size(r) * as_size(c);
        float* y = out + as_size(r) * as_size(c);
        float mean = 0.0f;
        for (int i = 0; i < c; ++i) mean += x[i];
        mean /= static_cast<float>(c);
        float var = 0.0f;
        for (int i = 0; i < c; ++i) {
            const float d = x[i] - mean;
            var += d * d;
        }
        var /= static_cast<float>(c);
        const float rstd = 1.0f / std::sqrt(var + eps);
        for (int i = 0; i < c; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
    }
}

// out[rows, out_dim] = in[rows, in_dim] · wᵀ + bias, w row-major [out_dim, in_dim] as nn.Linear.
// The bias is copied into every row first and the product accumulated onto it (beta = 1), so
// one sgemm does the whole layer. bias may be null (lm_head).
void linear(float* out, const float* in, const float* w, const float* bias, int rows, int in_dim, int out_dim) {
    if (bias != nullptr) {
        for (int r = 0; r < rows; ++r) std::copy(bias, bias + out_dim, out + as_size(r) * as_size(out_dim));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out_dim, in_dim, 1.0f, in, in_dim, w, in_dim,
                bias != nullptr ? 1.0f : 0.0f, out, out_dim);
}

// Row i of scores [t, t] may attend to positions 0..i only: softmax over those (minus the row
// max so exp cannot overflow) and zeros after, so the following ·V product ignores them.
void causal_softmax(float* scores, int t) {
    for (int i = 0; i < t; ++i) {
        float* row = scores + as_size(i) * as_size(t);
        float max = row[0];
        for (int j = 1; j <= i; ++j) max = std::max(max, row[j]);
        float sum = 0.0f;
        for (int j = 0; j <= i; ++j) {
            row[j] = std::exp(row[j] - max);
            sum += row[j];
        }
        const float inv_sum = 1.0f / sum;
        for (int j = 0; j <= i; ++j) row[j] *= inv_sum;
        std::fill(row + i + 1, row + t, 0.0f);
    }
}

// Causal multi-head attention. qkv [b, t, 3c] holds q, k and v side by side in each row, head h
// at columns h·hd of each; out [b, t, c] gets head h at columns h·hd. The heads are read and
// written in place through the leading dimensions, so nothing is transposed or copied.
// scores is a [t, t] scratch reused for every (batch, head).
void attention(float* out, float* scores, const float* qkv, int b, int t, int c, int n_head) {
    const int hd = c / n_head;
    const int ld_qkv = 3 * c;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int bi = 0; bi < b; ++bi) {
        for (int h = 0; h < n_head; ++h) {
            const float* q = qkv + as_size(bi) * as_size(t) * as_size(ld_qkv) + as_size(h) * as_size(hd);
            const float* k = q + c;
            const float* v = q + 2 * c;
            float* o = out + as_size(bi) * as_size(t) * as_size(c) + as_size(h) * as_size(hd);
            // The full [t, t] product is computed and the upper triangle masked: simpler than a
            // triangular product and cheap next to the linear layers.
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, hd, scale, q, ld_qkv, k, ld_qkv, 0.0f, scores,
                        t);
            causal_softmax(scores, t);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, hd, t, 1.0f, scores, t, v, ld_qkv, 0.0f, o, c);
        }
    }
}

// GPT-2's tanh approximation of GELU, in place.
void gelu(std::vector<float>& x) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    for (float& v : x) v = 0.5f * v * (1.0f + std::tanh(sqrt_2_over_pi * (v + 0.044715f * v * v * v)));
}

void add_inplace(std::vector<float>& x, const std::vector<float>& y) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += y[i];
}

}  // namespace

CpuForward::CpuForward(const ModelConfig& model, const WeightLayout& layout, int batch, int seq)
    : model_(model), layout_(layout), batch_(batch), seq_(seq) {
    if (const auto why = model.validate(); !why.empty()) throw std::invalid_argument(why);
    require_layout_for(model, layout, "CpuForward");
    if (batch < 1) {
        throw std::invalid_argument("CpuForward: batch must be at least 1, got " + std::to_string(batch) + ".");
    }
    if (seq < 1 || seq > model.max_positions) {
        throw std::invalid_argument("CpuForward: seq must be between 1 and " + std::to_string(model.max_positions) +
                                    " (the max_positions of model '" + model.name + "'), got " + std::to_string(seq) +
                                    ".");
    }
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

void CpuForward::run(LayerSource& weights, std::span<const std::int32_t> tokens, std::span<float> logits) {
    const std::size_t bt = as_size(batch_) * as_size(seq_);
    if (tokens.size() != bt) {
        throw std::invalid_argument("CpuForward: expected " + std::to_string(bt) + " tokens (batch × seq), got " +
                                    std::to_string(tokens.size()) + ".");
    }
    if (logits.size() != bt * as_size(model_.vocab_size)) {
        throw std::invalid_argument("CpuForward: the logits buffer must hold " +
                                    std::to_string(bt * as_size(model_.vocab_size)) +
                                    " floats (batch × seq × vocab), got " + std::to_string(logits.size()) + ".");
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] < 0 || tokens[i] >= model_.vocab_size) {
            throw std::invalid_argument("CpuForward: token " + std::to_string(tokens[i]) + " at index " +
                                        std::to_string(i) + " is outside the vocabulary of model '" + model_.name +
                                        "' (" + std::to_string(model_.vocab_size) + " tokens).");
        }
    }

    // Each unit is held only while it is computed with, so a backend can page the rest out.
    embed(static_cast<const float*>(weights.acquire(0)), tokens);
    weights.release(0);
    for (int l = 0; l < model_.n_layer; ++l) {
        const int unit = WeightLayout::block_unit(l);
        block(static_cast<const float*>(weights.acquire(unit)), layout_.units[as_size(unit)]);
        weights.release(unit);
    }
    const int head_unit = layout_.head_unit();
    head(static_cast<const float*>(weights.acquire(head_unit)), logits);
    weights.release(head_unit);
}

// x[b, t, :] = wte[token] + wpe[t]
void CpuForward::embed(const float* unit, std::span<const std::int32_t> tokens) {
    const UnitLayout& u = layout_.units[0];
    const float* wte = tensor_ptr(unit, u, embed_tensor::wte);
    const float* wpe = tensor_ptr(unit, u, embed_tensor::wpe);
    const std::size_t c = as_size(model_.n_embd);
    for (int b = 0; b < batch_; ++b) {
        for (int t = 0; t < seq_; ++t) {
            const std::size_t row = as_size(b) * as_size(seq_) + as_size(t);
            const float* tok = wte + as_size(tokens[row]) * c;
            const float* pos = wpe + as_size(t) * c;
            float* x = x_.data() + row * c;
            for (std::size_t i = 0; i < c; ++i) x[i] = tok[i] + pos[i];
        }
    }
}

// Pre-LN block: x += proj(attn(ln_1(x))); x += c_proj(gelu(c_fc(ln_2(x)))).
void CpuForward::block(const float* unit, const UnitLayout& unit_layout) {
    const auto w = [&](int tensor) { return tensor_ptr(unit, unit_layout, tensor); };
    const int bt = batch_ * seq_;
    const int c = model_.n_embd;

    layernorm(ln_.data(), x_.data(), w(block_tensor::ln1_w), w(block_tensor::ln1_b), bt, c, model_.ln_eps);
    linear(qkv_.data(), ln_.data(), w(block_tensor::qkv_w), w(block_tensor::qkv_b), bt, c, 3 * c);
    attention(att_.data(), scores_.data(), qkv_.data(), batch_, seq_, c, model_.n_head);
    linear(y_.data(), att_.data(), w(block_tensor::proj_w), w(block_tensor::proj_b), bt, c, c);
    add_inplace(x_, y_);

    layernorm(ln_.data(), x_.data(), w(block_tensor::ln2_w), w(block_tensor::ln2_b), bt, c, model_.ln_eps);
    linear(fc_.data(), ln_.data(), w(block_tensor::fc_w), w(block_tensor::fc_b), bt, c, 4 * c);
    gelu(fc_);
    linear(y_.data(), fc_.data(), w(block_tensor::fc_proj_w), w(block_tensor::fc_proj_b), bt, 4 * c, c);
    add_inplace(x_, y_);
}

// logits = ln_f(x) · lm_headᵀ, written straight into the caller's buffer.
void CpuForward::head(const float* unit, std::span<float> logits) {
    const UnitLayout& u = layout_.units[as_size(layout_.head_unit())];
    const int bt = batch_ * seq_;
    const int c = model_.n_embd;
    layernorm(ln_.data(), x_.data(), tensor_ptr(unit, u, head_tensor::lnf_w), tensor_ptr(unit, u, head_tensor::lnf_b),
              bt, c, model_.ln_eps);
    linear(logits.data(), ln_.data(), tensor_ptr(unit, u, head_tensor::lm_head), nullptr, bt, c, model_.vocab_size);
}

}  // namespace sweetspot
