#pragma once
// The operand split behind Gemm's split_tf32 products: x = big + small, both exact TF32 values, so
// that a·b ≈ a_big·b_big + a_big·b_small + a_small·b_big on TF32 tensor cores keeps fp32's
// accuracy (the dropped a_small·b_small and the rounding of small are each about 2⁻²² of a·b). The
// three products run at TF32's rate, several times fp32's on the CUDA cores. Plain C++ can include
// this header: it only declares host functions.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sweetspot::gpu {

// For each of `batches` matrices of rows × cols (row stride ld, `stride` elements between
// matrices) in x: big = x rounded to TF32 (to nearest, ties away), small = x − big rounded the
// same way, both written compact ([batches][rows][cols]).
void launch_tf32_split(float* big, float* small, const float* x, std::int64_t batches, std::int64_t rows,
                       std::int64_t cols, std::int64_t ld, std::int64_t stride, cudaStream_t stream);

}  // namespace sweetspot::gpu
