#include "kernels/compute/gemm.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/gemm_limits.hpp"
#include "kernels/compute/gemm_workspace.hpp"
#include "kernels/compute/tf32_split.cuh"

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

Gemm::Gemm(DType dtype, cudaStream_t stream, Fp32Gemm fp32_math, std::int64_t split_scratch_bytes)
    : dtype_(dtype),
      stream_(stream),
      fp32_math_(dtype == DType::fp32 ? fp32_math : Fp32Gemm::exact),
      compute_(fp32_math_ == Fp32Gemm::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F) {
    try {
        CUBLAS_CHECK(cublas_.create(&handle_));
        // cublasSetStream resets the handle to cuBLAS's own workspace pool, so the stream is set
        // first and our workspace after it.
        CUBLAS_CHECK(cublas_.set_stream(handle_, stream));
        CUDA_CHECK(cudaMalloc(&workspace_, static_cast<std::size_t>(kGemmWorkspaceBytes)));
        workspace_bytes_ = kGemmWorkspaceBytes;
        CUBLAS_CHECK(cublas_.set_workspace(handle_, workspace_, static_cast<std::size_t>(kGemmWorkspaceBytes)));
        // Default math = no TF32 for fp32 data: every product names its compute type, and only
        // tf32 and split_tf32's three products name TF32.
        CUBLAS_CHECK(cublas_.set_math_mode(handle_, CUBLAS_DEFAULT_MATH));
        CUBLAS_CHECK(cublas_.lt_create(&lt_));
        if (fp32_math_ == Fp32Gemm::split_tf32) {
            // Room for the halves of at least a 16-wide part of k of 128 rows and 128 columns.
            if (split_scratch_bytes < 2 * 2 * 128 * 16 * static_cast<std::int64_t>(sizeof(float)))
                throw std::invalid_argument("Gemm: split_tf32's scratch of " + std::to_string(split_scratch_bytes) +
                                            " bytes is too small");
            CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&split_scratch_),
                                  static_cast<std::size_t>(split_scratch_bytes)));
            split_scratch_bytes_ = split_scratch_bytes;
            workspace_bytes_ += split_scratch_bytes;
        }
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
    if (split_scratch_ != nullptr) (void)cudaFree(split_scratch_);
    handle_ = nullptr;
    workspace_ = nullptr;
    split_scratch_ = nullptr;
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
    if (fp32_math_ == Fp32Gemm::split_tf32) {
        split_batched(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c,
                      batch, nullptr);
    } else {
        product(compute_, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c,
                batch);
    }
}

