#include "kernels/compute/llama/llama_compute.hpp"

#include <algorithm>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/llama/llama_cpu_block.hpp"
#include "kernels/compute/llama/llama_reference.hpp"
#include "kernels/model/llama/llama_tensors.hpp"

namespace sweetspot::llama {

namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

class CpuLlamaForward final : public CpuFamilyForward {
public:
    CpuLlamaForward(const ModelConfig& model, const BatchShape& shape)
        : model_(model), shape_(shape), rotary_(model, shape) {
        const std::size_t bt = as_size(shape.rows());
        const std::size_t c = as_size(model.n_embd), f = as_size(model.ffn_width());
        x_.resize(bt * c);
        ln_.resize(bt * c);
        projection_.resize(bt * c);
        qkv_.resize(bt * as_size(qkv_width(model)));
        att_.resize(bt * c);
        y_.resize(bt * c);
        gate_.resize(bt * f);
        up_.resize(bt * f);
        scores_.resize(as_size(shape.stride()) * as_size(shape.stride()));
    }

    // x[r, :] = embed_tokens[token r]: no position table, positions enter through the rotation.
    void embed(const float* unit, const UnitLayout& u, std::span<const std::int32_t> tokens) override {
        cpu::embedding(x_.data(), tokens.data(), u.tensor(unit, embed_tensor::tokens), nullptr,
                       rotary_.positions.data(), shape_.rows(), model_.n_embd);
    }

    // One ln_ buffer for both RMSNorms, SwiGLU in gate_ in place (llama_cpu_block.hpp).
    void block(int, const float* unit, const UnitLayout& u) override {
        const BlockActivations a{.ln1 = ln_.data(), .projection = projection_.data(), .qkv = qkv_.data(),
                                 .att = att_.data(), .y = y_.data(), .x_mid = nullptr, .ln2 = ln_.data(),
                                 .gate = gate_.data(), .up = up_.data(), .act = gate_.data(), .scores = scores_.data()};
        block_forward(x_.data(), a, unit, u, {shape_, model_, rotary_});
    }

    void head(const float* unit, const UnitLayout& u, std::span<float> logits) override {
        const int bt = static_cast<int>(shape_.rows()), c = model_.n_embd;
        cpu::rmsnorm(ln_.data(), x_.data(), u.tensor(unit, head_tensor::norm), bt, c, model_.ln_eps);
        cpu::linear(logits.data(), ln_.data(), u.tensor(unit, head_tensor::lm_head), nullptr, bt, c,
                    model_.vocab_size);
    }

    std::int64_t activation_bytes() const override {
        const std::size_t floats = x_.size() + ln_.size() + projection_.size() + qkv_.size() + att_.size() +
                                   y_.size() + gate_.size() + up_.size() + scores_.size();
        return static_cast<std::int64_t>(floats * sizeof(float)) + rotary_.bytes();
    }

private:
    ModelConfig model_;
    BatchShape shape_;
    RotaryTables rotary_;
    std::vector<float> x_, ln_, projection_, qkv_, att_, y_, gate_, up_, scores_;
};

std::unique_ptr<CpuFamilyForward> cpu_forward(const ModelConfig& model, const BatchShape& shape, const Dropout&) {
    return std::make_unique<CpuLlamaForward>(model, shape);
}

std::int64_t cpu_activation_bytes(const ModelConfig& model, const BatchShape& shape) {
    // Per row: x, ln, the projection scratch, att and y of n_embd, the packed qkv, gate and up
    // of the MLP's width, a position; one head's scores and the frequencies.
    const std::size_t bt = as_size(shape.rows()), s = as_size(shape.stride());
    const std::size_t per_token = 5 * as_size(model.n_embd) + as_size(qkv_width(model)) + 2 * as_size(model.ffn_width());
    const std::size_t floats = bt * per_token + s * s + as_size(model.head_dim() / 2);
    return static_cast<std::int64_t>(floats * sizeof(float) + bt * sizeof(std::int32_t));
}

// The training step's forward and backward: each block's activations kept, the backward's
// scratch shared by the blocks.
class CpuLlamaBackprop final : public CpuFamilyBackprop {
public:
    CpuLlamaBackprop(const ModelConfig& model, const BatchShape& shape)
        : model_(model), shape_(shape), rotary_(model, shape_), scratch_(model, shape) {
        const std::size_t bt = as_size(shape.rows()), c = as_size(model.n_embd);
        for (int l = 0; l < model.n_layer; ++l) kept_.emplace_back(model, bt);
        for (auto* v : {&x_, &y_, &projection_, &xf_, &dxf_, &dx_}) v->resize(bt * c);
        scores_.resize(as_size(shape.stride()) * as_size(shape.stride()));
    }

