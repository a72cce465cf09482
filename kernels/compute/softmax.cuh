#pragma once
// The attention's softmax: the baseline's causal mask and softmax, the `softmax` fusion of mask,
// softmax and attention dropout in one kernel, and their backward.
//
// T is the activation and weight type: float, __half or __nv_bfloat16 (explicit instantiations
// in the .cu). Inside every kernel the math is fp32; only loads and stores are in T. Buffers are
// row-major and contiguous; counts are int64 where B·T·vocab sized buffers could overflow an
// index. Each launcher enqueues one kernel on `stream` and checks the launch. Plain C++ can
// include this header: it only declares host functions.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/compute/dropout.hpp"

namespace sweetspot::gpu {

// Score rows [rows, seq], row r being query position r % seq of some (batch, head): columns after
// r % seq become −inf (the causal mask, in place).
template <class T>
void launch_causal_mask(T* scores, std::int64_t rows, int seq, cudaStream_t stream);

// Softmax over each whole row of `rows` rows of length `seq`, in place (−inf columns give 0).
// The 1/sqrt(head_dim) scale is NOT applied here: the forward folds it into the QKᵀ GEMM.
template <class T>
void launch_softmax(T* scores, std::int64_t rows, int seq, cudaStream_t stream);

// The `softmax` fusion: causal mask, softmax and attention dropout in one kernel, in place. Row r
// is query position i = r % seq: softmax over columns 0 .. i, exact zeros after, then each
// probability times its dropout factor (d.seq must be seq).
template <class T>
void launch_causal_softmax_dropout(T* scores, std::int64_t rows, int seq, const Dropout& d, std::uint32_t site,
                                   cudaStream_t stream);

// The backward of launch_causal_softmax_dropout (and of baseline's mask, softmax and dropout):
// row r of probs [rows, seq] holds the probabilities P of query position i = r % seq (zeros after
// column i), grad the gradient of the probabilities after dropout, dA = dout·vᵀ. In place, with
// exact zeros after column i: grad becomes the scores' gradient dS = P∘(f∘dA − rowsum(P∘f∘dA))
// (without the 1/sqrt(hd) the forward folds into QKᵀ, which the caller's GEMMs apply again) and
// probs becomes A = P∘f, what dV = Aᵀ·dout reads. d.seq must be seq.
template <class T>
void launch_causal_softmax_backward(T* probs, T* grad, std::int64_t rows, int seq, const Dropout& d,
                                    std::uint32_t site, cudaStream_t stream);

}  // namespace sweetspot::gpu
