#include "kernels/compute/cuda_check.hpp"

#include <dlfcn.h>

namespace sweetspot {

void cuda_check(cudaError_t status, const char* call, const char* file, int line) {
    if (status == cudaSuccess) return;
    throw CudaError(std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ") from " + call +
                    " at " + file + ":" + std::to_string(line));
}

void cublas_check(cublasStatus_t status, const char* call, const char* file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    throw CudaError(std::string("cuBLAS status ") + std::to_string(static_cast<int>(status)) + " from " + call +
                    " at " + file + ":" + std::to_string(line));
}

std::string gpu_unavailable_reason() {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status == cudaSuccess) return count > 0 ? std::string() : "no GPU found (the NVIDIA driver sees none)";
    (void)cudaGetLastError();  // not sticky, but leave no error behind for the next call
    if (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice) {
        // The runtime says "insufficient driver" both for an old driver and for none at all.
        if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
            dlclose(driver);
        } else {
            return "no NVIDIA driver on this machine (libcuda.so.1 does not load)";
        }
    }
    if (status == cudaErrorInsufficientDriver)
        return std::string("the NVIDIA driver is older than this CUDA runtime needs (") + cudaGetErrorString(status) + ")";
    return std::string("no usable GPU: ") + cudaGetErrorString(status);
}

}  // namespace sweetspot
