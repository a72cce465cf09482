#include "kernels/compute/cublas_library.hpp"

#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "kernels/compute/cuda_check.hpp"

namespace sweetspot {
namespace {

void* open_library(const std::string& name) {
    void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) throw CudaError("cannot load " + name + ": " + dlerror());
    return library;
}

template <class Function>
void resolve(void* library, const char* symbol, Function& function) {
    function = reinterpret_cast<std::remove_reference_t<Function>>(dlsym(library, symbol));
    if (function == nullptr) throw CudaError(std::string("cuBLAS lacks ") + symbol);
}

}  // namespace

CublasLibrary::CublasLibrary() {
    const std::string major = std::to_string(CUBLAS_VER_MAJOR);
    try {
        cublas_lt_ = open_library("libcublasLt.so." + major);
        cublas_ = open_library("libcublas.so." + major);
        // The _v2 names are what cublas_v2.h maps cublasCreate and the others to.
        resolve(cublas_, "cublasCreate_v2", create);
        resolve(cublas_, "cublasDestroy_v2", destroy);
        resolve(cublas_, "cublasSetStream_v2", set_stream);
        resolve(cublas_, "cublasSetWorkspace_v2", set_workspace);
        resolve(cublas_, "cublasSetMathMode", set_math_mode);
        resolve(cublas_, "cublasGemmEx", gemm_ex);
        resolve(cublas_, "cublasGemmStridedBatchedEx", gemm_strided_batched_ex);
        resolve(cublas_lt_, "cublasLtCreate", lt_create);
        resolve(cublas_lt_, "cublasLtDestroy", lt_destroy);
        resolve(cublas_lt_, "cublasLtMatmulDescCreate", matmul_desc_create);
        resolve(cublas_lt_, "cublasLtMatmulDescDestroy", matmul_desc_destroy);
        resolve(cublas_lt_, "cublasLtMatmulDescSetAttribute", matmul_desc_set_attribute);
        resolve(cublas_lt_, "cublasLtMatrixLayoutCreate", matrix_layout_create);
        resolve(cublas_lt_, "cublasLtMatrixLayoutDestroy", matrix_layout_destroy);
        resolve(cublas_lt_, "cublasLtMatmulPreferenceCreate", preference_create);
        resolve(cublas_lt_, "cublasLtMatmulPreferenceDestroy", preference_destroy);
        resolve(cublas_lt_, "cublasLtMatmulPreferenceSetAttribute", preference_set_attribute);
        resolve(cublas_lt_, "cublasLtMatmulAlgoGetHeuristic", algo_get_heuristic);
        resolve(cublas_lt_, "cublasLtMatmul", matmul);
    } catch (...) {
        if (cublas_ != nullptr) dlclose(cublas_);
        if (cublas_lt_ != nullptr) dlclose(cublas_lt_);
        throw;
    }
}

CublasLibrary::~CublasLibrary() {
    dlclose(cublas_);
    dlclose(cublas_lt_);
}

}  // namespace sweetspot
