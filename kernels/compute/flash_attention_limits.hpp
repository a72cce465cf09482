#pragma once
// What the flash_attention kernels (gpu_flash_attention.cu) can take, in a header without CUDA,
// so that a build without it can still say why a cell cannot run.

namespace sweetspot {

// The CUDA-core kernel keeps a block's 32 query rows and their outputs in shared memory: head
// dimensions up to this fit the GPUs sweetspot builds for (227 KiB per block on sm_90).
inline constexpr int kFlashAttentionMaxHeadDim = 512;

}  // namespace sweetspot
