// LLaMA's forward on the GPU (gpu_forward_context.hpp), the math of its host forward
// (llama_compute.cpp) in the cell's dtype with fp32 accumulation: per block, RMSNorm, q, k and v by
// three cuBLAS products into one packed qkv (qkv_heads.hpp), the rotation of q and k, attention
// over grouped kv heads, o_proj and the residual add; RMSNorm, gate and up, SwiGLU in place over
// the gate, down_proj and the residual add. The attention over grouped heads is materialised
// (gpu_attention.hpp: the mask, softmax as kernels of their own, or one kernel with the `softmax`
// fusion) or the flash_attention fusion's kernel; with `proj_epilogue` the residual add is
// o_proj's GEMM adding onto the residual stream (beta 1: one rounding, as cuBLASLt's residual
// epilogue; LLaMA has no bias). residual_ln and mlp_epilogue are GPT-2's kernels (LayerNorm,
// bias and GELU) and no LLaMA form of them is built: llama_compute.cpp declares the fusions this
// forward takes, and make_gpu_forward refuses the others.
#include "kernels/compute/llama/llama_gpu_forward.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <vector>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/embedding.cuh"
#include "kernels/compute/family_compute.hpp"
#include "kernels/compute/gpu_attention.hpp"
#include "kernels/compute/qkv_heads.hpp"
#include "kernels/compute/residual.cuh"
#include "kernels/compute/rmsnorm.cuh"
#include "kernels/compute/rope.cuh"
#include "kernels/compute/rope_frequencies.hpp"
#include "kernels/compute/swiglu.cuh"
#include "kernels/model/llama/llama_tensors.hpp"

