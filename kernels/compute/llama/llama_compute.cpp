#include "kernels/compute/llama/llama_compute.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/reference_ops.hpp"
#include "kernels/compute/rope_frequencies.hpp"
#include "kernels/model/llama/llama_tensors.hpp"

namespace sweetspot::llama {

namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

const float* tensor_ptr(const float* unit, const UnitLayout& unit_layout, int tensor) {
    return unit + unit_layout.tensors[as_size(tensor)].offset;
}

// The packed qkv row's width: n_head q heads, then n_kv_head k heads, then as many v heads.
int qkv_width(const ModelConfig& m) { return (m.n_head + 2 * m.kv_heads()) * m.head_dim(); }

class CpuLlamaForward final : public CpuFamilyForward {
public:
    CpuLlamaForward(const ModelConfig& model, int batch, int seq)
        : model_(model), batch_(batch), seq_(seq),
          inv_freq_(rope_inv_frequencies_f32(model.head_dim(), model.rope_theta, model.rope_scaling)) {
        const std::size_t bt = as_size(batch) * as_size(seq);
        const std::size_t c = as_size(model.n_embd), f = as_size(model.ffn_width());
        x_.resize(bt * c);
        ln_.resize(bt * c);
        projection_.resize(bt * c);
        qkv_.resize(bt * as_size(qkv_width(model)));
        att_.resize(bt * c);
        y_.resize(bt * c);
        gate_.resize(bt * f);
        up_.resize(bt * f);
        scores_.resize(as_size(seq) * as_size(seq));
        // Every sequence of a rectangular batch starts at position 0.
        positions_.resize(bt);
        for (std::size_t r = 0; r < bt; ++r) positions_[r] = static_cast<std::int32_t>(r % as_size(seq));
    }

    // x[r, :] = embed_tokens[token r]: no position table, positions enter through the rotation.
    void embed(const float* unit, const UnitLayout& u, std::span<const std::int32_t> tokens) override {
        const std::size_t c = as_size(model_.n_embd);
        const float* table = tensor_ptr(unit, u, embed_tensor::tokens);
        for (std::size_t r = 0; r < tokens.size(); ++r)
            std::memcpy(x_.data() + r * c, table + as_size(tokens[r]) * c, c * sizeof(float));
    }

    void block(int, const float* unit, const UnitLayout& u) override {
        const auto w = [&](int tensor) { return tensor_ptr(unit, u, tensor); };
        const int bt = batch_ * seq_, c = model_.n_embd, f = model_.ffn_width();
        const int hd = model_.head_dim(), kv = model_.kv_heads() * hd, width = qkv_width(model_);
        const std::int64_t elems = static_cast<std::int64_t>(bt) * c;

        cpu::rmsnorm(ln_.data(), x_.data(), w(block_tensor::attn_norm), bt, c, model_.ln_eps);
        // q, k and v side by side in each row, the layout rope and the attention read.
        const auto project_into_qkv = [&](int tensor, int out, int column) {
            cpu::linear(projection_.data(), ln_.data(), w(tensor), nullptr, bt, c, out);
            for (std::size_t r = 0; r < as_size(bt); ++r)
                std::copy_n(projection_.data() + r * as_size(out), out, qkv_.data() + r * as_size(width) + column);
        };
        project_into_qkv(block_tensor::q_w, c, 0);
        project_into_qkv(block_tensor::k_w, kv, c);
        project_into_qkv(block_tensor::v_w, kv, c + kv);
        cpu::rope(qkv_.data(), positions_.data(), inv_freq_.data(), bt, model_.n_head, model_.kv_heads(), hd);
        cpu::grouped_attention(att_.data(), scores_.data(), qkv_.data(), batch_, seq_, model_.n_head,
                               model_.kv_heads(), hd);
        cpu::linear(y_.data(), att_.data(), w(block_tensor::o_w), nullptr, bt, c, c);
        cpu::residual_add(x_.data(), y_.data(), elems);

        cpu::rmsnorm(ln_.data(), x_.data(), w(block_tensor::mlp_norm), bt, c, model_.ln_eps);
        cpu::linear(gate_.data(), ln_.data(), w(block_tensor::gate_w), nullptr, bt, c, f);
        cpu::linear(up_.data(), ln_.data(), w(block_tensor::up_w), nullptr, bt, c, f);
        cpu::swiglu(gate_.data(), gate_.data(), up_.data(), static_cast<std::int64_t>(bt) * f);
        cpu::linear(y_.data(), gate_.data(), w(block_tensor::down_w), nullptr, bt, f, c);
        cpu::residual_add(x_.data(), y_.data(), elems);
    }

