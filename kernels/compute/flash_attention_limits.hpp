#pragma once
// What the flash_attention kernels (gpu_flash_attention.cu) can take, in a header without CUDA,
// so that a build without it can still say why a cell cannot run.
#include "kernels/model/variant.hpp"

namespace sweetspot {

// Above head dim 256 the quad kernel takes over; it keeps a block's 32 query rows and their
// outputs in shared memory, and head dimensions up to this fit the GPUs sweetspot builds for
// (227 KiB per block on sm_90).
inline constexpr int kFlashAttentionMaxHeadDim = 512;

// Whether the forward of `variant` runs a batch that is not rectangular (BatchShape): only the
// flash_attention fusion's kernel takes each sequence's own rows and length (sequence_spans.hpp);
// the materialised attention's strided-batched products need every sequence the stride long.
// GpuForward (gpu_forward.hpp) refuses the others with std::invalid_argument; a cell can ask first.
inline bool gpu_forward_runs_ragged(const Variant& variant) { return variant.has(Fusion::flash_attention); }

}  // namespace sweetspot
