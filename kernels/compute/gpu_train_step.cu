// The GPU training step: the forward of GpuForward's baseline kernels (or flash attention) with
// each block's activations kept, the fused classifier, and the backward of cpu_block.cpp's
// block_backward op for op, each backward kernel from its op family's file. The residual stream is
// kept as each block's input and x_mid: a sub-layer writes its output straight into the next
// buffer and adds the one before, so nothing is copied. What the Recompute setting does not keep
// the backward computes again before it needs it, with the forward's own functions (the block's
// forward is those functions in order). The variant's mlp_epilogue and proj_epilogue move biases,
// the GELU, its backward and residual adds into the GEMMs' cuBLASLt epilogues; its inplace_ln
// has the LayerNorms keep each row's rstd and their backwards read their outputs instead of their
// inputs, so that the residual stream is kept only where a recomputation starts from it; its
// inplace_gelu runs the GELU in place over its input, keeping a branch bit per element, and the
// GELU's backward from that output and the bits (gelu_from_output.hpp).
#include "kernels/compute/gpu_train_step.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/compute/bias.cuh"
#include "kernels/compute/classifier.cuh"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/dropout.cuh"
#include "kernels/compute/embedding.cuh"
#include "kernels/compute/gelu.cuh"
#include "kernels/compute/gemm.hpp"
#include "kernels/compute/gemm_limits.hpp"
#include "kernels/compute/gpu_attention.hpp"
#include "kernels/compute/gpu_dtype.hpp"
#include "kernels/compute/host_adamw.hpp"
#include "kernels/compute/layernorm.cuh"
#include "kernels/compute/layernorm_recovery.hpp"
#include "kernels/compute/nvtx.hpp"
#include "kernels/compute/optimizer.cuh"
#include "kernels/compute/residual.cuh"
#include "kernels/compute/train_arena.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"

namespace sweetspot {
namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

// Writes the padding between `unit`'s tensors (and after the last) into `weights` from its fp32
// `master`, rounded to the dtype: what the unit was placed with, since AdamW never moves it.
void restore_padding(const UnitLayout& unit, const float* master, void* weights, DType dtype) {
    const auto write = [&](std::int64_t begin, std::int64_t end) {
        if (end <= begin) return;
        convert_from_f32({master + begin, as_size(end - begin)}, dtype,
                         static_cast<std::byte*>(weights) + begin * static_cast<std::int64_t>(dtype_size(dtype)));
    };
    std::int64_t end = 0;
    for (const TensorSpec& t : unit.tensors) {
        write(end, t.offset);
        end = t.offset + t.numel;
    }
    write(end, unit.numel);
}

}  // namespace

struct GpuTrainStep::Impl {
    ModelConfig model;
    WeightLayout layout;
    DType dtype;
    int batch, seq;
    cudaStream_t stream;
    GpuTrainOptions options;
    bool flash;
    // The MLP's biases, GELU (and its backward) and residual add in the GEMMs' epilogues.
    bool mlp_fused;
    bool inplace_ln;  // the LayerNorms' backwards from their outputs and kept rstd
    // The GELU's output and branch bits kept for its backward instead of its input.
    bool inplace_gelu;
    Recompute recompute;
    TrainArena plan;
    DeviceMemory arena;
    DeviceMemory embedding_scratch;  // only where the dead scratch is too small (TrainArena)
    std::int64_t extra_bytes = 0;
    std::unique_ptr<Gemm> gemm;
    bool batch_set = false;

    float scale = 1.0f;           // the loss scale the next backward's gradients carry
    float backward_scale = 1.0f;  // the one the last backward's gradients carry
    int good_steps = 0;           // updates in a row since the scale last changed
    int steps = 0, skipped = 0;
    double norm = 0.0;  // the last backward's, unscaled
    bool norm_read = true;

    // The update on the host's cores (UnitUpdate::on_host), made at its first use: a copy stream
    // each way, and per staging slot when its gradient has come down and its weights gone up.
    struct HostLink {
        CudaStream down, up;
        CudaEvent backward_done, all_up;
        std::array<CudaEvent, kHostUpdateSlots> gradient_down, weights_up;
    };
    std::unique_ptr<HostLink> host_link;
    LinkBytes link_bytes;

    Impl(const ModelConfig& model_, const WeightLayout& layout_, DType dtype_, int batch_, int seq_,
         cudaStream_t stream_, const GpuTrainOptions& options_);

    std::int64_t rows() const { return static_cast<std::int64_t>(batch) * seq; }
    template <class T>
    T* at(std::int64_t offset) const {
        return reinterpret_cast<T*>(arena.get() + offset);
    }
    float* lse(int layer) const { return flash ? at<float>(plan.lse[as_size(layer)]) : nullptr; }
    const float* gelu_table() const { return plan.gelu_table ? at<float>(plan.gelu_derivatives) : nullptr; }
    // A LayerNorm's rstd with inplace_ln, else none (the forward keeps nothing, the backward
    // recomputes the statistics from the input).
    float* rstd(const std::vector<std::int64_t>& entry, int layer) const {
        return inplace_ln ? at<float>(entry[as_size(layer)]) : nullptr;
    }

