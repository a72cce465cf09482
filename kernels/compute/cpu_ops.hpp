#pragma once
// The operations of the fp32 CPU forward, one plain function each with explicit shapes, so each
// can be checked on its own: against values worked out by hand (tests/test_kernels.cpp) and as
// the reference of its GPU kernel (tests/test_kernel_ops.cpp). CpuForward is built from them.
//
// All buffers are fp32, row-major and contiguous unless a leading dimension says otherwise.
// Shapes are trusted: the callers (CpuForward, the tests) check them once.
#include <cstdint>

#include "kernels/compute/dropout.hpp"
#include "kernels/model/batch_shape.hpp"

namespace sweetspot::cpu {

// x[r, :] = wte[tokens[r], :] + wpe[positions[r], :] for each of `rows` rows. x [rows, c]; tokens
// [rows] ids < vocab; positions [rows] (BatchShape::positions(): each sequence from 0); wte
// [vocab, c]; wpe [> every position, c], or null for a family without a position table (LLaMA's:
// x is the token's row alone).
void embedding(float* x, const std::int32_t* tokens, const float* wte, const float* wpe,
               const std::int32_t* positions, std::int64_t rows, int c);

// Its rectangular batch: row b·seq + t at position t.
void embedding(float* x, const std::int32_t* tokens, const float* wte, const float* wpe, int batch, int seq, int c);

// The backward of embedding: dwte[tokens[r], :] += dx[r, :] and dwpe[positions[r], :] += dx[r, :]
// for the rows r of dx [rows, c] in order. dwpe is null for a family without a position table
// (LLaMA's token embedding alone; positions are then not read).
void embedding_backward(float* dwte, float* dwpe, const float* dx, const std::int32_t* tokens,
                        const std::int32_t* positions, std::int64_t rows, int c);

// Its rectangular batch: row r at position r % seq.
void embedding_backward(float* dwte, float* dwpe, const float* dx, const std::int32_t* tokens, int batch, int seq,
                        int c);

// out[r, :] = (in[r, :] − mean) / sqrt(var + eps) · w + b for each of `rows` rows of `c`, with
// the biased variance as in nn.LayerNorm. out and in must not alias. Where rstd_out is not null,
// rstd_out[r] = 1 / sqrt(var + eps) of row r (what inplace_ln keeps for the backward).
void layernorm(float* out, const float* in, const float* w, const float* b, int rows, int c, float eps,
               float* rstd_out = nullptr);

// The backward of layernorm: dx += dL/din, dw += dL/dw, db += dL/db, from dout = dL/dout and
// the forward's input.
void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* in, const float* w, int rows,
                        int c, float eps);

// The same backward from the forward's output `out` and each row's rstd instead of its input
// (inplace_ln): x̂ = (out − b) / w (layernorm_recovery.hpp). Returns the number of channels whose
// |w| is below kInplaceLnMinWeight: their x̂, and so dw, db and dx, are then not to be trusted.
int layernorm_backward_from_output(float* dx, float* dw, float* db, const float* dout, const float* out,
                                   const float* w, const float* b, const float* rstd, int rows, int c);

// out[rows, out_dim] = in[rows, in_dim] · wᵀ + bias, w row-major [out_dim, in_dim] as nn.Linear.
// bias may be null (lm_head). The bias is the GEMM's starting accumulator, not a pass after it.
void linear(float* out, const float* in, const float* w, const float* bias, int rows, int in_dim, int out_dim);

// The backward of linear: din = dL/din (overwritten), dw += dL/dw, dbias += dL/dbias (unless null),
// from dout = dL/dout [rows, out_dim] and the forward's input.
void linear_backward(float* din, float* dw, float* dbias, const float* dout, const float* in, const float* w, int rows,
                     int in_dim, int out_dim);

// y[r, j] += bias[j] for y [rows, cols]: a bias added after the product, as the GPU forward does.
void add_bias(float* y, const float* bias, std::int64_t rows, std::int64_t cols);

// The backward of a bias: dbias[j] += Σ_r dout[r, j] for dout [rows, cols], the column sums
// (linear_backward's dbias).
void bias_backward(float* dbias, const float* dout, std::int64_t rows, std::int64_t cols);

// x = gelu(x) in place over n elements, GPT-2's tanh approximation.
void gelu_tanh(float* x, std::int64_t n);

// dx *= gelu'(x) over n elements: the backward of gelu_tanh, x its input.
void gelu_tanh_backward(float* dx, const float* x, std::int64_t n);

