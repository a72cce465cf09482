// The float64 reference's loss and gradients (kernels/compute/reference_gradients) against
// central differences of the loss computed from reference_forward's logits: nothing of the
// backward is used to compute what it is checked against. GPT-2's and LLaMA's (grouped-query
// attention with 1 kv head, 2 heads a group and none shared, Llama 3's rope scaling), of
// rectangular batches and ragged ones (the loss over the real tokens).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "kernels/compute/dropout.hpp"
#include "kernels/compute/reference_forward.hpp"
#include "kernels/compute/reference_gradients.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "kernels/model/weight_layout.hpp"

using namespace sweetspot;

namespace {

// Small enough that every parameter can be perturbed: 2 layers, head dimension 3 (odd), a
// vocabulary of 13.
ModelConfig small_model() { return {"grad_check", 2, 6, 2, 13, 8, 1e-5f}; }

struct Weights {
    std::vector<std::vector<float>> units;
    std::vector<const float*> pointers() const {
        std::vector<const float*> p;
        for (const auto& u : units) p.push_back(u.data());
        return p;
    }
};

Weights synthetic(const ModelConfig& m, const WeightLayout& layout, std::uint64_t seed) {
    Weights w;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        w.units.emplace_back(static_cast<std::size_t>(layout.units[u].numel));
        fill_synthetic_unit(m, layout, static_cast<int>(u), seed, w.units.back());
    }
    return w;
}

// LLaMA's synthetic RMSNorm weights are all 1, which would hide a backward that forgets them:
// each is moved to 1 ± up to 0.5, element by element.
Weights synthetic_llama(const ModelConfig& m, const WeightLayout& layout, std::uint64_t seed) {
    Weights w = synthetic(m, layout, seed);
    for (std::size_t u = 0; u < layout.units.size(); ++u)
        for (const TensorSpec& t : layout.units[u].tensors)
            if (t.shape.size() == 1)
                for (std::int64_t e = 0; e < t.numel; ++e)
                    w.units[u][static_cast<std::size_t>(t.offset + e)] = 1.0f + 0.5f * std::sin(1.7f * static_cast<float>(e + 3 * u));
    return w;
}

// A LLaMA small enough that every parameter can be perturbed: head dimension 4, `kv_heads` of its
// 4 heads, an MLP width of 20, a vocabulary of 11.
ModelConfig small_llama(int kv_heads) {
    return {"grad_check_llama", 2, 16, 4, 11, 8, 1e-5f, ModelFamily::llama, kv_heads, 20, 10000.0, {}};
}

// The central difference of the loss at element i of unit u, against the analytic gradient.
struct Perturbed {
    double numeric, error;
};

// Mean cross-entropy of the next tokens over the real rows of `shape`, from the float64 forward's
// logits.
double loss_from_logits(const ModelConfig& m, const WeightLayout& layout, const Weights& w,
                        const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& targets,
                        const BatchShape& shape, const Dropout& dropout) {
    const auto logits = reference_forward(m, layout, w.pointers(), tokens, shape, dropout);
    const auto vocab = static_cast<std::size_t>(m.vocab_size);
    double total = 0.0;
    for (std::size_t t = 0; t < tokens.size(); ++t) {
        if (!shape.is_real(static_cast<std::int64_t>(t))) continue;
        const double* z = &logits[t * vocab];
        double sum = 0.0;
        for (std::size_t v = 0; v < vocab; ++v) sum += std::exp(z[v]);
        total += std::log(sum) - z[static_cast<std::size_t>(targets[t])];
    }
    return total / static_cast<double>(shape.real_tokens());
}

// Perturbs element i of unit u by ±2^-16 (exact in fp32 at these magnitudes; the denominator is
// the difference of the stored values, so any rounding of them is counted) and compares the
// central difference of the float64 loss with `analytic`. Central differences err by O(step²)
// times the third derivative, which is large for what adds to the residual stream (embeddings,
// the projections' biases): a norm scales it by 1 / the row's deviation. Hence the small step.
Perturbed check_element(const ModelConfig& m, const WeightLayout& layout, Weights& w, std::size_t u, std::size_t i,
                        double analytic, const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& targets,
                        const BatchShape& shape, const Dropout& dropout) {
    const float original = w.units[u][i];
    const float up = original + 0x1p-16f, down = original - 0x1p-16f;
    w.units[u][i] = up;
    const double loss_up = loss_from_logits(m, layout, w, tokens, targets, shape, dropout);
    w.units[u][i] = down;
    const double loss_down = loss_from_logits(m, layout, w, tokens, targets, shape, dropout);
    w.units[u][i] = original;
    const double numeric = (loss_up - loss_down) / (static_cast<double>(up) - static_cast<double>(down));
    const double error = std::abs(analytic - numeric);
    CHECK(error <= 1e-7 + 1e-4 * std::abs(numeric));
    return {numeric, error};
}

