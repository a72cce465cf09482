#pragma once
// Where the GPU forward's activations live: one allocation carved into its buffers. Pure C++ (no
// CUDA), so the memory estimator predicts the forward's activation bytes with the very layout the
// forward allocates, and both are tested on every machine.
#include <cstdint>

#include "kernels/model/batch_shape.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/model_config.hpp"

namespace sweetspot {

// Every buffer starts on this many bytes inside the one allocation.
inline constexpr std::int64_t kActivationAlignBytes = 256;

// Byte offsets of the buffers (elements of the dtype except tokens), and the allocation's size.
// rows = BatchShape::rows() (batch · seq for a rectangular batch), C = n_embd, H = n_head, KV = its kv heads, hd = C / H, F = the MLP's width,
// V = vocab_size; the family (model_family.hpp) says how many [rows, F] inputs its MLP has and
// whether it rotates positions.
struct ActivationLayout {
    std::int64_t x = 0;       // [rows, C] residual stream
    std::int64_t ln = 0;      // [rows, C] layernorm output
    std::int64_t qkv = 0;     // [rows, (H + 2·KV)·hd] q | k | v heads per row (qkv_heads.hpp); GPT-2's 3C
    std::int64_t scores = 0;  // [batch, H, seq, seq] attention scores, then probabilities in place (seq: the stride)
    std::int64_t att = 0;     // [rows, C] attention output, head h at columns h·hd
    std::int64_t fc = 0;      // the MLP's inputs, each [rows, F]: GPT-2's hidden [rows, 4C]; LLaMA's gate, then up
    std::int64_t y = 0;       // [rows, C] sub-layer output before the residual add
    std::int64_t logits = 0;  // [rows, V]
    std::int64_t tokens = 0;  // [rows] int32
    // Each row's position [rows] int32, for rotary families and for any batch that is not
    // rectangular (GPT-2's position table then has no formula for a row's position); 0 elsewhere.
    std::int64_t positions = 0;
    // Rotary families: the rotation's frequencies [hd / 2] fp32 (rope_frequencies.hpp); 0 elsewhere.
    std::int64_t frequencies = 0;
    // A batch that is not rectangular: each sequence's first row [batch] int32, then its length
    // [batch] int32, what the flash attention's SequenceSpans point at; 0 for a rectangular one.
    std::int64_t spans = 0;
    std::int64_t scores_bytes = 0;  // the scores buffer alone: 0 when the variant keeps none
    std::int64_t total_bytes = 0;   // the allocation, alignment included
};

// The layout for a forward of `shape`; `keeps_scores` is false for a variant whose attention keeps
// no [stride, stride] buffer per (sequence, head) (flash_attention). Sizes in checked 64-bit
// arithmetic.
ActivationLayout activation_layout(const ModelConfig& model, DType dtype, const BatchShape& shape, bool keeps_scores);
// The same for `batch` × `seq` tokens (BatchShape::rectangular).
ActivationLayout activation_layout(const ModelConfig& model, DType dtype, int batch, int seq, bool keeps_scores);

}  // namespace sweetspot
