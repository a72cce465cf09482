#pragma once
// The device scratch of the training kernels, sized in a header without CUDA: the GPU training
// step allocates it (train_arena.hpp) and the memory estimator counts it, in builds with or
// without a GPU.
#include <algorithm>
#include <cstdint>

#include "kernels/compute/qkv_heads.hpp"

namespace sweetspot::gpu {

// The most blocks LayerNorm's backward spreads its rows over (layernorm.cu), each writing one
// partial dw and db (2c fp32): enough to fill an H100 at a few blocks per SM, few enough that the
// partials (written and read once) stay a small part of the traffic.
inline constexpr int kLayerNormBackwardBlocks = 512;
// The most blocks RMSNorm's backward spreads its rows over (rmsnorm.cu), each writing one partial
// dw (c fp32), for LayerNorm's reasons.
inline constexpr int kRmsNormBackwardBlocks = 512;
// Rows a block sums in the first of the column sums' two passes (elementwise.cuh).
inline constexpr std::int64_t kColumnSumChunk = 256;
// The per-block partial sums of squares each gradient buffer's norm is reduced through
// (optimizer.cuh).
inline constexpr int kNormPartials = 1024;

// fp32 values of scratch launch_layernorm_backward needs for `rows` rows of `c`.
inline std::int64_t layernorm_backward_scratch_floats(int rows, int c) {
    return static_cast<std::int64_t>(std::min(rows, kLayerNormBackwardBlocks)) * 2 * c;
}

// fp32 values of scratch launch_rmsnorm_backward needs for `rows` rows of `c`.
inline std::int64_t rmsnorm_backward_scratch_floats(int rows, int c) {
    return static_cast<std::int64_t>(std::min(rows, kRmsNormBackwardBlocks)) * c;
}

// fp32 values the column sums need in their partials for rows × cols.
inline std::int64_t column_sum_partials(std::int64_t rows, int cols) {
    return (rows + kColumnSumChunk - 1) / kColumnSumChunk * cols;
}

// fp32 values of scratch launch_bias_backward needs for dout [rows, cols].
inline std::int64_t bias_backward_scratch_floats(std::int64_t rows, int cols) { return column_sum_partials(rows, cols); }

// Where flash_attention_backward's scratch holds, over grouped heads, each q head's share of dK
// and dV before their sum over its group ([rows, 2c] in the dtype), in floats: after dq's fp32
// accumulator [rows, c] and rowsum(dout ∘ out) [rows, n_head], on a 16-byte boundary.
inline std::int64_t flash_attention_backward_shares_offset(std::int64_t rows, QkvHeads heads) {
    return (rows * heads.c() + rows * heads.n_head + 3) / 4 * 4;
}

// The fp32 scratch of a family's norm and bias backwards in its GPU training step
// (FamilyCompute::gpu_train_scratch), for its rows: one buffer each, which every norm's and every
// bias's backward reuses.
struct FamilyTrainScratch {
    std::int64_t norm_floats = 0;  // its norms' backward (layernorm_ or rmsnorm_backward_scratch_floats)
    std::int64_t bias_floats = 0;  // its widest bias's backward; 0 for a family without biases
};

// fp32 values of scratch flash_attention_backward needs: dq's fp32 accumulator and
// rowsum(dout ∘ out), and over grouped heads the dK and dV shares (counted as fp32 in every dtype).
inline std::int64_t flash_attention_backward_scratch_floats(std::int64_t rows, QkvHeads heads) {
    if (heads.n_kv_head == heads.n_head) return rows * heads.c() + rows * heads.n_head;
    return flash_attention_backward_shares_offset(rows, heads) + 2 * rows * heads.c();
}
inline std::int64_t flash_attention_backward_scratch_floats(int batch, int seq, QkvHeads heads) {
    return flash_attention_backward_scratch_floats(static_cast<std::int64_t>(batch) * seq, heads);
}
inline std::int64_t flash_attention_backward_scratch_floats(int batch, int seq, int c, int n_head) {
    return flash_attention_backward_scratch_floats(batch, seq, QkvHeads::multi_head(c, n_head));
}

}  // namespace sweetspot::gpu