    // out = LayerNorm(in), keeping each row's rstd where rstd is not null.
    template <class T>
    void layernorm(T* out, float* rstd, const T* in, const T* w, const T* b);
    // dx += the LayerNorm's input gradient, dw and db += its weights', from dout: from its input
    // `in`, or with inplace_ln from its output `out` and rstd, flagging a weight too small to
    // divide by with `tag` (read_norm names the LayerNorm from it: ln_tag).
    template <class T>
    void layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* in, const T* out, const T* w, const T* b,
                            const float* rstd, int tag);
    // 2l + 1 for block l's ln_1, 2l + 2 for its ln_2, 2L + 1 for ln_f; 0 is none.
    static int ln_tag(int layer, int which) { return 2 * layer + 1 + which; }
    std::string ln_named(int tag) const;

    template <class T>
    void forward(LayerSource& weights);
    // The block's forward, x_out = x_mid + dropout(mlp(ln_2(x_mid))) after
    // x_mid = x_in + dropout(c_proj(attention(c_attn(ln_1(x_in))))), in the pieces the backward
    // calls again for what the Recompute setting did not keep: the attention sub-layer (ln_1, the
    // QKV projection, the attention, its projection into x_mid); the attention alone, from qkv;
    // the MLP's input (ln_2 unless `with_layernorm` is false, the first GEMM and its GELU).
    template <class T>
    void block_forward(int layer, const T* unit, const UnitLayout& ul);
    template <class T>
    void attention_sublayer(int layer, const T* unit, const UnitLayout& ul);
    template <class T>
    void core_attention(int layer);
    template <class T>
    void mlp_input(int layer, const T* unit, const UnitLayout& ul, bool with_layernorm = true);
    // y [rows, C] = residual + dropout(x [rows, in] · wᵀ + b): a sub-layer's output projection,
    // the bias and residual add in its GEMM's epilogue where `epilogue` (the bias only while
    // dropout is on).
    template <class T>
    void sublayer_output(T* y, const T* x, const T* w, const T* b, const T* residual, int in, bool epilogue,
                         std::uint32_t dropout_site);
    // The lm_head's GEMMs split the vocabulary at the last multiple of kLogitsRowAlignment below
    // it: cuBLAS computes the aligned part with its fast kernels and only the few columns past it
    // with the slow ones a vocabulary such as 50257 otherwise gets for all of them.
    template <class F>
    void over_vocabulary(const F& f) const;
    template <class T>
    void backward(LayerSource& weights);
    template <class T>
    void block_backward(int layer, const T* unit, T* grad, const UnitLayout& ul);
    template <class T>
    void update(LayerSource& weights);
    // The update from `first`, unit 0's, where the source keeps the optimizer's state on the host.
    template <class T>
    void update_on_host(LayerSource& weights, const UnitUpdate& first, bool finite, float grad_scale);
    // AdamW's settings for tensor `t` at this step.
    cpu::AdamW adamw_for(const TensorSpec& t, float grad_scale) const {
        const TrainSettings& s = options.settings;
        return {s.lr, s.beta1, s.beta2, s.eps, decays_weights(t) ? s.weight_decay : 0.0f, steps, grad_scale};
    }

    // Of y [rows, out] = x [rows, in] · wᵀ + b: dw = dyᵀ · x, db = Σ_rows dy (added to the zeroed
    // gradient), dx = dy · w (not computed where dx is null: an epilogue computes it).
    template <class T>
    void linear_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int in, int out);
    // dy = dres through the dropout at `site` (dres itself when dropout is off).
    template <class T>
    const T* through_dropout(std::uint32_t site);
    void read_norm();
    void* embedding_scratch_at() const { return extra_bytes > 0 ? embedding_scratch.get() : at<void>(plan.scratch); }
};

GpuTrainStep::Impl::Impl(const ModelConfig& model_, const WeightLayout& layout_, DType dtype_, int batch_, int seq_,
                         cudaStream_t stream_, const GpuTrainOptions& options_)
    : model(model_),
      layout(layout_),
      dtype(dtype_),
      batch(batch_),
      seq(seq_),
      stream(stream_),
      options(options_),
      flash(options_.variant.has(Fusion::flash_attention)),
      mlp_fused(options_.variant.has(Fusion::mlp_epilogue)),
      inplace_ln(options_.variant.has(Fusion::inplace_ln)),
      inplace_gelu(options_.variant.has(Fusion::inplace_gelu)),
      recompute(options_.recompute),
      plan([&] {
          // Every argument is checked before the first CUDA call.
          check_batch_shape("GpuTrainStep", model_, layout_, batch_, seq_);
          // cuBLAS takes int dimensions and the softmax launches one block per score row.
          const std::int64_t score_rows = static_cast<std::int64_t>(batch_) * seq_ * model_.n_head;
          if (score_rows > INT_MAX) {
              throw std::invalid_argument("GpuTrainStep: batch × seq × n_head = " + std::to_string(score_rows) +
                                          " is too large (at most " + std::to_string(INT_MAX) + ").");
          }
          if (!options_.variant.within(kTrainingFusions)) {
              throw std::invalid_argument("GpuTrainStep: training has kernels for the fusions " +
                                          kTrainingFusions.fusions_text() + " only; variant '" +
                                          options_.variant.text() + "' has " + options_.variant.fusions_text() + ".");
          }
          if (options_.variant.has(Fusion::mlp_epilogue) && !options_.variant.has(Fusion::inplace_gelu) &&
              !gemm_aux_width_fits(4 * model_.n_embd)) {
              throw std::invalid_argument("GpuTrainStep: mlp_epilogue needs 4 × n_embd to be a multiple of 8 (cuBLASLt's "
                                          "GELU epilogue buffer); model '" + model_.name + "' has n_embd " +
                                          std::to_string(model_.n_embd) + ".");
          }
          const bool uses_flash = options_.variant.has(Fusion::flash_attention);
          if (uses_flash && model_.head_dim() > kFlashAttentionMaxHeadDim) {
              throw std::invalid_argument("GpuTrainStep: the flash_attention fusion supports head dimensions up to " +
                                          std::to_string(kFlashAttentionMaxHeadDim) + "; model '" + model_.name +
                                          "' has " + std::to_string(model_.head_dim()) + ".");
          }
          return TrainArena(model_, dtype_, batch_, seq_, options_.variant, options_.recompute);
      }()) {
    options.dropout = options.dropout.for_shape(seq, model.max_positions);
    scale = dtype == DType::fp16 ? kInitialLossScale : 1.0f;
    arena = allocate_device(plan.total);
    if (plan.gelu_table) {
        float* table = at<float>(plan.gelu_derivatives);
        if (dtype == DType::bf16) gpu::launch_gelu_derivative_table<__nv_bfloat16>(table, stream);
        else gpu::launch_gelu_derivative_table<__half>(table, stream);
    }
    const auto embedding_bytes = static_cast<std::int64_t>(gpu::embedding_backward_scratch_bytes(batch, seq));
    if (embedding_bytes > plan.dres - plan.scratch) {
        embedding_scratch = allocate_device(embedding_bytes);
        extra_bytes = embedding_bytes;
    }
    gemm = std::make_unique<Gemm>(dtype, stream, options.fp32_gemm);
}

