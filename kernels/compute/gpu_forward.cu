// The GPU forward: one kernel per op (one file per op family: embedding.cuh, layernorm.cuh, ...) and cuBLAS for every matrix product
// (gemm.hpp), attention materialising the [seq, seq] scores of every (batch, head)
// (gpu_attention.hpp); the variant's fusions replace groups of those kernels. With `residual_ln`,
// the residual add of a sub-layer is deferred into the kernel of the LayerNorm that follows it,
// which for the MLP is the next unit's ln_1 (or the head's ln_f): the sub-layer's output waits in
// `y` until then.
// The math is exactly CpuForward's (kernels/compute/cpu_forward.cpp), in the cell's dtype with fp32
// accumulation.
#include "kernels/compute/gpu_forward.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

#include "kernels/compute/bias.cuh"
#include "kernels/compute/count_nonfinite.cuh"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/dropout.cuh"
#include "kernels/compute/embedding.cuh"
#include "kernels/compute/gelu.cuh"
#include "kernels/compute/gemm.hpp"
#include "kernels/compute/gpu_attention.hpp"
#include "kernels/compute/gpu_dtype.hpp"
#include "kernels/compute/layernorm.cuh"
#include "kernels/compute/managed_memory.hpp"
#include "kernels/compute/nvtx.hpp"
#include "kernels/compute/residual.cuh"
#include "kernels/compute/unit_graphs.hpp"
#include "kernels/model/activation_layout.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"

namespace sweetspot {

namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

}  // namespace

struct GpuForward::Impl {
    ModelConfig model;
    WeightLayout layout;
    DType dtype;
    int batch;
    int seq;
    cudaStream_t stream;
    GpuForwardOptions options;

    // All activations live in one allocation (cudaMalloc, or managed memory when asked), carved
    // into the buffers below as activation_layout says; elements are of the dtype except tokens.
    DeviceMemory arena;  // cudaFree frees managed memory too
    std::int64_t arena_bytes = 0;
    void* x = nullptr;       // [B·T, C] residual stream
    void* ln = nullptr;      // [B·T, C] layernorm output
    void* qkv = nullptr;     // [B·T, 3C] q | k | v per row, head h at columns h·hd of each
    void* scores = nullptr;  // [B, H, T, T] attention scores, then probabilities in place
    void* att = nullptr;     // [B·T, C] attention output, head h at columns h·hd
    void* fc = nullptr;      // [B·T, 4C] MLP hidden
    void* y = nullptr;       // [B·T, C] sub-layer output before the residual add
    void* logits = nullptr;  // [B·T, V]
    std::int32_t* tokens = nullptr;  // [B·T]
    bool tokens_set = false;

    std::unique_ptr<Gemm> gemm;
    int launches = 0;  // kernels and GEMMs enqueued by the forward in progress
    // The layer whose MLP output waits in y for its residual add (residual_ln), or -1.
    int pending_mlp_layer = -1;
    std::optional<UnitGraphs> graphs;  // with options.unit_graphs

    Impl(const ModelConfig& model_, const WeightLayout& layout_, DType dtype_, int batch_, int seq_,
         cudaStream_t stream_, const GpuForwardOptions& options_);

    std::int64_t rows() const { return static_cast<std::int64_t>(batch) * seq; }

    template <class T>
    void run(LayerSource& weights);
    template <class T>
    void block(int layer, const T* unit, const UnitLayout& unit_layout);
    // out = LayerNorm(x) with w, b; first the residual add waiting in y, if any (residual_ln).
    template <class T>
    void layernorm_after_pending(T* out, const T* w, const T* b);
    // x += dropout(y) at `site`, then out = LayerNorm(x): fused, or three baseline kernels.
    template <class T>
    void residual_then_layernorm(T* out, std::uint32_t site, const T* w, const T* b);
    bool fused(Fusion f) const { return options.variant.has(f); }
};

GpuForward::Impl::Impl(const ModelConfig& model_, const WeightLayout& layout_, DType dtype_, int batch_, int seq_,
                       cudaStream_t stream_, const GpuForwardOptions& options_)
    : model(model_), layout(layout_), dtype(dtype_), batch(batch_), seq(seq_), stream(stream_), options(options_) {
    options.dropout = options.dropout.for_shape(seq, model.max_positions);
    if (options.variant.has(Fusion::flash_attention) && model.head_dim() > kFlashAttentionMaxHeadDim) {
        throw std::invalid_argument("GpuForward: the flash_attention fusion supports head dimensions up to " +
                                    std::to_string(kFlashAttentionMaxHeadDim) + "; model '" + model.name + "' has " +
                                    std::to_string(model.head_dim()) + ".");
    }
    // Every argument is checked before the first CUDA call, so a bad request fails the same way
    // with or without a GPU.
    check_batch_shape("GpuForward", model, layout, batch, seq);
    // cuBLAS takes int dimensions and the softmax launches one block per score row.
    if (rows() * model.n_head > INT_MAX) {
        throw std::invalid_argument("GpuForward: batch × seq × n_head = " + std::to_string(rows() * model.n_head) +
                                    " is too large (at most " + std::to_string(INT_MAX) + ").");
    }

    // flash_attention keeps no scores: that buffer is what the fusion saves.
    const ActivationLayout l =
        activation_layout(model, dtype, batch, seq, !options.variant.has(Fusion::flash_attention));
    const std::int64_t bytes = l.total_bytes;
    if (options.managed_activations) {
        arena = ManagedMemory(allocate_managed(bytes, options.allow_oversubscription));
    } else {
        arena = allocate_device(bytes);
    }
    arena_bytes = bytes;
    char* base = reinterpret_cast<char*>(arena.get());
    x = base + l.x;
    ln = base + l.ln;
    qkv = base + l.qkv;
    scores = base + l.scores;
    att = base + l.att;
    fc = base + l.fc;
    y = base + l.y;
    logits = base + l.logits;
    tokens = reinterpret_cast<std::int32_t*>(base + l.tokens);

    gemm = std::make_unique<Gemm>(dtype, stream, options.fp32_gemm);
    if (options.unit_graphs) graphs.emplace(static_cast<int>(layout.units.size()));
}

