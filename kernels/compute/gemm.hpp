#pragma once
// A thin cuBLAS wrapper with a ROW-MAJOR interface: the forward thinks in row-major [rows, cols]
// activations and nn.Linear weights [out, in]; the one place that turns that into cuBLAS's
// column-major calls is gemm.cpp (the derivation is written there, once).
//
// Inputs, outputs and the compute are in the cell's dtype with fp32 accumulation
// (CUBLAS_COMPUTE_32F for every dtype, so fp32 is true fp32 unless Fp32Gemm says otherwise:
// CUBLAS_COMPUTE_32F_FAST_TF32 for tf32; for split_tf32 each product is three TF32 products of
// split operands, tf32_split.cuh). alpha and beta are floats. Everything runs on the stream given
// to the constructor, with a workspace (and split_tf32's scratch) this object allocates, so it is
// accounted in workspace_bytes.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <tuple>

#include "kernels/compute/cublas_library.hpp"
#include "kernels/compute/fp32_gemm.hpp"
#include "kernels/compute/gemm_workspace.hpp"
#include "kernels/model/dtype.hpp"

namespace sweetspot {

// A GEMM epilogue's operands besides the bias (Gemm::linear_fused): the residual (bias_residual;
// nullptr: y's own values) and the pre-activation's buffer [rows, out] (bias_gelu_aux).
struct EpilogueOperands {
    const void* residual = nullptr;
    void* aux = nullptr;
};

class Gemm {
public:
    // split_scratch_bytes: split_tf32's scratch (gemm_workspace.hpp); a smaller one makes the
    // products run in more blocks, as tests of the blocking want.
    Gemm(DType dtype, cudaStream_t stream, Fp32Gemm fp32_math,
         std::int64_t split_scratch_bytes = kSplitTf32ScratchBytes);
    ~Gemm();
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;

    // y[rows, out] = x[rows, in] · wᵀ, w row-major [out, in] (nn.Linear without its bias).
    // All three contiguous.
    void linear(void* y, const void* x, const void* w, int rows, int in, int out);

    // What a cuBLASLt epilogue does to a linear layer's product, in fp32 before the one rounding
    // to the dtype: add the bias; add the bias then apply GPT-2's GELU; add the bias and a residual
    // (y = residual + x · wᵀ + bias, the residual being y itself unless given); add the bias, apply
    // the GELU and also store the pre-activation in `aux` (what the backward needs).
    enum class Epilogue { bias, bias_gelu, bias_residual, bias_gelu_aux };
    // y = epilogue(x · wᵀ), bias [out] in the dtype. One cuBLASLt call instead of the GEMM and
    // one or two element-wise kernels.
    void linear_fused(void* y, const void* x, const void* w, const void* bias, int rows, int in, int out,
                      Epilogue epilogue, EpilogueOperands operands = {});
    // The backward of a linear layer fed by GELU(pre): dx [rows, in] = (dy [rows, out] · w) ⊙
    // gelu'(pre), w [out, in] as in linear, pre [rows, in] the kept pre-activation. One cuBLASLt
    // call (its DGELU epilogue) instead of the GEMM and the GELU's backward kernel.
    // bias_gelu_aux and this take widths (out, in) that gemm_aux_width_fits (gemm_limits.hpp).
    void linear_backward_dgelu(void* dx, const void* dy, const void* w, const void* pre, int rows, int in, int out);

    // For each of `batch` problems p (pointers advanced by p·stride_*, in elements), row-major:
    //   c[m, n] = alpha · a[m, k] · op(b) + beta · c
    // with op(b) = bᵀ where b is stored [n, k] (trans_b), or op(b) = b stored [k, n] (!trans_b).
    // lda, ldb, ldc are row strides in elements (row-major leading dimensions).
    void batched(bool trans_b, int m, int n, int k, float alpha, const void* a, int lda, std::int64_t stride_a,
                 const void* b, int ldb, std::int64_t stride_b, float beta, void* c, int ldc, std::int64_t stride_c,
                 int batch) {
        batched(/*trans_a=*/false, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c,
                batch);
    }
    // The same with op(a) = aᵀ where a is stored [k, m] (trans_a), as the backward's products
    // with a transposed activation need.
    void batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a, int lda,
                 std::int64_t stride_a, const void* b, int ldb, std::int64_t stride_b, float beta, void* c, int ldc,
                 std::int64_t stride_c, int batch);

