#include "kernels/compute/cpu_ops.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "kernels/compute/gelu_from_output.hpp"
#include "kernels/compute/layernorm_recovery.hpp"

namespace sweetspot::cpu {

namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

}  // namespace

void embedding(float* x, const std::int32_t* tokens, const float* wte, const float* wpe,
               const std::int32_t* positions, std::int64_t rows, int c) {
    const std::size_t width = as_size(c);
    for (std::size_t r = 0; r < as_size(rows); ++r) {
        const float* tok = wte + as_size(tokens[r]) * width;
        float* out = x + r * width;
        if (wpe == nullptr) {
            std::copy_n(tok, width, out);
            continue;
        }
        const float* pos = wpe + as_size(positions[r]) * width;
        for (std::size_t i = 0; i < width; ++i) out[i] = tok[i] + pos[i];
    }
}

void embedding(float* x, const std::int32_t* tokens, const float* wte, const float* wpe, int batch, int seq, int c) {
    const BatchShape shape = BatchShape::rectangular(batch, seq);
    embedding(x, tokens, wte, wpe, shape.positions().data(), shape.rows(), c);
}

void embedding_backward(float* dwte, float* dwpe, const float* dx, const std::int32_t* tokens,
                        const std::int32_t* positions, std::int64_t rows, int c) {
    const std::size_t width = as_size(c);
    for (std::size_t r = 0; r < as_size(rows); ++r) {
        const float* g = dx + r * width;
        float* te = dwte + as_size(tokens[r]) * width;
        for (std::size_t i = 0; i < width; ++i) te[i] += g[i];
        if (dwpe == nullptr) continue;
        float* pe = dwpe + as_size(positions[r]) * width;
        for (std::size_t i = 0; i < width; ++i) pe[i] += g[i];
    }
}

void embedding_backward(float* dwte, float* dwpe, const float* dx, const std::int32_t* tokens, int batch, int seq,
                        int c) {
    const BatchShape shape = BatchShape::rectangular(batch, seq);
    embedding_backward(dwte, dwpe, dx, tokens, shape.positions().data(), shape.rows(), c);
}

// Two passes (mean, then centred squares) avoid the cancellation of E[x²] − E[x]².
namespace {

// Mean and 1 / sqrt(biased variance + eps) of one row of c, as nn.LayerNorm normalises it.
struct RowStats {
    float mean, rstd;
};

RowStats row_stats(const float* x, int c, float eps) {
    float mean = 0.0f;
    for (int i = 0; i < c; ++i) mean += x[i];
    mean /= static_cast<float>(c);
    float var = 0.0f;
    for (int i = 0; i < c; ++i) {
        const float d = x[i] - mean;
        var += d * d;
    }
    var /= static_cast<float>(c);
    return {mean, 1.0f / std::sqrt(var + eps)};
}

}  // namespace

void layernorm(float* out, const float* in, const float* w, const float* b, int rows, int c, float eps, float* rstd_out) {
    for (int r = 0; r < rows; ++r) {
        const float* x = in + as_size(r) * as_size(c);
        float* y = out + as_size(r) * as_size(c);
        const auto [mean, rstd] = row_stats(x, c, eps);
        for (int i = 0; i < c; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
        if (rstd_out != nullptr) rstd_out[r] = rstd;
    }
}

namespace {

// The backward of one row from its rstd and x̂ (normalized(i), the same value each time it is
// asked): with g = dout·w, dx += rstd · (g − mean(g) − x̂ · mean(g · x̂)).
template <class Normalized>
void layernorm_backward_row(float* dxr, float* dw, float* db, const float* dy, const float* w, int c, float rstd,
                            const Normalized& normalized) {
    float mean_g = 0.0f, mean_gx = 0.0f;
    for (int i = 0; i < c; ++i) {
        const float xhat = normalized(i);
        dw[i] += dy[i] * xhat;
        db[i] += dy[i];
        mean_g += dy[i] * w[i];
        mean_gx += dy[i] * w[i] * xhat;
    }
    mean_g /= static_cast<float>(c);
    mean_gx /= static_cast<float>(c);
    for (int i = 0; i < c; ++i) dxr[i] += rstd * (dy[i] * w[i] - mean_g - normalized(i) * mean_gx);
}

}  // namespace

// The statistics are recomputed from the input rather than kept from the forward: two floats a
// row saved against one pass over the row.
void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* in, const float* w, int rows,
                        int c, float eps) {
    for (int r = 0; r < rows; ++r) {
        const std::size_t first = as_size(r) * as_size(c);
        const float* x = in + first;
        const auto [mean, rstd] = row_stats(x, c, eps);
        layernorm_backward_row(dx + first, dw, db, dout + first, w, c, rstd,
                               [&](int i) { return (x[i] - mean) * rstd; });
    }
}

