#include "kernels/compute/cuda_check.hpp"

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

}  // namespace sweetspot