    std::int64_t workspace_bytes() const { return workspace_bytes_; }
    DType dtype() const { return dtype_; }
    // Work that must be ordered with the products (a kernel between two GEMMs) goes here too.
    cudaStream_t stream() const { return stream_; }

private:
    void destroy() noexcept;

    // One cuBLAS product as batched() describes it, computed as `compute` says.
    void product(cublasComputeType_t compute, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                 const void* a, int lda, std::int64_t stride_a, const void* b, int ldb, std::int64_t stride_b,
                 float beta, void* c, int ldc, std::int64_t stride_c, int batch);

    // A block of a split_tf32 product: rows m0.. and columns n0.. of the output (mc × nc, at `c`),
    // the last part of the inner dimension (kc), and the big halves of its operands, compact
    // (ld kc for rows of op(a) and of op(b)ᵀ stored [·, k]; ld mc or nc for those stored [k, ·]).
    struct SplitBlock {
        int m0, n0, mc, nc, kc;
        const float* a_big;
        const float* b_big;
        float* c;
    };
    // What a fused product does last: a_big·b_big added to the block (beta 1) with its epilogue.
    using FinalProduct = std::function<void(const SplitBlock&)>;
    // batched() for split_tf32: per block of the output (and of k) whose operands' halves fit
    // the scratch, c = alpha·(a_small·b_big + a_big·b_small + a_big·b_big) + beta·c, the big
    // product last (by `final` where given, batch 1 only).
    void split_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void* a, int lda,
                       std::int64_t stride_a, const void* b, int ldb, std::int64_t stride_b, float beta, void* c,
                       int ldc, std::int64_t stride_c, int batch, const FinalProduct* final);

    // A cuBLASLt problem's descriptors and the algorithm its heuristic chose, made once per shape.
    struct LtPlan {
        cublasLtMatmulDesc_t desc = nullptr;
        cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
        cublasLtMatmulAlgo_t algo{};
    };
    // The cuBLASLt epilogues behind the public calls: Epilogue's, and the backward's DGELU.
    enum class LtEpilogue { bias, bias_gelu, bias_residual, bias_gelu_aux, dgelu };
    // A plan for y [rows, out] = x [rows, in] · wᵀ (w [out, in]), or for dgelu y [rows, in] =
    // x [rows, out] · w; y's rows (and the auxiliary buffer's) y_ld elements apart.
    LtPlan& lt_plan(int rows, int in, int out, int y_ld, LtEpilogue epilogue);
    // The cuBLASLt call of a plan: y = epilogue(alpha·x·op(w) + beta·y).
    void lt_matmul(LtPlan& plan, const void* w, const void* x, float beta, const void* c, void* y);

    CublasLibrary cublas_;  // first: loaded before, and unloaded after, everything made through it
    DType dtype_;
    cudaStream_t stream_;
    Fp32Gemm fp32_math_;  // exact for fp16 and bf16
    cublasComputeType_t compute_;
    cublasHandle_t handle_ = nullptr;
    cublasLtHandle_t lt_ = nullptr;
    std::map<std::tuple<int, int, int, int, LtEpilogue>, LtPlan> lt_plans_;
    void* workspace_ = nullptr;
    float* split_scratch_ = nullptr;  // split_tf32: the operands' halves
    std::int64_t split_scratch_bytes_ = 0;
    std::int64_t workspace_bytes_ = 0;
};

}  // namespace sweetspot