template <class T>
void GpuForward::Impl::residual_then_layernorm(T* out, std::uint32_t site, const T* w, const T* b) {
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
void GpuForward::Impl::layernorm_after_pending(T* out, const T* w, const T* b) {
    if (pending_mlp_layer >= 0) {
        residual_then_layernorm<T>(out, Dropout::site_word(DropoutSite::mlp_residual, pending_mlp_layer), w, b);
        pending_mlp_layer = -1;
        return;
    }
    gpu::launch_layernorm<T>(out, static_cast<const T*>(x), w, b, static_cast<int>(rows()), model.n_embd,
                             model.ln_eps, stream);
    launches += 1;
}

template <class T>
void GpuForward::Impl::run(LayerSource& weights) {
    launches = 0;
    pending_mlp_layer = -1;
    const auto tensor = [](const T* unit, const UnitLayout& u, int t) {
        return unit + u.tensors[as_size(t)].offset;
    };
    // Each unit is held only while its kernels are enqueued, inside NVTX ranges that show where
    // the host spends its time: waiting for the backend, enqueuing kernels, handing back.
    const auto with_unit = [&](int unit, const std::string& name, const auto& compute) {
        const NvtxRange layer(name);
        const T* p = nullptr;
        {
            const NvtxRange phase("acquire");
            p = static_cast<const T*>(weights.acquire(unit));
        }
        if (p == nullptr) {
            throw std::runtime_error("GpuForward: the layer source returned no pointer for unit " +
                                     std::to_string(unit) + ".");
        }
        {
            const NvtxRange phase("compute");
            const UnitLayout& u = layout.units[as_size(unit)];
            if (graphs) {
                // A replayed graph enqueues nothing from the host code, so what that code leaves
                // for the next unit comes from the capture.
                const int before = launches;
                const auto effect = graphs->run(unit, p, stream, [&] {
                    compute(p, u);
                    return UnitGraphs::HostEffect{launches - before, pending_mlp_layer};
                });
                launches = before + effect.launches;
                pending_mlp_layer = effect.state_after;
            } else {
                compute(p, u);
            }
        }
        const NvtxRange phase("release");
        weights.release(unit);
    };
    const int c = model.n_embd;

    with_unit(0, "embedding", [&](const T* unit, const UnitLayout& u) {
        gpu::launch_embedding<T>(static_cast<T*>(x), tokens, tensor(unit, u, gpt2::embed_tensor::wte),
                                 tensor(unit, u, gpt2::embed_tensor::wpe), batch, seq, c, stream);
        gpu::launch_dropout<T>(static_cast<T*>(x), rows(), c, options.dropout,
                               Dropout::site_word(DropoutSite::embedding, 0), stream);
        launches += options.dropout.active() ? 2 : 1;
    });
    for (int l = 0; l < model.n_layer; ++l) {
        with_unit(WeightLayout::block_unit(l), "layer " + std::to_string(l),
                  [&](const T* unit, const UnitLayout& u) { block<T>(l, unit, u); });
    }
    // Head: logits = ln_f(x) · lm_headᵀ (no bias).
    with_unit(layout.head_unit(), "head", [&](const T* unit, const UnitLayout& u) {
        layernorm_after_pending<T>(static_cast<T*>(ln), tensor(unit, u, gpt2::head_tensor::lnf_w),
                                   tensor(unit, u, gpt2::head_tensor::lnf_b));
        gemm->linear(logits, ln, tensor(unit, u, gpt2::head_tensor::lm_head), static_cast<int>(rows()), c,
                     model.vocab_size);
        launches += 1;
    });
}

// Pre-LN block: x += drop(c_proj(attn(ln_1(x)))); x += drop(mlp_c_proj(gelu(c_fc(ln_2(x))))).
template <class T>
void GpuForward::Impl::block(int layer, const T* unit, const UnitLayout& unit_layout) {
    const auto w = [&](int t) { return unit + unit_layout.tensors[as_size(t)].offset; };
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
        gpu::flash_attention<T>(static_cast<T*>(att), qkv_, batch, seq, c, model.n_head, options.dropout, probs_site,
                                stream);
        launches += 1;
    } else {
        gpu::AttentionOptions attention_options;
        attention_options.fused_softmax = fused(Fusion::softmax);
        attention_options.dropout = options.dropout;
        attention_options.dropout_site = probs_site;
        launches += gpu::attention<T>(*gemm, static_cast<T*>(att), static_cast<T*>(scores), qkv_, batch, seq, c,
                                          model.n_head, attention_options);
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
        pending_mlp_layer = layer;
        return;
    }
    gpu::launch_dropout<T>(y_, rows(), c, options.dropout, Dropout::site_word(DropoutSite::mlp_residual, layer), stream);
    gpu::launch_residual_add<T>(static_cast<T*>(x), y_, rows() * c, stream);
    launches += options.dropout.active() ? 2 : 1;
}