template <class T>
void GpuTrainStep::Impl::layernorm(T* out, float* rstd, const T* in, const T* w, const T* b) {
    const int bt = static_cast<int>(rows());
    if (rstd != nullptr) gpu::launch_layernorm_keeping_rstd<T>(out, rstd, in, w, b, bt, model.n_embd, model.ln_eps, stream);
    else gpu::launch_layernorm<T>(out, in, w, b, bt, model.n_embd, model.ln_eps, stream);
}

template <class T>
void GpuTrainStep::Impl::layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* in, const T* out, const T* w,
                                            const T* b, const float* rstd, int tag) {
    const int bt = static_cast<int>(rows());
    float* const scratch = at<float>(plan.ln_scratch);
    if (inplace_ln) {
        gpu::launch_layernorm_backward_from_output<T>(dx, dw, db, dout, out, w, b, rstd, bt, model.n_embd, scratch,
                                                      at<int>(plan.unrecoverable), tag, stream);
    } else {
        gpu::launch_layernorm_backward<T>(dx, dw, db, dout, in, w, bt, model.n_embd, model.ln_eps, scratch, stream);
    }
}

std::string GpuTrainStep::Impl::ln_named(int tag) const {
    if (tag == ln_tag(model.n_layer, 0)) return "ln_f";
    return "block " + std::to_string((tag - 1) / 2) + "'s " + ((tag - 1) % 2 == 0 ? "ln_1" : "ln_2");
}

template <class T>
void GpuTrainStep::Impl::block_forward(int layer, const T* unit, const UnitLayout& ul) {
    const auto w = [&](int t) { return unit + ul.tensors[as_size(t)].offset; };
    const std::size_t l = as_size(layer);
    attention_sublayer<T>(layer, unit, ul);
    mlp_input<T>(layer, unit, ul);
    sublayer_output<T>(at<T>(plan.resid[l + 1]), at<T>(plan.fc[l]), w(gpt2::block_tensor::fc_proj_w),
                       w(gpt2::block_tensor::fc_proj_b), at<T>(plan.x_mid[l]), 4 * model.n_embd, mlp_fused,
                       Dropout::site_word(DropoutSite::mlp_residual, layer));
}

template <class T>
void GpuTrainStep::Impl::attention_sublayer(int layer, const T* unit, const UnitLayout& ul) {
    const auto w = [&](int t) { return unit + ul.tensors[as_size(t)].offset; };
    const int bt = static_cast<int>(rows()), c = model.n_embd;
    const std::size_t l = as_size(layer);
    const T* x_in = at<T>(plan.resid[l]);
    T* const ln1 = at<T>(plan.ln1[l]);
    T* const qkv = at<T>(plan.qkv[l]);

    layernorm<T>(ln1, rstd(plan.ln1_rstd, layer), x_in, w(gpt2::block_tensor::ln1_w), w(gpt2::block_tensor::ln1_b));
    if (options.variant.has(Fusion::proj_epilogue)) {
        gemm->linear_fused(qkv, ln1, w(gpt2::block_tensor::qkv_w), w(gpt2::block_tensor::qkv_b), bt, c, 3 * c,
                           Gemm::Epilogue::bias);
    } else {
        gemm->linear(qkv, ln1, w(gpt2::block_tensor::qkv_w), bt, c, 3 * c);
        gpu::launch_add_bias<T>(qkv, w(gpt2::block_tensor::qkv_b), bt, 3 * c, stream);
    }
    core_attention<T>(layer);
    // x_mid = x_in + dropout(att · Wᵀ + b), the sum written where the projection was.
    sublayer_output<T>(at<T>(plan.x_mid[l]), at<T>(plan.att[l]), w(gpt2::block_tensor::proj_w), w(gpt2::block_tensor::proj_b), x_in,
                       c, options.variant.has(Fusion::proj_epilogue),
                       Dropout::site_word(DropoutSite::attention_residual, layer));
}

template <class T>
void GpuTrainStep::Impl::core_attention(int layer) {
    const std::size_t l = as_size(layer);
    const int c = model.n_embd;
    T* const att = at<T>(plan.att[l]);
    const T* qkv = at<T>(plan.qkv[l]);
    // The masks are the generator's for (seed, site, position): a recomputation draws the same.
    const std::uint32_t probs_site = Dropout::site_word(DropoutSite::attention_probs, layer);
    if (flash) {
        gpu::flash_attention<T>(att, qkv, batch, seq, c, model.n_head, options.dropout, probs_site, stream, lse(layer));
    } else {
        gpu::attention<T>(*gemm, att, at<T>(plan.scores), qkv, batch, seq, c, model.n_head,
                          {.fused_softmax = false, .dropout = options.dropout, .dropout_site = probs_site});
    }
}

