#pragma once
// The GPU probe's on-demand fault-in (harness/measure/gpu_probe_cuda.cpp), apart from the
// forward's kernels. Plain C++ can include this header: it only declares the launcher.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sweetspot::gpu {

// Reads each of `n` floats of `data` (a managed range resident on the host, so every page
// migrates when first touched) and writes to *sink only for a value no float in the range has,
// so the reads cannot be optimised away. Enqueued on `stream`, the launch checked.
void launch_read_every_element(const float* data, std::int64_t n, float* sink, cudaStream_t stream);

}  // namespace sweetspot::gpu