    void embed(const float* unit, const UnitLayout& u, std::span<const std::int32_t> tokens) override {
        cpu::embedding(x_.data(), tokens.data(), u.tensor(unit, embed_tensor::tokens), nullptr,
                       rotary_.positions.data(), shape_.rows(), model_.n_embd);
    }

    void block(int layer, const float* unit, const UnitLayout& u) override {
        KeptBlock& k = kept_[as_size(layer)];
        std::copy(x_.begin(), x_.end(), k.x_in.begin());
        block_forward(x_.data(), activations(k), unit, u, {shape_, model_, rotary_});
    }

    void head(const float* unit, const UnitLayout& u, std::span<float> logits) override {
        cpu::rmsnorm(xf_.data(), x_.data(), u.tensor(unit, head_tensor::norm), rows(), model_.n_embd,
                     model_.ln_eps);
        cpu::linear(logits.data(), xf_.data(), u.tensor(unit, head_tensor::lm_head), nullptr, rows(),
                    model_.n_embd, model_.vocab_size);
    }

    void head_backward(const float* unit, const UnitLayout& u, std::span<const float> dlogits, float* grad) override {
        const auto g = [&](int tensor) { return u.tensor(grad, tensor); };
        std::fill(dx_.begin(), dx_.end(), 0.0f);
        cpu::linear_backward(dxf_.data(), g(head_tensor::lm_head), nullptr, dlogits.data(), xf_.data(),
                             u.tensor(unit, head_tensor::lm_head), rows(), model_.n_embd, model_.vocab_size);
        cpu::rmsnorm_backward(dx_.data(), g(head_tensor::norm), dxf_.data(), x_.data(),
                              u.tensor(unit, head_tensor::norm), rows(), model_.n_embd, model_.ln_eps);
    }

    void block_backward(int layer, const float* unit, const UnitLayout& u, float* grad) override {
        KeptBlock& k = kept_[as_size(layer)];
        llama::block_backward(dx_.data(), grad, k.x_in.data(), activations(k), unit, u,
                              {shape_, model_, rotary_}, scratch_);
    }

    // The token table's rows take their tokens' gradients; there is no position table.
    void embed_backward(const UnitLayout& u, std::span<const std::int32_t> tokens, float* grad) override {
        cpu::embedding_backward(u.tensor(grad, embed_tensor::tokens), nullptr, dx_.data(), tokens.data(),
                                rotary_.positions.data(), shape_.rows(), model_.n_embd);
    }

    std::int64_t buffer_bytes() const override {
        std::size_t floats = 0;
        for (const auto* v : {&x_, &y_, &projection_, &xf_, &dxf_, &dx_, &scores_}) floats += v->size();
        for (const KeptBlock& k : kept_)
            for (const auto* v : {&k.x_in, &k.ln1, &k.qkv, &k.att, &k.x_mid, &k.ln2, &k.gate, &k.up, &k.act})
                floats += v->size();
        return static_cast<std::int64_t>(floats * sizeof(float)) + rotary_.bytes() + scratch_.bytes();
    }

private:
    // One block's kept activations: its input and what its backward reads.
    struct KeptBlock {
        std::vector<float> x_in, ln1, qkv, att, x_mid, ln2, gate, up, act;
        KeptBlock(const ModelConfig& m, std::size_t bt) {
            const std::size_t c = as_size(m.n_embd), f = as_size(m.ffn_width());
            for (auto* v : {&x_in, &ln1, &att, &x_mid, &ln2}) v->resize(bt * c);
            qkv.resize(bt * as_size(qkv_width(m)));
            for (auto* v : {&gate, &up, &act}) v->resize(bt * f);
        }
    };

    BlockActivations activations(KeptBlock& k) {
        return {.ln1 = k.ln1.data(), .projection = projection_.data(), .qkv = k.qkv.data(), .att = k.att.data(),
                .y = y_.data(), .x_mid = k.x_mid.data(), .ln2 = k.ln2.data(), .gate = k.gate.data(),
                .up = k.up.data(), .act = k.act.data(), .scores = scores_.data()};
    }
    int rows() const { return static_cast<int>(shape_.rows()); }

