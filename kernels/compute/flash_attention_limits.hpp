#pragma once
// What the flash_attention kernels (gpu_flash_attention.cu) can take, in a header without CUDA,
// so that a build without it can still say why a cell cannot run.

namespace sweetspot {

// Above head dim 256 the quad kernel takes over; it keeps a block's 32 query rows and their
// outputs in shared memory, and head dimensions up to this fit the GPUs sweetspot builds for
// (227 KiB per block on sm_90).
inline constexpr int kFlashAttentionMaxHeadDim = 512;

}  // namespace sweetspot
