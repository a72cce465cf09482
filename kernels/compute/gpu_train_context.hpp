#pragma once
// What every family's GPU training step shares with the step's walks (gpu_train_step.cu): the
// shape, the one allocation carved as TrainArena says, cuBLAS, the stream, the attention over the
// packed qkv heads, and the hooks through which the walks have the family compute each unit. The
// walks acquire and release the units, zero their gradients and sum their squares, and run what
// no family changes: the lm_head's products, the fused classifier and loss, clipping and AdamW. A
// family derives from it and says what its embedding, blocks and final norm compute forward,
// keeping what the Recompute setting keeps, and backward (gpt2/gpt2_gpu_train.cu,
// llama/llama_gpu_train.cu); gpu_family_train.cu makes the model's.
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/gemm.hpp"
#include "kernels/compute/gpu_attention.hpp"
#include "kernels/compute/gpu_dtype.hpp"
#include "kernels/compute/gpu_train_step.hpp"
#include "kernels/compute/qkv_heads.hpp"
#include "kernels/compute/sequence_spans.hpp"
#include "kernels/compute/train_arena.hpp"

namespace sweetspot {

struct GpuTrainContext {
    ModelConfig model;
    WeightLayout layout;
    DType dtype;
    BatchShape shape;
    cudaStream_t stream;
    GpuTrainOptions options;  // its dropout already for_shape(stride, max_positions)
    QkvHeads heads;           // how each packed qkv row holds the heads (qkv_heads.hpp)
    // FlashAttention-2's forward, keeping each row's logsumexp, and backward; otherwise the
    // attention is materialised and its probabilities recomputed in the backward.
    bool flash;
    // The norms' backwards read their outputs and kept rstd, and flag a weight too small to divide
    // by (layernorm_recovery.hpp) in plan.unrecoverable, with norm_tag's tag.
    bool inplace_ln;
    Recompute recompute;
    TrainArena plan;
    DeviceMemory arena;
    DeviceMemory embedding_scratch;  // only where the dead scratch is too small (TrainArena)
    std::int64_t extra_bytes = 0;
    std::unique_ptr<Gemm> gemm;
    // Where each sequence lies, for the flash attention: rectangular, or ragged with its offsets
    // and lengths in the arena (plan.spans).
    SequenceSpans spans;

    // Checks what every family checks and allocates; throws std::invalid_argument (before any
    // CUDA call) for a shape or option the step cannot take.
    GpuTrainContext(const ModelConfig& model, const WeightLayout& layout, DType dtype, const BatchShape& shape,
                    cudaStream_t stream, const GpuTrainOptions& options);
    virtual ~GpuTrainContext() = default;
    GpuTrainContext(const GpuTrainContext&) = delete;
    GpuTrainContext& operator=(const GpuTrainContext&) = delete;

    // The family's share, each enqueued on the stream in the cell's dtype, `unit` the unit's
    // weights laid out as `ul`. Forward: the embedding's output resid[0] from the tokens; block
    // `layer`'s output resid[layer + 1] from resid[layer], keeping its activations; xf, the final
    // norm's output, from resid[n_layer].
    virtual void embed(const void* unit, const UnitLayout& ul) = 0;
    virtual void block(int layer, const void* unit, const UnitLayout& ul) = 0;
    virtual void final_norm(const void* head, const UnitLayout& ul) = 0;
    // Backward, each adding its weights' gradients into `grad` (zeroed, laid out as the unit):
    // dres (zeroed) += the final norm's input gradient from dxf (in dln); dres from the block's
    // output gradient to its input's; the embedding's tables from dres.
    virtual void final_norm_backward(const void* head, void* grad, const UnitLayout& ul) = 0;
    virtual void block_backward(int layer, const void* unit, void* grad, const UnitLayout& ul) = 0;
    virtual void embed_backward(void* grad, const UnitLayout& ul) = 0;
    // The head unit's lm_head (logits = xf · lm_headᵀ), by its index in the unit.
    virtual int lm_head_tensor() const = 0;
    // The family's names of a block's first and second norms and of the final one, for messages.
    virtual std::array<std::string_view, 3> norm_names() const = 0;

    // 2l + 1 for block l's first norm, 2l + 2 for its second, 2L + 1 for the final one; 0 is none.
    static int norm_tag(int layer, int which) { return 2 * layer + 1 + which; }
    // What a tag names: "block 1's ln_2", "ln_f".
    std::string norm_named(int tag) const {
        const auto names = norm_names();
        if (tag == norm_tag(model.n_layer, 0)) return std::string(names[2]);
        return "block " + std::to_string((tag - 1) / 2) + "'s " + std::string(names[static_cast<std::size_t>((tag - 1) % 2)]);
    }

