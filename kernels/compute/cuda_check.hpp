#pragma once
// Every CUDA runtime and cuBLAS call goes through these checks: a failure throws CudaError with
// the call, the place and the library's own message, and the cell is recorded as failed.
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace sweetspot {

class CudaError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

void cuda_check(cudaError_t status, const char* call, const char* file, int line);
void cublas_check(cublasStatus_t status, const char* call, const char* file, int line);

// Why this process sees no GPU, in words a user acts on ("no NVIDIA driver on this machine", not
// the runtime's "CUDA driver version is insufficient", which it also says when there is none); empty
// when it sees one.
std::string gpu_unavailable_reason();

}  // namespace sweetspot

#define CUDA_CHECK(call) ::sweetspot::cuda_check((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) ::sweetspot::cublas_check((call), #call, __FILE__, __LINE__)
// After a kernel launch: a bad configuration shows up here, not at the next synchronization.
#define CUDA_CHECK_LAUNCH() ::sweetspot::cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
