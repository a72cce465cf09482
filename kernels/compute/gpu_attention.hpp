#pragma once
// Causal multi-head attention on the GPU with the [seq, seq] scores of every (batch, head)
// materialised: cuBLAS for QKᵀ and P·V, between them the causal mask, softmax and attention
// dropout as three kernels (baseline) or one (the `softmax` fusion).
// The GPU counterpart of cpu::attention (cpu_ops.hpp), on its own so a test can run it alone.
//
// T is float, __half or __nv_bfloat16 (explicit instantiations in gpu_attention.cpp); plain C++
// can include this header.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/compute/dropout.hpp"
#include "kernels/compute/gemm.hpp"
#include "kernels/compute/flash_attention_limits.hpp"

namespace sweetspot::gpu {

// out [batch·seq, c] from qkv [batch·seq, 3c] (q | k | v in each row, head h at columns h·hd of
// each, hd = c / n_head), head h written at columns h·hd of out. scores [batch, n_head, seq, seq]
// is scratch and is left holding the probabilities. Enqueued on gemm's stream; gemm must be of
// T's dtype (checked). batch·n_head·seq must fit the softmax's grid (GpuForward checks it).
// Returns the number of kernels and GEMMs it enqueued.
struct AttentionOptions {
    bool fused_softmax = false;  // mask, softmax and dropout in one kernel
    Dropout dropout;             // on the probabilities; its seq must be this call's
    std::uint32_t dropout_site = 0;
};
template <class T>
int attention(Gemm& gemm, T* out, T* scores, const T* qkv, int batch, int seq, int c, int n_head,
              const AttentionOptions& options = {});

// The same attention in one kernel and no scores buffer (the `flash_attention` fusion,
// gpu_flash_attention.cu): out and qkv as above, dropout on the probabilities (its positions are
// the model's), head dimension at most kFlashAttentionMaxHeadDim. Enqueued on `stream`.
template <class T>
void flash_attention(T* out, const T* qkv, int batch, int seq, int c, int n_head, const Dropout& dropout,
                     std::uint32_t site, cudaStream_t stream);

}  // namespace sweetspot::gpu