    void head(const float* unit, const UnitLayout& u, std::span<float> logits) override {
        const int bt = batch_ * seq_, c = model_.n_embd;
        cpu::rmsnorm(ln_.data(), x_.data(), tensor_ptr(unit, u, head_tensor::norm), bt, c, model_.ln_eps);
        cpu::linear(logits.data(), ln_.data(), tensor_ptr(unit, u, head_tensor::lm_head), nullptr, bt, c,
                    model_.vocab_size);
    }

    std::int64_t activation_bytes() const override {
        const std::size_t floats = x_.size() + ln_.size() + projection_.size() + qkv_.size() + att_.size() +
                                   y_.size() + gate_.size() + up_.size() + scores_.size() + inv_freq_.size();
        return static_cast<std::int64_t>(floats * sizeof(float) + positions_.size() * sizeof(std::int32_t));
    }

private:
    ModelConfig model_;
    int batch_, seq_;
    std::vector<float> inv_freq_;
    std::vector<std::int32_t> positions_;
    std::vector<float> x_, ln_, projection_, qkv_, att_, y_, gate_, up_, scores_;
};

std::unique_ptr<CpuFamilyForward> cpu_forward(const ModelConfig& model, int batch, int seq, const Dropout&) {
    return std::make_unique<CpuLlamaForward>(model, batch, seq);
}

std::int64_t cpu_activation_bytes(const ModelConfig& model, int batch, int seq) {
    // Per token: x, ln, the projection scratch, att and y of n_embd, the packed qkv, gate and up
    // of the MLP's width, a position; one head's scores and the frequencies.
    const std::size_t bt = as_size(batch) * as_size(seq);
    const std::size_t per_token = 5 * as_size(model.n_embd) + as_size(qkv_width(model)) + 2 * as_size(model.ffn_width());
    const std::size_t floats = bt * per_token + as_size(seq) * as_size(seq) + as_size(model.head_dim() / 2);
    return static_cast<std::int64_t>(floats * sizeof(float) + bt * sizeof(std::int32_t));
}

// Deliberately naive, as GPT-2's: plain loops in double (reference_ops), the frequencies in double.
std::vector<double> reference_sequence(const ModelConfig& m, const WeightLayout& layout,
                                       std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                       const Dropout&, std::size_t) {
    using namespace reference;
    const std::size_t seq = tokens.size(), c = as_size(m.n_embd), f = as_size(m.ffn_width());
    const QkvHeads heads{as_size(m.n_head), as_size(m.kv_heads()), as_size(m.head_dim())};
    const std::size_t kv = heads.n_kv_head * heads.head_dim, width = c + 2 * kv;
    const std::vector<double> inv_freq = rope_inv_frequencies(m.head_dim(), m.rope_theta, m.rope_scaling);
    std::vector<std::int32_t> positions(seq);
    for (std::size_t t = 0; t < seq; ++t) positions[t] = static_cast<std::int32_t>(t);

    const TensorView table = tensor_of(units[0], layout.units[0], embed_tensor::tokens);
    Rows x(seq * c);
    for (std::size_t t = 0; t < seq; ++t)
        for (std::size_t i = 0; i < c; ++i) x[t * c + i] = table[as_size(tokens[t]) * c + i];
    const auto add = [](Rows& to, const Rows& from) {
        for (std::size_t i = 0; i < to.size(); ++i) to[i] += from[i];
    };
    for (int l = 0; l < m.n_layer; ++l) {
        const auto u = as_size(WeightLayout::block_unit(l));
        const auto w = [&](int tensor) { return tensor_of(units[u], layout.units[u], tensor); };
        const Rows h = rms_norm(x, c, w(block_tensor::attn_norm), m.ln_eps);
        const Rows q = dense(h, c, c, w(block_tensor::q_w), nullptr);
        const Rows k = dense(h, c, kv, w(block_tensor::k_w), nullptr);
        const Rows v = dense(h, c, kv, w(block_tensor::v_w), nullptr);
        Rows qkv(seq * width);
        for (std::size_t t = 0; t < seq; ++t) {
            std::copy_n(q.begin() + static_cast<std::ptrdiff_t>(t * c), c, qkv.begin() + static_cast<std::ptrdiff_t>(t * width));
            std::copy_n(k.begin() + static_cast<std::ptrdiff_t>(t * kv), kv, qkv.begin() + static_cast<std::ptrdiff_t>(t * width + c));
            std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(t * kv), kv, qkv.begin() + static_cast<std::ptrdiff_t>(t * width + c + kv));
        }
        const Rows att = grouped_causal_attention(rope(qkv, positions, heads, inv_freq), heads);
        add(x, dense(att, c, c, w(block_tensor::o_w), nullptr));
        const Rows h2 = rms_norm(x, c, w(block_tensor::mlp_norm), m.ln_eps);
        const Rows mixed = swiglu(dense(h2, c, f, w(block_tensor::gate_w), nullptr), dense(h2, c, f, w(block_tensor::up_w), nullptr));
        add(x, dense(mixed, f, c, w(block_tensor::down_w), nullptr));
    }
    const auto hu = as_size(layout.head_unit());
    const Rows xf = rms_norm(x, c, tensor_of(units[hu], layout.units[hu], head_tensor::norm), m.ln_eps);
    return dense(xf, c, as_size(m.vocab_size), tensor_of(units[hu], layout.units[hu], head_tensor::lm_head), nullptr);
}