template <class T>
void GpuTrainStep::Impl::mlp_input(int layer, const T* unit, const UnitLayout& ul, bool with_layernorm) {
    const auto w = [&](int t) { return unit + ul.tensors[as_size(t)].offset; };
    const int bt = static_cast<int>(rows()), c = model.n_embd;
    const std::size_t l = as_size(layer);
    T* const ln2 = at<T>(plan.ln2[l]);
    T* const fc = at<T>(plan.fc[l]);

    if (with_layernorm)
        layernorm<T>(ln2, rstd(plan.ln2_rstd, layer), at<T>(plan.x_mid[l]), w(gpt2::block_tensor::ln2_w), w(gpt2::block_tensor::ln2_b));
    if (inplace_gelu) {
        // fc = ln2 · Wᵀ + b (under mlp_epilogue the bias in the GEMM's epilogue: its GELU epilogue
        // would keep the input, not the bits), then the GELU in place over it, keeping the bits.
        if (mlp_fused) {
            gemm->linear_fused(fc, ln2, w(gpt2::block_tensor::fc_w), w(gpt2::block_tensor::fc_b), bt, c, 4 * c, Gemm::Epilogue::bias);
        } else {
            gemm->linear(fc, ln2, w(gpt2::block_tensor::fc_w), bt, c, 4 * c);
            gpu::launch_add_bias<T>(fc, w(gpt2::block_tensor::fc_b), bt, 4 * c, stream);
        }
        gpu::launch_gelu_tanh_with_branch<T>(fc, at<std::uint8_t>(plan.gelu_branch[l]), rows() * 4 * c, stream);
        return;
    }
    T* const fc_pre = at<T>(plan.fc_pre[l]);
    if (mlp_fused) {
        // fc = gelu(ln2 · Wᵀ + b) and its pre-activation fc_pre, both from the one GEMM's epilogue.
        gemm->linear_fused(fc, ln2, w(gpt2::block_tensor::fc_w), w(gpt2::block_tensor::fc_b), bt, c, 4 * c,
                           Gemm::Epilogue::bias_gelu_aux, {.aux = fc_pre});
    } else {
        gemm->linear(fc_pre, ln2, w(gpt2::block_tensor::fc_w), bt, c, 4 * c);
        gpu::launch_add_bias<T>(fc_pre, w(gpt2::block_tensor::fc_b), bt, 4 * c, stream);
        gpu::launch_gelu_tanh<T>(fc, fc_pre, rows() * 4 * c, stream);
    }
}

template <class T>
void GpuTrainStep::Impl::sublayer_output(T* y, const T* x, const T* w, const T* b, const T* residual, int in,
                                         bool epilogue, std::uint32_t dropout_site) {
    const int bt = static_cast<int>(rows()), c = model.n_embd;
    if (epilogue && !options.dropout.active()) {
        gemm->linear_fused(y, x, w, b, bt, in, c, Gemm::Epilogue::bias_residual, {.residual = residual});
        return;
    }
    // With dropout on, an epilogue adds the bias only: the dropout comes before the residual add.
    if (epilogue) {
        gemm->linear_fused(y, x, w, b, bt, in, c, Gemm::Epilogue::bias);
    } else {
        gemm->linear(y, x, w, bt, in, c);
        gpu::launch_add_bias<T>(y, b, bt, c, stream);
    }
    gpu::launch_dropout<T>(y, bt, c, options.dropout, dropout_site, stream);
    gpu::launch_residual_add<T>(y, residual, rows() * c, stream);
}

template <class T>
void GpuTrainStep::Impl::forward(LayerSource& weights) {
    const NvtxRange range("forward");
    const int bt = static_cast<int>(rows()), c = model.n_embd;
    const auto tensor = [&](const T* unit, int u, int t) {
        return unit + layout.units[as_size(u)].tensors[as_size(t)].offset;
    };
    const auto acquire = [&](int u) {
        const auto* p = static_cast<const T*>(weights.acquire(u));
        if (p == nullptr) throw std::runtime_error("GpuTrainStep: the layer source returned no pointer for unit " + std::to_string(u) + ".");
        return p;
    };

    const T* embed = acquire(0);
    T* const x0 = at<T>(plan.resid[0]);
    gpu::launch_embedding<T>(x0, at<std::int32_t>(plan.tokens), tensor(embed, 0, gpt2::embed_tensor::wte),
                             tensor(embed, 0, gpt2::embed_tensor::wpe), batch, seq, c, stream);
    gpu::launch_dropout<T>(x0, bt, c, options.dropout, Dropout::site_word(DropoutSite::embedding, 0), stream);
    weights.release(0);
    for (int l = 0; l < model.n_layer; ++l) {
        const int u = WeightLayout::block_unit(l);
        block_forward<T>(l, acquire(u), layout.units[as_size(u)]);
        weights.release(u);
    }
    const int hu = layout.head_unit();
    const T* head = acquire(hu);
    T* const xf = at<T>(plan.xf);
    T* const logits = at<T>(plan.logits);
    layernorm<T>(xf, inplace_ln ? at<float>(plan.lnf_rstd) : nullptr, at<T>(plan.resid[as_size(model.n_layer)]),
                 tensor(head, hu, gpt2::head_tensor::lnf_w), tensor(head, hu, gpt2::head_tensor::lnf_b));
    const std::int64_t stride = padded_vocab(model.vocab_size);
    // logits [bt, V] = xf [bt, c] · lm_headᵀ, rows `stride` apart.
    const T* lm_head = tensor(head, hu, gpt2::head_tensor::lm_head);
    over_vocabulary([&](int first, int count, bool) {
        gemm->batched(/*trans_b=*/true, bt, count, c, 1.0f, xf, c, 0, lm_head + static_cast<std::int64_t>(first) * c, c,
                      0, 0.0f, logits + first, static_cast<int>(stride), 0, 1);
    });
    weights.release(hu);
    // The mean loss's gradient, 1 / targets per row, times the loss scale.
    const float per_target = 1.0f / static_cast<float>(rows());
    gpu::launch_fused_classifier<T>(logits, at<float>(plan.losses), at<std::int32_t>(plan.targets), rows(),
                                    model.vocab_size, stride, per_target * scale, stream);
    gpu::launch_mean_loss(at<float>(plan.losses), rows(), per_target, at<float>(plan.loss), stream);
    backward_scale = scale;
}

