// GPT-2's forward on the GPU (gpu_forward_context.hpp): one kernel per op and cuBLAS for every
// matrix product (gemm.hpp), attention materialising the [seq, seq] scores of every (batch, head)
// (gpu_attention.hpp); the variant's fusions replace groups of those kernels. With `residual_ln`,
// the residual add of a sub-layer is deferred into the kernel of the LayerNorm that follows it,
// which for the MLP is the next unit's ln_1 (or the head's ln_f): the sub-layer's output waits in
// `y` until then. The math is exactly GPT-2's host forward (gpt2_compute.cpp), in the cell's
// dtype with fp32 accumulation.
#include "kernels/compute/gpt2/gpt2_gpu_forward.hpp"

#include <string>

#include "kernels/compute/bias.cuh"
#include "kernels/compute/dropout.cuh"
#include "kernels/compute/embedding.cuh"
#include "kernels/compute/gelu.cuh"
#include "kernels/compute/gpu_attention.hpp"
#include "kernels/compute/layernorm.cuh"
#include "kernels/compute/qkv_heads.hpp"
#include "kernels/compute/residual.cuh"
#include "kernels/model/gpt2/gpt2_tensors.hpp"

namespace sweetspot::gpt2 {

namespace {

class Gpt2GpuForward final : public GpuForwardContext {
public:
    using GpuForwardContext::GpuForwardContext;

