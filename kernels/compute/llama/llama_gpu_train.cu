// LLaMA's share of the GPU training step (gpu_train_context.hpp): its GPU forward's kernels
// (llama_gpu_forward.cu) with each block's activations kept, and the backward of
// llama_cpu_block.cpp's block_backward op for op, each backward kernel from its op family's file
// (rmsnorm.cuh, swiglu.cuh, rope.cuh, the attention's over grouped kv heads). As GPT-2's step,
// the residual stream is kept as each block's input and x_mid, a sub-layer writing its output
// straight into the next buffer and adding the one before; what the Recompute setting does not
// keep the backward computes again with the forward's own functions (recompute.hpp's LLaMA
// table). The projections of one input share their input's gradient: the second and third add
// theirs in their GEMM (beta 1) rather than through a buffer and an add. No bias, no dropout, no
// position table (the rows' positions turn q and k, and dq and dk back).
#include "kernels/compute/llama/llama_gpu_train.hpp"

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/embedding.cuh"
#include "kernels/compute/residual.cuh"
#include "kernels/compute/rmsnorm.cuh"
#include "kernels/compute/rope.cuh"
#include "kernels/compute/rope_frequencies.hpp"
#include "kernels/compute/swiglu.cuh"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/llama/llama_tensors.hpp"

