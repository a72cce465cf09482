// The fused classifier, llm.c's shape: one block per row reads the row once for its softmax
// statistics (an online max and sum, so one read instead of two) and once more to write the
// gradient in place. The second read mostly hits L2, which holds the rows the blocks in flight are
// working on: it and the gradient's stores are streaming (evict-first), as they are the last use
// of a row, which keeps fp32 rows (200 kB each) in L2 until their second read. Deterministic:
// each row's sums run in a fixed order.
#include "kernels/compute/classifier.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/ordered_sum.cuh"
#include "kernels/compute/packed_access.cuh"

namespace sweetspot::gpu {

namespace {

// A vocabulary of 50257 gives each of 1024 threads about six 16-byte packs of bf16.
constexpr int kThreads = 1024;

// The softmax statistics of some of a row's values: their max and Σ exp(x − max). Empty, max is
// −inf and the sum 0.
struct SoftmaxStats {
    float max;
    float sum;
};

__device__ __forceinline__ void add(SoftmaxStats& s, float x) {
    if (x > s.max) {
        s.sum = s.sum * expf(s.max - x) + 1.0f;
        s.max = x;
    } else {
        s.sum += expf(x - s.max);
    }
}

__device__ __forceinline__ SoftmaxStats combine(SoftmaxStats a, SoftmaxStats b) {
    const float m = fmaxf(a.max, b.max);
    if (m == -INFINITY) return a;  // both empty: exp(−inf − (−inf)) would be NaN
    return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

__device__ __forceinline__ SoftmaxStats warp_combine(SoftmaxStats s) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        const SoftmaxStats other{__shfl_xor_sync(0xFFFFFFFFu, s.max, offset),
                                 __shfl_xor_sync(0xFFFFFFFFu, s.sum, offset)};
        s = combine(s, other);
    }
    return s;
}

// The row's statistics from every thread's, returned to every thread, in a fixed tree. Its
// barriers also order every thread's reads of the row before any thread's writes.
__device__ SoftmaxStats block_combine(SoftmaxStats s, SoftmaxStats* shared) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    const int warp = static_cast<int>(threadIdx.x) / kWarp;
    s = warp_combine(s);
    if (lane == 0) shared[warp] = s;
    __syncthreads();
    s = lane < static_cast<int>(blockDim.x) / kWarp ? shared[lane] : SoftmaxStats{-INFINITY, 0.0f};
    return warp_combine(s);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    fused_classifier_kernel(T* logits, float* losses, const std::int32_t* targets, int vocab, std::int64_t row_stride,
                            float scale) {
    __shared__ SoftmaxStats shared[kThreads / kWarp];
    const std::int64_t r = blockIdx.x;
    T* row = logits + r * row_stride;
    const int target = targets[r];
    if (target == kIgnoredTarget) {  // the same for every thread of the block
        if (threadIdx.x == 0) losses[r] = 0.0f;
        for_each_packed<Caching::streaming>(row, vocab, threadIdx.x, blockDim.x,
                                            [](std::int64_t, T& value) { value = from_f32<T>(0.0f); });
        return;
    }

    SoftmaxStats stats{-INFINITY, 0.0f};
    for_each_packed(static_cast<const T*>(row), vocab, threadIdx.x, blockDim.x,
                    [&](std::int64_t, const T& value) { add(stats, to_f32(value)); });
    const float target_logit = threadIdx.x == 0 ? to_f32(row[target]) : 0.0f;
    stats = block_combine(stats, shared);

    if (threadIdx.x == 0) losses[r] = logf(stats.sum) + stats.max - target_logit;
    const float inv_sum = 1.0f / stats.sum;
    for_each_packed<Caching::streaming>(row, vocab, threadIdx.x, blockDim.x, [&](std::int64_t i, T& value) {
        const float p = expf(to_f32(value) - stats.max) * inv_sum;
        value = from_f32<T>((p - (i == target ? 1.0f : 0.0f)) * scale);
    });
}

}  // namespace

template <class T>
void launch_fused_classifier(T* logits, float* losses, const std::int32_t* targets, std::int64_t rows, int vocab,
                             std::int64_t row_stride, float scale, cudaStream_t stream) {
    if (rows == 0) return;
    if (row_stride < vocab)
        throw std::invalid_argument("launch_fused_classifier: a row stride of " + std::to_string(row_stride) +
                                    " is below the vocabulary of " + std::to_string(vocab));
    // rows = B·T ≤ 2^31 − 1, gridDim.x's limit, for every batch a GPU holds the logits of.
    fused_classifier_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, losses, targets, vocab,
                                                                                     row_stride, scale);
    CUDA_CHECK_LAUNCH();
}

void launch_mean_loss(const float* losses, std::int64_t rows, float scale, float* loss, cudaStream_t stream) {
    ordered_sum_kernel<float, float><<<1, kOrderedSumThreads, 0, stream>>>(losses, rows, scale, loss);
    CUDA_CHECK_LAUNCH();
}

template void launch_fused_classifier<float>(float*, float*, const std::int32_t*, std::int64_t, int, std::int64_t,
                                             float, cudaStream_t);
template void launch_fused_classifier<__half>(__half*, float*, const std::int32_t*, std::int64_t, int, std::int64_t,
                                              float, cudaStream_t);
template void launch_fused_classifier<__nv_bfloat16>(__nv_bfloat16*, float*, const std::int32_t*, std::int64_t, int,
                                                     std::int64_t, float, cudaStream_t);

}  // namespace sweetspot::gpu
