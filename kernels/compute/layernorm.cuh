#pragma once
// LayerNorm, its backward, and the `residual_ln` fusion of dropout, residual add and LayerNorm.
//
// T is the activation and weight type: float, __half or __nv_bfloat16 (explicit instantiations
// in the .cu). Inside every kernel the math is fp32; only loads and stores are in T. Buffers are
// row-major and contiguous; counts are int64 where B·T·vocab sized buffers could overflow an
// index. Each launcher enqueues one kernel on `stream` and checks the launch. Plain C++ can
// include this header: it only declares host functions.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/compute/dropout.hpp"
#include "kernels/compute/train_scratch.hpp"

namespace sweetspot::gpu {

// out[r, :] = (in[r, :] − mean) / sqrt(var + eps) · w + b for each of `rows` rows of `c`
// (biased variance, as nn.LayerNorm). out and in must not alias.
template <class T>
void launch_layernorm(T* out, const T* in, const T* w, const T* b, int rows, int c, float eps, cudaStream_t stream);

// launch_layernorm that also writes each row's rstd = 1 / sqrt(var + eps) to rstd [rows] (fp32),
// for launch_layernorm_backward_from_output: the same kernel, the same out bit for bit.
template <class T>
void launch_layernorm_keeping_rstd(T* out, float* rstd, const T* in, const T* w, const T* b, int rows, int c, float eps,
                                   cudaStream_t stream);

// The backward of launch_layernorm (as cpu::layernorm_backward): dx += dL/din, dw += dL/dw and
// db += dL/db, from dout = dL/dout and the forward's input `in`. One kernel computes dx and each
// block's partial dw and db (fp32, in `scratch`: layernorm_backward_scratch_floats, device
// memory); a second sums the partials in block order, so dw and db are the same bits every run
// (on one device: the grid is sized to it). The row statistics are recomputed from `in` (two
// passes, as the forward) rather than stored by the forward: the row is read for x̂ anyway, so
// that costs no memory traffic. Rows of whole 16-byte packs (c a multiple of 16 / sizeof(T),
// 16-byte aligned buffers) of up to 512 packs, their dw and db sums within the block's shared
// memory, take a warp per row with the row in registers; others one block per row.
template <class T>
void launch_layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* in, const T* w, int rows, int c, float eps,
                               float* scratch, cudaStream_t stream);

// The same backward from the forward's output `out`, its bias b and the rstd it kept
// (launch_layernorm_keeping_rstd) instead of its input (the inplace_ln variant, as
// cpu::layernorm_backward_from_output): x̂ = (out − b) / w (layernorm_recovery.hpp), the same
// kernels, paths, scratch and determinism otherwise (b on 16 bytes too for the warp path). Where
// some |w_j| is below kInplaceLnMinWeight, x̂ is not recoverable and the kernel writes `tag` to
// *unrecoverable (device memory), which it leaves alone otherwise.
template <class T>
void launch_layernorm_backward_from_output(T* dx, T* dw, T* db, const T* dout, const T* out, const T* w, const T* b,
                                           const float* rstd, int rows, int c, float* scratch, int* unrecoverable,
                                           int tag, cudaStream_t stream);

// The `residual_ln` fusion: x += dropout(y) (row r being (batch, position) r of a run of d.seq
// positions), then out = LayerNorm(x) with w, b, for each of `rows` rows of `c`. out must not
// alias x or y.
template <class T>
void launch_residual_layernorm(T* out, T* x, const T* y, const Dropout& d, std::uint32_t site, const T* w, const T* b,
                               int rows, int c, float eps, cudaStream_t stream);

}  // namespace sweetspot::gpu
