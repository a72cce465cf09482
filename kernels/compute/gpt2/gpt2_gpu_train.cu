// GPT-2's share of the GPU training step (gpu_train_context.hpp): the forward of its GPU forward's
// baseline kernels (or flash attention) with each block's activations kept, and the backward of
// gpt2_cpu_block.cpp's block_backward op for op, each backward kernel from its op family's file.
// The residual stream is kept as each block's input and x_mid: a sub-layer writes its output
// straight into the next buffer and adds the one before, so nothing is copied. What the Recompute
// setting does not keep the backward computes again before it needs it, with the forward's own
// functions (the block's forward is those functions in order). The variant's mlp_epilogue and
// proj_epilogue move biases, the GELU, its backward and residual adds into the GEMMs' cuBLASLt
// epilogues; its inplace_ln has the LayerNorms keep each row's rstd and their backwards read their
// outputs instead of their inputs, so that the residual stream is kept only where a recomputation
// starts from it; its inplace_gelu runs the GELU in place over its input, keeping a branch bit per
// element, and the GELU's backward from that output and the bits (gelu_from_output.hpp).
#include "kernels/compute/gpt2/gpt2_gpu_train.hpp"

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/compute/bias.cuh"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/dropout.cuh"
#include "kernels/compute/embedding.cuh"
#include "kernels/compute/gelu.cuh"
#include "kernels/compute/gemm_limits.hpp"
#include "kernels/compute/layernorm.cuh"
#include "kernels/compute/residual.cuh"
#include "kernels/model/gpt2/gpt2_tensors.hpp"

namespace sweetspot::gpt2 {

namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

class Gpt2GpuTrain final : public GpuTrainFamily<Gpt2GpuTrain> {
public:
    Gpt2GpuTrain(const ModelConfig& model_, const WeightLayout& layout_, DType dtype_, const BatchShape& shape_,
                 cudaStream_t stream_, const GpuTrainOptions& options_)
        : GpuTrainFamily(model_, layout_, dtype_, shape_, stream_, options_),
          mlp_fused(options_.variant.has(Fusion::mlp_epilogue)),
          inplace_gelu(options_.variant.has(Fusion::inplace_gelu)) {
        if (plan.gelu_table) {
            float* table = at<float>(plan.gelu_derivatives);
            if (dtype == DType::bf16) gpu::launch_gelu_derivative_table<__nv_bfloat16>(table, stream);
            else gpu::launch_gelu_derivative_table<__half>(table, stream);
        }
    }

    int lm_head_tensor() const override { return head_tensor::lm_head; }
    std::array<std::string_view, 3> norm_names() const override { return {"ln_1", "ln_2", "ln_f"}; }

private:
    friend GpuTrainFamily<Gpt2GpuTrain>;

    // The MLP's biases, GELU (and its backward) and residual add in the GEMMs' epilogues.
    bool mlp_fused;
    // The GELU's output and branch bits kept for its backward instead of its input.
    bool inplace_gelu;

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
    // divide by with `tag` (norm_named names the LayerNorm from it).
    template <class T>
    void layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* in, const T* out, const T* w, const T* b,
                            const float* rstd, int tag);

    // resid[0] = dropout(wte[tokens] + wpe[positions]).
    template <class T>
    void forward_embedding(const T* unit, const UnitLayout& ul);
    // xf = ln_f(resid[L]), keeping its rstd with inplace_ln.
    template <class T>
    void forward_final_norm(const T* head, const UnitLayout& ul);
    // The block's forward, x_out = x_mid + dropout(mlp(ln_2(x_mid))) after
    // x_mid = x_in + dropout(c_proj(attention(c_attn(ln_1(x_in))))), in the pieces the backward
    // calls again for what the Recompute setting did not keep: the attention sub-layer (ln_1, the
    // QKV projection, the attention, its projection into x_mid); the attention alone, from qkv
    // (core_attention); the MLP's input (ln_2 unless `with_layernorm` is false, the first GEMM and
    // its GELU).
    template <class T>
    void forward_block(int layer, const T* unit, const UnitLayout& ul);
    template <class T>
    void attention_sublayer(int layer, const T* unit, const UnitLayout& ul);
    template <class T>
    void mlp_input(int layer, const T* unit, const UnitLayout& ul, bool with_layernorm = true);
    // y [rows, C] = residual + dropout(x [rows, in] · wᵀ + b): a sub-layer's output projection,
    // the bias and residual add in its GEMM's epilogue where `epilogue` (the bias only while
    // dropout is on).
    template <class T>
    void sublayer_output(T* y, const T* x, const T* w, const T* b, const T* residual, int in, bool epilogue,
                         std::uint32_t dropout_site);