namespace sweetspot::llama {

namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

class LlamaGpuTrain final : public GpuTrainFamily<LlamaGpuTrain> {
public:
    LlamaGpuTrain(const ModelConfig& model_, const WeightLayout& layout_, DType dtype_, const BatchShape& shape_,
                  cudaStream_t stream_, const GpuTrainOptions& options_)
        : GpuTrainFamily(model_, layout_, dtype_, shape_, stream_, options_) {
        // The host's fp32 frequencies, the ones the CPU op reads, uploaded once (the rows'
        // positions the context uploaded); the host vector lives until the stream is synchronized.
        const std::vector<float> inv_freq =
            rope_inv_frequencies_f32(model.head_dim(), model.rope_theta, model.rope_scaling);
        CUDA_CHECK(cudaMemcpyAsync(frequencies(), inv_freq.data(), inv_freq.size() * sizeof(float),
                                   cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }

    int lm_head_tensor() const override { return head_tensor::lm_head; }
    std::array<std::string_view, 3> norm_names() const override { return {"attn_norm", "mlp_norm", "norm"}; }

private:
    friend GpuTrainFamily<LlamaGpuTrain>;

    float* frequencies() const { return at<float>(plan.frequencies); }

    // resid[0] = embed_tokens[tokens].
    template <class T>
    void forward_embedding(const T* unit, const UnitLayout& ul);
    // xf = norm(resid[L]).
    template <class T>
    void forward_final_norm(const T* head, const UnitLayout& ul);
    // The block's forward, x_out = x_mid + down(silu(gate(mlp_norm(x_mid))) · up(mlp_norm(x_mid)))
    // after x_mid = x_in + o_proj(attention(rope(q, k), v)) of attn_norm(x_in), in the pieces the
    // backward calls again for what the Recompute setting did not keep: the attention sub-layer
    // (attn_norm, the q, k and v projections into the packed qkv, the rotation, the attention,
    // o_proj into x_mid); the attention alone, from qkv (core_attention); the MLP's input
    // (mlp_norm, gate and up, SwiGLU).
    template <class T>
    void forward_block(int layer, const T* unit, const UnitLayout& ul);
    template <class T>
    void attention_sublayer(int layer, const T* unit, const UnitLayout& ul);
    template <class T>
    void mlp_input(int layer, const T* unit, const UnitLayout& ul);
    // out [rows, out_dim], rows ld_out apart (a part of the packed qkv rows) = in · wᵀ.
    template <class T>
    void project(T* out, std::int64_t ld_out, const T* in, const T* w, int in_dim, int out_dim);

    template <class T>
    void backward_final_norm(const T* head, T* grad, const UnitLayout& ul);
    template <class T>
    void backward_block(int layer, const T* unit, T* grad, const UnitLayout& ul);
    template <class T>
    void backward_embedding(T* grad, const UnitLayout& ul);
    // Of y [rows, out_dim] (rows ld_dy apart) = x [rows, in_dim] · wᵀ: dw = dyᵀ · x into the
    // zeroed gradient, and dx = dy · w, or dx += dy · w where `accumulate` (a second projection of
    // the same x).
    template <class T>
    void projection_backward(T* dx, T* dw, const T* dy, std::int64_t ld_dy, const T* x, const T* w, int in_dim,
                             int out_dim, bool accumulate);
    // dx += the RMSNorm's input gradient and dw += its weight's, from dout and its input `in`.
    template <class T>
    void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* in, const T* w);
};

template <class T>
void LlamaGpuTrain::forward_embedding(const T* unit, const UnitLayout& ul) {
    gpu::launch_embedding<T>(at<T>(plan.resid[0]), at<std::int32_t>(plan.tokens),
                             ul.tensor(unit, embed_tensor::tokens), nullptr, positions(), rows(), model.n_embd,
                             stream);
}

template <class T>
void LlamaGpuTrain::forward_final_norm(const T* head, const UnitLayout& ul) {
    gpu::launch_rmsnorm<T>(at<T>(plan.xf), at<T>(plan.resid[as_size(model.n_layer)]),
                           ul.tensor(head, head_tensor::norm), static_cast<int>(rows()), model.n_embd,
                           model.ln_eps, stream);
}

template <class T>
void LlamaGpuTrain::forward_block(int layer, const T* unit, const UnitLayout& ul) {
    const std::size_t l = as_size(layer);
    attention_sublayer<T>(layer, unit, ul);
    mlp_input<T>(layer, unit, ul);
    // x_out = x_mid + down(act), the sum written where the projection was.
    T* const out = at<T>(plan.resid[l + 1]);
    gemm->linear(out, at<T>(plan.fc[l]), ul.tensor(unit, block_tensor::down_w), static_cast<int>(rows()),
                 model.ffn_width(), model.n_embd);
    gpu::launch_residual_add<T>(out, at<T>(plan.x_mid[l]), rows() * model.n_embd, stream);
}

template <class T>
void LlamaGpuTrain::attention_sublayer(int layer, const T* unit, const UnitLayout& ul) {
    const auto w = [&](int t) { return ul.tensor(unit, t); };
    const int bt = static_cast<int>(rows()), c = model.n_embd, kv = heads.n_kv_head * heads.head_dim;
    const std::size_t l = as_size(layer);
    const T* x_in = at<T>(plan.resid[l]);
    T* const ln1 = at<T>(plan.ln1[l]);
    T* const qkv = at<T>(plan.qkv[l]);
    T* const x_mid = at<T>(plan.x_mid[l]);

    gpu::launch_rmsnorm<T>(ln1, x_in, w(block_tensor::attn_norm), bt, c, model.ln_eps, stream);
    project<T>(qkv + heads.q_col(0), heads.ld(), ln1, w(block_tensor::q_w), c, c);
    project<T>(qkv + heads.k_col(0), heads.ld(), ln1, w(block_tensor::k_w), c, kv);
    project<T>(qkv + heads.v_col(0), heads.ld(), ln1, w(block_tensor::v_w), c, kv);
    gpu::launch_rope<T>(qkv, positions(), frequencies(), bt, heads.n_head, heads.n_kv_head, heads.head_dim, stream);
    core_attention<T>(layer);
    // x_mid = x_in + att · Woᵀ, the sum written where the projection was.
    gemm->linear(x_mid, at<T>(plan.att[l]), w(block_tensor::o_w), bt, c, c);
    gpu::launch_residual_add<T>(x_mid, x_in, rows() * c, stream);
}

template <class T>
void LlamaGpuTrain::mlp_input(int layer, const T* unit, const UnitLayout& ul) {
    const auto w = [&](int t) { return ul.tensor(unit, t); };
    const int bt = static_cast<int>(rows()), c = model.n_embd, f = model.ffn_width();
    const std::size_t l = as_size(layer);
    T* const ln2 = at<T>(plan.ln2[l]);
    T* const gate = at<T>(plan.fc_pre[l]);
    T* const up = gate + rows() * f;

    gpu::launch_rmsnorm<T>(ln2, at<T>(plan.x_mid[l]), w(block_tensor::mlp_norm), bt, c, model.ln_eps, stream);
    gemm->linear(gate, ln2, w(block_tensor::gate_w), bt, c, f);
    gemm->linear(up, ln2, w(block_tensor::up_w), bt, c, f);
    gpu::launch_swiglu<T>(at<T>(plan.fc[l]), gate, up, rows() * f, stream);
}

template <class T>
void LlamaGpuTrain::project(T* out, std::int64_t ld_out, const T* in, const T* w, int in_dim, int out_dim) {
    gemm->batched(/*trans_b=*/true, static_cast<int>(rows()), out_dim, in_dim, 1.0f, in, in_dim, 0, w, in_dim, 0, 0.0f,
                  out, static_cast<int>(ld_out), 0, 1);
}

template <class T>
void LlamaGpuTrain::projection_backward(T* dx, T* dw, const T* dy, std::int64_t ld_dy, const T* x, const T* w,
                                        int in_dim, int out_dim, bool accumulate) {
    const int bt = static_cast<int>(rows()), ld = static_cast<int>(ld_dy);
    // dw [out, in] = dyᵀ [out, rows] · x [rows, in]; dx [rows, in] = dy [rows, out] · w [out, in].
    gemm->batched(/*trans_a=*/true, /*trans_b=*/false, out_dim, in_dim, bt, 1.0f, dy, ld, 0, x, in_dim, 0, 0.0f, dw,
                  in_dim, 0, 1);
    gemm->batched(/*trans_a=*/false, /*trans_b=*/false, bt, in_dim, out_dim, 1.0f, dy, ld, 0, w, in_dim, 0,
                  accumulate ? 1.0f : 0.0f, dx, in_dim, 0, 1);
}

template <class T>
void LlamaGpuTrain::rmsnorm_backward(T* dx, T* dw, const T* dout, const T* in, const T* w) {
    gpu::launch_rmsnorm_backward<T>(dx, dw, dout, in, w, static_cast<int>(rows()), model.n_embd, model.ln_eps,
                                    at<float>(plan.norm_scratch), stream);
}

template <class T>
void LlamaGpuTrain::backward_final_norm(const T* head, T* grad, const UnitLayout& ul) {
    rmsnorm_backward<T>(at<T>(plan.dres), ul.tensor(grad, head_tensor::norm), at<T>(plan.dln),
                        at<T>(plan.resid[as_size(model.n_layer)]), ul.tensor(head, head_tensor::norm));
}

// llama::block_backward (llama/llama_cpu_block.cpp), op for op.
template <class T>
void LlamaGpuTrain::backward_block(int layer, const T* unit, T* grad, const UnitLayout& ul) {
    const auto w = [&](int t) { return ul.tensor(unit, t); };
    const auto g = [&](int t) { return ul.tensor(grad, t); };
    const int c = model.n_embd, f = model.ffn_width(), kv = heads.n_kv_head * heads.head_dim;
    const std::size_t l = as_size(layer);
    T* const dres = at<T>(plan.dres);
    T* const dln = at<T>(plan.dln);
    // dgate and dup side by side in dfc, the activation's gradient first in dgate's place.
    T* const dgate = at<T>(plan.dfc);
    T* const dup = dgate + rows() * f;
    const T* gate = at<T>(plan.fc_pre[l]);
    const T* up = gate + rows() * f;
    T* const act = at<T>(plan.fc[l]);

    // What the backward reads and the forward did not keep (recompute.hpp), computed again by the
    // forward's own functions from what it kept, into buffers no other layer's backward needs.
    if (recompute == Recompute::block) attention_sublayer<T>(layer, unit, ul);
    else if (recompute >= Recompute::attention) core_attention<T>(layer);
    if (recompute >= Recompute::mlp) mlp_input<T>(layer, unit, ul);
    else if (recompute >= Recompute::gelu) gpu::launch_swiglu<T>(act, gate, up, rows() * f, stream);

    // x_out = x_mid + down(silu(gate) · up): the residual passes dres on, and the MLP's input
    // gradient, the sum of gate's and up's, adds to it through mlp_norm.
    projection_backward<T>(dgate, g(block_tensor::down_w), dres, c, act, w(block_tensor::down_w), f, c, false);
    gpu::launch_swiglu_backward<T>(dgate, dup, dgate, gate, up, rows() * f, stream);
    const T* ln2 = at<T>(plan.ln2[l]);
    projection_backward<T>(dln, g(block_tensor::gate_w), dgate, f, ln2, w(block_tensor::gate_w), c, f, false);
    projection_backward<T>(dln, g(block_tensor::up_w), dup, f, ln2, w(block_tensor::up_w), c, f, true);
    rmsnorm_backward<T>(dres, g(block_tensor::mlp_norm), dln, at<T>(plan.x_mid[l]), w(block_tensor::mlp_norm));

    // x_mid = x_in + o_proj(attention(rope(q, k), v)), q, k and v projected from attn_norm(x_in):
    // the rotation's backward turns dq and dk back, and the three projections' input gradients add.
    T* const datt = at<T>(plan.datt);
    T* const dqkv = at<T>(plan.dqkv);
    projection_backward<T>(datt, g(block_tensor::o_w), dres, c, at<T>(plan.att[l]), w(block_tensor::o_w), c, c, false);
    core_attention_backward<T>(layer, dqkv, datt);
    gpu::launch_rope_backward<T>(dqkv, positions(), frequencies(), static_cast<int>(rows()), heads.n_head,
                                 heads.n_kv_head, heads.head_dim, stream);
    const T* ln1 = at<T>(plan.ln1[l]);
    projection_backward<T>(dln, g(block_tensor::q_w), dqkv + heads.q_col(0), heads.ld(), ln1, w(block_tensor::q_w), c,
                           c, false);
    projection_backward<T>(dln, g(block_tensor::k_w), dqkv + heads.k_col(0), heads.ld(), ln1, w(block_tensor::k_w), c,
                           kv, true);
    projection_backward<T>(dln, g(block_tensor::v_w), dqkv + heads.v_col(0), heads.ld(), ln1, w(block_tensor::v_w), c,
                           kv, true);
    rmsnorm_backward<T>(dres, g(block_tensor::attn_norm), dln, at<T>(plan.resid[l]), w(block_tensor::attn_norm));
}

// The token table's rows take their tokens' gradients; there is no position table.
template <class T>
void LlamaGpuTrain::backward_embedding(T* grad, const UnitLayout& ul) {
    gpu::launch_embedding_backward<T>(ul.tensor(grad, embed_tensor::tokens), nullptr, at<T>(plan.dres),
                                      at<std::int32_t>(plan.tokens), positions(), rows(), model.n_embd,
                                      embedding_scratch_at(), stream);
}

}  // namespace

std::unique_ptr<GpuTrainContext> make_gpu_train(const ModelConfig& model, const WeightLayout& layout, DType dtype,
                                                const BatchShape& shape, cudaStream_t stream,
                                                const GpuTrainOptions& options) {
    return std::make_unique<LlamaGpuTrain>(model, layout, dtype, shape, stream, options);
}

}  // namespace sweetspot::llama
