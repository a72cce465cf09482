#pragma once
// What the kernels with more than 48 KiB of dynamic shared memory need from the host: the
// device's limit per block (opt-in), and allowing a kernel that much, which must happen before its
// first launch. Included by the .cu files that launch such kernels.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/compute/cuda_check.hpp"

namespace sweetspot::gpu {

// The current device's shared memory per block that a kernel may be allowed, in bytes.
inline int shared_memory_limit() {
    int device = 0, bytes = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return bytes;
}

template <class Kernel>
void allow_shared_memory(Kernel kernel, std::size_t bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace sweetspot::gpu