    template <class T>
    void backward_final_norm(const T* head, T* grad, const UnitLayout& ul);
    template <class T>
    void backward_block(int layer, const T* unit, T* grad, const UnitLayout& ul);
    template <class T>
    void backward_embedding(T* grad, const UnitLayout& ul);
    // Of y [rows, out] = x [rows, in] · wᵀ + b: dw = dyᵀ · x, db = Σ_rows dy (added to the zeroed
    // gradient), dx = dy · w (not computed where dx is null: an epilogue computes it).
    template <class T>
    void linear_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int in, int out);
    // dy = dres through the dropout at `site` (dres itself when dropout is off).
    template <class T>
    const T* through_dropout(std::uint32_t site);
};

template <class T>
void Gpt2GpuTrain::forward_embedding(const T* unit, const UnitLayout& ul) {
    T* const x0 = at<T>(plan.resid[0]);
    const std::int32_t* tokens = at<std::int32_t>(plan.tokens);
    const T* wte = ul.tensor(unit, embed_tensor::wte);
    const T* wpe = ul.tensor(unit, embed_tensor::wpe);
    if (positions() != nullptr) {
        gpu::launch_embedding<T>(x0, tokens, wte, wpe, positions(), rows(), model.n_embd, stream);
    } else {
        gpu::launch_embedding<T>(x0, tokens, wte, wpe, shape.batch(), shape.stride(), model.n_embd, stream);
    }
    gpu::launch_dropout<T>(x0, rows(), model.n_embd, options.dropout, Dropout::site_word(DropoutSite::embedding, 0),
                           stream);
}

template <class T>
void Gpt2GpuTrain::forward_final_norm(const T* head, const UnitLayout& ul) {
    layernorm<T>(at<T>(plan.xf), inplace_ln ? at<float>(plan.lnf_rstd) : nullptr,
                 at<T>(plan.resid[as_size(model.n_layer)]), ul.tensor(head, head_tensor::lnf_w),
                 ul.tensor(head, head_tensor::lnf_b));
}

template <class T>
void Gpt2GpuTrain::layernorm(T* out, float* rstd, const T* in, const T* w, const T* b) {
    const int bt = static_cast<int>(rows());
    if (rstd != nullptr) gpu::launch_layernorm_keeping_rstd<T>(out, rstd, in, w, b, bt, model.n_embd, model.ln_eps, stream);
    else gpu::launch_layernorm<T>(out, in, w, b, bt, model.n_embd, model.ln_eps, stream);
}

template <class T>
void Gpt2GpuTrain::layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* in, const T* out, const T* w,
                                            const T* b, const float* rstd, int tag) {
    const int bt = static_cast<int>(rows());
    float* const scratch = at<float>(plan.norm_scratch);
    if (inplace_ln) {
        gpu::launch_layernorm_backward_from_output<T>(dx, dw, db, dout, out, w, b, rstd, bt, model.n_embd, scratch,
                                                      at<int>(plan.unrecoverable), tag, stream);
    } else {
        gpu::launch_layernorm_backward<T>(dx, dw, db, dout, in, w, bt, model.n_embd, model.ln_eps, scratch, stream);
    }
}