int layernorm_backward_from_output(float* dx, float* dw, float* db, const float* dout, const float* out,
                                   const float* w, const float* b, const float* rstd, int rows, int c) {
    for (int r = 0; r < rows; ++r) {
        const std::size_t first = as_size(r) * as_size(c);
        const float* y = out + first;
        layernorm_backward_row(dx + first, dw, db, dout + first, w, c, rstd[r],
                               [&](int i) { return ln_normalized_from_output(y[i], w[i], b[i]); });
    }
    return static_cast<int>(std::count_if(w, w + c, [](float v) { return !ln_weight_recoverable(v); }));
}

// The bias is copied into every row first and the product accumulated onto it (beta = 1), so
// one sgemm does the whole layer.
void linear(float* out, const float* in, const float* w, const float* bias, int rows, int in_dim, int out_dim) {
    if (bias != nullptr) {
        for (int r = 0; r < rows; ++r) std::copy(bias, bias + out_dim, out + as_size(r) * as_size(out_dim));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out_dim, in_dim, 1.0f, in, in_dim, w, in_dim,
                bias != nullptr ? 1.0f : 0.0f, out, out_dim);
}

// Two sgemms: din = dout · w, and dw += doutᵀ · in (beta = 1, so the gradients of a layer used
// more than once add up); the bias's gradient is the column sums of dout.
void linear_backward(float* din, float* dw, float* dbias, const float* dout, const float* in, const float* w, int rows,
                     int in_dim, int out_dim) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in_dim, out_dim, 1.0f, dout, out_dim, w, in_dim, 0.0f,
                din, in_dim);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_dim, in_dim, rows, 1.0f, dout, out_dim, in, in_dim, 1.0f,
                dw, in_dim);
    if (dbias != nullptr) bias_backward(dbias, dout, rows, out_dim);
}

void bias_backward(float* dbias, const float* dout, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* row = dout + as_size(r) * as_size(cols);
        for (std::int64_t j = 0; j < cols; ++j) dbias[j] += row[j];
    }
}

void add_bias(float* y, const float* bias, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t r = 0; r < rows; ++r) {
        float* row = y + as_size(r) * as_size(cols);
        for (std::int64_t j = 0; j < cols; ++j) row[j] += bias[j];
    }
}

void gelu_tanh(float* x, std::int64_t n) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        x[i] = 0.5f * v * (1.0f + std::tanh(sqrt_2_over_pi * (v + 0.044715f * v * v * v)));
    }
}

void gelu_tanh_backward(float* dx, const float* x, std::int64_t n) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        const float th = std::tanh(sqrt_2_over_pi * (v + 0.044715f * v * v * v));
        dx[i] *= 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * sqrt_2_over_pi * (1.0f + 3.0f * 0.044715f * v * v);
    }
}

void gelu_tanh_with_branch(float* x, std::uint8_t* left_bits, std::int64_t n) {
    std::fill_n(left_bits, as_size(gelu_output::branch_bytes(n)), std::uint8_t{0});
    for (std::int64_t i = 0; i < n; ++i)
        if (gelu_output::left_of_minimum(x[i])) left_bits[i / 8] |= static_cast<std::uint8_t>(1u << (i % 8));
    gelu_tanh(x, n);
}

void gelu_tanh_backward_from_output(float* dx, const float* y, const std::uint8_t* left_bits, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i)
        dx[i] *= gelu_output::derivative_from_output(y[i], gelu_output::branch_bit(left_bits, i));
}

