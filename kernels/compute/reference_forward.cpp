#include "kernels/compute/reference_forward.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

// Deliberately naive: one sequence at a time, every product a plain loop in double, nothing
// shared with CpuForward, so an error in one is not repeated in the other.
namespace sweetspot {

namespace {

using Rows = std::vector<double>;  // row-major [rows, width]

// Reads one tensor of a unit as doubles, element by element.
struct TensorView {
    const float* data;
    double operator[](std::size_t i) const { return static_cast<double>(data[i]); }
};

TensorView tensor_of(const float* unit, const UnitLayout& unit_layout, int tensor) {
    return {unit + unit_layout.tensors[static_cast<std::size_t>(tensor)].offset};
}

// The model's dimensions as unsigned sizes, for indexing without casts, and where in the batch
// the sequence being computed sits (dropout masks are indexed over the whole batch).
struct Dims {
    std::size_t c, n_head, hd, vocab;
    double eps;
    Dropout dropout;
    std::size_t sequence = 0;
};

Dims dims_of(const ModelConfig& m, const Dropout& dropout) {
    return {static_cast<std::size_t>(m.n_embd), static_cast<std::size_t>(m.n_head),
            static_cast<std::size_t>(m.head_dim()), static_cast<std::size_t>(m.vocab_size), m.ln_eps, dropout};
}

// The dropout factor of element i of a [seq, c] tensor of the current sequence at `site`.
double row_dropout(const Dims& d, std::size_t seq, std::uint32_t site, std::size_t i) {
    return d.dropout.row_factor(site, d.sequence * seq + i / d.c, d.c, i % d.c);
}

Rows layer_norm(const Rows& x, std::size_t width, TensorView gamma, TensorView beta, double eps) {
    Rows y(x.size());
    for (std::size_t r = 0; r < x.size() / width; ++r) {
        const double* in = &x[r * width];
        double* out = &y[r * width];
        double mean = 0.0;
        for (std::size_t i = 0; i < width; ++i) mean += in[i];
        mean /= static_cast<double>(width);
        double var = 0.0;
        for (std::size_t i = 0; i < width; ++i) var += (in[i] - mean) * (in[i] - mean);
        var /= static_cast<double>(width);
        for (std::size_t i = 0; i < width; ++i) out[i] = (in[i] - mean) / std::sqrt(var + eps) * gamma[i] + beta[i];
    }
    return y;
}

// y[r, o] = Σ_i x[r, i] · w[o, i] (+ b[o]); w is [out_dim, in_dim].
Rows dense(const Rows& x, std::size_t in_dim, std::size_t out_dim, TensorView w, const TensorView* b) {
    const std::size_t rows = x.size() / in_dim;
    Rows y(rows * out_dim);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t o = 0; o < out_dim; ++o) {
            double acc = b != nullptr ? (*b)[o] : 0.0;
            for (std::size_t i = 0; i < in_dim; ++i) acc += x[r * in_dim + i] * w[o * in_dim + i];
            y[r * out_dim + o] = acc;
        }
    }
    return y;
}

// qkv: [seq, 3c] with q | k | v in each row, head h at columns h·hd of each. Returns [seq, c].
Rows causal_self_attention(const Rows& qkv, const Dims& d, std::uint32_t probs_site) {
    const std::size_t seq = qkv.size() / (3 * d.c);
    const auto q = [&](std::size_t t, std::size_t col) { return qkv[t * 3 * d.c + col]; };
    const auto k = [&](std::size_t t, std::size_t col) { return qkv[t * 3 * d.c + d.c + col]; };
    const auto v = [&](std::size_t t, std::size_t col) { return qkv[t * 3 * d.c + 2 * d.c + col]; };
    Rows out(seq * d.c, 0.0);
    std::vector<double> weight(seq);
    for (std::size_t h = 0; h < d.n_head; ++h) {
        const std::size_t col0 = h * d.hd;
        for (std::size_t t = 0; t < seq; ++t) {
            double max_score = -INFINITY;
            for (std::size_t s = 0; s <= t; ++s) {
                double dot = 0.0;
                for (std::size_t i = 0; i < d.hd; ++i) dot += q(t, col0 + i) * k(s, col0 + i);
                weight[s] = dot / std::sqrt(static_cast<double>(d.hd));
                if (weight[s] > max_score) max_score = weight[s];
            }
            double total = 0.0;
            for (std::size_t s = 0; s <= t; ++s) {
                weight[s] = std::exp(weight[s] - max_score);
                total += weight[s];
            }
            // Attention dropout on the probabilities [batch, head, t, s].
            const std::uint64_t row = (d.sequence * d.n_head + h) * seq + t;
            for (std::size_t s = 0; s <= t; ++s) weight[s] *= d.dropout.probability_factor(probs_site, row, s);
            for (std::size_t i = 0; i < d.hd; ++i) {
                double acc = 0.0;
                for (std::size_t s = 0; s <= t; ++s) acc += weight[s] / total * v(s, col0 + i);
                out[t * d.c + col0 + i] = acc;
            }
        }
    }
    return out;
}