template <class T>
void Gpt2GpuTrain::forward_block(int layer, const T* unit, const UnitLayout& ul) {
    const auto w = [&](int t) { return ul.tensor(unit, t); };
    const std::size_t l = as_size(layer);
    attention_sublayer<T>(layer, unit, ul);
    mlp_input<T>(layer, unit, ul);
    sublayer_output<T>(at<T>(plan.resid[l + 1]), at<T>(plan.fc[l]), w(block_tensor::fc_proj_w),
                       w(block_tensor::fc_proj_b), at<T>(plan.x_mid[l]), 4 * model.n_embd, mlp_fused,
                       Dropout::site_word(DropoutSite::mlp_residual, layer));
}

template <class T>
void Gpt2GpuTrain::attention_sublayer(int layer, const T* unit, const UnitLayout& ul) {
    const auto w = [&](int t) { return ul.tensor(unit, t); };
    const int bt = static_cast<int>(rows()), c = model.n_embd;
    const std::size_t l = as_size(layer);
    const T* x_in = at<T>(plan.resid[l]);
    T* const ln1 = at<T>(plan.ln1[l]);
    T* const qkv = at<T>(plan.qkv[l]);

    layernorm<T>(ln1, rstd(plan.ln1_rstd, layer), x_in, w(block_tensor::ln1_w), w(block_tensor::ln1_b));
    if (options.variant.has(Fusion::proj_epilogue)) {
        gemm->linear_fused(qkv, ln1, w(block_tensor::qkv_w), w(block_tensor::qkv_b), bt, c, 3 * c,
                           Gemm::Epilogue::bias);
    } else {
        gemm->linear(qkv, ln1, w(block_tensor::qkv_w), bt, c, 3 * c);
        gpu::launch_add_bias<T>(qkv, w(block_tensor::qkv_b), bt, 3 * c, stream);
    }
    core_attention<T>(layer);
    // x_mid = x_in + dropout(att · Wᵀ + b), the sum written where the projection was.
    sublayer_output<T>(at<T>(plan.x_mid[l]), at<T>(plan.att[l]), w(block_tensor::proj_w), w(block_tensor::proj_b), x_in,
                       c, options.variant.has(Fusion::proj_epilogue),
                       Dropout::site_word(DropoutSite::attention_residual, layer));
}

template <class T>
void Gpt2GpuTrain::mlp_input(int layer, const T* unit, const UnitLayout& ul, bool with_layernorm) {
    const auto w = [&](int t) { return ul.tensor(unit, t); };
    const int bt = static_cast<int>(rows()), c = model.n_embd;
    const std::size_t l = as_size(layer);
    T* const ln2 = at<T>(plan.ln2[l]);
    T* const fc = at<T>(plan.fc[l]);

    if (with_layernorm)
        layernorm<T>(ln2, rstd(plan.ln2_rstd, layer), at<T>(plan.x_mid[l]), w(block_tensor::ln2_w), w(block_tensor::ln2_b));
    if (inplace_gelu) {
        // fc = ln2 · Wᵀ + b (under mlp_epilogue the bias in the GEMM's epilogue: its GELU epilogue
        // would keep the input, not the bits), then the GELU in place over it, keeping the bits.
        if (mlp_fused) {
            gemm->linear_fused(fc, ln2, w(block_tensor::fc_w), w(block_tensor::fc_b), bt, c, 4 * c, Gemm::Epilogue::bias);
        } else {
            gemm->linear(fc, ln2, w(block_tensor::fc_w), bt, c, 4 * c);
            gpu::launch_add_bias<T>(fc, w(block_tensor::fc_b), bt, 4 * c, stream);
        }
        gpu::launch_gelu_tanh_with_branch<T>(fc, at<std::uint8_t>(plan.gelu_branch[l]), rows() * 4 * c, stream);
        return;
    }
    T* const fc_pre = at<T>(plan.fc_pre[l]);
    if (mlp_fused) {
        // fc = gelu(ln2 · Wᵀ + b) and its pre-activation fc_pre, both from the one GEMM's epilogue.
        gemm->linear_fused(fc, ln2, w(block_tensor::fc_w), w(block_tensor::fc_b), bt, c, 4 * c,
                           Gemm::Epilogue::bias_gelu_aux, {.aux = fc_pre});
    } else {
        gemm->linear(fc_pre, ln2, w(block_tensor::fc_w), bt, c, 4 * c);
        gpu::launch_add_bias<T>(fc_pre, w(block_tensor::fc_b), bt, 4 * c, stream);
        gpu::launch_gelu_tanh<T>(fc, fc_pre, rows() * 4 * c, stream);
    }
}

