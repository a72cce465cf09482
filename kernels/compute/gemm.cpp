#include "kernels/compute/gemm.hpp"

#include <stdexcept>
#include <string>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/gemm_limits.hpp"
#include "kernels/compute/gemm_workspace.hpp"

namespace sweetspot {

namespace {

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
        CUBLAS_CHECK(cublas_.create(&handle_));
        // cublasSetStream resets the handle to cuBLAS's own workspace pool, so the stream is set
        // first and our workspace after it.
        CUBLAS_CHECK(cublas_.set_stream(handle_, stream));
        CUDA_CHECK(cudaMalloc(&workspace_, static_cast<std::size_t>(kGemmWorkspaceBytes)));
        workspace_bytes_ = kGemmWorkspaceBytes;
        CUBLAS_CHECK(cublas_.set_workspace(handle_, workspace_, static_cast<std::size_t>(kGemmWorkspaceBytes)));
        // Default math = no TF32 for fp32 data: fp32 GEMMs are true fp32 unless tf32 was asked.
        CUBLAS_CHECK(cublas_.set_math_mode(handle_, tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
        CUBLAS_CHECK(cublas_.lt_create(&lt_));
    } catch (...) {
        destroy();
        throw;
    }
}

Gemm::~Gemm() { destroy(); }

void Gemm::destroy() noexcept {
    // Errors are ignored: nothing can be done about them in a destructor.
    for (auto& [shape, plan] : lt_plans_) {
        if (plan.desc != nullptr) (void)cublas_.matmul_desc_destroy(plan.desc);
        for (cublasLtMatrixLayout_t layout : {plan.w, plan.x, plan.y})
            if (layout != nullptr) (void)cublas_.matrix_layout_destroy(layout);
    }
    lt_plans_.clear();
    if (lt_ != nullptr) (void)cublas_.lt_destroy(lt_);
    lt_ = nullptr;
    if (handle_ != nullptr) (void)cublas_.destroy(handle_);
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
//   - second operand, trans_a (A stored row-major [k, m], op(A) = Aᵀ, we need op(A)ᵀ = A [k, m]):
//     A's memory read column-major is Aᵀ [m, k], so cuBLAS must transpose it: CUBLAS_OP_T,
//     ld = lda (≥ m).
//   - output: Cᵀ [n, m] column-major with ld = ldc is C [m, n] row-major with row stride ldc.
// The strides between batched problems are unchanged (they are just pointer offsets).
//
// linear: y[rows, out] = x[rows, in] · Wᵀ with W [out, in]: m = rows, n = out, k = in,
// trans_b → cublas_.gemm_ex(OP_T, OP_N, out, rows, in, W, ld in, x, ld in, y, ld out).
void Gemm::linear(void* y, const void* x, const void* w, int rows, int in, int out) {
    batched(/*trans_b=*/true, rows, out, in, 1.0f, x, in, 0, w, in, 0, 0.0f, y, out, 0, 1);
}

void Gemm::batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a, int lda,
                   std::int64_t stride_a, const void* b, int ldb, std::int64_t stride_b, float beta, void* c, int ldc,
                   std::int64_t stride_c, int batch) {
    const cudaDataType type = data_type(dtype_);
    const cublasComputeType_t compute = tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1) {
        CUBLAS_CHECK(cublas_.gemm_ex(handle_, op_b, op_a, n, m, k, &alpha, b, type, ldb, a, type, lda, &beta, c,
                                  type, ldc, compute, CUBLAS_GEMM_DEFAULT));
    } else {
        CUBLAS_CHECK(cublas_.gemm_strided_batched_ex(handle_, op_b, op_a, n, m, k, &alpha, b, type, ldb, stride_b, a,
                                                type, lda, stride_a, &beta, c, type, ldc, stride_c, batch, compute,
                                                CUBLAS_GEMM_DEFAULT));
    }
}

// The same row-major to column-major reading as linear above: cuBLASLt computes the column-major
// y' [out, rows] = op(W') [out, in] · x' [in, rows], W' being w's memory read column-major
// ([in, out], ld in, transposed by the op), x' x's ([in, rows], ld in) and y' y's ([out, rows],
// ld out). The bias is per row of y', i.e. per output feature, as the epilogue adds it. The
// backward's dgelu reads the same W' untransposed: y' [in, rows] = W' [in, out] · x' [out, rows].
// An auxiliary buffer has y's shape and leading dimension.
Gemm::LtPlan& Gemm::lt_plan(int rows, int in, int out, LtEpilogue epilogue) {
    const auto key = std::make_tuple(rows, in, out, epilogue);
    if (const auto found = lt_plans_.find(key); found != lt_plans_.end()) return found->second;
    const bool backward = epilogue == LtEpilogue::dgelu;
    const int y_width = backward ? in : out, x_width = backward ? out : in;
    const bool aux = epilogue == LtEpilogue::bias_gelu_aux || backward;
    if (aux && !gemm_aux_width_fits(y_width)) {
        throw std::invalid_argument("Gemm: cuBLASLt's GELU epilogues with an auxiliary buffer need a width that is a "
                                    "multiple of 8; this one is " + std::to_string(y_width) + ".");
    }
    LtPlan& plan = lt_plans_[key];  // destroy() frees whatever part of it is made
    const cudaDataType type = data_type(dtype_);
    const cublasComputeType_t compute = tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublas_.matmul_desc_create(&plan.desc, compute, CUDA_R_32F));
    const cublasOperation_t op_w = backward ? CUBLAS_OP_N : CUBLAS_OP_T, keep = CUBLAS_OP_N;
    CUBLAS_CHECK(cublas_.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_w, sizeof op_w));
    CUBLAS_CHECK(cublas_.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep));
    const cublasLtEpilogue_t lt_epilogue = [&] {
        switch (epilogue) {
            case LtEpilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
            case LtEpilogue::bias_gelu: return CUBLASLT_EPILOGUE_GELU_BIAS;
            case LtEpilogue::bias_residual: return CUBLASLT_EPILOGUE_BIAS;
            case LtEpilogue::bias_gelu_aux: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
            case LtEpilogue::dgelu: return CUBLASLT_EPILOGUE_DGELU;
        }
        return CUBLASLT_EPILOGUE_DEFAULT;
    }();
    CUBLAS_CHECK(
        cublas_.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &lt_epilogue, sizeof lt_epilogue));
    if (aux) {
        const auto aux_ld = static_cast<std::int64_t>(y_width);
        CUBLAS_CHECK(
            cublas_.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    }
    CUBLAS_CHECK(cublas_.matrix_layout_create(&plan.w, type, in, out, in));
    CUBLAS_CHECK(cublas_.matrix_layout_create(&plan.x, type, x_width, rows, x_width));
    CUBLAS_CHECK(cublas_.matrix_layout_create(&plan.y, type, y_width, rows, y_width));

    cublasLtMatmulPreference_t preference = nullptr;
    CUBLAS_CHECK(cublas_.preference_create(&preference));
    const std::size_t workspace = static_cast<std::size_t>(workspace_bytes_);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = [&] {
        const cublasStatus_t set = cublas_.preference_set_attribute(
            preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
        if (set != CUBLAS_STATUS_SUCCESS) return set;
        return cublas_.algo_get_heuristic(lt_, plan.desc, plan.w, plan.x, plan.y, plan.y, preference, 1, &result,
                                              &found);
    }();
    (void)cublas_.preference_destroy(preference);
    CUBLAS_CHECK(status);
    if (found == 0) {
        throw std::runtime_error("cuBLASLt has no algorithm for a " + std::string(enum_name(dtype_)) + " GEMM of " +
                                 std::to_string(rows) + "×" + std::to_string(x_width) + " to " +
                                 std::to_string(y_width) + " with an epilogue");
    }
    plan.algo = result.algo;
    return plan;
}

void Gemm::linear_fused(void* y, const void* x, const void* w, const void* bias, int rows, int in, int out,
                        Epilogue epilogue, EpilogueOperands operands) {
    const LtEpilogue lt_epilogue = [&] {
        switch (epilogue) {
            case Epilogue::bias: return LtEpilogue::bias;
            case Epilogue::bias_gelu: return LtEpilogue::bias_gelu;
            case Epilogue::bias_residual: return LtEpilogue::bias_residual;
            case Epilogue::bias_gelu_aux: return LtEpilogue::bias_gelu_aux;
        }
        return LtEpilogue::bias;
    }();
    if (epilogue == Epilogue::bias_gelu_aux && operands.aux == nullptr)
        throw std::invalid_argument("Gemm::linear_fused: the bias_gelu_aux epilogue needs an aux buffer");
    LtPlan& plan = lt_plan(rows, in, out, lt_epilogue);
    CUBLAS_CHECK(cublas_.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (epilogue == Epilogue::bias_gelu_aux) {
        CUBLAS_CHECK(cublas_.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                       &operands.aux, sizeof operands.aux));
    }
    const float alpha = 1.0f;
    const bool residual = epilogue == Epilogue::bias_residual;
    const float beta = residual ? 1.0f : 0.0f;
    const void* c = residual && operands.residual != nullptr ? operands.residual : y;
    CUBLAS_CHECK(cublas_.matmul(lt_, plan.desc, &alpha, w, plan.w, x, plan.x, &beta, c, plan.y, y, plan.y, &plan.algo,
                                workspace_, static_cast<std::size_t>(workspace_bytes_), stream_));
}

void Gemm::linear_backward_dgelu(void* dx, const void* dy, const void* w, const void* pre, int rows, int in, int out) {
    LtPlan& plan = lt_plan(rows, in, out, LtEpilogue::dgelu);
    CUBLAS_CHECK(
        cublas_.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof pre));
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublas_.matmul(lt_, plan.desc, &alpha, w, plan.w, dy, plan.x, &beta, dx, plan.y, dx, plan.y,
                                &plan.algo, workspace_, static_cast<std::size_t>(workspace_bytes_), stream_));
}

}  // namespace sweetspot
