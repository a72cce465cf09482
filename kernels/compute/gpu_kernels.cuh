#pragma once
// The element-wise and row-wise kernels of the GPU forward: the `baseline` variant's, one kernel
// per op, and the fused kernels the variants put in their place (each computes what the kernels
// it replaces compute, bit for bit). Each launcher enqueues one kernel on `stream` and checks the
// launch.
//
// T is the activation and weight type: float, __half or __nv_bfloat16 (explicit instantiations
// in gpu_kernels.cu). Inside every kernel the math is fp32; only loads and stores are in T.
// All buffers are row-major and contiguous unless a leading dimension says otherwise. Counts
// are int64 so B·T·vocab sized buffers cannot overflow an index.
//
// Plain C++ can include this header (gpu_forward.cu and tests do): it only declares host
// functions.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "kernels/compute/dropout.hpp"
#include "kernels/model/dtype.hpp"

namespace sweetspot::gpu {

// The DType that storage type T is, for what speaks DType (Gemm, the conversions in dtype.hpp).
template <class T>
constexpr DType dtype_of() {
    if constexpr (std::is_same_v<T, float>) {
        return DType::fp32;
    } else if constexpr (std::is_same_v<T, __half>) {
        return DType::fp16;
    } else {
        static_assert(std::is_same_v<T, __nv_bfloat16>, "T is float, __half or __nv_bfloat16");
        return DType::bf16;
    }
}

// x[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]. x [batch·seq, c]; tokens [batch·seq] (ids
// checked on the host); wte [vocab, c]; wpe [max_positions, c].
template <class T>
void launch_embedding(T* x, const std::int32_t* tokens, const T* wte, const T* wpe, int batch, int seq, int c,
                      cudaStream_t stream);

// out[r, :] = (in[r, :] − mean) / sqrt(var + eps) · w + b for each of `rows` rows of `c`
// (biased variance, as nn.LayerNorm). out and in must not alias.
template <class T>
void launch_layernorm(T* out, const T* in, const T* w, const T* b, int rows, int c, float eps, cudaStream_t stream);

// y[r, j] += bias[j] for y [rows, cols]: the bias of a linear layer, after the GEMM.
template <class T>
void launch_add_bias(T* y, const T* bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream);

// x = gelu(x) in place, GPT-2's tanh approximation. x has n elements.
template <class T>
void launch_gelu_tanh(T* x, std::int64_t n, cudaStream_t stream);

// x += y (the residual stream), n elements.
template <class T>
void launch_residual_add(T* x, const T* y, std::int64_t n, cudaStream_t stream);

// *count = how many of x's n values are NaN or infinite; count is one value in device memory.
template <class T>
void launch_count_nonfinite(const T* x, std::int64_t n, unsigned long long* count, cudaStream_t stream);

// Dropout in place on a [rows, width] activation, row r being (batch, position) r of a run of
// d.seq positions (dropout.hpp numbers the elements); nothing when d is inactive.
template <class T>
void launch_dropout(T* x, std::int64_t rows, int width, const Dropout& d, std::uint32_t site, cudaStream_t stream);

// Dropout in place on attention probabilities [rows, d.seq], row r = (b·H + h)·seq + t.
template <class T>
void launch_dropout_probabilities(T* p, std::int64_t rows, const Dropout& d, std::uint32_t site, cudaStream_t stream);

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

// The `residual_ln` fusion: x += dropout(y) (row r being (batch, position) r of a run of d.seq
// positions), then out = LayerNorm(x) with w, b, for each of `rows` rows of `c`. out must not
// alias x or y.
template <class T>
void launch_residual_layernorm(T* out, T* x, const T* y, const Dropout& d, std::uint32_t site, const T* w, const T* b,
                               int rows, int c, float eps, cudaStream_t stream);

}  // namespace sweetspot::gpu