template <class T>
void Gpt2GpuTrain::sublayer_output(T* y, const T* x, const T* w, const T* b, const T* residual, int in,
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
void Gpt2GpuTrain::linear_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int in, int out) {
    const int bt = static_cast<int>(rows());
    // dw [out, in] = dyᵀ [out, rows] · x [rows, in]; dx [rows, in] = dy [rows, out] · w [out, in].
    gemm->batched(/*trans_a=*/true, /*trans_b=*/false, out, in, bt, 1.0f, dy, out, 0, x, in, 0, 0.0f, dw, in, 0, 1);
    if (db != nullptr) gpu::launch_bias_backward<T>(db, dy, bt, out, at<float>(plan.bias_scratch), stream);
    if (dx != nullptr)
        gemm->batched(/*trans_a=*/false, /*trans_b=*/false, bt, in, out, 1.0f, dy, out, 0, w, in, 0, 0.0f, dx, in, 0, 1);
}

template <class T>
const T* Gpt2GpuTrain::through_dropout(std::uint32_t site) {
    T* const dres = at<T>(plan.dres);
    if (!options.dropout.active()) return dres;
    T* const dy = at<T>(plan.dy);
    CUDA_CHECK(cudaMemcpyAsync(dy, dres, as_size(rows() * model.n_embd) * sizeof(T), cudaMemcpyDeviceToDevice, stream));
    gpu::launch_dropout<T>(dy, rows(), model.n_embd, options.dropout, site, stream);
    return dy;
}

// gpt2::block_backward (gpt2/gpt2_cpu_block.cpp), op for op.
template <class T>
void Gpt2GpuTrain::backward_block(int layer, const T* unit, T* grad, const UnitLayout& ul) {
    const auto w = [&](int t) { return ul.tensor(unit, t); };
    const auto g = [&](int t) { return ul.tensor(grad, t); };
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
        linear_backward<T>(dfc, g(block_tensor::fc_proj_w), g(block_tensor::fc_proj_b), dy, fc,
                           w(block_tensor::fc_proj_w), 4 * c, c);
        gpu::launch_gelu_tanh_backward_from_output<T>(dfc, fc, at<std::uint8_t>(plan.gelu_branch[l]), gelu_table(),
                                                      rows() * 4 * c, stream);
    } else if (mlp_fused) {
        // dfc = (dy · W) ⊙ gelu'(fc_pre) from the one GEMM's DGELU epilogue.
        linear_backward<T>(nullptr, g(block_tensor::fc_proj_w), g(block_tensor::fc_proj_b), dy, fc,
                           w(block_tensor::fc_proj_w), 4 * c, c);
        gemm->linear_backward_dgelu(dfc, dy, w(block_tensor::fc_proj_w), fc_pre, bt, 4 * c, c);
    } else {
        linear_backward<T>(dfc, g(block_tensor::fc_proj_w), g(block_tensor::fc_proj_b), dy, fc,
                           w(block_tensor::fc_proj_w), 4 * c, c);
        gpu::launch_gelu_tanh_backward<T>(dfc, fc_pre, rows() * 4 * c, stream);
    }
    linear_backward<T>(dln, g(block_tensor::fc_w), g(block_tensor::fc_b), dfc, at<T>(plan.ln2[l]), w(block_tensor::fc_w),
                       c, 4 * c);
    layernorm_backward<T>(dres, g(block_tensor::ln2_w), g(block_tensor::ln2_b), dln, at<T>(plan.x_mid[l]),
                          at<T>(plan.ln2[l]), w(block_tensor::ln2_w), w(block_tensor::ln2_b), rstd(plan.ln2_rstd, layer),
                          norm_tag(layer, 1));

    // x_mid = x_in + dropout(c_proj(attention(c_attn(ln_1(x_in))))).
    dy = through_dropout<T>(Dropout::site_word(DropoutSite::attention_residual, layer));
    T* const datt = at<T>(plan.datt);
    T* const dqkv = at<T>(plan.dqkv);
    const T* att = at<T>(plan.att[l]);
    linear_backward<T>(datt, g(block_tensor::proj_w), g(block_tensor::proj_b), dy, att, w(block_tensor::proj_w), c, c);
    core_attention_backward<T>(layer, dqkv, datt);
    linear_backward<T>(dln, g(block_tensor::qkv_w), g(block_tensor::qkv_b), dqkv, at<T>(plan.ln1[l]),
                       w(block_tensor::qkv_w), c, 3 * c);
    layernorm_backward<T>(dres, g(block_tensor::ln1_w), g(block_tensor::ln1_b), dln, at<T>(plan.resid[l]),
                          at<T>(plan.ln1[l]), w(block_tensor::ln1_w), w(block_tensor::ln1_b), rstd(plan.ln1_rstd, layer),
                          norm_tag(layer, 0));
}


