#pragma once
// A linear layer's bias, added after the GEMM (baseline: no epilogue).
//
// T is the activation and weight type: float, __half or __nv_bfloat16 (explicit instantiations
// in the .cu). Inside every kernel the math is fp32; only loads and stores are in T. Buffers are
// row-major and contiguous; counts are int64 where B·T·vocab sized buffers could overflow an
// index. Each launcher enqueues one kernel on `stream` and checks the launch. Plain C++ can
// include this header: it only declares host functions.
#include <cuda_runtime_api.h>

#include <cstdint>
#include "kernels/compute/train_scratch.hpp"

namespace sweetspot::gpu {

// y[r, j] += bias[j] for y [rows, cols]: the bias of a linear layer, after the GEMM.
template <class T>
void launch_add_bias(T* y, const T* bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream);

// The backward of a bias: dbias[j] += Σ_r dout[r, j] for dout [rows, cols] (as
// cpu::bias_backward), summed in fp32 in an order fixed by the shape (the same bits every run),
// through `scratch` (bias_backward_scratch_floats, device memory). rows / 256 must be ≤ 65535.
template <class T>
void launch_bias_backward(T* dbias, const T* dout, std::int64_t rows, int cols, float* scratch, cudaStream_t stream);

}  // namespace sweetspot::gpu