template <class T>
void GpuTrainStep::Impl::linear_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int in, int out) {
    const int bt = static_cast<int>(rows());
    // dw [out, in] = dyᵀ [out, rows] · x [rows, in]; dx [rows, in] = dy [rows, out] · w [out, in].
    gemm->batched(/*trans_a=*/true, /*trans_b=*/false, out, in, bt, 1.0f, dy, out, 0, x, in, 0, 0.0f, dw, in, 0, 1);
    if (db != nullptr) gpu::launch_bias_backward<T>(db, dy, bt, out, at<float>(plan.bias_scratch), stream);
    if (dx != nullptr)
        gemm->batched(/*trans_a=*/false, /*trans_b=*/false, bt, in, out, 1.0f, dy, out, 0, w, in, 0, 0.0f, dx, in, 0, 1);
}

template <class F>
void GpuTrainStep::Impl::over_vocabulary(const F& f) const {
    const int aligned = model.vocab_size / kLogitsRowAlignment * kLogitsRowAlignment;
    if (aligned > 0) f(0, aligned, false);
    if (aligned < model.vocab_size) f(aligned, model.vocab_size - aligned, aligned > 0);
}

template <class T>
const T* GpuTrainStep::Impl::through_dropout(std::uint32_t site) {
    T* const dres = at<T>(plan.dres);
    if (!options.dropout.active()) return dres;
    T* const dy = at<T>(plan.dy);
    CUDA_CHECK(cudaMemcpyAsync(dy, dres, as_size(rows() * model.n_embd) * sizeof(T), cudaMemcpyDeviceToDevice, stream));
    gpu::launch_dropout<T>(dy, rows(), model.n_embd, options.dropout, site, stream);
    return dy;
}

// gpt2::block_backward (gpt2/gpt2_cpu_block.cpp), op for op.
template <class T>
void GpuTrainStep::Impl::block_backward(int layer, const T* unit, T* grad, const UnitLayout& ul) {
    const auto w = [&](int t) { return unit + ul.tensors[as_size(t)].offset; };
    const auto g = [&](int t) { return grad + ul.tensors[as_size(t)].offset; };
    const int bt = static_cast<int>(rows()), c = model.n_embd;
    const std::size_t l = as_size(layer);
    T* const dres = at<T>(plan.dres);
    T* const dln = at<T>(plan.dln);
    T* const dfc = at<T>(plan.dfc);
    T* const fc = at<T>(plan.fc[l]);
    // The GELU's input, where the variant keeps it.
    const T* fc_pre = inplace_gelu ? nullptr : at<T>(plan.fc_pre[l]);

    // What the backward reads and the forward did not keep (recompute.hpp), computed again by the
    // forward's own functions from what it kept, into buffers no other layer's backward needs.
    // Under inplace_gelu the GELU's output is kept below mlp.
    if (recompute == Recompute::block) attention_sublayer<T>(layer, unit, ul);
    else if (recompute >= Recompute::attention) core_attention<T>(layer);
    if (recompute >= Recompute::mlp) mlp_input<T>(layer, unit, ul, !keeps_ln2_output(recompute, inplace_ln));
    else if (recompute >= Recompute::gelu && !inplace_gelu) gpu::launch_gelu_tanh<T>(fc, fc_pre, rows() * 4 * c, stream);

    // x_out = x_mid + dropout(mlp(ln_2(x_mid))).
    const T* dy = through_dropout<T>(Dropout::site_word(DropoutSite::mlp_residual, layer));
    if (inplace_gelu) {
        // dfc = (dy · W) ⊙ gelu'(x), gelu' from the kept output and branch bits.
        linear_backward<T>(dfc, g(gpt2::block_tensor::fc_proj_w), g(gpt2::block_tensor::fc_proj_b), dy, fc,
                           w(gpt2::block_tensor::fc_proj_w), 4 * c, c);
        gpu::launch_gelu_tanh_backward_from_output<T>(dfc, fc, at<std::uint8_t>(plan.gelu_branch[l]), gelu_table(),
                                                      rows() * 4 * c, stream);
    } else if (mlp_fused) {
        // dfc = (dy · W) ⊙ gelu'(fc_pre) from the one GEMM's DGELU epilogue.
        linear_backward<T>(nullptr, g(gpt2::block_tensor::fc_proj_w), g(gpt2::block_tensor::fc_proj_b), dy, fc,
                           w(gpt2::block_tensor::fc_proj_w), 4 * c, c);
        gemm->linear_backward_dgelu(dfc, dy, w(gpt2::block_tensor::fc_proj_w), fc_pre, bt, 4 * c, c);
    } else {
        linear_backward<T>(dfc, g(gpt2::block_tensor::fc_proj_w), g(gpt2::block_tensor::fc_proj_b), dy, fc,
                           w(gpt2::block_tensor::fc_proj_w), 4 * c, c);
        gpu::launch_gelu_tanh_backward<T>(dfc, fc_pre, rows() * 4 * c, stream);
    }
    linear_backward<T>(dln, g(gpt2::block_tensor::fc_w), g(gpt2::block_tensor::fc_b), dfc, at<T>(plan.ln2[l]), w(gpt2::block_tensor::fc_w),
                       c, 4 * c);
    layernorm_backward<T>(dres, g(gpt2::block_tensor::ln2_w), g(gpt2::block_tensor::ln2_b), dln, at<T>(plan.x_mid[l]),
                          at<T>(plan.ln2[l]), w(gpt2::block_tensor::ln2_w), w(gpt2::block_tensor::ln2_b), rstd(plan.ln2_rstd, layer),
                          ln_tag(layer, 1));

    // x_mid = x_in + dropout(c_proj(attention(c_attn(ln_1(x_in))))).
    dy = through_dropout<T>(Dropout::site_word(DropoutSite::attention_residual, layer));
    T* const datt = at<T>(plan.datt);
    T* const dqkv = at<T>(plan.dqkv);
    const T* att = at<T>(plan.att[l]);
    const T* qkv = at<T>(plan.qkv[l]);
    linear_backward<T>(datt, g(gpt2::block_tensor::proj_w), g(gpt2::block_tensor::proj_b), dy, att, w(gpt2::block_tensor::proj_w), c, c);
    const std::uint32_t probs_site = Dropout::site_word(DropoutSite::attention_probs, layer);
    if (flash) {
        gpu::flash_attention_backward<T>(dqkv, at<float>(plan.flash_scratch), datt, qkv, att, lse(layer), batch, seq, c,
                                         model.n_head, options.dropout, probs_site, stream);
    } else {
        gpu::attention_backward<T>(*gemm, dqkv, at<T>(plan.scores), at<T>(plan.dscores), datt, qkv, batch, seq, c,
                                   model.n_head,
                                   {.fused_softmax = false, .dropout = options.dropout, .dropout_site = probs_site});
    }
    linear_backward<T>(dln, g(gpt2::block_tensor::qkv_w), g(gpt2::block_tensor::qkv_b), dqkv, at<T>(plan.ln1[l]),
                       w(gpt2::block_tensor::qkv_w), c, 3 * c);
    layernorm_backward<T>(dres, g(gpt2::block_tensor::ln1_w), g(gpt2::block_tensor::ln1_b), dln, at<T>(plan.resid[l]),
                          at<T>(plan.ln1[l]), w(gpt2::block_tensor::ln1_w), w(gpt2::block_tensor::ln1_b), rstd(plan.ln1_rstd, layer),
                          ln_tag(layer, 0));
}

