#pragma once
// The residual stream's add.
//
// T is the activation and weight type: float, __half or __nv_bfloat16 (explicit instantiations
// in the .cu). Inside every kernel the math is fp32; only loads and stores are in T. Buffers are
// row-major and contiguous; counts are int64 where B·T·vocab sized buffers could overflow an
// index. Each launcher enqueues one kernel on `stream` and checks the launch. Plain C++ can
// include this header: it only declares host functions.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sweetspot::gpu {

// x += y (the residual stream), n elements.
template <class T>
void launch_residual_add(T* x, const T* y, std::int64_t n, cudaStream_t stream);

// The backward of x += y has no kernel of its own: the gradient reaching x flows unchanged to both
// x's old value and y, so the training step passes the residual stream's gradient straight on
// and, where a sub-layer's input gradient joins it, adds with launch_residual_add(dx, dy, n).

}  // namespace sweetspot::gpu
