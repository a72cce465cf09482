#pragma once
// Dropout as a pass of its own (baseline), on activations and on attention probabilities; the
// mask itself, shared with the CPU and the fused kernels, is dropout.hpp's. The backward of either
// is the same call on the gradient: the same site and counters give the same mask and scale.
//
// T is the activation and weight type: float, __half or __nv_bfloat16 (explicit instantiations
// in the .cu). Inside every kernel the math is fp32; only loads and stores are in T. Buffers are
// row-major and contiguous; counts are int64 where B·T·vocab sized buffers could overflow an
// index. Each launcher enqueues one kernel on `stream` and checks the launch. Plain C++ can
// include this header: it only declares host functions.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/compute/dropout.hpp"

namespace sweetspot::gpu {

// Dropout in place on a [rows, width] activation, row r being (batch, position) r of a run of
// d.seq positions (dropout.hpp numbers the elements); nothing when d is inactive.
template <class T>
void launch_dropout(T* x, std::int64_t rows, int width, const Dropout& d, std::uint32_t site, cudaStream_t stream);

// Dropout in place on attention probabilities [rows, d.seq], row r = (b·H + h)·seq + t.
template <class T>
void launch_dropout_probabilities(T* p, std::int64_t rows, const Dropout& d, std::uint32_t site, cudaStream_t stream);

}  // namespace sweetspot::gpu