void Gemm::product(cublasComputeType_t compute, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                   const void* a, int lda, std::int64_t stride_a, const void* b, int ldb, std::int64_t stride_b,
                   float beta, void* c, int ldc, std::int64_t stride_c, int batch) {
    const cudaDataType type = data_type(dtype_);
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

// The blocks: the scratch holds the big and small halves of an op(a) block [mc, kc] and an op(b)
// block [kc, nc] for `group` problems. Whole problems where they fit (as many at a time as fit);
// otherwise one problem at a time in blocks of 128 rows or columns, a whole op(b) where it takes
// at most half the scratch, and k in parts only where not even 256 of its rows and columns fit.
// A block's halves are split from the operands' rows or columns as stored, into the same
// orientation, so each of the three products reads them with the transposes the caller gave.
void Gemm::split_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a, int lda,
                         std::int64_t stride_a, const void* b, int ldb, std::int64_t stride_b, float beta, void* c,
                         int ldc, std::int64_t stride_c, int batch, const FinalProduct* final) {
    if (m == 0 || n == 0 || batch == 0) return;
    if (k == 0 && final == nullptr) {  // c = beta·c: nothing to split
        product(compute_, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c,
                batch);
        return;
    }
    if (final != nullptr && batch != 1) throw std::logic_error("Gemm: a fused split_tf32 product has one problem");
    const std::int64_t cap = split_scratch_bytes_ / static_cast<std::int64_t>(2 * sizeof(float));
    const auto m64 = static_cast<std::int64_t>(m), n64 = static_cast<std::int64_t>(n), k64 = static_cast<std::int64_t>(k);
    const auto down = [](std::int64_t v, std::int64_t step) { return std::max(step, v / step * step); };
    int group = 1, mc = m, nc = n, kc = k;
    if (const std::int64_t whole = (m64 + n64) * k64; whole <= cap) {
        group = static_cast<int>(std::min<std::int64_t>(batch, cap / std::max<std::int64_t>(whole, 1)));
    } else {
        kc = static_cast<int>(std::min(k64, down(cap / 256, 16)));
        if (n64 * kc > cap / 2) nc = static_cast<int>(down(cap / 2 / kc, 128));
        const std::int64_t rows_left = (cap - static_cast<std::int64_t>(nc) * kc) / kc;
        if (m64 > rows_left) mc = static_cast<int>(down(rows_left, 128));
    }
    const std::int64_t a_block = static_cast<std::int64_t>(mc) * kc * group;
    float* const a_big = split_scratch_;
    float* const a_small = a_big + a_block;
    float* const b_big = a_small + a_block;
    float* const b_small = b_big + static_cast<std::int64_t>(nc) * kc * group;
    const auto* const af = static_cast<const float*>(a);
    const auto* const bf = static_cast<const float*>(b);
    auto* const cf = static_cast<float*>(c);
    for (int p0 = 0; p0 < batch; p0 += group) {
        const int g = std::min(group, batch - p0);
        for (int n0 = 0; n0 < n; n0 += nc) {
            const int nb = std::min(nc, n - n0);
            for (int k0 = 0; k0 < k; k0 += kc) {
                const int kb = std::min(kc, k - k0);
                const bool last_k = k0 + kb == k;
                // op(b)'s block: rows n0.. of b [n, k] (trans_b) or columns n0.. of b [k, n].
                const float* b_src = bf + p0 * stride_b + (trans_b ? static_cast<std::int64_t>(n0) * ldb + k0
                                                                   : static_cast<std::int64_t>(k0) * ldb + n0);
                const int ldb_block = trans_b ? kb : nb;
                gpu::launch_tf32_split(b_big, b_small, b_src, g, trans_b ? nb : kb, trans_b ? kb : nb, ldb, stride_b,
                                       stream_);
                for (int m0 = 0; m0 < m; m0 += mc) {
                    const int mb = std::min(mc, m - m0);
                    // op(a)'s block: rows m0.. of a [m, k] or columns m0.. of a [k, m] (trans_a).
                    const float* a_src = af + p0 * stride_a + (trans_a ? static_cast<std::int64_t>(k0) * lda + m0
                                                                       : static_cast<std::int64_t>(m0) * lda + k0);
                    const int lda_block = trans_a ? mb : kb;
                    gpu::launch_tf32_split(a_big, a_small, a_src, g, trans_a ? kb : mb, trans_a ? mb : kb, lda,
                                           stride_a, stream_);
                    float* c_block = cf + p0 * stride_c + static_cast<std::int64_t>(m0) * ldc + n0;
                    const std::int64_t sa = static_cast<std::int64_t>(mb) * kb, sb = static_cast<std::int64_t>(nb) * kb;
                    const auto tf32_product = [&](const float* x, const float* y, float beta_here) {
                        product(CUBLAS_COMPUTE_32F_FAST_TF32, trans_a, trans_b, mb, nb, kb, alpha, x, lda_block, sa, y,
                                ldb_block, sb, beta_here, c_block, ldc, stride_c, g);
                    };
                    tf32_product(a_small, b_big, k0 == 0 ? beta : 1.0f);
                    tf32_product(a_big, b_small, 1.0f);
                    if (final != nullptr && last_k) {
                        (*final)(SplitBlock{m0, n0, mb, nb, kb, a_big, b_big, c_block});
                    } else {
                        tf32_product(a_big, b_big, 1.0f);
                    }
                }
            }
        }
    }
}

