#pragma once
// The SwiGLU MLP's activation, silu(gate) · up, and its backward.
//
// T is the activation type: float, __half or __nv_bfloat16 (explicit instantiations in the .cu).
// Inside every kernel the math is fp32; only loads and stores are in T. gate, up and their
// gradients are [rows, f], contiguous and the same shape; counts are int64 (rows · f of a large
// batch overflows an int). Each launcher enqueues its kernels on `stream` and checks every
// launch. Plain C++ can include this header: it only declares host functions.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sweetspot::gpu {

// out = silu(gate) · up over n elements, silu(z) = z · sigmoid(z) (as cpu::swiglu).
template <class T>
void launch_swiglu(T* out, const T* gate, const T* up, std::int64_t n, cudaStream_t stream);

// The backward of launch_swiglu (as cpu::swiglu_backward): dgate = dout · up · silu'(gate) and
// dup = dout · silu(gate), overwritten, over n elements. dgate may be dout (each element is read
// before its gradients are written): a training step's backward takes it in place.
template <class T>
void launch_swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::int64_t n,
                            cudaStream_t stream);

}  // namespace sweetspot::gpu