template <class T>
void Gpt2GpuTrain::backward_final_norm(const T* head, T* grad, const UnitLayout& ul) {
    layernorm_backward<T>(at<T>(plan.dres), ul.tensor(grad, head_tensor::lnf_w), ul.tensor(grad, head_tensor::lnf_b),
                          at<T>(plan.dln), at<T>(plan.resid[as_size(model.n_layer)]), at<T>(plan.xf),
                          ul.tensor(head, head_tensor::lnf_w), ul.tensor(head, head_tensor::lnf_b),
                          inplace_ln ? at<float>(plan.lnf_rstd) : nullptr, norm_tag(model.n_layer, 0));
}

template <class T>
void Gpt2GpuTrain::backward_embedding(T* grad, const UnitLayout& ul) {
    T* const dres = at<T>(plan.dres);
    gpu::launch_dropout<T>(dres, rows(), model.n_embd, options.dropout, Dropout::site_word(DropoutSite::embedding, 0),
                           stream);
    const std::int32_t* tokens = at<std::int32_t>(plan.tokens);
    T* const dwte = ul.tensor(grad, embed_tensor::wte);
    T* const dwpe = ul.tensor(grad, embed_tensor::wpe);
    if (positions() != nullptr) {
        gpu::launch_embedding_backward<T>(dwte, dwpe, dres, tokens, positions(), rows(), model.n_embd,
                                          embedding_scratch_at(), stream);
    } else {
        gpu::launch_embedding_backward<T>(dwte, dwpe, dres, tokens, shape.batch(), shape.stride(), model.n_embd,
                                          embedding_scratch_at(), stream);
    }
}

}  // namespace

std::unique_ptr<GpuTrainContext> make_gpu_train(const ModelConfig& model, const WeightLayout& layout, DType dtype,
                                                const BatchShape& shape, cudaStream_t stream,
                                                const GpuTrainOptions& options) {
    if (options.variant.has(Fusion::mlp_epilogue) && !options.variant.has(Fusion::inplace_gelu) &&
        !gemm_aux_width_fits(4 * model.n_embd)) {
        throw std::invalid_argument("GpuTrainStep: mlp_epilogue needs 4 × n_embd to be a multiple of 8 (cuBLASLt's "
                                    "GELU epilogue buffer); model '" + model.name + "' has n_embd " +
                                    std::to_string(model.n_embd) + ".");
    }
    return std::make_unique<Gpt2GpuTrain>(model, layout, dtype, shape, stream, options);
}

}  // namespace sweetspot::gpt2
