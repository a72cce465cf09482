#pragma once
// PENDING: moves into softmax.cuh once opsframe's split lands.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/compute/dropout.hpp"

namespace sweetspot::gpu {

// The backward of launch_causal_softmax_dropout (and of baseline's mask, softmax and dropout):
// row r of probs [rows, seq] holds the probabilities P of query position i = r % seq, grad the
// gradient of the probabilities after dropout, dA = dout·vᵀ. In place: grad becomes the scores'
// gradient dS = P∘(f∘dA − rowsum(P∘f∘dA)) (without the 1/sqrt(hd)), probs becomes P∘f; both
// exact zeros after column i. d.seq must be seq.
template <class T>
void launch_causal_softmax_backward(T* probs, T* grad, std::int64_t rows, int seq, const Dropout& d,
                                    std::uint32_t site, cudaStream_t stream);

}  // namespace sweetspot::gpu