// The loss and its gradient in one pass over each row, in place: nothing of [rows, vocab] is kept
// but the gradient that the lm_head's backward reads next.
namespace {

// One row's term of the loss; its logits z [vocab] become their gradient.
double cross_entropy_row(float* z, std::int32_t target_id, int vocab, float scale) {
    const float top = *std::max_element(z, z + vocab);
    double total = 0.0;
    for (int v = 0; v < vocab; ++v) total += std::exp(static_cast<double>(z[v] - top));
    const auto target = static_cast<std::size_t>(target_id);
    const double term = static_cast<double>(top) + std::log(total) - static_cast<double>(z[target]);
    for (int v = 0; v < vocab; ++v) z[v] = static_cast<float>(std::exp(static_cast<double>(z[v] - top)) / total) * scale;
    z[target] -= scale;
    return term;
}

}  // namespace

double cross_entropy(float* logits, const std::int32_t* targets, std::int64_t rows, int vocab, float scale) {
    double loss = 0.0;
    for (std::int64_t r = 0; r < rows; ++r)
        loss += cross_entropy_row(logits + as_size(r) * as_size(vocab), targets[r], vocab, scale);
    return loss;
}

double cross_entropy(float* logits, const std::int32_t* targets, const BatchShape& shape, int vocab, float scale) {
    double loss = 0.0;
    for (std::int64_t r = 0; r < shape.rows(); ++r) {
        float* z = logits + as_size(r) * as_size(vocab);
        if (shape.is_real(r))
            loss += cross_entropy_row(z, targets[r], vocab, scale);
        else
            std::fill_n(z, vocab, 0.0f);
    }
    return loss;
}

void residual_add(float* x, const float* y, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void dropout_rows(float* x, std::int64_t rows, int width, const Dropout& d, std::uint32_t site) {
    if (!d.active()) return;
    for (std::int64_t r = 0; r < rows; ++r)
        for (int i = 0; i < width; ++i)
            x[as_size(r) * as_size(width) + as_size(i)] *= d.row_factor(site, static_cast<std::uint64_t>(r),
                                                                        static_cast<std::uint64_t>(width),
                                                                        static_cast<std::uint64_t>(i));
}

void dropout_probabilities(float* p, std::int64_t first_row, std::int64_t rows, const Dropout& d, std::uint32_t site) {
    if (!d.active()) return;
    const auto seq = static_cast<std::size_t>(d.seq);
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::size_t j = 0; j < seq; ++j)
            p[as_size(r) * seq + j] *= d.probability_factor(site, static_cast<std::uint64_t>(first_row + r), j);
}

// Subtracting the row max first means exp cannot overflow. The masked columns are written as
// zeros rather than skipped, so the ·V product that follows may run over the full row.
void causal_softmax(float* scores, std::int64_t rows, int seq) {
    for (std::int64_t r = 0; r < rows; ++r) {
        const int i = static_cast<int>(r % seq);
        float* row = scores + as_size(r) * as_size(seq);
        float max = row[0];
        for (int j = 1; j <= i; ++j) max = std::max(max, row[j]);
        float sum = 0.0f;
        for (int j = 0; j <= i; ++j) {
            row[j] = std::exp(row[j] - max);
            sum += row[j];
        }
        const float inv_sum = 1.0f / sum;
        for (int j = 0; j <= i; ++j) row[j] *= inv_sum;
        std::fill(row + i + 1, row + seq, 0.0f);
    }
}

