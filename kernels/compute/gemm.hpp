#pragma once
// A thin cuBLAS wrapper with a ROW-MAJOR interface: the forward thinks in row-major [rows, cols]
// activations and nn.Linear weights [out, in]; the one place that turns that into cuBLAS's
// column-major calls is gemm.cpp (the derivation is written there, once).
//
// Inputs, outputs and the compute are in the cell's dtype with fp32 accumulation
// (CUBLAS_COMPUTE_32F for every dtype, so fp32 is true fp32; CUBLAS_COMPUTE_32F_FAST_TF32 only
// when tf32 is asked for). alpha and beta are floats. Everything runs on the stream given to the
// constructor, with a workspace this object allocates (so it is accounted in workspace_bytes).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "kernels/compute/cublas_library.hpp"
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
    Gemm(DType dtype, cudaStream_t stream, bool tf32);
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

    // A cuBLASLt problem's descriptors and the algorithm its heuristic chose, made once per shape.
    struct LtPlan {
        cublasLtMatmulDesc_t desc = nullptr;
        cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
        cublasLtMatmulAlgo_t algo{};
    };
    // The cuBLASLt epilogues behind the public calls: Epilogue's, and the backward's DGELU.
    enum class LtEpilogue { bias, bias_gelu, bias_residual, bias_gelu_aux, dgelu };
    // A plan for y [rows, out] = x [rows, in] · wᵀ (w [out, in]), or for dgelu y [rows, in] =
    // x [rows, out] · w.
    LtPlan& lt_plan(int rows, int in, int out, LtEpilogue epilogue);

    CublasLibrary cublas_;  // first: loaded before, and unloaded after, everything made through it
    DType dtype_;
    cudaStream_t stream_;
    bool tf32_;
    cublasHandle_t handle_ = nullptr;
    cublasLtHandle_t lt_ = nullptr;
    std::map<std::tuple<int, int, int, LtEpilogue>, LtPlan> lt_plans_;
    void* workspace_ = nullptr;
    std::int64_t workspace_bytes_ = 0;
};

}  // namespace sweetspot