double reference_macs(const ModelConfig& m, int batch, int seq) {
    const double c = m.n_embd, kv = static_cast<double>(m.kv_heads()) * m.head_dim(), f = m.ffn_width();
    const double tokens = static_cast<double>(batch) * seq;
    // Linear layers per token and layer: q and o c² each, k and v c·kv each, gate, up and down c·f each.
    const double linear = tokens * m.n_layer * (2.0 * c * c + 2.0 * c * kv + 3.0 * c * f);
    const double attention = static_cast<double>(batch) * m.n_layer * seq * (seq + 1.0) * c;
    return linear + attention + tokens * m.vocab_size * c;
}

}  // namespace

const FamilyCompute& compute() {
    static constexpr FamilyCompute entry = {
        .cpu_forward = cpu_forward,
        .cpu_activation_bytes = cpu_activation_bytes,
        .reference_sequence = reference_sequence,
        .reference_macs = reference_macs,
        .no_gpu_forward = {},
        .no_training = "the llama family's training step is not built yet",
        // Its GPU blocks (llama_gpu_forward.cu) take the attention's fusions over grouped kv heads
        // and o_proj's residual add in its GEMM; residual_ln and mlp_epilogue are GPT-2's kernels
        // (LayerNorm; bias and GELU), with no RMSNorm or SwiGLU form built.
        .gpu_fusions = Variant{Fusion::softmax, Fusion::flash_attention, Fusion::proj_epilogue},
        .gpu_required = {},
        .dropout = false,
    };
    return entry;
}

}  // namespace sweetspot::llama
