#pragma once
// cuBLAS and cuBLASLt, opened when a Gemm is made instead of when the process starts. Loading
// libcublasLt (half a gigabyte, with hundreds of thousands of relocations to apply) costs each
// process CPU time (docs/benchmarks-history.md has how much), and most of sweetspot's processes never
// multiply on a GPU: the run's parent, host cells, summary, list, estimate, report. The entry
// points keep the headers' types; the libraries are those of the toolkit sweetspot was built with
// (CUBLAS_VER_MAJOR).
#include <cublasLt.h>
#include <cublas_v2.h>

namespace sweetspot {

class CublasLibrary {
public:
    // cublasGemmEx and cublasGemmStridedBatchedEx have C++ overloads (taking a cudaDataType
    // compute type); these are the C entry points, which take a cublasComputeType_t.
    using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                      const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                      cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                    const void*, const void*, cudaDataType, int, long long, const void*,
                                                    cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                                    long long, int, cublasComputeType_t, cublasGemmAlgo_t);

    // Throws CudaError naming the library or symbol that cannot be loaded.
    CublasLibrary();
    ~CublasLibrary();
    CublasLibrary(const CublasLibrary&) = delete;
    CublasLibrary& operator=(const CublasLibrary&) = delete;

    decltype(&::cublasCreate_v2) create = nullptr;
    decltype(&::cublasDestroy_v2) destroy = nullptr;
    decltype(&::cublasSetStream_v2) set_stream = nullptr;
    decltype(&::cublasSetWorkspace_v2) set_workspace = nullptr;
    decltype(&::cublasSetMathMode) set_math_mode = nullptr;
    GemmEx gemm_ex = nullptr;
    GemmStridedBatchedEx gemm_strided_batched_ex = nullptr;
    decltype(&::cublasLtCreate) lt_create = nullptr;
    decltype(&::cublasLtDestroy) lt_destroy = nullptr;
    decltype(&::cublasLtMatmulDescCreate) matmul_desc_create = nullptr;
    decltype(&::cublasLtMatmulDescDestroy) matmul_desc_destroy = nullptr;
    decltype(&::cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute = nullptr;
    decltype(&::cublasLtMatrixLayoutCreate) matrix_layout_create = nullptr;
    decltype(&::cublasLtMatrixLayoutDestroy) matrix_layout_destroy = nullptr;
    decltype(&::cublasLtMatmulPreferenceCreate) preference_create = nullptr;
    decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy = nullptr;
    decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set_attribute = nullptr;
    decltype(&::cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic = nullptr;
    decltype(&::cublasLtMatmul) matmul = nullptr;

private:
    void* cublas_ = nullptr;
    void* cublas_lt_ = nullptr;
};

}  // namespace sweetspot