// The heads are read and written in place through the leading dimensions, so nothing is
// transposed or copied.
namespace {

void refuse_ragged_dropout(const BatchShape& shape, const Dropout& dropout) {
    if (dropout.active() && !shape.is_rectangular())
        throw std::invalid_argument("cpu attention: dropout masks are numbered by the rows of a rectangular batch; "
                                    "this batch is ragged");
}

// Zeros the rows of sequence b's span past its length, x [rows, width]: a padded batch's padding
// rows, which nothing attends from (none in a packed batch). first: shape.offsets().
void zero_padding_rows(float* x, std::size_t width, const BatchShape& shape, const std::vector<std::int32_t>& first,
                       int b) {
    const std::size_t end = b + 1 < shape.batch() ? as_size(first[as_size(b + 1)]) : as_size(shape.rows());
    std::fill(x + (as_size(first[as_size(b)]) + as_size(shape.length(b))) * width, x + end * width, 0.0f);
}

// Causal attention of packed heads, q head h reading kv head h / group, each sequence over its
// own rows; the dropout mask over the probabilities where `dropout` is active.
void causal_attention(float* out, float* scores, const float* qkv, const BatchShape& shape, int n_head, int n_kv_head,
                      int hd, const Dropout& dropout, std::uint32_t probs_site) {
    refuse_ragged_dropout(shape, dropout);
    const int ld_qkv = (n_head + 2 * n_kv_head) * hd, c = n_head * hd, group = n_head / n_kv_head;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const std::vector<std::int32_t> first = shape.offsets();
    for (int b = 0; b < shape.batch(); ++b) {
        const int n = shape.length(b);
        const std::size_t row = as_size(first[as_size(b)]);
        const float* row0 = qkv + row * as_size(ld_qkv);
        for (int h = 0; h < n_head; ++h) {
            const float* q = row0 + as_size(h) * as_size(hd);
            const float* k = row0 + as_size(n_head + h / group) * as_size(hd);
            const float* v = k + as_size(n_kv_head) * as_size(hd);
            float* o = out + row * as_size(c) + as_size(h) * as_size(hd);
            // The full [n, n] product is computed and the upper triangle masked: simpler than
            // a triangular product and cheap next to the linear layers.
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, hd, scale, q, ld_qkv, k, ld_qkv, 0.0f, scores,
                        n);
            causal_softmax(scores, n, n);
            dropout_probabilities(scores, (static_cast<std::int64_t>(b) * n_head + h) * shape.stride(), n, dropout,
                                  probs_site);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, n, 1.0f, scores, n, v, ld_qkv, 0.0f, o, c);
        }
        // Nothing attends from a padding row: zeros keep what follows finite.
        zero_padding_rows(out, as_size(c), shape, first, b);
    }
}

}  // namespace

void attention(float* out, float* scores, const float* qkv, int batch, int seq, int c, int n_head,
               const Dropout& probs_dropout, std::uint32_t probs_site) {
    attention(out, scores, qkv, BatchShape::rectangular(batch, seq), c, n_head, probs_dropout, probs_site);
}

void attention(float* out, float* scores, const float* qkv, const BatchShape& shape, int c, int n_head,
               const Dropout& probs_dropout, std::uint32_t probs_site) {
    causal_attention(out, scores, qkv, shape, n_head, n_head, c / n_head,
                     probs_dropout.for_shape(shape.stride(), probs_dropout.positions), probs_site);
}

void grouped_attention(float* out, float* scores, const float* qkv, int batch, int seq, int n_head, int n_kv_head,
                       int head_dim, const Dropout& probs_dropout, std::uint32_t probs_site) {
    grouped_attention(out, scores, qkv, BatchShape::rectangular(batch, seq), n_head, n_kv_head, head_dim, probs_dropout,
                      probs_site);
}

void grouped_attention(float* out, float* scores, const float* qkv, const BatchShape& shape, int n_head, int n_kv_head,
                       int head_dim, const Dropout& probs_dropout, std::uint32_t probs_site) {
    causal_attention(out, scores, qkv, shape, n_head, n_kv_head, head_dim,
                     probs_dropout.for_shape(shape.stride(), probs_dropout.positions), probs_site);
}