    ModelConfig model_;
    BatchShape shape_;
    RotaryTables rotary_;
    std::vector<KeptBlock> kept_;
    std::vector<float> x_, y_, projection_, xf_, dxf_, dx_, scores_;
    BlockGradScratch scratch_;
};

std::unique_ptr<CpuFamilyBackprop> cpu_backprop(const ModelConfig& model, const BatchShape& shape, const Dropout&) {
    return std::make_unique<CpuLlamaBackprop>(model, shape);
}

std::int64_t cpu_backprop_bytes(const ModelConfig& model, const BatchShape& shape) {
    const std::size_t bt = as_size(shape.rows()), c = as_size(model.n_embd), s = as_size(shape.stride());
    const std::size_t f = as_size(model.ffn_width()), width = as_size(qkv_width(model));
    // Per block and row: x_in, ln1, att, x_mid, ln2 of c, the packed qkv, gate, up and act of f.
    const std::size_t kept = as_size(model.n_layer) * bt * (5 * c + width + 3 * f);
    // x, y, the projection scratch, xf, dxf, dx [bt, c]; the scores [stride, stride].
    const std::size_t activations = 6 * bt * c + s * s;
    // BlockGradScratch: dln, dln_part, datt, dprojection [bt, c]; dqkv; dact, dgate, dup [bt, f];
    // probs, grad [stride, stride].
    const std::size_t scratch = bt * (4 * c + width + 3 * f) + 2 * s * s;
    // RotaryTables: a position per row, the frequencies.
    const std::size_t rotary = bt * sizeof(std::int32_t) + as_size(model.head_dim() / 2) * sizeof(float);
    return static_cast<std::int64_t>((kept + activations + scratch) * sizeof(float) + rotary);
}

double reference_macs(const ModelConfig& m, int batch, int seq) {
    const double c = m.n_embd, kv = static_cast<double>(m.kv_heads()) * m.head_dim(), f = m.ffn_width();
    const double tokens = static_cast<double>(batch) * seq;
    // Linear layers per token and layer: q and o c² each, k and v c·kv each, gate, up and down c·f each.
    const double linear = tokens * m.n_layer * (2.0 * c * c + 2.0 * c * kv + 3.0 * c * f);
    const double attention = static_cast<double>(batch) * m.n_layer * seq * (seq + 1.0) * c;
    return linear + attention + tokens * m.vocab_size * c;
}

// RMSNorms with a weight alone, and no bias anywhere.
gpu::FamilyTrainScratch gpu_train_scratch(const ModelConfig& model, int rows) {
    return {.norm_floats = gpu::rmsnorm_backward_scratch_floats(rows, model.n_embd), .bias_floats = 0};
}

}  // namespace

const FamilyCompute& compute() {
    static constexpr FamilyCompute entry = {
        .cpu_forward = cpu_forward,
        .cpu_activation_bytes = cpu_activation_bytes,
        .reference_sequence = reference_sequence,
        .reference_macs = reference_macs,
        .cpu_backprop = cpu_backprop,
        .cpu_backprop_bytes = cpu_backprop_bytes,
        .reference_sequence_gradients = reference_sequence_gradients,
        .no_gpu_forward = {},
        .no_gpu_training = {},
        // Its GPU blocks (llama_gpu_forward.cu) take the attention's fusions over grouped kv heads
        // and o_proj's residual add in its GEMM; residual_ln and mlp_epilogue are GPT-2's kernels
        // (LayerNorm; bias and GELU), with no RMSNorm or SwiGLU form built.
        .gpu_fusions = Variant{Fusion::softmax, Fusion::flash_attention, Fusion::proj_epilogue},
        .gpu_required = {},
        // Its GPU training step (llama_gpu_train.cu) takes the flash attention over grouped kv
        // heads (its backward from the kept logsumexp). proj_epilogue's forward adds o_proj's
        // product onto the residual stream in place, and the step keeps the stream before and
        // after the attention apart (x_in, x_mid): no bias-free residual epilogue is built for
        // it. mlp_epilogue, inplace_ln and inplace_gelu are GPT-2's bias, GELU and LayerNorm
        // kernels.
        .gpu_training_fusions = Variant{Fusion::flash_attention},
        .gpu_train_scratch = gpu_train_scratch,
        .dropout = false,
    };
    return entry;
}

}  // namespace sweetspot::llama
