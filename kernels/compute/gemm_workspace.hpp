#pragma once
// The GEMM workspace's size, in a header without CUDA, so the memory estimator (which builds
// without CUDA too) predicts the allocation Gemm makes (gemm.cpp).

#include <cstdint>

namespace sweetspot {

// Each Gemm (one per GPU forward) allocates this once for cuBLAS and cuBLASLt: NVIDIA's
// recommended cuBLAS workspace on Hopper.
inline constexpr std::int64_t kGemmWorkspaceBytes = std::int64_t{32} << 20;

}  // namespace sweetspot