template <class T>
void GpuTrainStep::Impl::backward(LayerSource& weights) {
    const NvtxRange range("backward");
    const int bt = static_cast<int>(rows()), c = model.n_embd;
    double* const partials = at<double>(plan.partials);
    // The unit's gradient, zeroed: the backward kernels add to it.
    const auto gradient_of = [&](int u) {
        auto* g = static_cast<T*>(weights.gradient(u));
        if (g == nullptr) throw std::runtime_error("GpuTrainStep: the layer source returned no gradient for unit " + std::to_string(u) + ".");
        CUDA_CHECK(cudaMemsetAsync(g, 0, as_size(layout.units[as_size(u)].numel) * sizeof(T), stream));
        return g;
    };
    const auto squares_of = [&](const T* g, int u) {
        gpu::launch_squared_norm_partials<T>(g, layout.units[as_size(u)].numel,
                                             partials + static_cast<std::int64_t>(u) * gpu::kNormPartials, stream);
    };
    T* const dres = at<T>(plan.dres);

    const int hu = layout.head_unit();
    const UnitLayout& hl = layout.units[as_size(hu)];
    const auto* head = static_cast<const T*>(weights.acquire(hu));
    T* const head_grad = gradient_of(hu);
    const auto hoff = [&](int t) { return hl.tensors[as_size(t)].offset; };
    T* const dxf = at<T>(plan.dln);
    // Of logits = xf · lm_headᵀ, a vocabulary part at a time: d lm_head's rows = dlogitsᵀ · xf;
    // dxf = Σ over the parts of dlogits · lm_head.
    const int stride = static_cast<int>(padded_vocab(model.vocab_size));
    const T* dlogits = at<T>(plan.logits);
    const T* xf = at<T>(plan.xf);
    const T* lm_head = head + hoff(gpt2::head_tensor::lm_head);
    T* const dlm_head = head_grad + hoff(gpt2::head_tensor::lm_head);
    over_vocabulary([&](int first, int count, bool later) {
        const std::int64_t row = static_cast<std::int64_t>(first) * c;
        gemm->batched(/*trans_a=*/true, /*trans_b=*/false, count, c, bt, 1.0f, dlogits + first, stride, 0, xf, c, 0,
                      0.0f, dlm_head + row, c, 0, 1);
        gemm->batched(/*trans_a=*/false, /*trans_b=*/false, bt, c, count, 1.0f, dlogits + first, stride, 0,
                      lm_head + row, c, 0, later ? 1.0f : 0.0f, dxf, c, 0, 1);
    });
    CUDA_CHECK(cudaMemsetAsync(dres, 0, as_size(rows() * c) * sizeof(T), stream));
    if (inplace_ln) CUDA_CHECK(cudaMemsetAsync(at<int>(plan.unrecoverable), 0, sizeof(int), stream));
    layernorm_backward<T>(dres, head_grad + hoff(gpt2::head_tensor::lnf_w), head_grad + hoff(gpt2::head_tensor::lnf_b), dxf,
                          at<T>(plan.resid[as_size(model.n_layer)]), xf, head + hoff(gpt2::head_tensor::lnf_w),
                          head + hoff(gpt2::head_tensor::lnf_b), inplace_ln ? at<float>(plan.lnf_rstd) : nullptr,
                          ln_tag(model.n_layer, 0));
    squares_of(head_grad, hu);
    weights.release(hu);

    for (int l = model.n_layer - 1; l >= 0; --l) {
        const int u = WeightLayout::block_unit(l);
        const auto* unit = static_cast<const T*>(weights.acquire(u));
        T* const grad = gradient_of(u);
        block_backward<T>(l, unit, grad, layout.units[as_size(u)]);
        squares_of(grad, u);
        weights.release(u);
    }

    weights.acquire(0);
    const UnitLayout& el = layout.units[0];
    T* const embed_grad = gradient_of(0);
    gpu::launch_dropout<T>(dres, bt, c, options.dropout, Dropout::site_word(DropoutSite::embedding, 0), stream);
    gpu::launch_embedding_backward<T>(embed_grad + el.tensors[gpt2::embed_tensor::wte].offset,
                                      embed_grad + el.tensors[gpt2::embed_tensor::wpe].offset, dres,
                                      at<std::int32_t>(plan.tokens), batch, seq, c, embedding_scratch_at(), stream);
    squares_of(embed_grad, 0);
    weights.release(0);
    gpu::launch_sum_partials(partials, static_cast<std::int64_t>(layout.unit_count()) * gpu::kNormPartials,
                             at<double>(plan.squared_norm), stream);
    norm_read = false;
}

