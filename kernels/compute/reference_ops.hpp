#pragma once
// The float64 reference's ops, each forward beside its backward: plain loops in double over one
// sequence, nothing shared with CpuForward or the GPU kernels, so an error in one is not repeated
// in the other. reference_forward (logits) and reference_gradients (loss and gradients) are made
// of them.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/compute/dropout.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot::reference {

using Rows = std::vector<double>;  // row-major [rows, width]

// Reads one tensor of a unit as doubles, element by element.
struct TensorView {
    const float* data;
    double operator[](std::size_t i) const { return static_cast<double>(data[i]); }
};

inline TensorView tensor_of(const float* unit, const UnitLayout& unit_layout, int tensor) {
    return {unit_layout.tensor(unit, tensor)};
}

// Where a tensor's gradient goes inside its unit's gradient (laid out as the unit's weights).
inline double* gradient_of(std::vector<double>& unit_gradient, const UnitLayout& unit_layout, int tensor) {
    return unit_layout.tensor(unit_gradient.data(), tensor);
}

// The model's dimensions as unsigned sizes, for indexing without casts, and where in the batch
// the sequence being computed sits (dropout masks are indexed over the whole batch).
struct Dims {
    std::size_t c, n_head, hd, vocab;
    double eps;
    Dropout dropout;
    std::size_t sequence = 0;
};

Dims dims_of(const ModelConfig& m, const Dropout& dropout);

// The dropout factor of element i of a [seq, c] tensor of the current sequence at `site`.
double row_dropout(const Dims& d, std::size_t seq, std::uint32_t site, std::size_t i);

// The mean cross-entropy's numerator over the rows of logits [rows, vocab]: returns Σ over the rows
// of logsumexp(z) − z[target] and overwrites the logits with their gradient scaled by
// `per_target`, (softmax(z) − onehot(target)) · per_target.
double cross_entropy(Rows& logits, std::span<const std::int32_t> targets, std::size_t vocab, double per_target);

// Row-wise LayerNorm of [rows, width].
Rows layer_norm(const Rows& x, std::size_t width, TensorView gamma, TensorView beta, double eps);
// Adds dL/dgamma and dL/dbeta to `dgamma`, `dbeta`; returns dL/dx. Recomputes the statistics from x.
Rows layer_norm_backward(const Rows& x, const Rows& dy, std::size_t width, TensorView gamma, double eps, double* dgamma,
                         double* dbeta);

// y[r, o] = Σ_i x[r, i] · w[o, i] (+ b[o]); w is [out_dim, in_dim].
Rows dense(const Rows& x, std::size_t in_dim, std::size_t out_dim, TensorView w, const TensorView* b);
// Adds dL/dw (and dL/db unless null) to `dw`, `db`; returns dL/dx.
Rows dense_backward(const Rows& x, const Rows& dy, std::size_t in_dim, std::size_t out_dim, TensorView w, double* dw,
                    double* db);

// qkv: [seq, 3c] with q | k | v in each row, head h at columns h·hd of each. Returns [seq, c].
// Where `probs` is given, it receives the softmax of each head's scores before dropout,
// [head, t, s] (s ≤ t; the rest 0), which the backward needs.
Rows causal_self_attention(const Rows& qkv, const Dims& d, std::uint32_t probs_site, Rows* probs = nullptr);
// dL/dqkv from dL/dout, the forward's qkv and its probabilities.
Rows causal_self_attention_backward(const Rows& qkv, const Rows& probs, const Rows& dout, const Dims& d,
                                    std::uint32_t probs_site);

// Throws std::invalid_argument, naming `who`, unless the model, layout, unit pointers, tokens and
// shape fit together.
void check_arguments(const std::string& who, const ModelConfig& m, const WeightLayout& layout,
                     std::span<const float* const> units, std::span<const std::int32_t> tokens, int batch, int seq);

double gelu_tanh(double x);
double gelu_tanh_derivative(double x);

// ---- LLaMA's ops (Hugging Face LlamaForCausalLM) ---------------------------------------------

// Row-wise RMSNorm of [rows, width]: y = x / sqrt(mean(x²) + eps) · weight, no bias.
Rows rms_norm(const Rows& x, std::size_t width, TensorView weight, double eps);
// Adds dL/dweight to `dweight`; returns dL/dx. Recomputes each row's rms from x.
Rows rms_norm_backward(const Rows& x, const Rows& dy, std::size_t width, TensorView weight, double eps,
                       double* dweight);

// The SwiGLU MLP's activation, element by element: silu(gate) · up, silu(z) = z · sigmoid(z).
Rows swiglu(const Rows& gate, const Rows& up);
struct SwigluGradients {
    Rows dgate, dup;
};
SwigluGradients swiglu_backward(const Rows& gate, const Rows& up, const Rows& dout);

// The heads of a packed qkv row [(n_head + 2 · n_kv_head) · head_dim]: the q heads, then the k
// heads, then the v heads.
struct QkvHeads {
    std::size_t n_head, n_kv_head, head_dim;
};

// Rotary position embeddings (transformers' rotate_half convention) on the q and k heads of
// qkv [rows, (n_head + 2 · n_kv_head) · head_dim], v passed through: in each head, the pair
// (x[i], x[i + head_dim/2]) turns by positions[r] · inv_freq[i] (rope_inv_frequencies).
Rows rope(const Rows& qkv, std::span<const std::int32_t> positions, const QkvHeads& heads,
          std::span<const double> inv_freq);
// Its backward: dL/dqkv (before the rotation) from dL/dqkv after it, the turn by −angle.
Rows rope_backward(const Rows& dqkv, std::span<const std::int32_t> positions, const QkvHeads& heads,
                   std::span<const double> inv_freq);

// Causal grouped-query attention without dropout over one sequence: qkv [seq, (n_head + 2 ·
// n_kv_head) · head_dim] (QkvHeads' packing), q head h reading kv head h / (n_head / n_kv_head).
// Returns [seq, n_head · head_dim].
Rows grouped_causal_attention(const Rows& qkv, const QkvHeads& heads);
// Its backward: dL/dqkv (QkvHeads' packing) from dL/dout [seq, n_head · head_dim], the
// probabilities recomputed from qkv; a kv head's dk and dv sum those of its group of q heads.
Rows grouped_causal_attention_backward(const Rows& qkv, const Rows& dout, const QkvHeads& heads);

}  // namespace sweetspot::reference
