#pragma once
// One LLaMA block of the fp32 host compute, forward beside backward, from the ops of cpu_ops.hpp:
// the family's host forward (buffers reused layer after layer) and its host training step (each
// layer's activations kept for its backward) run this one function, as GPT-2's do
// (gpt2/gpt2_cpu_block.hpp).
#include <cstdint>
#include <vector>

#include "kernels/model/batch_shape.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot::llama {

// The packed qkv row's width: n_head q heads, then n_kv_head k heads, then as many v heads.
int qkv_width(const ModelConfig& model);

// What the rotation reads: each row's position (BatchShape::positions(): every sequence starts at
// position 0) and the frequencies (rope_inv_frequencies_f32).
struct RotaryTables {
    std::vector<std::int32_t> positions;  // [rows]
    std::vector<float> inv_freq;          // [head_dim / 2]
    RotaryTables(const ModelConfig& model, const BatchShape& shape);
    std::int64_t bytes() const;
};

struct BlockShape {
    const BatchShape& shape;  // the batch's rows; the attention within each sequence
    const ModelConfig& model;
    const RotaryTables& rotary;
};

// The block's activations, [shape.rows(), width] each (bt below). ln1 and ln2 may be one buffer, and act may be
// gate, when nothing reads them after the block (a forward alone).
struct BlockActivations {
    float* ln1;         // attn_norm(x)                            [bt, c]
    float* projection;  // one of q, k, v's projection, scratch    [bt, c]
    float* qkv;         // q | k | v, q and k rotated              [bt, qkv_width]
    float* att;         // attention(qkv)                          [bt, c]
    float* y;           // o_proj's or down's output, scratch      [bt, c]
    float* x_mid;       // x after the attention's residual        [bt, c]; null: not kept
    float* ln2;         // mlp_norm(x_mid)                         [bt, c]
    float* gate;        // gate_proj(ln2)                          [bt, f]
    float* up;          // up_proj(ln2)                            [bt, f]
    float* act;         // silu(gate) · up                         [bt, f]
    float* scores;      // [stride, stride] scratch
};

// x [bt, c] in place: x += o_proj(attention(rope(q, k), v)) over attn_norm(x), the attention
// within each sequence of the batch; x += down(silu(gate) · up) over mlp_norm(x).
void block_forward(float* x, const BlockActivations& a, const float* unit, const UnitLayout& ul, const BlockShape& s);

// Scratch of the block's backward: per row of the shape, and the attention's [stride, stride].
struct BlockGradScratch {
    std::vector<float> dln, dln_part, datt, dprojection, dqkv, dact, dgate, dup, probs, grad;
    BlockGradScratch(const ModelConfig& model, const BatchShape& shape);
    std::int64_t bytes() const;
};

// dx: dloss/d(block output) in, dloss/d(block input) out; the block's weight gradients added to
// `grad` (laid out as the unit). x_in is the block's input; `a` the activations its forward kept
// (x_mid set, act apart from gate). The attention's backward within each sequence; a padding row
// whose dx is zero stays zero and adds nothing to `grad`.
void block_backward(float* dx, float* grad, const float* x_in, const BlockActivations& a, const float* unit,
                    const UnitLayout& ul, const BlockShape& s, BlockGradScratch& scratch);

}  // namespace sweetspot::llama
