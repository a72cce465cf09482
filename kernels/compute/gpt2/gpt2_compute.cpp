#include "kernels/compute/gpt2/gpt2_compute.hpp"

#include <algorithm>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/gpt2/gpt2_cpu_block.hpp"
#include "kernels/compute/gpt2/gpt2_reference.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"

namespace sweetspot::gpt2 {

namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

class CpuGpt2Forward final : public CpuFamilyForward {
public:
    CpuGpt2Forward(const ModelConfig& model, const BatchShape& shape, const Dropout& dropout)
        : model_(model), shape_(shape), dropout_(dropout) {
        const std::size_t bt = as_size(shape.rows());
        const std::size_t c = as_size(model.n_embd);
        x_.resize(bt * c);
        ln_.resize(bt * c);
        qkv_.resize(bt * 3 * c);
        att_.resize(bt * c);
        y_.resize(bt * c);
        fc_.resize(bt * 4 * c);
        scores_.resize(as_size(shape.stride()) * as_size(shape.stride()));
    }

    // x[r, :] = wte[token r] + wpe[position r], each sequence's positions from 0.
    void embed(const float* unit, const UnitLayout& u, std::span<const std::int32_t> tokens) override {
        cpu::embedding(x_.data(), tokens.data(), u.tensor(unit, embed_tensor::wte),
                       u.tensor(unit, embed_tensor::wpe), shape_.positions().data(), shape_.rows(),
                       model_.n_embd);
        cpu::dropout_rows(x_.data(), shape_.rows(), model_.n_embd, dropout_,
                          Dropout::site_word(DropoutSite::embedding, 0));
    }

    // Pre-LN block (gpt2_cpu_block.hpp): one ln_ buffer for both LayerNorms, GELU in fc_ in place.
    void block(int layer, const float* unit, const UnitLayout& unit_layout) override {
        const BlockActivations a{.ln1 = ln_.data(), .qkv = qkv_.data(), .att = att_.data(), .y = y_.data(),
                                      .x_mid = nullptr, .ln2 = ln_.data(), .fc_pre = nullptr, .fc = fc_.data(),
                                      .scores = scores_.data()};
        block_forward(x_.data(), a, unit, unit_layout,
                           {shape_, model_.n_embd, model_.n_head, model_.ln_eps, dropout_, layer});
    }

    // logits = ln_f(x) · lm_headᵀ, written straight into the caller's buffer.
    void head(const float* unit, const UnitLayout& u, std::span<float> logits) override {
        const int bt = static_cast<int>(shape_.rows());
        const int c = model_.n_embd;
        cpu::layernorm(ln_.data(), x_.data(), u.tensor(unit, head_tensor::lnf_w),
                       u.tensor(unit, head_tensor::lnf_b), bt, c, model_.ln_eps);
        cpu::linear(logits.data(), ln_.data(), u.tensor(unit, head_tensor::lm_head), nullptr, bt, c,
                    model_.vocab_size);
    }

    std::int64_t activation_bytes() const override {
        const std::size_t floats =
            x_.size() + ln_.size() + qkv_.size() + att_.size() + y_.size() + fc_.size() + scores_.size();
        return static_cast<std::int64_t>(floats * sizeof(float));
    }

private:
    ModelConfig model_;
    BatchShape shape_;
    Dropout dropout_;
    std::vector<float> x_, ln_, qkv_, att_, y_, fc_, scores_;
};

std::unique_ptr<CpuFamilyForward> cpu_forward(const ModelConfig& model, const BatchShape& shape,
                                              const Dropout& dropout) {
    return std::make_unique<CpuGpt2Forward>(model, shape, dropout);
}

std::int64_t cpu_activation_bytes(const ModelConfig& model, const BatchShape& shape) {
    // x, ln, att and y of n_embd, qkv of 3 · n_embd and fc of 4 · n_embd per row; one head's scores.
    const std::size_t bt = as_size(shape.rows()), s = as_size(shape.stride());
    const std::size_t floats = bt * 11 * as_size(model.n_embd) + s * s;
    return static_cast<std::int64_t>(floats * sizeof(float));
}

// The training step's forward and backward: each block's activations kept, the backward's
// scratch shared by the blocks.
class CpuGpt2Backprop final : public CpuFamilyBackprop {
public:
    CpuGpt2Backprop(const ModelConfig& model, const BatchShape& shape, const Dropout& dropout)
        : model_(model), shape_(shape), dropout_(dropout), scratch_(shape, model.n_embd) {
        const std::size_t bt = as_size(shape.rows()), c = as_size(model.n_embd);
        for (int l = 0; l < model.n_layer; ++l) kept_.emplace_back(bt, c);
        x_.resize(bt * c);
        y_.resize(bt * c);
        xf_.resize(bt * c);
        dxf_.resize(bt * c);
        dx_.resize(bt * c);
        scores_.resize(as_size(shape.stride()) * as_size(shape.stride()));
    }