void GpuTrainStep::Impl::read_norm() {
    if (norm_read) return;
    double squared = 0.0;
    int unrecoverable = 0;
    CUDA_CHECK(cudaMemcpyAsync(&squared, at<double>(plan.squared_norm), sizeof squared, cudaMemcpyDeviceToHost, stream));
    if (inplace_ln) {
        CUDA_CHECK(cudaMemcpyAsync(&unrecoverable, at<int>(plan.unrecoverable), sizeof unrecoverable,
                                   cudaMemcpyDeviceToHost, stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    // Before the update reads the norm: no weight changes on gradients that divided by ~0.
    if (unrecoverable != 0) {
        char bound[32];
        std::snprintf(bound, sizeof bound, "%g", static_cast<double>(kInplaceLnMinWeight));
        throw std::runtime_error("GpuTrainStep: the inplace_ln variant cannot recover the normalised input of " +
                                 ln_named(unrecoverable) + " from its output: one of its weights is below " + bound +
                                 " in magnitude, and the recovery (output - bias) / weight divides by it. Train this "
                                 "model without inplace_ln.");
    }
    norm = std::sqrt(squared) / static_cast<double>(backward_scale);
    norm_read = true;
}

template <class T>
void GpuTrainStep::Impl::update(LayerSource& weights) {
    const NvtxRange range("update");
    read_norm();
    const bool finite = std::isfinite(norm);
    if (dtype == DType::fp16) {
        if (!finite) {
            scale = std::max(1.0f, scale / 2.0f);
            good_steps = 0;
        } else if (++good_steps == kLossScaleWindow) {
            scale *= 2.0f;
            good_steps = 0;
        }
    }
    if (finite) ++steps;
    else ++skipped;
    // clip_grad_norm_'s scale and the loss scale's inverse, applied inside the AdamW pass.
    const auto grad_scale =
        static_cast<float>(std::min(1.0, options.settings.max_grad_norm / (norm + 1e-6)) / backward_scale);
    link_bytes = {};
    // A skipped update still visits every unit: the schedule is the same every step.
    UnitUpdate unit = weights.acquire_update(0);
    if (unit.on_host()) {
        update_on_host<T>(weights, unit, finite, grad_scale);
        return;
    }
    for (int u = 0;;) {
        if (finite) {
            for (const TensorSpec& t : layout.units[as_size(u)].tensors) {
                gpu::launch_adamw<T>(static_cast<T*>(unit.weights) + t.offset,
                                     unit.master != nullptr ? unit.master + t.offset : nullptr,
                                     static_cast<const T*>(unit.gradient) + t.offset, unit.m + t.offset,
                                     unit.v + t.offset, t.numel, adamw_for(t, grad_scale), stream);
            }
        }
        weights.release_update(u);
        if (++u == layout.unit_count()) break;
        unit = weights.acquire_update(u);
    }
}

template <class T>
void GpuTrainStep::Impl::update_on_host(LayerSource& weights, const UnitUpdate& first, bool finite, float grad_scale) {
    const NvtxRange range("host_update");
    if (!host_link) host_link = std::make_unique<HostLink>();
    HostLink& link = *host_link;
    const int units = layout.unit_count();
    const auto bytes_of = [&](int u) { return as_size(layout.units[as_size(u)].numel) * sizeof(T); };
    // The gradients are final once the backward's work on the compute stream is.
    link.backward_done.record(stream);
    link.backward_done.wait_on(link.down.get());
    // A streamed unit's gradient and weights are its own host buffers: the source copied the
    // gradient there, and the next forward streams the new weights from there.
    const auto copy_down = [&](int u, const UnitUpdate& unit) {
        if (!finite || unit.streamed) return;
        CUDA_CHECK(cudaMemcpyAsync(unit.host_gradient, unit.gradient, bytes_of(u), cudaMemcpyDeviceToHost, link.down.get()));
        link.gradient_down[as_size(u % kHostUpdateSlots)].record(link.down.get());
        link_bytes.to_host += static_cast<std::int64_t>(bytes_of(u));
    };
    std::array<UnitUpdate, kHostUpdateSlots> held{};
    held[0] = first;
    copy_down(0, first);
    for (int u = 0; u < units; ++u) {
        const auto slot = as_size(u % kHostUpdateSlots);
        if (u + 1 < units) {
            UnitUpdate& next = held[as_size((u + 1) % kHostUpdateSlots)];
            next = weights.acquire_update(u + 1);
            copy_down(u + 1, next);
        }
        const UnitUpdate& unit = held[slot];
        if (finite) {
            {
                const NvtxRange wait("host_update_wait");
                if (unit.streamed) {
                    if (unit.gradient_copied != nullptr) CUDA_CHECK(cudaEventSynchronize(unit.gradient_copied));
                } else {
                    link.gradient_down[slot].synchronize();
                    // The slot's weights buffer is free once the unit before in this slot went up.
                    link.weights_up[slot].synchronize();
                }
            }
            const NvtxRange compute("host_adamw");
            for (const TensorSpec& t : layout.units[as_size(u)].tensors) {
                host_adamw(dtype, static_cast<T*>(unit.host_weights) + t.offset, unit.master + t.offset,
                           static_cast<const T*>(unit.host_gradient) + t.offset, unit.m + t.offset, unit.v + t.offset,
                           t.numel, adamw_for(t, grad_scale));
            }
            if (!unit.streamed) {
                // The slot's padding holds whichever unit went through it before: the unit goes
                // up whole (one copy), so its own padding goes with it.
                restore_padding(layout.units[as_size(u)], unit.master, unit.host_weights, dtype);
                CUDA_CHECK(cudaMemcpyAsync(unit.weights, unit.host_weights, bytes_of(u), cudaMemcpyHostToDevice, link.up.get()));
                link.weights_up[slot].record(link.up.get());
                link_bytes.to_device += static_cast<std::int64_t>(bytes_of(u));
            }
        }
        weights.release_update(u);
    }
    // The copies up run in order on one stream: an event after the last covers them all.
    if (finite) {
        link.all_up.record(link.up.get());
        link.all_up.wait_on(stream);
    }
}

GpuTrainStep::GpuTrainStep(const ModelConfig& model, const WeightLayout& layout, DType dtype, int batch, int seq,
                           cudaStream_t stream, const GpuTrainOptions& options)
    : impl_(std::make_unique<Impl>(model, layout, dtype, batch, seq, stream, options)) {}

GpuTrainStep::~GpuTrainStep() = default;

void GpuTrainStep::set_batch(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) {
    Impl& s = *impl_;
    check_batch_ids("GpuTrainStep", s.model, tokens, s.rows(), "token");
    check_batch_ids("GpuTrainStep", s.model, targets, s.rows(), "target");
    // On the stream, so a step in flight reads the old ids; then wait, as promised.
    CUDA_CHECK(cudaMemcpyAsync(s.at<std::int32_t>(s.plan.tokens), tokens.data(), tokens.size_bytes(),
                               cudaMemcpyHostToDevice, s.stream));
    CUDA_CHECK(cudaMemcpyAsync(s.at<std::int32_t>(s.plan.targets), targets.data(), targets.size_bytes(),
                               cudaMemcpyHostToDevice, s.stream));
    CUDA_CHECK(cudaStreamSynchronize(s.stream));
    s.batch_set = true;
}

namespace {

template <class F>
void with_type(DType dtype, const F& f) {
    switch (dtype) {
        case DType::fp32: f(float{}); break;
        case DType::fp16: f(__half{}); break;
        case DType::bf16: f(__nv_bfloat16{}); break;
    }
}

}  // namespace

void GpuTrainStep::forward(LayerSource& weights) {
    Impl& s = *impl_;
    if (!s.batch_set) throw std::logic_error("GpuTrainStep::forward: set_batch was never called.");
    with_type(s.dtype, [&](auto t) { s.forward<decltype(t)>(weights); });
}

void GpuTrainStep::backward(LayerSource& weights) {
    Impl& s = *impl_;
    with_type(s.dtype, [&](auto t) { s.backward<decltype(t)>(weights); });
}

void GpuTrainStep::update(LayerSource& weights) {
    Impl& s = *impl_;
    with_type(s.dtype, [&](auto t) { s.update<decltype(t)>(weights); });
}

double GpuTrainStep::loss() {
    Impl& s = *impl_;
    float loss = 0.0f;
    CUDA_CHECK(cudaMemcpyAsync(&loss, s.at<float>(s.plan.loss), sizeof loss, cudaMemcpyDeviceToHost, s.stream));
    CUDA_CHECK(cudaStreamSynchronize(s.stream));
    return loss;
}

double GpuTrainStep::grad_norm() {
    impl_->read_norm();
    return impl_->norm;
}

float GpuTrainStep::loss_scale() const { return impl_->scale; }
int GpuTrainStep::steps() const { return impl_->steps; }
int GpuTrainStep::skipped_steps() const { return impl_->skipped; }
LinkBytes GpuTrainStep::update_link_bytes() const { return impl_->link_bytes; }

std::int64_t GpuTrainStep::activation_bytes() const { return impl_->plan.total + impl_->extra_bytes; }

std::int64_t GpuTrainStep::activation_bytes_for(const ModelConfig& model, DType dtype, int batch, int seq,
                                                const Variant& variant, Recompute recompute) {
    return TrainArena(model, dtype, batch, seq, variant, recompute).total;
}

std::int64_t GpuTrainStep::workspace_bytes() const { return impl_->gemm->workspace_bytes(); }

}  // namespace sweetspot
