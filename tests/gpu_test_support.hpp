#pragma once
// What every [gpu] test shares: its first line fails it with a clear message on a machine
// without a visible GPU (ctest's `gpu` label is excluded there; this is for a direct run).
#include <cuda_runtime_api.h>

#include <string>

#include <catch2/catch_test_macros.hpp>

namespace sweetspot::test {

inline void require_gpu() {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
        FAIL("this [gpu] test needs a CUDA device, but cudaGetDeviceCount reported "
             << (status != cudaSuccess ? std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")"
                                       : std::string("no device"))
             << "; on a machine without a GPU run only the tests selected by \"~[gpu]\"");
    }
}

}  // namespace sweetspot::test