    std::int64_t rows() const { return shape.rows(); }
    template <class T>
    T* at(std::int64_t offset) const {
        return reinterpret_cast<T*>(arena.get() + offset);
    }
    float* lse(int layer) const { return flash ? at<float>(plan.lse[static_cast<std::size_t>(layer)]) : nullptr; }
    // Each row's position (BatchShape::positions) where the family rotates by it or the batch is
    // ragged; null for a rectangular batch of a family with a position table (row % stride).
    const std::int32_t* positions() const { return plan.positions != 0 ? at<std::int32_t>(plan.positions) : nullptr; }
    void* embedding_scratch_at() const { return extra_bytes > 0 ? embedding_scratch.get() : at<void>(plan.scratch); }

    // att[layer] from qkv[layer]: the flash attention (keeping lse) or the materialised one, with
    // the options' dropout on the probabilities. The masks are the generator's for (seed, site,
    // position): a recomputation draws the same.
    template <class T>
    void core_attention(int layer) {
        const auto l = static_cast<std::size_t>(layer);
        T* const att = at<T>(plan.att[l]);
        const T* qkv = at<T>(plan.qkv[l]);
        const std::uint32_t probs_site = Dropout::site_word(DropoutSite::attention_probs, layer);
        if (flash) {
            // The flash attention writes no padding row, and this buffer may hold anything there
            // (the recomputed activations' scratch is the embedding backward's too): zeros keep
            // everything computed from those rows finite, as the padding's zero gradient needs.
            if (shape.padded_tokens() > 0)
                CUDA_CHECK(
                    cudaMemsetAsync(att, 0, static_cast<std::size_t>(rows() * model.n_embd) * sizeof(T), stream));
            gpu::flash_attention<T>(att, qkv, shape.batch(), spans, heads, options.dropout, probs_site, stream,
                                    lse(layer));
        } else {
            gpu::attention<T>(*gemm, att, at<T>(plan.scores), qkv, shape.batch(), shape.stride(), heads,
                              {.fused_softmax = false, .dropout = options.dropout, .dropout_site = probs_site});
        }
    }
    // Its backward: dqkv (overwritten, laid out as qkv) from datt, reading the layer's kept qkv,
    // att and lse (flash) or recomputing the probabilities into the scores (materialised).
    template <class T>
    void core_attention_backward(int layer, T* dqkv, const T* datt) {
        const auto l = static_cast<std::size_t>(layer);
        const T* att = at<T>(plan.att[l]);
        const T* qkv = at<T>(plan.qkv[l]);
        const std::uint32_t probs_site = Dropout::site_word(DropoutSite::attention_probs, layer);
        if (flash) {
            gpu::flash_attention_backward<T>(dqkv, at<float>(plan.flash_scratch), datt, qkv, att, lse(layer),
                                             shape.batch(), spans, rows(), heads, options.dropout, probs_site, stream);
        } else {
            gpu::attention_backward<T>(
                *gemm, dqkv, at<T>(plan.scores), at<T>(plan.dscores), datt, qkv, shape.batch(), shape.stride(), heads,
                {.fused_softmax = false, .dropout = options.dropout, .dropout_site = probs_site});
        }
    }
};

// A family's GpuTrainContext: the hooks in the cell's dtype, each calling Family's function
// template for the unit's work in the storage type T (forward_embedding, forward_block,
// forward_final_norm, backward_final_norm, backward_block, backward_embedding, each with the
// hook's arguments typed), so that a family writes each unit's work once.
template <class Family>
struct GpuTrainFamily : GpuTrainContext {
    using GpuTrainContext::GpuTrainContext;

    void embed(const void* unit, const UnitLayout& ul) final {
        with_dtype(dtype, [&](auto t) { family().forward_embedding(typed(unit, t), ul); });
    }
    void block(int layer, const void* unit, const UnitLayout& ul) final {
        with_dtype(dtype, [&](auto t) { family().forward_block(layer, typed(unit, t), ul); });
    }
    void final_norm(const void* head, const UnitLayout& ul) final {
        with_dtype(dtype, [&](auto t) { family().forward_final_norm(typed(head, t), ul); });
    }
    void final_norm_backward(const void* head, void* grad, const UnitLayout& ul) final {
        with_dtype(dtype, [&](auto t) { family().backward_final_norm(typed(head, t), typed(grad, t), ul); });
    }
    void block_backward(int layer, const void* unit, void* grad, const UnitLayout& ul) final {
        with_dtype(dtype, [&](auto t) { family().backward_block(layer, typed(unit, t), typed(grad, t), ul); });
    }
    void embed_backward(void* grad, const UnitLayout& ul) final {
        with_dtype(dtype, [&](auto t) { family().backward_embedding(typed(grad, t), ul); });
    }

private:
    Family& family() { return static_cast<Family&>(*this); }
    template <class T>
    static const T* typed(const void* p, T) {
        return static_cast<const T*>(p);
    }
    template <class T>
    static T* typed(void* p, T) {
        return static_cast<T*>(p);
    }
};

// The training step's share of the model's family (gpu_family_train.cu).
std::unique_ptr<GpuTrainContext> make_gpu_train(const ModelConfig& model, const WeightLayout& layout, DType dtype,
                                                const BatchShape& shape, cudaStream_t stream,
                                                const GpuTrainOptions& options);

}  // namespace sweetspot
