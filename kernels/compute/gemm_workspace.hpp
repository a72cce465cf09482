#pragma once
// The GEMM workspace's size, in a header without CUDA, so the memory estimator (which builds
// without CUDA too) predicts the allocations Gemm makes (gemm.cpp).

#include <cstdint>

#include "kernels/compute/fp32_gemm.hpp"
#include "kernels/model/dtype.hpp"

namespace sweetspot {

// Each Gemm (one per GPU forward) allocates this once for cuBLAS and cuBLASLt: NVIDIA's
// recommended cuBLAS workspace on Hopper.
inline constexpr std::int64_t kGemmWorkspaceBytes = std::int64_t{32} << 20;

// A split_tf32 Gemm also holds the split halves of the operands of the part of a product it
// computes at a time. Products whose operands do not fit run as several blocks of the output (and
// of the inner dimension), each splitting its own operands; at 256 MiB, GPT-2 1.5B's products at
// batch 8 run whole or in a few blocks, so the splits stay a small part of the products' time.
inline constexpr std::int64_t kSplitTf32ScratchBytes = std::int64_t{256} << 20;

// What a Gemm of `dtype` computing fp32 products as `math` allocates.
constexpr std::int64_t gemm_device_bytes(DType dtype, Fp32Gemm math) {
    return kGemmWorkspaceBytes + (dtype == DType::fp32 && math == Fp32Gemm::split_tf32 ? kSplitTf32ScratchBytes : 0);
}

}  // namespace sweetspot
