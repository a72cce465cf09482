#include "kernels/compute/gemm.hpp"

#include <cublas_v2.h>

#include "kernels/compute/cuda_check.hpp"

namespace sweetspot {

namespace {

// NVIDIA's recommended cuBLAS workspace on Hopper.
constexpr std::int64_t kWorkspaceBytes = std::int64_t{32} << 20;

cudaDataType data_type(DType dtype) {
    switch (dtype) {
        case DType::fp32: return CUDA_R_32F;
        case DType::fp16: return CUDA_R_16F;
        case DType::bf16: return CUDA_R_16BF;
    }
    return CUDA_R_32F;
}

}  // namespace

Gemm::Gemm(DType dtype, cudaStream_t stream, bool tf32)
    : dtype_(dtype), stream_(stream), tf32_(tf32 && dtype == DType::fp32) {
    try {
        CUBLAS_CHECK(cublasCreate(&handle_));
        // cublasSetStream resets the handle to cuBLAS's own workspace pool, so the stream is set
        // first and our workspace after it.
        CUBLAS_CHECK(cublasSetStream(handle_, stream));
        CUDA_CHECK(cudaMalloc(&workspace_, static_cast<std::size_t>(kWorkspaceBytes)));
        workspace_bytes_ = kWorkspaceBytes;
        CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_, static_cast<std::size_t>(kWorkspaceBytes)));
        // Default math = no TF32 for fp32 data: fp32 GEMMs are true fp32 unless tf32 was asked.
        CUBLAS_CHECK(cublasSetMathMode(handle_, tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    } catch (...) {
        destroy();
        throw;
    }
}

Gemm::~Gemm() { destroy(); }

void Gemm::destroy() noexcept {
    // Errors are ignored: nothing can be done about them in a destructor.
    if (handle_ != nullptr) (void)cublasDestroy(handle_);
    if (workspace_ != nullptr) (void)cudaFree(workspace_);
    handle_ = nullptr;
    workspace_ = nullptr;
    workspace_bytes_ = 0;
}

// Row-major to column-major, the derivation used by both calls below.
//
// A row-major matrix M [r, c] with row stride L is, byte for byte, the column-major matrix
// Mᵀ [c, r] with leading dimension L. So the row-major product C[m, n] = A[m, k] · op(B) is
// computed as the column-major product Cᵀ[n, m] = op(B)ᵀ[n, k] · Aᵀ[k, m], i.e. cuBLAS with
// its (m, n, k) = (n, m, k), first operand B, second operand A, output C:
//   - second operand: A's memory read column-major is already Aᵀ [k, m]: CUBLAS_OP_N, ld = lda.
//   - first operand, trans_b (B stored row-major [n, k], op(B) = Bᵀ, we need op(B)ᵀ = B [n, k]):
//     B's memory read column-major is Bᵀ [k, n], so cuBLAS must transpose it: CUBLAS_OP_T,
//     ld = ldb (cuBLAS requires ld ≥ k: ldb ≥ k holds since B's rows have k elements).
//   - first operand, !trans_b (B stored row-major [k, n], op(B) = B, we need Bᵀ [n, k]):
//     B's memory read column-major is already Bᵀ [n, k]: CUBLAS_OP_N, ld = ldb (≥ n).
//   - output: Cᵀ [n, m] column-major with ld = ldc is C [m, n] row-major with row stride ldc.
// The strides between batched problems are unchanged (they are just pointer offsets).
//
// linear: y[rows, out] = x[rows, in] · Wᵀ with W [out, in]: m = rows, n = out, k = in,
// trans_b → cublasGemmEx(OP_T, OP_N, out, rows, in, W, ld in, x, ld in, y, ld out).
void Gemm::linear(void* y, const void* x, const void* w, int rows, int in, int out) {
    batched(/*trans_b=*/true, rows, out, in, 1.0f, x, in, 0, w, in, 0, 0.0f, y, out, 0, 1);
}

void Gemm::batched(bool trans_b, int m, int n, int k, float alpha, const void* a, int lda, std::int64_t stride_a,
                   const void* b, int ldb, std::int64_t stride_b, float beta, void* c, int ldc, std::int64_t stride_c,
                   int batch) {
    const cudaDataType type = data_type(dtype_);
    const cublasComputeType_t compute = tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1) {
        CUBLAS_CHECK(cublasGemmEx(handle_, op_b, CUBLAS_OP_N, n, m, k, &alpha, b, type, ldb, a, type, lda, &beta, c,
                                  type, ldc, compute, CUBLAS_GEMM_DEFAULT));
    } else {
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle_, op_b, CUBLAS_OP_N, n, m, k, &alpha, b, type, ldb, stride_b, a,
                                                type, lda, stride_a, &beta, c, type, ldc, stride_c, batch, compute,
                                                CUBLAS_GEMM_DEFAULT));
    }
}

}  // namespace sweetspot