// Tempo's in-place GELU (gelu_from_output.hpp): x = gelu(x) in place over n elements, as
// gelu_tanh, and each element's branch bit (left of GELU's minimum) into left_bits
// (branch_bytes(n) bytes, gelu_output's layout).
void gelu_tanh_with_branch(float* x, std::uint8_t* left_bits, std::int64_t n);

// Its backward: dx *= gelu'(x) over n elements, from the forward's output y and its bits.
void gelu_tanh_backward_from_output(float* dx, const float* y, const std::uint8_t* left_bits, std::int64_t n);

// The fused classifier's loss: over `rows` rows of logits [rows, vocab], returns Σ (logsumexp −
// the target's logit) and overwrites the logits with their gradient, (softmax − onehot(target))
// · scale (scale = 1 / the batch's targets for a mean).
double cross_entropy(float* logits, const std::int32_t* targets, std::int64_t rows, int vocab, float scale);

// The same over the rows of a batch laid out as `shape`: the real rows' terms summed in row order
// (a rectangular shape's sum is the rows form's, bit for bit), each padding row's target ignored
// and its gradient zeros, so nothing of the padding reaches the backward.
double cross_entropy(float* logits, const std::int32_t* targets, const BatchShape& shape, int vocab, float scale);

// x += y over n elements (the residual stream).
void residual_add(float* x, const float* y, std::int64_t n);

// Dropout in place on a [rows, width] activation whose row r is (batch, position) r of a run of
// d.seq positions (dropout.hpp numbers the elements). Nothing when d is inactive.
void dropout_rows(float* x, std::int64_t rows, int width, const Dropout& d, std::uint32_t site);

// Dropout in place on `rows` rows of attention probabilities of length d.seq, the first being
// row `first_row` of the run's [batch·heads·seq, seq] probabilities.
void dropout_probabilities(float* p, std::int64_t first_row, std::int64_t rows, const Dropout& d, std::uint32_t site);

// In place over `rows` rows of length `seq`, row r being query position i = r % seq of some
// (batch, head): softmax over columns 0..i, exact zeros after (the causal mask). No scale: the
// 1/sqrt(head_dim) is applied to the scores before, as the GPU forward folds it into QKᵀ.
void causal_softmax(float* scores, std::int64_t rows, int seq);

// Causal multi-head attention. qkv [batch·seq, 3c] holds q, k and v side by side in each row,
// head h at columns h·hd of each (hd = c / n_head); out [batch·seq, c] gets head h at columns
// h·hd. Per (batch, head): dropout(softmax(q·kᵀ / sqrt(hd), causal)) · v, the dropout mask over
// the probabilities drawn at `probs_site` (probs_dropout.positions is the model's; its seq is
// this call's). scores is a [seq, seq] scratch.
void attention(float* out, float* scores, const float* qkv, int batch, int seq, int c, int n_head,
               const Dropout& probs_dropout = {}, std::uint32_t probs_site = 0);

// The same over the rows of a batch laid out as `shape` (qkv [rows, 3c], out [rows, c]): each
// sequence attends over its own rows alone, and a padded batch's padding rows of out are zeros.
// scores is a [stride, stride] scratch. The dropout masks are numbered by (sequence, position)
// with the stride as seq, which only a rectangular shape's rows follow: an active dropout with
// another shape is refused (std::invalid_argument).
void attention(float* out, float* scores, const float* qkv, const BatchShape& shape, int c, int n_head,
               const Dropout& probs_dropout = {}, std::uint32_t probs_site = 0);

// The backward of attention: dqkv [batch·seq, 3c] (overwritten) from dout [batch·seq, c] and the
// forward's qkv, with the same dropout masks. probs and grad are [seq, seq] scratches.
void attention_backward(float* dqkv, float* probs, float* grad, const float* dout, const float* qkv, int batch, int seq,
                        int c, int n_head, const Dropout& probs_dropout = {}, std::uint32_t probs_site = 0);

// The same over the rows of a batch laid out as `shape`, as attention's shape form: each sequence
// over its own rows, padding rows of dqkv zeros; probs and grad [stride, stride] scratches; an
// active dropout refused unless the shape is rectangular.
void attention_backward(float* dqkv, float* probs, float* grad, const float* dout, const float* qkv,
                        const BatchShape& shape, int c, int n_head, const Dropout& probs_dropout = {},
                        std::uint32_t probs_site = 0);

// Σ x² over n elements, in double: summed over every tensor, the square of the global gradient
// norm that clipping scales by.
double squared_norm(const float* x, std::int64_t n);

