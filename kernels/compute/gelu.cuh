#pragma once
// GPT-2's GELU (the tanh approximation) on the MLP's activations, and its backward.
//
// T is the activation and weight type: float, __half or __nv_bfloat16 (explicit instantiations
// in the .cu). Inside every kernel the math is fp32; only loads and stores are in T. Buffers are
// row-major and contiguous; counts are int64 where B·T·vocab sized buffers could overflow an
// index. Each launcher enqueues one kernel on `stream` and checks the launch. Plain C++ can
// include this header: it only declares host functions.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sweetspot::gpu {

// x = gelu(x) in place, GPT-2's tanh approximation. x has n elements.
template <class T>
void launch_gelu_tanh(T* x, std::int64_t n, cudaStream_t stream);
// out = gelu(in) over n elements: the training step's backward recomputes the GELU's output from
// the kept pre-activation in one pass, where a copy and the in-place form would take two.
template <class T>
void launch_gelu_tanh(T* out, const T* in, std::int64_t n, cudaStream_t stream);

// The backward of launch_gelu_tanh: dx *= gelu'(x) in place over n elements, x the forward's
// input (as cpu::gelu_tanh_backward).
template <class T>
void launch_gelu_tanh_backward(T* dx, const T* x, std::int64_t n, cudaStream_t stream);

// Tempo's in-place GELU (gelu_from_output.hpp): x = gelu(x) in place, the same values as
// launch_gelu_tanh, and each element's branch bit into left_bits (gelu_output::branch_bytes(n)
// bytes, gelu_output's layout; as cpu::gelu_tanh_with_branch).
template <class T>
void launch_gelu_tanh_with_branch(T* x, std::uint8_t* left_bits, std::int64_t n, cudaStream_t stream);

// For T = __half or __nv_bfloat16: gelu' of the inverse for every value of T on each branch into
// `table` (gelu_output::kDerivativeTableSize floats, gelu_output's layout), made once for a run of
// backwards.
template <class T>
void launch_gelu_derivative_table(float* table, cudaStream_t stream);

// Its backward: dx *= gelu'(x) in place over n elements, from the forward's output y and its bits
// (as cpu::gelu_tanh_backward_from_output): in fp32 (`table` null) by inverting each y, in __half
// and __nv_bfloat16 by reading launch_gelu_derivative_table<T>'s `table`.
template <class T>
void launch_gelu_tanh_backward_from_output(T* dx, const T* y, const std::uint8_t* left_bits, const float* table,
                                           std::int64_t n, cudaStream_t stream);

}  // namespace sweetspot::gpu