    void embed(const float* unit, const UnitLayout& u, std::span<const std::int32_t> tokens) override {
        cpu::embedding(x_.data(), tokens.data(), u.tensor(unit, embed_tensor::wte),
                       u.tensor(unit, embed_tensor::wpe), shape_.positions().data(), shape_.rows(),
                       model_.n_embd);
        cpu::dropout_rows(x_.data(), rows(), model_.n_embd, dropout_, Dropout::site_word(DropoutSite::embedding, 0));
    }

    void block(int layer, const float* unit, const UnitLayout& u) override {
        KeptBlock& k = kept_[as_size(layer)];
        std::copy(x_.begin(), x_.end(), k.x_in.begin());
        block_forward(x_.data(), k.activations(y_.data(), scores_.data()), unit, u, block_shape(layer));
    }

    void head(const float* unit, const UnitLayout& u, std::span<float> logits) override {
        cpu::layernorm(xf_.data(), x_.data(), u.tensor(unit, head_tensor::lnf_w),
                       u.tensor(unit, head_tensor::lnf_b), rows(), model_.n_embd, model_.ln_eps);
        cpu::linear(logits.data(), xf_.data(), u.tensor(unit, head_tensor::lm_head), nullptr, rows(),
                    model_.n_embd, model_.vocab_size);
    }

    void head_backward(const float* unit, const UnitLayout& u, std::span<const float> dlogits, float* grad) override {
        const auto g = [&](int tensor) { return u.tensor(grad, tensor); };
        std::fill(dx_.begin(), dx_.end(), 0.0f);
        cpu::linear_backward(dxf_.data(), g(head_tensor::lm_head), nullptr, dlogits.data(), xf_.data(),
                             u.tensor(unit, head_tensor::lm_head), rows(), model_.n_embd, model_.vocab_size);
        cpu::layernorm_backward(dx_.data(), g(head_tensor::lnf_w), g(head_tensor::lnf_b), dxf_.data(), x_.data(),
                                u.tensor(unit, head_tensor::lnf_w), rows(), model_.n_embd, model_.ln_eps);
    }

    void block_backward(int layer, const float* unit, const UnitLayout& u, float* grad) override {
        KeptBlock& k = kept_[as_size(layer)];
        gpt2::block_backward(dx_.data(), grad, k.x_in.data(), k.activations(y_.data(), scores_.data()), unit, u,
                             block_shape(layer), scratch_);
    }

    void embed_backward(const UnitLayout& u, std::span<const std::int32_t> tokens, float* grad) override {
        cpu::dropout_rows(dx_.data(), rows(), model_.n_embd, dropout_, Dropout::site_word(DropoutSite::embedding, 0));
        cpu::embedding_backward(u.tensor(grad, embed_tensor::wte), u.tensor(grad, embed_tensor::wpe),
                                dx_.data(), tokens.data(), shape_.positions().data(), shape_.rows(), model_.n_embd);
    }

