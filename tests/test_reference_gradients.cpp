// The float64 reference's loss and gradients (kernels/compute/reference_gradients) against
// central differences of the loss computed from reference_forward's logits: nothing of the
// backward is used to compute what it is checked against.
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

// Mean cross-entropy of the next tokens, from the float64 forward's logits.
double loss_from_logits(const ModelConfig& m, const WeightLayout& layout, const Weights& w,
                        const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& targets, int batch,
                        int seq, const Dropout& dropout) {
    const auto logits = reference_forward(m, layout, w.pointers(), tokens, batch, seq, dropout);
    const auto vocab = static_cast<std::size_t>(m.vocab_size);
    double total = 0.0;
    for (std::size_t t = 0; t < tokens.size(); ++t) {
        const double* z = &logits[t * vocab];
        double sum = 0.0;
        for (std::size_t v = 0; v < vocab; ++v) sum += std::exp(z[v]);
        total += std::log(sum) - z[static_cast<std::size_t>(targets[t])];
    }
    return total / static_cast<double>(tokens.size());
}

}  // namespace

TEST_CASE("the float64 reference's gradients are the central differences of its loss, for every parameter",
          "[kernels][gradients]") {
    const ModelConfig m = small_model();
    REQUIRE(m.validate().empty());
    const auto layout = WeightLayout::for_model(m);
    const int batch = 2, seq = 5;
    std::vector<std::int32_t> tokens, targets;
    for (int i = 0; i < batch * seq; ++i) {
        tokens.push_back((i * 5 + 3) % m.vocab_size);
        targets.push_back((i * 7 + 1) % m.vocab_size);
    }
    for (const float p : {0.0f, 0.1f}) {
        INFO("dropout " << p);
        const Dropout dropout{p, 11};
        Weights w = synthetic(m, layout, 42);
        const auto got = reference_gradients(m, layout, w.pointers(), tokens, targets, batch, seq, dropout);
        const double loss = loss_from_logits(m, layout, w, tokens, targets, batch, seq, dropout);
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
                    const float original = w.units[u][i];
                    // A step of 2^-16, exact in fp32 at these magnitudes; the denominator is the
                    // difference of the stored values, so any rounding of them is counted.
                    const float up = original + 0x1p-16f, down = original - 0x1p-16f;
                    w.units[u][i] = up;
                    const double loss_up = loss_from_logits(m, layout, w, tokens, targets, batch, seq, dropout);
                    w.units[u][i] = down;
                    const double loss_down = loss_from_logits(m, layout, w, tokens, targets, batch, seq, dropout);
                    w.units[u][i] = original;
                    const double numeric = (loss_up - loss_down) / (static_cast<double>(up) - static_cast<double>(down));
                    const double error = std::abs(got.units[u][i] - numeric);
                    INFO(tensor.name << "[" << e << "]: analytic " << got.units[u][i] << ", numeric " << numeric);
                    // Central differences err by O(step²) times the third derivative, which is large for
                    // what adds to the residual stream (embeddings, the projections' biases): LayerNorm
                    // scales it by 1 / its deviation. Hence the small step.
                    CHECK(error <= 1e-7 + 1e-4 * std::abs(numeric));
                    worst = std::max(worst, error);
                    largest = std::max(largest, std::abs(numeric));
                    ++checked;
                }
            }
        }
        INFO("worst error " << worst << " over " << checked << " parameters, largest gradient " << largest);
        CHECK(checked == static_cast<std::size_t>(n_params(m)));
        CHECK(largest > 1e-3);  // the gradients are not all zero
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