// The probabilities are recomputed from qkv, as a flash attention's backward does, rather than
// kept from the forward: [seq, seq] per head would be the largest activation of a step. With
// A = P∘mask the forward's out = A·v: dv = Aᵀ·dout, dP = (dout·vᵀ)∘mask, and the softmax's
// dscores = P∘(dP − rowsum(P∘dP)), scaled as the scores were. Over grouped heads a kv head's dk
// and dv are the sums over its group's q heads (consecutive heads): the first writes them, the
// others add to them.
namespace {

void causal_attention_backward(float* dqkv, float* probs, float* grad, const float* dout, const float* qkv,
                               const BatchShape& shape, int n_head, int n_kv_head, int hd, const Dropout& dropout,
                               std::uint32_t probs_site) {
    refuse_ragged_dropout(shape, dropout);
    const int ld_qkv = (n_head + 2 * n_kv_head) * hd, c = n_head * hd, group = n_head / n_kv_head;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const std::vector<std::int32_t> first = shape.offsets();
    for (int b = 0; b < shape.batch(); ++b) {
        const int n = shape.length(b);
        const std::size_t row = as_size(first[as_size(b)]), square = as_size(n) * as_size(n);
        const std::size_t row0 = row * as_size(ld_qkv);
        for (int h = 0; h < n_head; ++h) {
            const std::size_t q_at = row0 + as_size(h) * as_size(hd);
            const std::size_t k_at = row0 + as_size(n_head + h / group) * as_size(hd);
            const std::size_t v_at = k_at + as_size(n_kv_head) * as_size(hd);
            const float* q = qkv + q_at;
            const float* k = qkv + k_at;
            const float* v = qkv + v_at;
            float* dq = dqkv + q_at;
            float* dk = dqkv + k_at;
            float* dv = dqkv + v_at;
            const float kv_beta = h % group == 0 ? 0.0f : 1.0f;
            const float* dout_h = dout + row * as_size(c) + as_size(h) * as_size(hd);
            const std::int64_t first_row = (static_cast<std::int64_t>(b) * n_head + h) * shape.stride();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, hd, scale, q, ld_qkv, k, ld_qkv, 0.0f, probs, n);
            causal_softmax(probs, n, n);
            std::copy(probs, probs + square, grad);
            dropout_probabilities(grad, first_row, n, dropout, probs_site);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hd, n, 1.0f, grad, n, dout_h, c, kv_beta, dv, ld_qkv);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, hd, 1.0f, dout_h, c, v, ld_qkv, 0.0f, grad, n);
            dropout_probabilities(grad, first_row, n, dropout, probs_site);
            for (int t = 0; t < n; ++t) {
                const float* p = probs + as_size(t) * as_size(n);
                float* g = grad + as_size(t) * as_size(n);
                float p_dot_g = 0.0f;
                for (int s2 = 0; s2 <= t; ++s2) p_dot_g += p[s2] * g[s2];
                for (int s2 = 0; s2 < n; ++s2) g[s2] = s2 <= t ? p[s2] * (g[s2] - p_dot_g) * scale : 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, n, 1.0f, grad, n, k, ld_qkv, 0.0f, dq, ld_qkv);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hd, n, 1.0f, grad, n, q, ld_qkv, kv_beta, dk, ld_qkv);
        }
        // No gradient reaches a padding row: nothing attends from or to it.
        zero_padding_rows(dqkv, as_size(ld_qkv), shape, first, b);
    }
}

}  // namespace

void attention_backward(float* dqkv, float* probs, float* grad, const float* dout, const float* qkv, int batch, int seq,
                        int c, int n_head, const Dropout& probs_dropout, std::uint32_t probs_site) {
    attention_backward(dqkv, probs, grad, dout, qkv, BatchShape::rectangular(batch, seq), c, n_head, probs_dropout,
                       probs_site);
}

void attention_backward(float* dqkv, float* probs, float* grad, const float* dout, const float* qkv,
                        const BatchShape& shape, int c, int n_head, const Dropout& probs_dropout,
                        std::uint32_t probs_site) {
    causal_attention_backward(dqkv, probs, grad, dout, qkv, shape, n_head, n_head, c / n_head,
                              probs_dropout.for_shape(shape.stride(), probs_dropout.positions), probs_site);
}

void grouped_attention_backward(float* dqkv, float* probs, float* grad, const float* dout, const float* qkv, int batch,
                                int seq, int n_head, int n_kv_head, int head_dim, const Dropout& probs_dropout,
                                std::uint32_t probs_site) {
    grouped_attention_backward(dqkv, probs, grad, dout, qkv, BatchShape::rectangular(batch, seq), n_head, n_kv_head,
                               head_dim, probs_dropout, probs_site);
}

void grouped_attention_backward(float* dqkv, float* probs, float* grad, const float* dout, const float* qkv,
                                const BatchShape& shape, int n_head, int n_kv_head, int head_dim,
                                const Dropout& probs_dropout, std::uint32_t probs_site) {
    causal_attention_backward(dqkv, probs, grad, dout, qkv, shape, n_head, n_kv_head, head_dim,
                              probs_dropout.for_shape(shape.stride(), probs_dropout.positions), probs_site);
}

double squared_norm(const float* x, std::int64_t n) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return sum;
}

float AdamW::bias_correction1() const { return 1.0f - std::pow(beta1, static_cast<float>(step)); }
float AdamW::bias_correction2() const { return 1.0f - std::pow(beta2, static_cast<float>(step)); }