    std::int64_t buffer_bytes() const override {
        std::size_t floats = x_.size() + y_.size() + xf_.size() + dxf_.size() + dx_.size() + scores_.size();
        for (const KeptBlock& k : kept_)
            floats += k.x_in.size() + k.ln1.size() + k.qkv.size() + k.att.size() + k.x_mid.size() + k.ln2.size() +
                      k.fc_pre.size() + k.fc.size();
        for (const auto* v : {&scratch_.dy, &scratch_.dln, &scratch_.datt, &scratch_.dqkv, &scratch_.dfc,
                              &scratch_.probs, &scratch_.grad})
            floats += v->size();
        return static_cast<std::int64_t>(floats * sizeof(float));
    }

private:
    // One block's kept activations: its input and what its backward reads.
    struct KeptBlock {
        std::vector<float> x_in, ln1, qkv, att, x_mid, ln2, fc_pre, fc;
        KeptBlock(std::size_t bt, std::size_t c)
            : x_in(bt * c), ln1(bt * c), qkv(bt * 3 * c), att(bt * c), x_mid(bt * c), ln2(bt * c),
              fc_pre(bt * 4 * c), fc(bt * 4 * c) {}
        BlockActivations activations(float* y, float* scores) {
            return {.ln1 = ln1.data(), .qkv = qkv.data(), .att = att.data(), .y = y, .x_mid = x_mid.data(),
                    .ln2 = ln2.data(), .fc_pre = fc_pre.data(), .fc = fc.data(), .scores = scores};
        }
    };

    int rows() const { return static_cast<int>(shape_.rows()); }
    BlockShape block_shape(int layer) const {
        return {shape_, model_.n_embd, model_.n_head, model_.ln_eps, dropout_, layer};
    }

    ModelConfig model_;
    BatchShape shape_;
    Dropout dropout_;
    std::vector<KeptBlock> kept_;
    std::vector<float> x_, y_, xf_, dxf_, dx_, scores_;
    BlockGradScratch scratch_;
};

std::unique_ptr<CpuFamilyBackprop> cpu_backprop(const ModelConfig& model, const BatchShape& shape,
                                                const Dropout& dropout) {
    return std::make_unique<CpuGpt2Backprop>(model, shape, dropout);
}

std::int64_t cpu_backprop_bytes(const ModelConfig& model, const BatchShape& shape) {
    const std::size_t bt = as_size(shape.rows()), c = as_size(model.n_embd), s = as_size(shape.stride());
    // Per block and row: x_in, ln1, att, x_mid, ln2 of c, qkv 3c, fc_pre and fc 4c each.
    const std::size_t kept = as_size(model.n_layer) * bt * 16 * c;
    // x, y, xf, dxf, dx [bt, c]; the scores [stride, stride].
    const std::size_t activations = 5 * bt * c + s * s;
    // BlockGradScratch: dy, dln, datt [bt, c]; dqkv [bt, 3c]; dfc [bt, 4c]; probs, grad [stride, stride].
    const std::size_t scratch = bt * 10 * c + 2 * s * s;
    return static_cast<std::int64_t>((kept + activations + scratch) * sizeof(float));
}

double reference_macs(const ModelConfig& model, int batch, int seq) {
    const double c = model.n_embd;
    const double tokens = static_cast<double>(batch) * seq;
    // Linear layers: qkv 3c², proj c², fc 4c², fc_proj 4c² per token and layer.
    const double linear = tokens * model.n_layer * 12.0 * c * c;
    // Attention: position t scores and mixes t + 1 positions over all heads, twice (QKᵀ, ·V).
    const double attention = static_cast<double>(batch) * model.n_layer * seq * (seq + 1.0) * c;
    const double lm_head = tokens * model.vocab_size * c;
    return linear + attention + lm_head;
}

// LayerNorms with weights and biases; the widest bias is the MLP's first (4C).
gpu::FamilyTrainScratch gpu_train_scratch(const ModelConfig& model, int rows) {
    const int c = model.n_embd;
    std::int64_t bias_floats = 0;
    for (const int width : {c, 3 * c, 4 * c})
        bias_floats = std::max(bias_floats, gpu::bias_backward_scratch_floats(rows, width));
    return {.norm_floats = gpu::layernorm_backward_scratch_floats(rows, c), .bias_floats = bias_floats};
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
        .gpu_fusions = kEveryFusion,
        .gpu_required = {},
        .gpu_training_fusions = kTrainingFusions,
        .gpu_train_scratch = gpu_train_scratch,
        .dropout = true,
    };
    return entry;
}

}  // namespace sweetspot::gpt2
