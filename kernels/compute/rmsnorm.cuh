#pragma once
// LLaMA's RMSNorm and its backward.
//
// T is the activation and weight type: float, __half or __nv_bfloat16 (explicit instantiations
// in the .cu). Inside every kernel the math is fp32; only loads and stores are in T. Buffers are
// row-major and contiguous. Each launcher enqueues its kernels on `stream` and checks every
// launch. Plain C++ can include this header: it only declares host functions.
#include <cuda_runtime_api.h>

#include "kernels/compute/train_scratch.hpp"

namespace sweetspot::gpu {

// out[r, :] = in[r, :] / sqrt(mean(in[r, :]²) + eps) · w for each of `rows` rows of `c`
// (as cpu::rmsnorm). out and in must not alias.
template <class T>
void launch_rmsnorm(T* out, const T* in, const T* w, int rows, int c, float eps, cudaStream_t stream);

// The backward of launch_rmsnorm (as cpu::rmsnorm_backward): dx += dL/din and dw += dL/dw, from
// dout = dL/dout and the forward's input `in`. Each row's rms is recomputed from `in` rather than
// kept by the forward, as LayerNorm's backward does: the row is read for x̂ anyway. One kernel
// computes dx and each block's partial dw (fp32, in `scratch`: rmsnorm_backward_scratch_floats,
// device memory); a second sums the partials in block order, so dw is the same bits every run.
template <class T>
void launch_rmsnorm_backward(T* dx, T* dw, const T* dout, const T* in, const T* w, int rows, int c, float eps,
                             float* scratch, cudaStream_t stream);

}  // namespace sweetspot::gpu