// One AdamW step of one tensor, as torch.optim.AdamW (decoupled decay before the update,
// bias-corrected moments; reference_optimizer.hpp is its float64 reference). grad_scale is the
// clipping's max_norm / (norm + 1e-6), or 1; weight_decay 0 for tensors that do not decay.
struct AdamW {
    float lr, beta1, beta2, eps, weight_decay;
    int step;           // from 1
    float grad_scale = 1.0f;

    // 1 − β^step, the bias corrections of the first and second moments: computed once per step
    // here, so the GPU's AdamW divides by the same fp32 numbers as this one.
    float bias_correction1() const;
    float bias_correction2() const;
};
void adamw(float* params, const float* grads, float* m, float* v, std::int64_t n, const AdamW& a);

// ---- LLaMA's ops (Hugging Face LlamaForCausalLM) ---------------------------------------------

// out[r, :] = in[r, :] / sqrt(mean(in[r, :]²) + eps) · w for each of `rows` rows of `c`: LLaMA's
// RMSNorm, no bias. out and in must not alias.
void rmsnorm(float* out, const float* in, const float* w, int rows, int c, float eps);

// The backward of rmsnorm: dx += dL/din and dw += dL/dw, from dout = dL/dout and the forward's
// input (each row's rms recomputed from it).
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* in, const float* w, int rows, int c,
                      float eps);

// out = silu(gate) · up over n elements (the SwiGLU MLP's activation; silu(z) = z · sigmoid(z)),
// gate, up and out each [rows, f] with n = rows · f.
void swiglu(float* out, const float* gate, const float* up, std::int64_t n);

// The backward of swiglu: dgate = dout · up · silu'(gate) and dup = dout · silu(gate)
// (overwritten) over n elements.
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, std::int64_t n);

// Causal grouped-query attention: qkv [batch·seq, (n_head + 2·n_kv_head) · head_dim] (q heads,
// then k, then v, as rope's), q head h reading kv head h / (n_head / n_kv_head); out [batch·seq,
// n_head · head_dim]; scores a [seq, seq] scratch; the dropout mask on the probabilities as
// attention()'s, which is its n_kv_head = n_head case.
void grouped_attention(float* out, float* scores, const float* qkv, int batch, int seq, int n_head, int n_kv_head,
                       int head_dim, const Dropout& probs_dropout = {}, std::uint32_t probs_site = 0);

// The same over the rows of a batch laid out as `shape`, as attention's shape form: each sequence
// over its own rows, padding rows of out zeros; scores a [stride, stride] scratch.
void grouped_attention(float* out, float* scores, const float* qkv, const BatchShape& shape, int n_head, int n_kv_head,
                       int head_dim, const Dropout& probs_dropout = {}, std::uint32_t probs_site = 0);

// The backward of grouped_attention: dqkv (overwritten, qkv's layout) from dout [batch·seq,
// n_head · head_dim] and the forward's qkv, each kv head's dk and dv the sum over its group's q
// heads. probs and grad are [seq, seq] scratches. attention_backward() is its n_kv_head = n_head
// case.
void grouped_attention_backward(float* dqkv, float* probs, float* grad, const float* dout, const float* qkv, int batch,
                                int seq, int n_head, int n_kv_head, int head_dim, const Dropout& probs_dropout = {},
                                std::uint32_t probs_site = 0);

// The same over the rows of a batch laid out as `shape`, as attention_backward's shape form.
void grouped_attention_backward(float* dqkv, float* probs, float* grad, const float* dout, const float* qkv,
                                const BatchShape& shape, int n_head, int n_kv_head, int head_dim,
                                const Dropout& probs_dropout = {}, std::uint32_t probs_site = 0);

// Rotary position embeddings in place on the q and k heads of qkv [rows, (n_head + 2·n_kv_head) ·
// head_dim] (q heads, then k, then v, which is left alone), transformers' rotate_half
// convention: in each head the pair (x[i], x[i + head_dim/2]) turns by the angle
// positions[r] · inv_freq[i], computed in fp32 (inv_freq: rope_inv_frequencies_f32, head_dim/2
// values).
void rope(float* qkv, const std::int32_t* positions, const float* inv_freq, int rows, int n_head, int n_kv_head,
          int head_dim);

// The backward of rope, in place on dqkv (same layout): dq and dk turn by −angle, dv is left alone.
void rope_backward(float* dqkv, const std::int32_t* positions, const float* inv_freq, int rows, int n_head,
                   int n_kv_head, int head_dim);

}  // namespace sweetspot::cpu
