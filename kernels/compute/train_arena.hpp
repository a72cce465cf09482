#pragma once
// Where each buffer of the GPU training step (gpu_train_step.hpp) sits in its one device
// allocation, planned without a device: the step allocates it, and the memory estimator counts
// the same bytes in builds with or without CUDA.
#include <cstdint>
#include <vector>

#include "kernels/model/batch_shape.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/recompute.hpp"
#include "kernels/model/variant.hpp"

namespace sweetspot {

// The logits' rows are padded to a multiple of this many values: the lm_head's GEMMs then have
// aligned leading dimensions, without which cuBLAS falls back to slow kernels for a vocabulary of
// 50257 (llm.c pads it to 50304 for the same reason).
inline constexpr int kLogitsRowAlignment = 128;
inline std::int64_t padded_vocab(int vocab) {
    return (static_cast<std::int64_t>(vocab) + kLogitsRowAlignment - 1) / kLogitsRowAlignment * kLogitsRowAlignment;
}

// Where each buffer sits in the step's one allocation, in bytes from its start: the one place the
// step's constructor and activation_bytes_for (and through it the estimator) read.
struct TrainArena {
    static constexpr std::int64_t kAlign = 256;
    std::int64_t total = 0;
    // Each block's activations, one entry per layer, each [B·T, width] in the dtype (C = n_embd,
    // F = the MLP's width): ln1 (C), qkv (the packed heads, (H + 2·KV)·hd: GPT-2's 3C), att (C),
    // x_mid (C, the residual stream between the sub-layers), ln2 (C), fc_pre (the MLP's
    // pre-activations, F per input: GPT-2's GELU input, LLaMA's gate then up), fc (F, the
    // activation's output: GPT-2's GELU, LLaMA's SwiGLU); with flash attention each row's logsumexp
    // lse (fp32 [B, H, T]); with inplace_ln ln_1's and ln_2's rstd (fp32 [B·T]); with inplace_gelu,
    // instead of fc_pre (empty then), the GELU's branch bits gelu_branch
    // (gelu_output::branch_bytes(B·T·F) bytes, gelu_from_output.hpp), which with fc is what the
    // GELU's backward reads. What `recompute` keeps has a buffer per layer; what it recomputes, or
    // inplace_ln does not keep, has one buffer in the scratch, which every layer's entry names
    // (recompute.hpp).
    std::vector<std::int64_t> ln1, ln1_rstd, qkv, att, lse, x_mid, ln2, ln2_rstd, fc_pre, fc, gelu_branch;
    // L + 1 entries [B·T, C]: the embedding's output, then each block's output (the next one's
    // input). Without inplace_ln each has a buffer; with it those the backward reads (each
    // block's input under block) have one, the others one buffer in the scratch.
    std::vector<std::int64_t> resid;
    // ln_f's output and, with inplace_ln, its rstd (fp32 [B·T]); the logits [B·T, V] (rows
    // padded_vocab(V) apart), then their gradient.
    std::int64_t xf = 0, lnf_rstd = 0, logits = 0;
    // Scratch: from `scratch` the recomputed activations (above), then, [B·T, width] in the dtype,
    // dfc (fc_pre's width), dqkv (qkv's), dy, dln, datt, dres (C); the baseline's scores and their
    // gradient [B, H, T, T].
    std::int64_t scratch = 0, dfc = 0, dqkv = 0, dy = 0, dln = 0, datt = 0, dres = 0, scores = 0, dscores = 0;
    // fp32 scratch of the backward kernels (the norms' and biases' as the family says:
    // FamilyCompute::gpu_train_scratch), the per-row losses and the loss; ids; the norm's partials
    // and the squared norm (double). The embedding's backward, the last kernel of the
    // backward, takes the scratch from `scratch` up to dres (dead by then) for its own: its size
    // is cub's to say, which needs a device, and this plan is made without one. Only a handful of
    // rows leave that scratch smaller than cub's fixed storage; the step then allocates it apart.
    std::int64_t norm_scratch = 0, bias_scratch = 0, flash_scratch = 0, losses = 0, loss = 0;
    std::int64_t tokens = 0, targets = 0, partials = 0, squared_norm = 0;
    // With inplace_ln, the int the LayerNorms' backwards flag a weight too small to divide by in
    // (gpu::launch_layernorm_backward_from_output).
    std::int64_t unrecoverable = 0;
    // With inplace_gelu in fp16 and bf16, the GELU backward's derivative table (fp32,
    // gelu_output::kDerivativeTableSize entries; gpu::launch_gelu_derivative_table).
    bool gelu_table = false;
    std::int64_t gelu_derivatives = 0;
    // Each row's position (int32 [rows], BatchShape::positions) for families with rotary positions
    // and for ragged batches; the rotation's frequencies (fp32 [hd / 2], rope_frequencies.hpp) for
    // the former; a ragged batch's sequences' first rows then lengths (int32 [2·batch], what the
    // flash attention's SequenceSpans point at); 0 where there is none.
    std::int64_t positions = 0, frequencies = 0, spans = 0;

    // The model's family sets the widths (its qkv heads, its MLP's inputs) and the scratch; the
    // variant's flash_attention, inplace_ln and inplace_gelu decide what is kept; its other fusions
    // do not. B·T is the shape's rows throughout, and T of what is numbered by (sequence, head,
    // position) (lse, the scores) its stride.
    TrainArena(const ModelConfig& m, DType dtype, const BatchShape& shape, const Variant& variant, Recompute recompute);
};

}  // namespace sweetspot