namespace sweetspot::llama {

namespace {

class LlamaGpuForward final : public GpuForwardContext {
public:
    LlamaGpuForward(const ModelConfig& model_, const WeightLayout& layout_, DType dtype_, const BatchShape& shape_,
                    cudaStream_t stream_, const GpuForwardOptions& options_)
        : GpuForwardContext(model_, layout_, dtype_, shape_, stream_, options_),
          heads{model.n_head, model.kv_heads(), model.head_dim()} {
        // The rows' positions are the context's (the shape's); the frequencies are the host's fp32
        // table, the one the CPU op reads.
        const std::vector<float> inv_freq = rope_inv_frequencies_f32(model.head_dim(), model.rope_theta, model.rope_scaling);
        CUDA_CHECK(cudaMemcpyAsync(frequencies, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice,
                                   stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }

    void run(LayerSource& weights) override {
        with_dtype(dtype, [&](auto t) { forward<decltype(t)>(weights); });
    }

private:
    QkvHeads heads;

    template <class T>
    void forward(LayerSource& weights) {
        launches = 0;
        const int c = model.n_embd;
        const auto tensor = [](const T* unit, const UnitLayout& u, int t) { return u.tensor(unit, t); };
        with_unit<T>(weights, 0, [&](const T* unit, const UnitLayout& u) {
            // No position table (the rows' positions turn q and k instead): the rows' form, which a
            // packed batch's rows need, reads no position here.
            gpu::launch_embedding<T>(static_cast<T*>(x), tokens, tensor(unit, u, embed_tensor::tokens), nullptr,
                                     positions, rows(), c, stream);
            launches += 1;
        });
        for (int l = 0; l < model.n_layer; ++l) {
            with_unit<T>(weights, WeightLayout::block_unit(l),
                         [&](const T* unit, const UnitLayout& u) { block<T>(unit, u); });
        }
        with_unit<T>(weights, layout.head_unit(), [&](const T* unit, const UnitLayout& u) {
            gpu::launch_rmsnorm<T>(static_cast<T*>(ln), static_cast<const T*>(x), tensor(unit, u, head_tensor::norm),
                                   static_cast<int>(rows()), c, model.ln_eps, stream);
            gemm->linear(logits, ln, tensor(unit, u, head_tensor::lm_head), static_cast<int>(rows()), c, model.vocab_size);
            launches += 2;
        });
    }

    // out[rows, out_dim] (rows ld_out apart) = in · wᵀ + beta · out.
    template <class T>
    void linear_into(T* out, std::int64_t ld_out, const T* in, const T* w, int in_dim, int out_dim, float beta = 0.0f) {
        gemm->batched(/*trans_b=*/true, static_cast<int>(rows()), out_dim, in_dim, 1.0f, in, in_dim, 0, w, in_dim, 0,
                      beta, out, static_cast<int>(ld_out), 0, 1);
    }

    template <class T>
    void block(const T* unit, const UnitLayout& u) {
        const auto w = [&](int t) { return u.tensor(unit, t); };
        const int bt = static_cast<int>(rows()), c = model.n_embd, f = model.ffn_width();
        const int kv = heads.n_kv_head * heads.head_dim;
        T* const x_ = static_cast<T*>(x);
        T* const ln_ = static_cast<T*>(ln);
        T* const qkv_ = static_cast<T*>(qkv);
        T* const att_ = static_cast<T*>(att);
        T* const y_ = static_cast<T*>(y);
        T* const gate = static_cast<T*>(fc);
        T* const up = gate + rows() * f;

        gpu::launch_rmsnorm<T>(ln_, x_, w(block_tensor::attn_norm), bt, c, model.ln_eps, stream);
        linear_into<T>(qkv_ + heads.q_col(0), heads.ld(), ln_, w(block_tensor::q_w), c, c);
        linear_into<T>(qkv_ + heads.k_col(0), heads.ld(), ln_, w(block_tensor::k_w), c, kv);
        linear_into<T>(qkv_ + heads.v_col(0), heads.ld(), ln_, w(block_tensor::v_w), c, kv);
        gpu::launch_rope<T>(qkv_, positions, frequencies, bt, heads.n_head, heads.n_kv_head, heads.head_dim, stream);
        launches += 5;
        if (fused(Fusion::flash_attention)) {
            gpu::flash_attention<T>(att_, qkv_, shape.batch(), spans, heads, Dropout{}, 0, stream);
            launches += 1;
        } else {
            gpu::AttentionOptions attention_options;
            attention_options.fused_softmax = fused(Fusion::softmax);
            // A rectangular batch only (the constructor refuses a ragged one).
            launches += gpu::attention<T>(*gemm, att_, static_cast<T*>(scores), qkv_, shape.batch(), shape.stride(),
                                          heads, attention_options);
        }
        if (fused(Fusion::proj_epilogue)) {
            linear_into<T>(x_, c, att_, w(block_tensor::o_w), c, c, /*beta=*/1.0f);
            launches += 1;
        } else {
            gemm->linear(y_, att_, w(block_tensor::o_w), bt, c, c);
            gpu::launch_residual_add<T>(x_, y_, rows() * c, stream);
            launches += 2;
        }

        gpu::launch_rmsnorm<T>(ln_, x_, w(block_tensor::mlp_norm), bt, c, model.ln_eps, stream);
        gemm->linear(gate, ln_, w(block_tensor::gate_w), bt, c, f);
        gemm->linear(up, ln_, w(block_tensor::up_w), bt, c, f);
        gpu::launch_swiglu<T>(gate, gate, up, rows() * f, stream);
        gemm->linear(y_, gate, w(block_tensor::down_w), bt, f, c);
        gpu::launch_residual_add<T>(x_, y_, rows() * c, stream);
        launches += 6;
    }
};

}  // namespace

std::unique_ptr<GpuForwardContext> make_gpu_forward(const ModelConfig& model, const WeightLayout& layout, DType dtype,
                                                    const BatchShape& shape, cudaStream_t stream,
                                                    const GpuForwardOptions& options) {
    // The fusions are declared once, in llama_compute.cpp (the harness skips other cells).
    const FamilyCompute& compute = compute_of(model.family);
    if (!options.variant.within(compute.gpu_fusions) || !compute.gpu_required.within(options.variant))
        throw std::invalid_argument("GpuForward: model '" + model.name + "' (LLaMA) runs variants within " +
                                    compute.gpu_fusions.fusions_text() + "; '" + options.variant.text() +
                                    "' is not built for it.");
    if (options.dropout.active() && !compute.dropout)
        throw std::invalid_argument("GpuForward: model '" + model.name + "' (LLaMA) has no dropout.");
    return std::make_unique<LlamaGpuForward>(model, layout, dtype, shape, stream, options);
}

}  // namespace sweetspot::llama
