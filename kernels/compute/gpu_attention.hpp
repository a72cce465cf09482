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
#include "kernels/compute/qkv_heads.hpp"
#include "kernels/compute/sequence_spans.hpp"
#include "kernels/compute/gemm.hpp"
#include "kernels/compute/flash_attention_limits.hpp"
#include "kernels/compute/train_scratch.hpp"

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
// The same over a packed qkv of grouped heads (qkv_heads.hpp: [rows, heads.ld()] in, out [rows,
// heads.c()], scores [batch, n_head, seq, seq]), q head h attending with kv head h / (n_head /
// n_kv_head); the form above is its n_kv_head = n_head case, with the same products.
template <class T>
int attention(Gemm& gemm, T* out, T* scores, const T* qkv, int batch, int seq, QkvHeads heads,
              const AttentionOptions& options = {});

// The backward of attention for the same options: dqkv [batch·seq, 3c] (overwritten; dq | dk | dv
// laid out as qkv) from dout [batch·seq, c] and the forward's qkv. The probabilities are
// recomputed from qkv into `scores` rather than taken from the forward: the forward leaves them
// after dropout, and a dropped probability's own gradient still needs its value
// (dS = P∘(f∘dP − rowsum(P∘f∘dP))); a training step then need not keep a [seq, seq] buffer per
// layer either. scores and grad are [batch, n_head, seq, seq] scratches. Every product is a
// strided-batched GEMM; between them one softmax-backward kernel. Returns the number of
// kernels and GEMMs it enqueued.
template <class T>
int attention_backward(Gemm& gemm, T* dqkv, T* scores, T* grad, const T* dout, const T* qkv, int batch, int seq, int c,
                       int n_head, const AttentionOptions& options = {});
// The same over grouped heads (dqkv and qkv [rows, heads.ld()], dout [rows, heads.c()]): a kv
// head's dk and dv are the sums over its group's q heads, added in a fixed order.
template <class T>
int attention_backward(Gemm& gemm, T* dqkv, T* scores, T* grad, const T* dout, const T* qkv, int batch, int seq,
                       QkvHeads heads, const AttentionOptions& options = {});

// The same attention in one kernel and no scores buffer (the `flash_attention` fusion,
// gpu_flash_attention.cu): out and qkv as above, dropout on the probabilities (its positions are
// the model's), head dimension at most kFlashAttentionMaxHeadDim. Enqueued on `stream`. With
// lse (fp32 [batch, n_head, seq]) it also writes each row's logsumexp for the backward
// (gpu_flash_attention_logsumexp.cuh defines it); the inference forward passes none.
// The same over a packed qkv of grouped heads (qkv_heads.hpp: [rows, heads.ld()] in, out [rows,
// heads.c()]), q head h attending with kv head h / (n_head / n_kv_head); the form above is its
// n_kv_head = n_head case.
template <class T>
void flash_attention(T* out, const T* qkv, int batch, int seq, QkvHeads heads, const Dropout& dropout,
                     std::uint32_t site, cudaStream_t stream, float* lse = nullptr);
// The same over a ragged batch (sequence_spans.hpp): sequence b's queries attend to its own keys
// only, at its positions 0 .. length − 1; rows outside every span (a padded batch's padding) are
// not written. lse is [batch, n_head, spans.seq] as for a rectangular batch of the longest length.
template <class T>
void flash_attention(T* out, const T* qkv, int batch, SequenceSpans spans, QkvHeads heads, const Dropout& dropout,
                     std::uint32_t site, cudaStream_t stream, float* lse = nullptr);
template <class T>
void flash_attention(T* out, const T* qkv, int batch, int seq, int c, int n_head, const Dropout& dropout,
                     std::uint32_t site, cudaStream_t stream, float* lse = nullptr);

// The backward of flash_attention (gpu_flash_attention_backward.cu), FlashAttention-2's: the
// probabilities are recomputed tile by tile from q, k and the forward's lse, nothing of size
// [seq, seq] is stored. dqkv [batch·seq, 3c] (overwritten) from dout, the forward's qkv, out and
// lse, with the forward's dropout and site. scratch holds
// flash_attention_backward_scratch_floats(...) floats (train_scratch.hpp). dq is summed over key
// blocks with fp32 atomics, so its last bits may differ between runs. Enqueued on `stream`.
// The same over grouped heads (dqkv and qkv [rows, heads.ld()], dout and out [rows, heads.c()]):
// a kv head's dk and dv are the sums over its group's q heads, in a fixed order (the same bits
// every run); the form below is its n_kv_head = n_head case.
template <class T>
void flash_attention_backward(T* dqkv, float* scratch, const T* dout, const T* qkv, const T* out, const float* lse,
                              int batch, int seq, QkvHeads heads, const Dropout& dropout, std::uint32_t site,
                              cudaStream_t stream);
template <class T>
void flash_attention_backward(T* dqkv, float* scratch, const T* dout, const T* qkv, const T* out, const float* lse,
                              int batch, int seq, int c, int n_head, const Dropout& dropout, std::uint32_t site,
                              cudaStream_t stream);
// The same over a ragged batch of `rows` rows (sequence_spans.hpp; lse as the ragged forward
// writes it, scratch of flash_attention_backward_scratch_floats(rows, heads)): each sequence's
// gradient from its own rows, and every row outside the spans (a padded batch's padding, whose
// output reads nothing) zero in dqkv. Without dropout, which a ragged batch does not number.
template <class T>
void flash_attention_backward(T* dqkv, float* scratch, const T* dout, const T* qkv, const T* out, const float* lse,
                              int batch, SequenceSpans spans, std::int64_t rows, QkvHeads heads, const Dropout& dropout,
                              std::uint32_t site, cudaStream_t stream);

}  // namespace sweetspot::gpu
