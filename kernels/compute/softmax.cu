#include "kernels/compute/softmax.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"

namespace sweetspot::gpu {

namespace {

// The causal mask on its own (baseline): scores[r, j] = −inf for j > r % seq, in place, so the
// plain softmax that follows gives those columns exact zeros.
template <class T>
__global__ void causal_mask_kernel(T* scores, std::int64_t rows, int seq) {
    const std::int64_t n = rows * seq;
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t r = idx / seq;
        if (idx % seq > r % seq) scores[idx] = from_f32<T>(-INFINITY);
    }
}

// One block per score row [B·H·T rows, T columns], in place. Three sweeps over the row (max,
// sum of exp, write), all in fp32 from the stored T values; exp(v − max) cannot overflow. The
// scores arrive already scaled by 1/sqrt(head_dim) (folded into the QKᵀ GEMM's alpha).
// kFused (the `softmax` fusion): the causal mask and the attention dropout happen here too. Row
// r is query position i = r % seq; only columns 0..i are read, the columns after i are written
// as exact zeros (so the P·V GEMM over the full row adds nothing for them), and each kept
// probability is scaled by its dropout factor. Otherwise (baseline) the row was masked by
// causal_mask_kernel and the dropout is a pass of its own: the softmax runs over every column,
// where the masked −inf give exp(−inf) = 0, so both forms compute the same numbers.
template <class T, bool kFused>
__global__ void softmax_kernel(T* scores, int seq, Dropout d, std::uint32_t site) {
    __shared__ float shared[kWarp];
    const std::int64_t r = blockIdx.x;
    const int last = kFused ? static_cast<int>(r % seq) : seq - 1;
    T* row = scores + r * seq;

    float row_max = -INFINITY;
    for (int j = static_cast<int>(threadIdx.x); j <= last; j += static_cast<int>(blockDim.x)) {
        row_max = fmaxf(row_max, to_f32(row[j]));
    }
    row_max = block_reduce<true>(row_max, shared);

    float sum = 0.0f;
    for (int j = static_cast<int>(threadIdx.x); j <= last; j += static_cast<int>(blockDim.x)) {
        sum += expf(to_f32(row[j]) - row_max);
    }
    sum = block_reduce<false>(sum, shared);
    const float inv_sum = 1.0f / sum;

    // Every read of the row above happened before the barriers in block_reduce, so writing in
    // place cannot change what another thread reads.
    for (int j = static_cast<int>(threadIdx.x); j < seq; j += static_cast<int>(blockDim.x)) {
        if (j > last) {
            row[j] = from_f32<T>(0.0f);
            continue;
        }
        const T p = from_f32<T>(expf(to_f32(row[j]) - row_max) * inv_sum);
        // Fused, the probability is rounded to T before its dropout, as the separate pass sees it.
        row[j] = kFused && d.active()
                     ? from_f32<T>(to_f32(p) * d.probability_factor(site, static_cast<std::uint64_t>(r),
                                                                     static_cast<std::uint64_t>(j)))
                     : p;
    }
}

// One block per row of the softmax's backward (launch_causal_softmax_backward), in place: the
// row's Σ P·f·dA in fp32 from the stored T values, then each element, which the same thread
// reads and writes. The dropout factor is drawn again in the second sweep rather than kept.
template <class T>
__global__ void causal_softmax_backward_kernel(T* probs, T* grad, int seq, Dropout d, std::uint32_t site) {
    __shared__ float shared[kWarp];
    const std::int64_t r = blockIdx.x;
    const int last = static_cast<int>(r % seq);
    T* p_row = probs + r * seq;
    T* g_row = grad + r * seq;
    const auto factor = [&](int j) {
        return d.active() ? d.probability_factor(site, static_cast<std::uint64_t>(r), static_cast<std::uint64_t>(j))
                          : 1.0f;
    };
    float dot = 0.0f;
    for (int j = static_cast<int>(threadIdx.x); j <= last; j += static_cast<int>(blockDim.x))
        dot += to_f32(p_row[j]) * factor(j) * to_f32(g_row[j]);
    dot = block_reduce<false>(dot, shared);
    for (int j = static_cast<int>(threadIdx.x); j < seq; j += static_cast<int>(blockDim.x)) {
        if (j > last) {
            p_row[j] = from_f32<T>(0.0f);
            g_row[j] = from_f32<T>(0.0f);
            continue;
        }
        const float p = to_f32(p_row[j]), f = factor(j);
        g_row[j] = from_f32<T>(p * (f * to_f32(g_row[j]) - dot));
        p_row[j] = from_f32<T>(p * f);
    }
}

}  // namespace

template <class T>
void launch_causal_mask(T* scores, std::int64_t rows, int seq, cudaStream_t stream) {
    if (rows == 0) return;
    causal_mask_kernel<T><<<elementwise_blocks(rows * seq), kBlock, 0, stream>>>(scores, rows, seq);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_softmax(T* scores, std::int64_t rows, int seq, cudaStream_t stream) {
    if (rows == 0) return;
    // rows = B·H·T ≤ 2^31 − 1 for every shape the harness runs (gridDim.x's limit).
    softmax_kernel<T, false><<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(scores, seq, Dropout{}, 0);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_causal_softmax_dropout(T* scores, std::int64_t rows, int seq, const Dropout& d, std::uint32_t site,
                                   cudaStream_t stream) {
    if (rows == 0) return;
    softmax_kernel<T, true><<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(scores, seq, d, site);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_causal_softmax_backward(T* probs, T* grad, std::int64_t rows, int seq, const Dropout& d,
                                    std::uint32_t site, cudaStream_t stream) {
    if (rows == 0) return;
    causal_softmax_backward_kernel<T><<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(probs, grad, seq, d, site);
    CUDA_CHECK_LAUNCH();
}

#define SWEETSPOT_INSTANTIATE(T) \
    template void launch_causal_mask<T>(T*, std::int64_t, int, cudaStream_t); \
    template void launch_softmax<T>(T*, std::int64_t, int, cudaStream_t); \
    template void launch_causal_softmax_dropout<T>(T*, std::int64_t, int, const Dropout&, std::uint32_t, cudaStream_t); \
    template void launch_causal_softmax_backward<T>(T*, T*, std::int64_t, int, const Dropout&, std::uint32_t, cudaStream_t);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