double gelu_tanh(double x) {
    const double pi = 3.14159265358979323846;
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

void transformer_block(Rows& x, const Dims& d, int layer, const float* unit, const UnitLayout& ul) {
    const std::size_t seq = x.size() / d.c;
    const auto t = [&](int tensor) { return tensor_of(unit, ul, tensor); };
    const TensorView qkv_b = t(block_tensor::qkv_b), proj_b = t(block_tensor::proj_b);
    const TensorView fc_b = t(block_tensor::fc_b), fc_proj_b = t(block_tensor::fc_proj_b);

    const Rows h1 = layer_norm(x, d.c, t(block_tensor::ln1_w), t(block_tensor::ln1_b), d.eps);
    const Rows qkv = dense(h1, d.c, 3 * d.c, t(block_tensor::qkv_w), &qkv_b);
    const Rows attn = causal_self_attention(qkv, d, Dropout::site_word(DropoutSite::attention_probs, layer));
    const Rows proj = dense(attn, d.c, d.c, t(block_tensor::proj_w), &proj_b);
    const std::uint32_t attn_site = Dropout::site_word(DropoutSite::attention_residual, layer);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += proj[i] * row_dropout(d, seq, attn_site, i);

    const Rows h2 = layer_norm(x, d.c, t(block_tensor::ln2_w), t(block_tensor::ln2_b), d.eps);
    Rows fc = dense(h2, d.c, 4 * d.c, t(block_tensor::fc_w), &fc_b);
    for (double& a : fc) a = gelu_tanh(a);
    const Rows mlp = dense(fc, 4 * d.c, d.c, t(block_tensor::fc_proj_w), &fc_proj_b);
    const std::uint32_t mlp_site = Dropout::site_word(DropoutSite::mlp_residual, layer);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += mlp[i] * row_dropout(d, seq, mlp_site, i);
}

// Logits [seq, vocab] of one sequence.
Rows forward_one_sequence(const ModelConfig& m, const WeightLayout& layout, std::span<const float* const> units,
                          std::span<const std::int32_t> tokens, const Dims& d) {
    const TensorView wte = tensor_of(units[0], layout.units[0], embed_tensor::wte);
    const TensorView wpe = tensor_of(units[0], layout.units[0], embed_tensor::wpe);
    Rows x(tokens.size() * d.c);
    for (std::size_t t = 0; t < tokens.size(); ++t) {
        const auto tok = static_cast<std::size_t>(tokens[t]);
        for (std::size_t i = 0; i < d.c; ++i) x[t * d.c + i] = wte[tok * d.c + i] + wpe[t * d.c + i];
    }
    const std::uint32_t embedding_site = Dropout::site_word(DropoutSite::embedding, 0);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] *= row_dropout(d, tokens.size(), embedding_site, i);

    for (int l = 0; l < m.n_layer; ++l) {
        const auto u = static_cast<std::size_t>(WeightLayout::block_unit(l));
        transformer_block(x, d, l, units[u], layout.units[u]);
    }

    const auto hu = static_cast<std::size_t>(layout.head_unit());
    const float* head = units[hu];
    const UnitLayout& hl = layout.units[hu];
    const Rows xf =
        layer_norm(x, d.c, tensor_of(head, hl, head_tensor::lnf_w), tensor_of(head, hl, head_tensor::lnf_b), d.eps);
    return dense(xf, d.c, d.vocab, tensor_of(head, hl, head_tensor::lm_head), nullptr);
}

void check_arguments(const ModelConfig& m, const WeightLayout& layout, std::span<const float* const> units,
                     std::span<const std::int32_t> tokens, int batch, int seq) {
    const auto fail = [](const std::string& why) { throw std::invalid_argument("reference_forward: " + why); };
    if (const auto why = m.validate(); !why.empty()) fail(why);
    if (layout.units.size() != static_cast<std::size_t>(m.n_layer) + 2) fail("the layout does not match the model.");
    if (units.size() != layout.units.size()) {
        fail("expected " + std::to_string(layout.units.size()) + " unit pointers, got " + std::to_string(units.size()) +
             ".");
    }
    if (batch < 1 || seq < 1 || seq > m.max_positions) {
        fail("batch " + std::to_string(batch) + " × seq " + std::to_string(seq) + " is not a valid shape for model '" +
             m.name + "'.");
    }
    if (tokens.size() != static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq)) {
        fail("expected batch × seq tokens, got " + std::to_string(tokens.size()) + ".");
    }
    for (const std::int32_t tok : tokens) {
        if (tok < 0 || tok >= m.vocab_size) fail("token " + std::to_string(tok) + " is outside the vocabulary.");
    }
}

}  // namespace

std::vector<double> reference_forward(const ModelConfig& model, const WeightLayout& layout,
                                      std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                      int batch, int seq, const Dropout& dropout) {
    check_arguments(model, layout, units, tokens, batch, seq);
    Dims d = dims_of(model, dropout.for_shape(seq, model.max_positions));
    const auto seq_len = static_cast<std::size_t>(seq);
    std::vector<double> logits;
    logits.reserve(tokens.size() * static_cast<std::size_t>(model.vocab_size));
    for (std::size_t b = 0; b < static_cast<std::size_t>(batch); ++b) {
        d.sequence = b;
        const Rows out = forward_one_sequence(model, layout, units, tokens.subspan(b * seq_len, seq_len), d);
        logits.insert(logits.end(), out.begin(), out.end());
    }
    return logits;
}

double reference_forward_macs(const ModelConfig& model, int batch, int seq) {
    const double c = model.n_embd;
    const double tokens = static_cast<double>(batch) * seq;
    // Linear layers: qkv 3c², proj c², fc 4c², fc_proj 4c² per token and layer.
    const double linear = tokens * model.n_layer * 12.0 * c * c;
    // Attention: position t scores and mixes t + 1 positions over all heads, twice (QKᵀ, ·V).
    const double attention = static_cast<double>(batch) * model.n_layer * seq * (seq + 1.0) * c;
    const double lm_head = tokens * model.vocab_size * c;
    return linear + attention + lm_head;
}

}  // namespace sweetspot