    void run(LayerSource& weights) override {
        with_dtype(dtype, [&](auto t) { forward<decltype(t)>(weights); });
    }

private:
    template <class T>
    void forward(LayerSource& weights);
    template <class T>
    void block(int layer, const T* unit, const UnitLayout& unit_layout);
    // out = LayerNorm(x) with w, b; first the residual add waiting in y, if any (residual_ln).
    template <class T>
    void layernorm_after_pending(T* out, const T* w, const T* b);
    // x += dropout(y) at `site`, then out = LayerNorm(x): fused, or three baseline kernels.
    template <class T>
    void residual_then_layernorm(T* out, std::uint32_t site, const T* w, const T* b);
};

template <class T>
void Gpt2GpuForward::residual_then_layernorm(T* out, std::uint32_t site, const T* w, const T* b) {
    T* const x_ = static_cast<T*>(x);
    T* const y_ = static_cast<T*>(y);
    const int bt = static_cast<int>(rows());
    const int c = model.n_embd;
    if (fused(Fusion::residual_ln)) {
        gpu::launch_residual_layernorm<T>(out, x_, y_, options.dropout, site, w, b, bt, c, model.ln_eps, stream);
        launches += 1;
        return;
    }
    gpu::launch_dropout<T>(y_, rows(), c, options.dropout, site, stream);
    gpu::launch_residual_add<T>(x_, y_, rows() * c, stream);
    gpu::launch_layernorm<T>(out, x_, w, b, bt, c, model.ln_eps, stream);
    launches += options.dropout.active() ? 3 : 2;
}

template <class T>
void Gpt2GpuForward::layernorm_after_pending(T* out, const T* w, const T* b) {
    if (carried >= 0) {
        residual_then_layernorm<T>(out, Dropout::site_word(DropoutSite::mlp_residual, carried), w, b);
        carried = -1;
        return;
    }
    gpu::launch_layernorm<T>(out, static_cast<const T*>(x), w, b, static_cast<int>(rows()), model.n_embd,
                             model.ln_eps, stream);
    launches += 1;
}

template <class T>
void Gpt2GpuForward::forward(LayerSource& weights) {
    launches = 0;
    carried = -1;
    const auto tensor = [](const T* unit, const UnitLayout& u, int t) {
        return u.tensor(unit, t);
    };
    const int c = model.n_embd;

    with_unit<T>(weights, 0, [&](const T* unit, const UnitLayout& u) {
        const T* const wte = tensor(unit, u, gpt2::embed_tensor::wte);
        const T* const wpe = tensor(unit, u, gpt2::embed_tensor::wpe);
        // A rectangular batch's positions are row % seq, read from no table (positions is null).
        if (positions != nullptr) {
            gpu::launch_embedding<T>(static_cast<T*>(x), tokens, wte, wpe, positions, rows(), c, stream);
        } else {
            gpu::launch_embedding<T>(static_cast<T*>(x), tokens, wte, wpe, shape.batch(), shape.stride(), c, stream);
        }
        gpu::launch_dropout<T>(static_cast<T*>(x), rows(), c, options.dropout,
                               Dropout::site_word(DropoutSite::embedding, 0), stream);
        launches += options.dropout.active() ? 2 : 1;
    });
    for (int l = 0; l < model.n_layer; ++l) {
        with_unit<T>(weights, WeightLayout::block_unit(l),
                     [&](const T* unit, const UnitLayout& u) { block<T>(l, unit, u); });
    }
    // Head: logits = ln_f(x) · lm_headᵀ (no bias).
    with_unit<T>(weights, layout.head_unit(), [&](const T* unit, const UnitLayout& u) {
        layernorm_after_pending<T>(static_cast<T*>(ln), tensor(unit, u, gpt2::head_tensor::lnf_w),
                                   tensor(unit, u, gpt2::head_tensor::lnf_b));
        gemm->linear(logits, ln, tensor(unit, u, gpt2::head_tensor::lm_head), static_cast<int>(rows()), c,
                     model.vocab_size);
        launches += 1;
    });
}

// Pre-LN block: x += drop(c_proj(attn(ln_1(x)))); x += drop(mlp_c_proj(gelu(c_fc(ln_2(x))))).
template <class T>
void Gpt2GpuForward::block(int layer, const T* unit, const UnitLayout& unit_layout) {
    const auto w = [&](int t) { return unit_layout.tensor(unit, t); };
    const int bt = static_cast<int>(rows());
    const int c = model.n_embd;
    T* const ln_ = static_cast<T*>(ln);
    T* const qkv_ = static_cast<T*>(qkv);
    T* const fc_ = static_cast<T*>(fc);
    T* const y_ = static_cast<T*>(y);

    // Attention sub-layer.
    layernorm_after_pending<T>(ln_, w(gpt2::block_tensor::ln1_w), w(gpt2::block_tensor::ln1_b));
    if (fused(Fusion::proj_epilogue)) {
        gemm->linear_fused(qkv_, ln_, w(gpt2::block_tensor::qkv_w), w(gpt2::block_tensor::qkv_b), bt, c, 3 * c,
                           Gemm::Epilogue::bias);
        launches += 1;
    } else {
        gemm->linear(qkv_, ln_, w(gpt2::block_tensor::qkv_w), bt, c, 3 * c);
        gpu::launch_add_bias<T>(qkv_, w(gpt2::block_tensor::qkv_b), bt, 3 * c, stream);
        launches += 2;
    }
    const std::uint32_t probs_site = Dropout::site_word(DropoutSite::attention_probs, layer);
    if (fused(Fusion::flash_attention)) {
        gpu::flash_attention<T>(static_cast<T*>(att), qkv_, shape.batch(), spans, QkvHeads::multi_head(c, model.n_head),
                                options.dropout, probs_site, stream);
        launches += 1;
    } else {
        gpu::AttentionOptions attention_options;
        attention_options.fused_softmax = fused(Fusion::softmax);
        attention_options.dropout = options.dropout;
        attention_options.dropout_site = probs_site;
        // A rectangular batch only (the constructor refuses a ragged one).
        launches += gpu::attention<T>(*gemm, static_cast<T*>(att), static_cast<T*>(scores), qkv_, shape.batch(),
                                      shape.stride(), c, model.n_head, attention_options);
    }
    const std::uint32_t attention_residual = Dropout::site_word(DropoutSite::attention_residual, layer);
    if (fused(Fusion::proj_epilogue) && !options.dropout.active()) {
        // x += att · Wᵀ + b in the GEMM's epilogue: the residual add needs no kernel of its own.
        gemm->linear_fused(x, att, w(gpt2::block_tensor::proj_w), w(gpt2::block_tensor::proj_b), bt, c, c,
                           Gemm::Epilogue::bias_residual);
        gpu::launch_layernorm<T>(ln_, static_cast<const T*>(x), w(gpt2::block_tensor::ln2_w), w(gpt2::block_tensor::ln2_b), bt, c,
                                 model.ln_eps, stream);
        launches += 2;
    } else {
        // With dropout on, the epilogue can add the bias only: dropout comes between it and the
        // residual add.
        if (fused(Fusion::proj_epilogue)) {
            gemm->linear_fused(y_, att, w(gpt2::block_tensor::proj_w), w(gpt2::block_tensor::proj_b), bt, c, c, Gemm::Epilogue::bias);
            launches += 1;
        } else {
            gemm->linear(y_, att, w(gpt2::block_tensor::proj_w), bt, c, c);
            gpu::launch_add_bias<T>(y_, w(gpt2::block_tensor::proj_b), bt, c, stream);
            launches += 2;
        }
        // MLP sub-layer, after the attention's residual add.
        residual_then_layernorm<T>(ln_, attention_residual, w(gpt2::block_tensor::ln2_w), w(gpt2::block_tensor::ln2_b));
    }
    if (fused(Fusion::mlp_epilogue)) {
        gemm->linear_fused(fc_, ln_, w(gpt2::block_tensor::fc_w), w(gpt2::block_tensor::fc_b), bt, c, 4 * c,
                           Gemm::Epilogue::bias_gelu);
        launches += 2;
        if (!fused(Fusion::residual_ln) && !options.dropout.active()) {
            // x += fc · Wᵀ + b in the GEMM's epilogue, as proj_epilogue does for the attention.
            gemm->linear_fused(x, fc_, w(gpt2::block_tensor::fc_proj_w), w(gpt2::block_tensor::fc_proj_b), bt, 4 * c, c,
                               Gemm::Epilogue::bias_residual);
            return;
        }
        gemm->linear_fused(y_, fc_, w(gpt2::block_tensor::fc_proj_w), w(gpt2::block_tensor::fc_proj_b), bt, 4 * c, c,
                           Gemm::Epilogue::bias);
    } else {
        gemm->linear(fc_, ln_, w(gpt2::block_tensor::fc_w), bt, c, 4 * c);
        gpu::launch_add_bias<T>(fc_, w(gpt2::block_tensor::fc_b), bt, 4 * c, stream);
        gpu::launch_gelu_tanh<T>(fc_, rows() * 4 * c, stream);
        gemm->linear(y_, fc_, w(gpt2::block_tensor::fc_proj_w), bt, 4 * c, c);
        gpu::launch_add_bias<T>(y_, w(gpt2::block_tensor::fc_proj_b), bt, c, stream);
        launches += 5;
    }
    // The MLP's residual add: deferred into the next LayerNorm's kernel when fused.
    if (fused(Fusion::residual_ln)) {
        carried = layer;
        return;
    }
    gpu::launch_dropout<T>(y_, rows(), c, options.dropout, Dropout::site_word(DropoutSite::mlp_residual, layer), stream);
    gpu::launch_residual_add<T>(static_cast<T*>(x), y_, rows() * c, stream);
    launches += options.dropout.active() ? 2 : 1;
}

}  // namespace

std::unique_ptr<GpuForwardContext> make_gpu_forward(const ModelConfig& model, const WeightLayout& layout, DType dtype,
                                                    const BatchShape& shape, cudaStream_t stream,
                                                    const GpuForwardOptions& options) {
    return std::make_unique<Gpt2GpuForward>(model, layout, dtype, shape, stream, options);
}

}  // namespace sweetspot::gpt2