// One pass over the tensor: the moments and the weight updated together, as a fused GPU kernel
// would (llm.c's adamw_kernel), so each element is read and written once.
void adamw(float* params, const float* grads, float* m, float* v, std::int64_t n, const AdamW& a) {
    const float correct1 = a.bias_correction1();
    const float correct2 = a.bias_correction2();
    for (std::int64_t i = 0; i < n; ++i) {
        const float g = grads[i] * a.grad_scale;
        m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * g;
        v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
        params[i] -= a.lr * a.weight_decay * params[i];
        params[i] -= a.lr * (m[i] / correct1) / (std::sqrt(v[i] / correct2) + a.eps);
    }
}

namespace {

// 1 / sqrt(mean(x²) + eps) of one row of c. No mean is subtracted, so one pass has no cancellation.
float row_rrms(const float* x, int c, float eps) {
    float sq = 0.0f;
    for (int i = 0; i < c; ++i) sq += x[i] * x[i];
    return 1.0f / std::sqrt(sq / static_cast<float>(c) + eps);
}

float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// Turns each q and k pair of every row by sin_sign · positions[r] · inv_freq[i], in place.
void rotate_pairs(float* qkv, const std::int32_t* positions, const float* inv_freq, int rows, int n_head,
                  int n_kv_head, int head_dim, float sin_sign) {
    const std::size_t half = as_size(head_dim / 2), hd = as_size(head_dim);
    const std::size_t width = as_size(n_head + 2 * n_kv_head) * hd;
    for (std::size_t r = 0; r < as_size(rows); ++r) {
        const auto pos = static_cast<float>(positions[r]);
        for (std::size_t h = 0; h < as_size(n_head + n_kv_head); ++h) {
            float* x = qkv + r * width + h * hd;
            for (std::size_t i = 0; i < half; ++i) {
                const float angle = pos * inv_freq[i];
                const float c = std::cos(angle), s = sin_sign * std::sin(angle);
                const float a = x[i], b = x[i + half];
                x[i] = a * c - b * s;
                x[i + half] = b * c + a * s;
            }
        }
    }
}

}  // namespace

void rmsnorm(float* out, const float* in, const float* w, int rows, int c, float eps) {
    for (int r = 0; r < rows; ++r) {
        const float* x = in + as_size(r) * as_size(c);
        float* y = out + as_size(r) * as_size(c);
        const float rrms = row_rrms(x, c, eps);
        for (int i = 0; i < c; ++i) y[i] = x[i] * rrms * w[i];
    }
}

// With x̂ = x · rrms and g = dout · w: dx += rrms · (g − x̂ · mean(g · x̂)), mean(g · x̂) taken as
// rrms · Σ g · x / c so that one pass gives it with the row's Σ x² (as the GPU kernel does).
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* in, const float* w, int rows, int c,
                      float eps) {
    for (int r = 0; r < rows; ++r) {
        const std::size_t first = as_size(r) * as_size(c);
        const float* x = in + first;
        const float* dy = dout + first;
        float* dxr = dx + first;
        float sq = 0.0f, gx = 0.0f;
        for (int i = 0; i < c; ++i) {
            sq += x[i] * x[i];
            gx += dy[i] * w[i] * x[i];
        }
        const float rrms = 1.0f / std::sqrt(sq / static_cast<float>(c) + eps);
        const float mean_gx = rrms * gx / static_cast<float>(c);
        for (int i = 0; i < c; ++i) {
            const float xhat = x[i] * rrms;
            dw[i] += dy[i] * xhat;
            dxr[i] += rrms * (dy[i] * w[i] - xhat * mean_gx);
        }
    }
}

void swiglu(float* out, const float* gate, const float* up, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

// silu'(z) = σ(z) · (1 + z · (1 − σ(z))).
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
        const float z = gate[i], s = sigmoid(z), g = dout[i], u = up[i];
        dgate[i] = g * u * (s * (1.0f + z * (1.0f - s)));
        dup[i] = g * (z * s);
    }
}

void rope(float* qkv, const std::int32_t* positions, const float* inv_freq, int rows, int n_head, int n_kv_head,
          int head_dim) {
    rotate_pairs(qkv, positions, inv_freq, rows, n_head, n_kv_head, head_dim, 1.0f);
}

// The rotation is orthogonal: its transpose, the backward, is the rotation by −angle.
void rope_backward(float* dqkv, const std::int32_t* positions, const float* inv_freq, int rows, int n_head,
                   int n_kv_head, int head_dim) {
    rotate_pairs(dqkv, positions, inv_freq, rows, n_head, n_kv_head, head_dim, -1.0f);
}

}  // namespace sweetspot::cpu
