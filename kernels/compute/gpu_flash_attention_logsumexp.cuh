#pragma once
// The statistic of each query row that the flash_attention forward can leave for its backward
// (gpu_flash_attention_backward.cu): the natural logsumexp of the row's scaled scores over the
// keys it sees, lse = ln Σ_j exp(q·k_j / sqrt(hd)), before dropout, fp32 [batch, n_head, seq] at
// (b·n_head + h)·seq + t. The backward recomputes each probability as exp(q·k / sqrt(hd) − lse),
// so it needs neither the forward's running max nor its sum.
// Included by the flash attention kernels only.

namespace sweetspot::gpu {

constexpr float kLn2 = 0.693147180559945309f;
constexpr float kLog2e = 1.442695040888963407f;

// lse from an online softmax kept in base 2: its running max of the scores times
// log2(e) / sqrt(hd), and its sum of exp2(score − max).
__device__ __forceinline__ float logsumexp_from_base2(float max_log2, float sum) {
    return max_log2 * kLn2 + logf(sum);
}

}  // namespace sweetspot::gpu
