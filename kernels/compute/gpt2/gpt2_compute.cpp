#include "kernels/compute/gpt2/gpt2_compute.hpp"

#include "kernels/compute/cpu_block.hpp"
#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/reference_ops.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"

namespace sweetspot::gpt2 {

namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

const float* tensor_ptr(const float* unit, const UnitLayout& unit_layout, int tensor) {
    return unit + unit_layout.tensors[as_size(tensor)].offset;
}

class CpuGpt2Forward final : public CpuFamilyForward {
public:
    CpuGpt2Forward(const ModelConfig& model, int batch, int seq, const Dropout& dropout)
        : model_(model), batch_(batch), seq_(seq), dropout_(dropout) {
        const std::size_t bt = as_size(batch) * as_size(seq);
        const std::size_t c = as_size(model.n_embd);
        x_.resize(bt * c);
        ln_.resize(bt * c);
        qkv_.resize(bt * 3 * c);
        att_.resize(bt * c);
        y_.resize(bt * c);
        fc_.resize(bt * 4 * c);
        scores_.resize(as_size(seq) * as_size(seq));
    }

    // x[b, t, :] = wte[token] + wpe[t]
    void embed(const float* unit, const UnitLayout& u, std::span<const std::int32_t> tokens) override {
        cpu::embedding(x_.data(), tokens.data(), tensor_ptr(unit, u, embed_tensor::wte),
                       tensor_ptr(unit, u, embed_tensor::wpe), batch_, seq_, model_.n_embd);
        cpu::dropout_rows(x_.data(), static_cast<std::int64_t>(batch_) * seq_, model_.n_embd, dropout_,
                          Dropout::site_word(DropoutSite::embedding, 0));
    }

    // Pre-LN block (cpu_block.hpp): one ln_ buffer for both LayerNorms, GELU in fc_ in place.
    void block(int layer, const float* unit, const UnitLayout& unit_layout) override {
        const cpu::BlockActivations a{.ln1 = ln_.data(), .qkv = qkv_.data(), .att = att_.data(), .y = y_.data(),
                                      .x_mid = nullptr, .ln2 = ln_.data(), .fc_pre = nullptr, .fc = fc_.data(),
                                      .scores = scores_.data()};
        cpu::block_forward(x_.data(), a, unit, unit_layout,
                           {batch_, seq_, model_.n_embd, model_.n_head, model_.ln_eps, dropout_, layer});
    }

    // logits = ln_f(x) · lm_headᵀ, written straight into the caller's buffer.
    void head(const float* unit, const UnitLayout& u, std::span<float> logits) override {
        const int bt = batch_ * seq_;
        const int c = model_.n_embd;
        cpu::layernorm(ln_.data(), x_.data(), tensor_ptr(unit, u, head_tensor::lnf_w),
                       tensor_ptr(unit, u, head_tensor::lnf_b), bt, c, model_.ln_eps);
        cpu::linear(logits.data(), ln_.data(), tensor_ptr(unit, u, head_tensor::lm_head), nullptr, bt, c,
                    model_.vocab_size);
    }

    std::int64_t activation_bytes() const override {
        const std::size_t floats =
            x_.size() + ln_.size() + qkv_.size() + att_.size() + y_.size() + fc_.size() + scores_.size();
        return static_cast<std::int64_t>(floats * sizeof(float));
    }

private:
    ModelConfig model_;
    int batch_, seq_;
    Dropout dropout_;
    std::vector<float> x_, ln_, qkv_, att_, y_, fc_, scores_;
};

std::unique_ptr<CpuFamilyForward> cpu_forward(const ModelConfig& model, int batch, int seq, const Dropout& dropout) {
    return std::make_unique<CpuGpt2Forward>(model, batch, seq, dropout);
}

std::int64_t cpu_activation_bytes(const ModelConfig& model, int batch, int seq) {
    // x, ln, att and y of n_embd, qkv of 3 · n_embd and fc of 4 · n_embd per token; one head's scores.
    const std::size_t bt = as_size(batch) * as_size(seq);
    const std::size_t floats = bt * 11 * as_size(model.n_embd) + as_size(seq) * as_size(seq);
    return static_cast<std::int64_t>(floats * sizeof(float));
}

// Deliberately naive: every product a plain loop in double (reference_ops), nothing shared with
// the host forward, so an error in one is not repeated in the other.
std::vector<double> reference_sequence(const ModelConfig& m, const WeightLayout& layout,
                                       std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                       const Dropout& dropout, std::size_t sequence) {
    using namespace reference;
    Dims d = dims_of(m, dropout);
    d.sequence = sequence;
    Rows x = embed(tokens, units[0], layout.units[0], d);
    for (int l = 0; l < m.n_layer; ++l) {
        const auto u = static_cast<std::size_t>(WeightLayout::block_unit(l));
        block_forward(x, d, l, units[u], layout.units[u], nullptr);
    }
    const auto hu = static_cast<std::size_t>(layout.head_unit());
    const float* head = units[hu];
    const UnitLayout& hl = layout.units[hu];
    const Rows xf = layer_norm(x, d.c, tensor_of(head, hl, head_tensor::lnf_w), tensor_of(head, hl, head_tensor::lnf_b), d.eps);
    return dense(xf, d.c, d.vocab, tensor_of(head, hl, head_tensor::lm_head), nullptr);
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

}  // namespace

const FamilyCompute& compute() {
    static constexpr FamilyCompute entry = {
        .cpu_forward = cpu_forward,
        .cpu_activation_bytes = cpu_activation_bytes,
        .reference_sequence = reference_sequence,
        .reference_macs = reference_macs,
        .no_gpu_forward = {},
        .no_training = {},
        .gpu_fusions = kEveryFusion,
        .gpu_required = {},
        .dropout = true,
    };
    return entry;
}

}  // namespace sweetspot::gpt2
