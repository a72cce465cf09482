#pragma once
// Rotary position embeddings (transformers' rotate_half convention) on the q and k heads of a
// packed qkv activation, and the backward.
//
// T is the activation type: float, __half or __nv_bfloat16 (explicit instantiations in the .cu).
// Inside every kernel the math is fp32; only loads and stores are in T. qkv is [rows,
// (n_head + 2·n_kv_head) · head_dim], row-major and contiguous: in each row the q heads, then the
// k heads, then the v heads, which are left alone. Each launcher enqueues one kernel on `stream`
// and checks the launch. Plain C++ can include this header: it only declares host functions.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sweetspot::gpu {

// In place, as cpu::rope: in each q and k head of row r, the pair (x[i], x[i + head_dim/2]) turns
// by positions[r] · inv_freq[i], computed in fp32. positions [rows] (int32, so packed sequences
// may restart theirs) and inv_freq [head_dim / 2] (rope_inv_frequencies_f32) are device memory;
// head_dim is even.
template <class T>
void launch_rope(T* qkv, const std::int32_t* positions, const float* inv_freq, int rows, int n_head, int n_kv_head,
                 int head_dim, cudaStream_t stream);

// The backward of launch_rope, in place on dqkv (same layout), as cpu::rope_backward: dq and dk
// turn by −angle, dv is left alone.
template <class T>
void launch_rope_backward(T* dqkv, const std::int32_t* positions, const float* inv_freq, int rows, int n_head,
                          int n_kv_head, int head_dim, cudaStream_t stream);

}  // namespace sweetspot::gpu