// Tokens and targets of batch × seq that differ from each other and repeat some ids.
void make_ids(const ModelConfig& m, int batch, int seq, std::vector<std::int32_t>& tokens,
              std::vector<std::int32_t>& targets) {
    for (int i = 0; i < batch * seq; ++i) {
        tokens.push_back((i * 5 + 3) % m.vocab_size);
        targets.push_back((i * 7 + 1) % m.vocab_size);
    }
}

// A LLaMA's float64 gradients on its synthetic weights at batch × seq, their loss checked against
// the one from the logits.
struct LlamaCase {
    ModelConfig m;
    WeightLayout layout;
    int batch, seq;
    std::vector<std::int32_t> tokens, targets;
    Weights w;
    ReferenceGradients got;

    LlamaCase(const ModelConfig& model, int batch_size, int seq_len, std::uint64_t seed)
        : m(model), layout(WeightLayout::for_model(model)), batch(batch_size), seq(seq_len) {
        REQUIRE(m.validate().empty());
        make_ids(m, batch, seq, tokens, targets);
        w = synthetic_llama(m, layout, seed);
        got = reference_gradients(m, layout, w.pointers(), tokens, targets, batch, seq);
        const double loss = loss_from_logits(m, layout, w, tokens, targets, BatchShape::rectangular(batch, seq), {});
        CHECK(std::abs(got.loss - loss) < 1e-12);
        CHECK(loss > 1.0);  // about log vocab for small weights
    }
    // Element i of unit u against the central differences; returns the numeric gradient.
    double check(std::size_t u, std::size_t i) {
        return check_element(m, layout, w, u, i, got.units[u][i], tokens, targets, BatchShape::rectangular(batch, seq),
                             {})
            .numeric;
    }
};

}  // namespace

TEST_CASE("the float64 reference's gradients are the central differences of its loss, for every parameter",
          "[kernels][gradients]") {
    const ModelConfig m = small_model();
    REQUIRE(m.validate().empty());
    const auto layout = WeightLayout::for_model(m);
    const int batch = 2, seq = 5;
    std::vector<std::int32_t> tokens, targets;
    make_ids(m, batch, seq, tokens, targets);
    for (const float p : {0.0f, 0.1f}) {
        INFO("dropout " << p);
        const Dropout dropout{p, 11};
        Weights w = synthetic(m, layout, 42);
        const auto got = reference_gradients(m, layout, w.pointers(), tokens, targets, batch, seq, dropout);
        const BatchShape shape = BatchShape::rectangular(batch, seq);
        const double loss = loss_from_logits(m, layout, w, tokens, targets, shape, dropout);
        CHECK(std::abs(got.loss - loss) < 1e-12);
        CHECK(loss > 1.0);  // not degenerate: about log 13 for small weights
        REQUIRE(got.units.size() == layout.units.size());

        double worst = 0.0, largest = 0.0;
        std::size_t checked = 0;
        for (std::size_t u = 0; u < layout.units.size(); ++u) {
            REQUIRE(got.units[u].size() == w.units[u].size());
            for (const TensorSpec& tensor : layout.units[u].tensors) {
                for (std::int64_t e = 0; e < tensor.numel; ++e) {
                    const auto i = static_cast<std::size_t>(tensor.offset + e);
                    INFO(tensor.name << "[" << e << "]: analytic " << got.units[u][i]);
                    const Perturbed p = check_element(m, layout, w, u, i, got.units[u][i], tokens, targets, shape, dropout);
                    worst = std::max(worst, p.error);
                    largest = std::max(largest, std::abs(p.numeric));
                    ++checked;
                }
            }
        }
        INFO("worst error " << worst << " over " << checked << " parameters, largest gradient " << largest);
        CHECK(checked == static_cast<std::size_t>(n_params(m)));
        CHECK(largest > 1e-3);  // the gradients are not all zero
    }
}

