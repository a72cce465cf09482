#pragma once
// One GPT-2 block of the fp32 host compute, forward beside backward, from the ops of cpu_ops.hpp:
// the family's host forward (buffers reused layer after layer) and its host training step (each
// layer's activations kept for its backward) run this one function.
#include <cstdint>
#include <vector>

#include "kernels/compute/dropout.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot::gpt2 {

struct BlockShape {
    const BatchShape& shape;  // the batch's rows; the attention within each sequence
    int c, n_head;
    float eps;
    Dropout dropout;  // already for_shape(shape.stride(), positions)
    int layer;
};

// The block's activations, [shape.rows(), width] each (bt below). ln1 and ln2 may be one buffer,
// as may fc_pre and fc, when nothing reads them after the block (a forward alone).
struct BlockActivations {
    float* ln1;     // ln_1(x)                           [bt, c]
    float* qkv;     // c_attn(ln1)                       [bt, 3c]
    float* att;     // attention(qkv)                    [bt, c]
    float* y;       // a projection's output, scratch    [bt, c]
    float* x_mid;   // x after the attention's residual  [bt, c]; null: not kept
    float* ln2;     // ln_2(x_mid)                       [bt, c]
    float* fc_pre;  // c_fc(ln2) before GELU             [bt, 4c]; null: not kept
    float* fc;      // gelu(c_fc(ln2))                   [bt, 4c]
    float* scores;  // [stride, stride] scratch
};

// x [bt, c] in place: x += dropout(c_proj(attention(ln_1(x)))); x += dropout(mlp(ln_2(x))), the
// attention within each sequence of the batch.
void block_forward(float* x, const BlockActivations& a, const float* unit, const UnitLayout& ul, const BlockShape& s);

// Scratch of the block's backward: per row of the shape, and the attention's [stride, stride].
struct BlockGradScratch {
    std::vector<float> dy, dln, datt, dqkv, dfc, probs, grad;
    BlockGradScratch(const BatchShape& shape, int c);
};

// dx: dloss/d(block output) in, dloss/d(block input) out; the block's weight gradients added to
// `grad` (laid out as the unit). x_in is the block's input; `a` the activations its forward kept
// (x_mid and fc_pre set). The attention's backward within each sequence; a padding row whose dx
// is zero stays zero and adds nothing to `grad`.
void block_backward(float* dx, float* grad, const float* x_in, const BlockActivations& a, const float* unit,
                    const UnitLayout& ul, const BlockShape& s, BlockGradScratch& scratch);

}  // namespace sweetspot::gpt2