// The same row-major to column-major reading as linear above: cuBLASLt computes the column-major
// y' [out, rows] = op(W') [out, in] · x' [in, rows], W' being w's memory read column-major
// ([in, out], ld in, transposed by the op), x' x's ([in, rows], ld in) and y' y's ([out, rows],
// ld out). The bias is per row of y', i.e. per output feature, as the epilogue adds it. The
// backward's dgelu reads the same W' untransposed: y' [in, rows] = W' [in, out] · x' [out, rows].
// An auxiliary buffer has y's shape and leading dimension.
Gemm::LtPlan& Gemm::lt_plan(int rows, int in, int out, int y_ld, LtEpilogue epilogue) {
    const auto key = std::make_tuple(rows, in, out, y_ld, epilogue);
    if (const auto found = lt_plans_.find(key); found != lt_plans_.end()) return found->second;
    const bool backward = epilogue == LtEpilogue::dgelu;
    const int y_width = backward ? in : out, x_width = backward ? out : in;
    const bool aux = epilogue == LtEpilogue::bias_gelu_aux || backward;
    // A block's width (split_tf32) is a multiple of 128 or what is left of y_ld: y_ld decides.
    if (aux && !gemm_aux_width_fits(y_ld)) {
        throw std::invalid_argument("Gemm: cuBLASLt's GELU epilogues with an auxiliary buffer need a width that is a "
                                    "multiple of 8; this one is " + std::to_string(y_ld) + ".");
    }
    LtPlan& plan = lt_plans_[key];  // destroy() frees whatever part of it is made
    const cudaDataType type = data_type(dtype_);
    // split_tf32's fused product is its last, a_big·b_big, whose halves are TF32 already.
    const cublasComputeType_t compute =
        fp32_math_ == Fp32Gemm::split_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : compute_;
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
        const auto aux_ld = static_cast<std::int64_t>(y_ld);
        CUBLAS_CHECK(
            cublas_.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    }
    CUBLAS_CHECK(cublas_.matrix_layout_create(&plan.w, type, in, out, in));
    CUBLAS_CHECK(cublas_.matrix_layout_create(&plan.x, type, x_width, rows, x_width));
    CUBLAS_CHECK(cublas_.matrix_layout_create(&plan.y, type, y_width, rows, y_ld));

    cublasLtMatmulPreference_t preference = nullptr;
    CUBLAS_CHECK(cublas_.preference_create(&preference));
    const std::size_t workspace = static_cast<std::size_t>(kGemmWorkspaceBytes);
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

void Gemm::lt_matmul(LtPlan& plan, const void* w, const void* x, float beta, const void* c, void* y) {
    const float alpha = 1.0f;
    CUBLAS_CHECK(cublas_.matmul(lt_, plan.desc, &alpha, w, plan.w, x, plan.x, &beta, c, plan.y, y, plan.y, &plan.algo,
                                workspace_, static_cast<std::size_t>(kGemmWorkspaceBytes), stream_));
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
    const bool residual = epilogue == Epilogue::bias_residual;
    const std::size_t element = dtype_size(dtype_);
    // The epilogue's operands for the block of y at (m0, n0), y's row stride `out` apart.
    const auto fused = [&](LtPlan& plan, int m0, int n0, const void* w_block, const void* x_block, float beta,
                           const void* c, void* y_block) {
        const void* bias_block = static_cast<const char*>(bias) + static_cast<std::size_t>(n0) * element;
        CUBLAS_CHECK(cublas_.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_block,
                                                       sizeof bias_block));
        if (epilogue == Epilogue::bias_gelu_aux) {
            void* aux = static_cast<char*>(operands.aux) +
                        (static_cast<std::size_t>(m0) * static_cast<std::size_t>(out) + static_cast<std::size_t>(n0)) *
                            element;
            CUBLAS_CHECK(cublas_.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                           sizeof aux));
        }
        lt_matmul(plan, w_block, x_block, beta, c, y_block);
    };
    if (fp32_math_ == Fp32Gemm::split_tf32) {
        // The two small products go into y first (onto the residual, for bias_residual), then the
        // big one with the epilogue over the sum.
        if (residual && operands.residual != nullptr && operands.residual != y) {
            CUDA_CHECK(cudaMemcpyAsync(y, operands.residual, static_cast<std::size_t>(rows) * out * element,
                                       cudaMemcpyDeviceToDevice, stream_));
        }
        const FinalProduct final = [&](const SplitBlock& block) {
            fused(lt_plan(block.mc, block.kc, block.nc, out, lt_epilogue), block.m0, block.n0, block.b_big,
                  block.a_big, 1.0f, block.c, block.c);
        };
        split_batched(false, true, rows, out, in, 1.0f, x, in, 0, w, in, 0, residual ? 1.0f : 0.0f, y, out, 0, 1,
                      &final);
        return;
    }
    const void* c = residual && operands.residual != nullptr ? operands.residual : y;
    fused(lt_plan(rows, in, out, out, lt_epilogue), 0, 0, w, x, residual ? 1.0f : 0.0f, c, y);
}

void Gemm::linear_backward_dgelu(void* dx, const void* dy, const void* w, const void* pre, int rows, int in, int out) {
    const std::size_t element = dtype_size(dtype_);
    const auto fused = [&](LtPlan& plan, int m0, int n0, const void* w_block, const void* dy_block, float beta,
                           void* dx_block) {
        const void* pre_block = static_cast<const char*>(pre) +
                                (static_cast<std::size_t>(m0) * static_cast<std::size_t>(in) +
                                 static_cast<std::size_t>(n0)) * element;
        CUBLAS_CHECK(cublas_.matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                       &pre_block, sizeof pre_block));
        lt_matmul(plan, w_block, dy_block, beta, dx_block, dx_block);
    };
    if (fp32_math_ == Fp32Gemm::split_tf32) {
        // dx [rows, in] = dy [rows, out] · w [out, in]: the two small products first, then the big
        // one with the GELU's derivative applied to the sum.
        const FinalProduct final = [&](const SplitBlock& block) {
            fused(lt_plan(block.mc, block.nc, block.kc, in, LtEpilogue::dgelu), block.m0, block.n0, block.b_big,
                  block.a_big, 1.0f, block.c);
        };
        split_batched(false, false, rows, in, out, 1.0f, dy, out, 0, w, in, 0, 0.0f, dx, in, 0, 1, &final);
        return;
    }
    fused(lt_plan(rows, in, out, in, LtEpilogue::dgelu), 0, 0, w, dy, 0.0f, dx);
}

}  // namespace sweetspot