// Each sequence at its own positions from 0, its padding rows' tokens and targets other than the
// real ones' (so that counting them would show): the loss differentiated is the mean over the real
// tokens, from reference_forward's logits of the shape, which shares nothing with the backward.
TEST_CASE("a ragged batch's float64 gradients, padded and packed, are the central differences of its loss over the "
          "real tokens, for every parameter", "[kernels][gradients][ragged]") {
    const std::vector<int> lengths = {3, 1, 5};
    for (const ModelConfig& m : {small_model(), small_llama(2)}) {
        const auto layout = WeightLayout::for_model(m);
        Weights w = m.family == ModelFamily::llama ? synthetic_llama(m, layout, 42) : synthetic(m, layout, 42);
        for (const BatchShape& shape :
             {BatchShape::ragged(lengths, Packing::packed), BatchShape::ragged(lengths, Packing::padded, 6)}) {
            INFO(m.name << ", " << enum_name(shape.packing()));
            std::vector<std::int32_t> tokens(static_cast<std::size_t>(shape.rows()), 4), targets(tokens.size(), 9);
            for (int b = 0; b < shape.batch(); ++b)
                for (int t = 0; t < shape.length(b); ++t) {
                    const auto r = static_cast<std::size_t>(shape.first_row(b) + t);
                    tokens[r] = (b * 5 + t * 3 + 1) % m.vocab_size;
                    targets[r] = (b * 7 + t * 2 + 3) % m.vocab_size;
                }
            const auto got = reference_gradients(m, layout, w.pointers(), tokens, targets, shape);
            CHECK(std::abs(got.loss - loss_from_logits(m, layout, w, tokens, targets, shape, {})) < 1e-12);
            double largest = 0.0;
            std::size_t checked = 0;
            for (std::size_t u = 0; u < layout.units.size(); ++u) {
                for (const TensorSpec& tensor : layout.units[u].tensors) {
                    for (std::int64_t e = 0; e < tensor.numel; ++e) {
                        const auto i = static_cast<std::size_t>(tensor.offset + e);
                        INFO(tensor.name << "[" << e << "]: analytic " << got.units[u][i]);
                        const Perturbed p =
                            check_element(m, layout, w, u, i, got.units[u][i], tokens, targets, shape, {});
                        largest = std::max(largest, std::abs(p.numeric));
                        ++checked;
                    }
                }
            }
            CHECK(checked == static_cast<std::size_t>(n_params(m)));
            CHECK(largest > 1e-3);
        }
    }
}

TEST_CASE("the float64 reference's gradients refuse targets that do not fit", "[kernels][gradients]") {
    const ModelConfig m = small_model();
    const auto layout = WeightLayout::for_model(m);
    const Weights w = synthetic(m, layout, 42);
    const std::vector<std::int32_t> tokens{1, 2, 3}, short_targets{1, 2}, outside{1, 2, 13};
    CHECK_THROWS_AS(reference_gradients(m, layout, w.pointers(), tokens, short_targets, 1, 3), std::invalid_argument);
    CHECK_THROWS_AS(reference_gradients(m, layout, w.pointers(), tokens, outside, 1, 3), std::invalid_argument);
}

TEST_CASE("LLaMA's float64 gradients are the central differences of its loss, for every parameter, with 1, 2 and 4 "
          "kv heads", "[kernels][gradients][llama]") {
    for (const int kv_heads : {4, 2, 1}) {
        INFO(kv_heads << " kv heads");
        LlamaCase c(small_llama(kv_heads), 2, 5, 42);
        double largest = 0.0;
        std::size_t checked = 0;
        for (std::size_t u = 0; u < c.layout.units.size(); ++u) {
            for (const TensorSpec& tensor : c.layout.units[u].tensors) {
                for (std::int64_t e = 0; e < tensor.numel; ++e) {
                    const auto i = static_cast<std::size_t>(tensor.offset + e);
                    INFO(tensor.name << "[" << e << "]: analytic " << c.got.units[u][i]);
                    largest = std::max(largest, std::abs(c.check(u, i)));
                    ++checked;
                }
            }
        }
        CHECK(checked == static_cast<std::size_t>(n_params(c.m)));
        CHECK(largest > 1e-3);
    }
}

TEST_CASE("tiny_llama's and tiny_llama_odd's float64 gradients are the central differences of their loss, sampled "
          "in every tensor", "[kernels][gradients][llama]") {
    for (const char* name : {"tiny_llama", "tiny_llama_odd"}) {
        INFO(name);
        LlamaCase c(*find_builtin_model(name), 2, 7, 7);
        for (std::size_t u = 0; u < c.layout.units.size(); ++u) {
            for (const TensorSpec& tensor : c.layout.units[u].tensors) {
                // Seven elements spread over the tensor; of the token table, seven of a token's row
                // (the others' gradients are 0).
                const std::int64_t first = u == 0 ? std::int64_t{c.tokens[3]} * c.m.n_embd : 0;
                const std::int64_t span = u == 0 ? c.m.n_embd : tensor.numel;
                for (std::int64_t k = 0; k < 7; ++k) {
                    const std::int64_t e = first + k * (span - 1) / 6;
                    const auto i = static_cast<std::size_t>(tensor.offset + e);
                    INFO(tensor.name << "[" << e << "]: analytic " << c.got.units[u][i]);
                    c.check(u, i);
                }
            }
        }
    }
}

TEST_CASE("LLaMA's float64 gradients refuse dropout, which the family does not have", "[kernels][gradients][llama]") {
    const ModelConfig m = small_llama(2);
    const auto layout = WeightLayout::for_model(m);
    const Weights w = synthetic_llama(m, layout, 42);
    const std::vector<std::int32_t> tokens{1, 2, 3}, targets{2, 3, 4};
    CHECK_THROWS_AS(reference_gradients(m, layout, w.pointers(), tokens, targets, 1, 3, Dropout{0.1f, 1}),
                    std::invalid_argument);
    CHECK_THROWS_AS(reference_gradients_by_unit(m, layout, w.pointers(), tokens, targets, Dropout{0.1f, 1},
                                                [](int, std::span<const double>) {}),
                    std::invalid_argument);
}
