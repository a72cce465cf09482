#pragma once
// The optimizer's kernels of the training step: the global gradient norm that clipping scales by,
// and a fused AdamW over one tensor. cpu::squared_norm and cpu::adamw (cpu_ops.hpp) compute the
// same numbers.
//
// T is the type of the parameters and gradients: float, __half or __nv_bfloat16 (explicit
// instantiations in optimizer.cu). Moments and master weights are fp32. Plain C++ can include
// this header.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/train_scratch.hpp"

namespace sweetspot::gpu {

// One AdamW step of one tensor of n elements, in one pass: g = grads · a.grad_scale, the moments
// m and v (fp32) advanced, then the weight decayed and updated as cpu::adamw does. The weight
// read and updated in fp32 is master[i] when master is not null (mixed precision: fp32 master
// weights beside half params), else params[i]; params[i] is then the result rounded to nearest in
// T. a.grad_scale carries clipping's max_norm / (norm + 1e-6) and, for fp16 gradients, 1 / the
// loss scale.
template <class T>
void launch_adamw(T* params, float* master, const T* grads, float* m, float* v, std::int64_t n, const cpu::AdamW& a,
                  cudaStream_t stream);

// The global gradient norm, in two passes whose order depends on the sizes only, so it repeats
// bit for bit. First, once per gradient buffer: partials[0 .. kNormPartials) = Σ x² over parts of
// x's n elements (each square and sum in double, so the result is cpu::squared_norm's up to the
// order of the sums). Then launch_sum_partials over the partials of every buffer, laid end to end,
// kNormPartials (train_scratch.hpp) of them each.

template <class T>
void launch_squared_norm_partials(const T* x, std::int64_t n, double* partials, cudaStream_t stream);

// *squared_norm = Σ partials[0 .. count), in double; the norm is its square root.
void launch_sum_partials(const double* partials, std::int64_t count, double* squared_norm, cudaStream_t stream);

}  // namespace sweetspot::gpu
