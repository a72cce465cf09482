#pragma once
// The count of NaN and infinite values: the cell's output check over the logits.
//
// T is the activation and weight type: float, __half or __nv_bfloat16 (explicit instantiations
// in the .cu). Inside every kernel the math is fp32; only loads and stores are in T. Buffers are
// row-major and contiguous; counts are int64 where B·T·vocab sized buffers could overflow an
// index. Each launcher enqueues one kernel on `stream` and checks the launch. Plain C++ can
// include this header: it only declares host functions.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sweetspot::gpu {

// *count = how many of x's n values are NaN or infinite; count is one value in device memory.
template <class T>
void launch_count_nonfinite(const T* x, std::int64_t n, unsigned long long* count, cudaStream_t stream);

}  // namespace sweetspot::gpu
