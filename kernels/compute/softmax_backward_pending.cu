// PENDING: moves into softmax.cu once opsframe's split lands.
#include <cmath>
#include <cstdint>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/dropout.hpp"

namespace sweetspot::gpu {
namespace {
constexpr int kBlockSb = 256;
__device__ float block_sum_sb(float v, float* shared) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    const int warp = static_cast<int>(threadIdx.x) / kWarp;
    const int n_warps = static_cast<int>(blockDim.x) / kWarp;
    v = warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float r = lane < n_warps ? shared[lane] : 0.0f;
    r = warp_sum(r);
    __syncthreads();
    return r;
}

// The backward of the causal softmax and its attention dropout, one block per row [B·H·T rows,
// seq columns], row r being query position i = r % seq. probs holds the probabilities P (zeros
// after column i), grad holds dA = dout·vᵀ, the gradient of the probabilities after dropout
// A = P∘f. Writes, in place and with exact zeros after column i,
//   grad  = dS = P∘(f∘dA − Σ_j P_j·f_j·dA_j)   (the scores' gradient before the 1/sqrt(hd) the
//                                              forward folded into QKᵀ, which the caller's
//                                              GEMMs apply again)
//   probs = A = P∘f                            (what dV = Aᵀ·dout reads)
// The sum is over the stored T values, in fp32.
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
    dot = block_sum_sb(dot, shared);
    // Each element is read and written by the same thread: in place is safe.
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
void launch_causal_softmax_backward(T* probs, T* grad, std::int64_t rows, int seq, const Dropout& d,
                                    std::uint32_t site, cudaStream_t stream) {
    if (rows == 0) return;
    causal_softmax_backward_kernel<T><<<static_cast<unsigned>(rows), kBlockSb, 0, stream>>>(probs, grad, seq, d, site);
    CUDA_CHECK_LAUNCH();
}

template void launch_causal_softmax_backward<float>(float*, float*, std::int64_t, int, const Dropout&, std::uint32_t,
                                                    cudaStream_t);
template void launch_causal_softmax_backward<__half>(__half*, __half*, std::int64_t, int, const Dropout&, std::uint32_t,
                                                     cudaStream_t);
template void launch_causal_softmax_backward<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, std::int64_t, int,
                                                            const Dropout&, std::uint32_t, cudaStream_t);
}  // namespace sweetspot::gpu
