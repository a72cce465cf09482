#pragma once
// The launch shape the element-wise and row-wise kernels (embedding.cu, layernorm.cu, bias.cu,
// gelu.cu, residual.cu, dropout.cu, softmax.cu, count_nonfinite.cu, and optimizer.cu's AdamW and
// gradient norm) share, and their block-wide reduction, and the column sums in a fixed order that
// the backward kernels reduce with (a bias's gradient, LayerNorm's weight gradients). Apart from
// device_common.cuh because its names (kBlock) are other kernels' own.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/train_scratch.hpp"

namespace sweetspot::gpu {

// Threads per block of the element-wise kernels and the softmax.
constexpr int kBlock = 256;
// Element-wise grids are capped (each thread then strides over the rest): plenty of blocks to
// fill an H100, and no grid-size limit to think about for B·T·vocab sized buffers.
constexpr std::int64_t kMaxElementwiseBlocks = 65536;

// Reduces v over the whole block and returns the result to every thread. blockDim.x must be a
// multiple of 32 (at most 1024). `shared` holds one float per warp; the trailing barrier lets
// the caller reduce again with the same array straight away.
template <bool IsMax>
__device__ float block_reduce(float v, float* shared) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    const int warp = static_cast<int>(threadIdx.x) / kWarp;
    const int n_warps = static_cast<int>(blockDim.x) / kWarp;
    v = IsMax ? warp_max(v) : warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    const float identity = IsMax ? -INFINITY : 0.0f;
    float r = lane < n_warps ? shared[lane] : identity;
    r = IsMax ? warp_max(r) : warp_sum(r);  // every warp reduces the partials: all threads get it
    __syncthreads();
    return r;
}

inline int elementwise_blocks(std::int64_t n) {
    return static_cast<int>(std::min((n + kBlock - 1) / kBlock, kMaxElementwiseBlocks));
}

// ---- column sums in a fixed order ----------------------------------------------------------
//
// A gradient summed over rows is added in an order that depends only on the shape, never on
// which thread or block finishes first (no floating-point atomics): the same bits every run.

constexpr int kColumnSumRows = 8;               // rows a block reads at a time (threadIdx.y)

// Block (32, kColumnSumRows) over 32 consecutive columns of in [rows, cols] (row stride ld), the
// rows [blockIdx.y · chunk, + chunk): thread (x, y) sums rows y, y + 8, ... of its column in fp32,
// then thread (x, 0) adds the 8 sums in order of y. kAccumulate: out[j] += the sum, stored in
// Out; otherwise out[blockIdx.y · cols + j] = the sum (a partial row).
template <class In, class Out, bool kAccumulate>
__global__ void column_sum_kernel(Out* out, const In* in, std::int64_t rows, int cols, std::int64_t ld,
                                  std::int64_t chunk) {
    __shared__ float partial[kColumnSumRows][kWarp + 1];
    const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
    const int j = static_cast<int>(blockIdx.x) * kWarp + tx;
    const std::int64_t first = static_cast<std::int64_t>(blockIdx.y) * chunk;
    const std::int64_t last = first + chunk < rows ? first + chunk : rows;
    float sum = 0.0f;
    if (j < cols) {
        for (std::int64_t r = first + ty; r < last; r += kColumnSumRows) sum += to_f32(in[r * ld + j]);
    }
    partial[ty][tx] = sum;
    __syncthreads();
    if (ty != 0 || j >= cols) return;
    for (int k = 1; k < kColumnSumRows; ++k) sum += partial[k][tx];
    if constexpr (kAccumulate) {
        out[j] = from_f32<Out>(to_f32(out[j]) + sum);
    } else {
        out[static_cast<std::int64_t>(blockIdx.y) * cols + j] = from_f32<Out>(sum);
    }
}

// out[j] += Σ_r in[r, j] in one pass: for few rows (each thread reads rows / 8 of them).
template <class In, class Out>
void launch_column_sum_once(Out* out, const In* in, std::int64_t rows, int cols, std::int64_t ld, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return;
    const dim3 blocks(static_cast<unsigned>((cols + kWarp - 1) / kWarp), 1);
    column_sum_kernel<In, Out, true><<<blocks, dim3(kWarp, kColumnSumRows), 0, stream>>>(out, in, rows, cols, ld, rows);
    CUDA_CHECK_LAUNCH();
}


// out[j] += Σ_r in[r, j] for in [rows, cols] (row stride cols), in two passes so that many rows
// spread over many blocks: the sums of chunks of kColumnSumChunk rows into `partials`
// [⌈rows / chunk⌉, cols] (fp32), then the sum of those. rows / chunk must fit gridDim.y (65535).
template <class In, class Out>
void launch_column_sum(Out* out, const In* in, std::int64_t rows, int cols, float* partials, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return;
    const std::int64_t chunks = (rows + kColumnSumChunk - 1) / kColumnSumChunk;
    const dim3 blocks(static_cast<unsigned>((cols + kWarp - 1) / kWarp), static_cast<unsigned>(chunks));
    column_sum_kernel<In, float, false>
        <<<blocks, dim3(kWarp, kColumnSumRows), 0, stream>>>(partials, in, rows, cols, cols, kColumnSumChunk);
    CUDA_CHECK_LAUNCH();
    launch_column_sum_once<float, Out>(out, partials, chunks, cols, cols, stream);
}

}  // namespace sweetspot::gpu
