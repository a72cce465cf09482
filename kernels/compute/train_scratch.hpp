#pragma once
// The device scratch of the training kernels, sized in a header without CUDA: the GPU training
// step allocates it (train_arena.hpp) and the memory estimator counts it, in builds with or
// without a GPU.
#include <algorithm>
#include <cstdint>

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

// fp32 values of scratch flash_attention_backward needs: dq's fp32 accumulator and
// rowsum(dout ∘ out).
inline std::int64_t flash_attention_backward_scratch_floats(int batch, int seq, int c, int n_head) {
    const std::int64_t rows = static_cast<std::int64_t>(batch) * seq;
    return rows * c + rows * n_head;
}

}  // namespace sweetspot::gpu
