#pragma once
// How a GPU step's fp32 GEMMs compute. fp16 and bf16 GEMMs take their tensor cores with fp32
// accumulation whatever this says. No CUDA here: the cell, the estimator and the kernels read it.
#include <cstdint>

namespace sweetspot {

enum class Fp32Gemm : std::uint8_t {
    exact,       // cuBLAS's fp32 GEMMs on the CUDA cores (TF32 off): PyTorch's default
    tf32,        // one product on TF32 tensor cores: the inputs rounded to 10-bit mantissas
    split_tf32,  // three TF32 products of split operands (tf32_split.cuh): fp32-class accuracy
};

}  // namespace sweetspot