GpuForward::GpuForward(const ModelConfig& model, const WeightLayout& layout, DType dtype, int batch, int seq,
                       cudaStream_t stream, const GpuForwardOptions& options)
    : impl_(std::make_unique<Impl>(model, layout, dtype, batch, seq, stream, options)) {}

GpuForward::~GpuForward() = default;

void GpuForward::set_tokens(std::span<const std::int32_t> ids) {
    Impl& s = *impl_;
    check_batch_ids("GpuForward", s.model, ids, s.rows(), "token");
    // On the stream, so a forward still in flight reads the old ids; then wait, so the upload is
    // synchronous as promised.
    CUDA_CHECK(cudaMemcpyAsync(s.tokens, ids.data(), ids.size_bytes(), cudaMemcpyHostToDevice, s.stream));
    CUDA_CHECK(cudaStreamSynchronize(s.stream));
    s.tokens_set = true;
}

void GpuForward::run(LayerSource& weights) {
    Impl& s = *impl_;
    if (!s.tokens_set) throw std::logic_error("GpuForward::run: set_tokens was never called.");
    switch (s.dtype) {
        case DType::fp32: s.run<float>(weights); break;
        case DType::fp16: s.run<__half>(weights); break;
        case DType::bf16: s.run<__nv_bfloat16>(weights); break;
    }
}

std::vector<float> GpuForward::logits_to_host() { return logits_to_host(impl_->rows()); }

namespace {

// n logits of `dtype` from device memory at `src` as fp32. The conversion of half types is done
// on the host (dtype.hpp's exact conversions), so no fp32 copy of them ever takes device memory.
std::vector<float> logits_slice_to_host(const void* src, std::size_t n, DType dtype, cudaStream_t stream) {
    std::vector<float> out(n);
    if (dtype == DType::fp32) {
        CUDA_CHECK(cudaMemcpyAsync(out.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return out;
    }
    std::vector<std::uint16_t> bits(n);
    CUDA_CHECK(cudaMemcpyAsync(bits.data(), src, n * sizeof(std::uint16_t), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (std::size_t i = 0; i < n; ++i)
        out[i] = dtype == DType::fp16 ? fp16_bits_to_float(bits[i]) : bf16_bits_to_float(bits[i]);
    return out;
}

}  // namespace

std::vector<float> GpuForward::logits_to_host(std::int64_t rows) {
    Impl& s = *impl_;
    if (rows < 0 || rows > s.rows()) throw std::out_of_range("GpuForward::logits_to_host: rows out of range");
    return logits_slice_to_host(s.logits, as_size(rows * s.model.vocab_size), s.dtype, s.stream);
}

std::int64_t GpuForward::count_nonfinite_logits() {
    Impl& s = *impl_;
    const std::int64_t n = s.rows() * s.model.vocab_size;
    // The count goes into y, which is dead between forwards (the next one writes it before it
    // reads it): no allocation of its own, so the estimator's arithmetic is untouched.
    auto* count = static_cast<unsigned long long*>(s.y);
    switch (s.dtype) {
        case DType::fp32: gpu::launch_count_nonfinite(static_cast<const float*>(s.logits), n, count, s.stream); break;
        case DType::fp16: gpu::launch_count_nonfinite(static_cast<const __half*>(s.logits), n, count, s.stream); break;
        case DType::bf16:
            gpu::launch_count_nonfinite(static_cast<const __nv_bfloat16*>(s.logits), n, count, s.stream);
            break;
    }
    unsigned long long bad = 0;
    CUDA_CHECK(cudaMemcpyAsync(&bad, count, sizeof bad, cudaMemcpyDeviceToHost, s.stream));
    CUDA_CHECK(cudaStreamSynchronize(s.stream));
    return static_cast<std::int64_t>(bad);
}

std::int64_t GpuForward::activation_bytes() const { return impl_->arena_bytes; }

std::int64_t GpuForward::workspace_bytes() const { return impl_->gemm->workspace_bytes(); }

int GpuForward::launches_per_forward() const { return impl_->launches; }

int GpuForward::graph_captures() const { return impl_->graphs ? impl_->graphs->captures() : 0; }

}  // namespace sweetspot
