#pragma once
// What the GPU training step (gpu_train_step.hpp) can take, in a header without CUDA, so that a
// build without it can still say why a cell cannot run.

namespace sweetspot {

// Whether the GPU training step runs a batch that is not rectangular (BatchShape): not yet, its
// buffers (train_arena.hpp) and kernels are laid out by batch × seq. A ragged batch, padded or
// packed, trains on the host (CpuTrainStep).
inline constexpr bool kGpuTrainingRunsRagged = false;

}  // namespace sweetspot
