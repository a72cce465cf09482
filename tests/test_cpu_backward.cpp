// The fp32 host backward ops (kernels/compute/cpu_ops) against the float64 reference's
// (kernels/compute/reference_ops, itself checked against finite differences and PyTorch) on
// random inputs of odd sizes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "backends/host_backend.hpp"
#include "kernels/compute/cpu_gradients.hpp"
#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/cpu_train_step.hpp"
#include "kernels/compute/gelu_from_output.hpp"
#include "kernels/compute/layernorm_recovery.hpp"
#include "kernels/compute/reference_gradients.hpp"
#include "kernels/compute/reference_optimizer.hpp"
#include "kernels/compute/reference_ops.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "kernels/model/weight_layout.hpp"
#include "host_op_support.hpp"

using namespace sweetspot;

namespace {

using test::as_double;
using test::random_values;
using test::relative_error;

std::size_t as_size(int n) { return static_cast<std::size_t>(n); }

}  // namespace

TEST_CASE("host layernorm_backward adds the reference's gradients", "[kernels][backward]") {
    const int rows = 5, c = 37;
    const float eps = 1e-5f;
    const auto x = random_values(rows * c, 0.7f, 1), w = random_values(c, 1.0f, 2), dout = random_values(rows * c, 0.0f, 3);
    // The outputs start non-zero: the op adds (a residual's gradient, the weights' over a batch).
    const auto dx0 = random_values(rows * c, 0.0f, 4), dw0 = random_values(c, 0.0f, 5), db0 = random_values(c, 0.0f, 6);
    auto dx = dx0, dw = dw0, db = db0;
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), rows, c, eps);

    auto want_dw = as_double(dw0), want_db = as_double(db0);
    const auto want_in = reference::layer_norm_backward(as_double(x), as_double(dout), c, reference::TensorView{w.data()},
                                                        eps, want_dw.data(), want_db.data());
    std::vector<double> want_dx(dx0.size());
    for (std::size_t i = 0; i < dx0.size(); ++i) want_dx[i] = dx0[i] + want_in[i];
    CHECK(relative_error(dx, want_dx) < 1e-5);
    CHECK(relative_error(dw, want_dw) < 1e-5);
    CHECK(relative_error(db, want_db) < 1e-5);
}

// inplace_ln's backward (from the output y, kept in the dtype, and the forward's fp32 rstd)
// against layernorm_backward's (from the input x) on the same rows, element by element, within
// the bound y's rounding gives (layernorm_recovery.hpp). Both compute in fp32 from the same mean
// and rstd (row_stats), so x̂ = fl(fl(x − mean) · rstd) is the same on both sides until the
// forward's y = fl(fl(x̂ · w) + b) is rounded to the dtype (relative error δ, |δ| ≤ u: 2^-8 bf16,
// 2^-11 fp16, 0 for fp32, which y already is) and x̂' = fl(fl(ỹ − b) / w) recovered from it:
//   |x̂' − x̂| ≤ ε = (u·|ỹ|·(1 + u) + 2^-24·(|x̂·w| + |ỹ| + 2·(|ỹ| + |b|))·(1 + 2^-20)) / |w|,
// fp32's roundings being the forward's two, the subtraction and the division. With e = x̂' − x̂:
// - db does not involve x̂: equal bit for bit.
// - dw_j = Σ_r dy·x̂ (R rows in order): moves by ≤ Σ_r |dy|·ε, plus each side's fp32 sum
//   ((R + 1)·2^-24 · Σ_r |dy|·|x̂|, x̂ the larger of the two).
// - dx_i = rstd·(g_i − mean(g) − x̂_i·M), g = dy·w, M = mean(g·x̂): mean(g) is the same bits;
//   M moves by ΔM ≤ mean(|g|·ε) + 2·(c + 1)·2^-24·mean(|g|·|x̂|); x̂_i·M by ε_i·|M| + |x̂_i|·ΔM;
//   each side then rounds the two subtractions and the products: 4·2^-24·rstd·(|g_i| + |mean(g)|
//   + |x̂_i·M|) each.
TEST_CASE("layernorm_backward_from_output matches layernorm_backward within the bound of y's rounding",
          "[kernels][backward]") {
    const double fp32_u = std::ldexp(1.0, -24);
    const int rows = 5;
    const float eps = 1e-5f;
    for (const DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
        const double u = dtype == DType::fp32 ? 0.0 : std::ldexp(1.0, dtype == DType::fp16 ? -11 : -8);
        for (const int c : {1600, 777, 33}) {
            INFO(enum_name(dtype) << " c " << c);
            std::mt19937 gen(static_cast<std::uint32_t>(c));
            std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
            // x's mean far from 0; w of either sign, |w| in [0.2, 1.5]; b and dy of either sign.
            std::vector<float> x(as_size(rows * c)), w(as_size(c)), b(as_size(c)), dy(x.size());
            for (float& v : x) v = 1.5f + 2.0f * uniform(gen);
            for (float& v : w) v = std::copysign(0.85f + 0.65f * uniform(gen), uniform(gen));
            for (float& v : b) v = 0.5f * uniform(gen);
            for (float& v : dy) v = uniform(gen);
            std::vector<float> y(x.size()), rstd(as_size(rows));
            cpu::layernorm(y.data(), x.data(), w.data(), b.data(), rows, c, eps, rstd.data());
            round_through_dtype(y, dtype);

            std::vector<float> dx(x.size()), dw(as_size(c)), db(as_size(c));
            std::vector<float> want_dx(x.size()), want_dw(as_size(c)), want_db(as_size(c));
            CHECK(cpu::layernorm_backward_from_output(dx.data(), dw.data(), db.data(), dy.data(), y.data(), w.data(),
                                                      b.data(), rstd.data(), rows, c) == 0);
            cpu::layernorm_backward(want_dx.data(), want_dw.data(), want_db.data(), dy.data(), x.data(), w.data(), rows,
                                    c, eps);
            CHECK(db == want_db);

            // x̂ and its bound, per element; the row's statistics in float64 from x itself.
            std::vector<double> xhat(x.size()), bound(x.size());
            double worst_xhat = 0;
            for (int r = 0; r < rows; ++r) {
                double mean = 0, var = 0;
                for (int i = 0; i < c; ++i) mean += x[as_size(r * c + i)];
                mean /= c;
                for (int i = 0; i < c; ++i) var += (x[as_size(r * c + i)] - mean) * (x[as_size(r * c + i)] - mean);
                const double s = 1 / std::sqrt(var / c + eps);
                for (int i = 0; i < c; ++i) {
                    const std::size_t k = as_size(r * c + i);
                    xhat[k] = (x[k] - mean) * s;
                    const double yk = std::abs(y[k]), wk = std::abs(w[as_size(i)]), bk = std::abs(b[as_size(i)]);
                    bound[k] = (u * yk * (1 + u) + fp32_u * (std::abs(xhat[k]) * wk + yk + 2 * (yk + bk)) * (1 + 1e-6)) / wk;
                    const double recovered = ln_normalized_from_output(y[k], w[as_size(i)], b[as_size(i)]);
                    // The float64 x̂ differs from the fp32 one by a few 2^-24 of the row's scale:
                    // 1e-5 of slack.
                    worst_xhat = std::max(worst_xhat, std::abs(recovered - xhat[k]) / (bound[k] + 1e-5));
                }
            }
            CHECK(worst_xhat <= 1);
            // The bound is y's rounding, not slack: some element comes within a factor 4 of it.
            if (dtype != DType::fp32) CHECK(worst_xhat > 0.25);

            // Each gradient's largest |difference| / its bound.
            double worst_dw = 0, worst_dx = 0;

            for (int i = 0; i < c; ++i) {
                double moved = 0, magnitude = 0;
                for (int r = 0; r < rows; ++r) {
                    const std::size_t k = as_size(r * c + i);
                    moved += std::abs(dy[k]) * bound[k];
                    magnitude += std::abs(dy[k]) * (std::abs(xhat[k]) + bound[k] + 1e-5);
                }
                worst_dw = std::max(worst_dw, std::abs(dw[as_size(i)] - want_dw[as_size(i)]) /
                                                  (moved + 2 * (rows + 1) * fp32_u * magnitude));
            }
            for (int r = 0; r < rows; ++r) {
                double mean_g = 0, m = 0, dm = 0, gx = 0;
                for (int i = 0; i < c; ++i) {
                    const std::size_t k = as_size(r * c + i);
                    const double g = static_cast<double>(dy[k]) * w[as_size(i)];
                    mean_g += g / c;
                    m += g * xhat[k] / c;
                    dm += std::abs(g) * bound[k] / c;
                    gx += std::abs(g) * (std::abs(xhat[k]) + bound[k] + 1e-5) / c;
                }
                dm += 2 * (c + 1) * fp32_u * gx;
                for (int i = 0; i < c; ++i) {
                    const std::size_t k = as_size(r * c + i);
                    const double g = std::abs(static_cast<double>(dy[k]) * w[as_size(i)]);
                    const double moved = rstd[as_size(r)] * (bound[k] * std::abs(m) + (std::abs(xhat[k]) + bound[k]) * dm);
                    const double rounding =
                        2 * 4 * fp32_u * rstd[as_size(r)] * (g + std::abs(mean_g) + (std::abs(xhat[k]) + bound[k]) * gx);
                    worst_dx = std::max(worst_dx, std::abs(dx[k] - want_dx[k]) / (moved + rounding));
                }
            }
            CHECK(worst_dw <= 1);
            CHECK(worst_dx <= 1);
            std::printf("inplace_ln recovery %-4s c %4d: worst |error| / bound x̂ %.2f dw %.2f dx %.2f\n",
                        std::string(enum_name(dtype)).c_str(), c, worst_xhat, worst_dw, worst_dx);
        }
    }
}

TEST_CASE("layernorm_backward_from_output counts the channels whose weight is too small to divide by",
          "[kernels][backward]") {
    CHECK(ln_weight_recoverable(kInplaceLnMinWeight));
    CHECK(ln_weight_recoverable(-kInplaceLnMinWeight));
    CHECK_FALSE(ln_weight_recoverable(std::nextafter(kInplaceLnMinWeight, 0.0f)));
    CHECK_FALSE(ln_weight_recoverable(0.0f));
    CHECK_FALSE(ln_weight_recoverable(std::nanf("")));
    const int c = 6;
    const std::vector<float> y = {0.5f, -1.0f, 0.25f, 2.0f, -0.5f, 1.0f}, b(as_size(c), 0.125f), dy(as_size(c), 1.0f);
    const float rstd = 2.0f;
    std::vector<float> w = {1.0f, -1.0f, 0.5f, 2.0f, 1.0f, 0.75f};
    std::vector<float> dx(as_size(c)), dw(as_size(c)), db(as_size(c));
    CHECK(cpu::layernorm_backward_from_output(dx.data(), dw.data(), db.data(), dy.data(), y.data(), w.data(), b.data(),
                                              &rstd, 1, c) == 0);
    // x̂ = (y − b) / w, so dw = dy · x̂: (0.5 − 0.125) / 1.
    CHECK(dw[0] == 0.375f);
    w[2] = 0.0f;
    w[4] = -5e-4f;
    CHECK(cpu::layernorm_backward_from_output(dx.data(), dw.data(), db.data(), dy.data(), y.data(), w.data(), b.data(),
                                              &rstd, 1, c) == 2);
}

TEST_CASE("host linear_backward gives the reference's input gradient and adds its weight and bias gradients",
          "[kernels][backward]") {
    const int rows = 6, in_dim = 13, out_dim = 11;
    const auto x = random_values(rows * in_dim, 0.0f, 7), w = random_values(out_dim * in_dim, 0.0f, 8);
    const auto dout = random_values(rows * out_dim, 0.0f, 9);
    const auto dw0 = random_values(out_dim * in_dim, 0.0f, 10), db0 = random_values(out_dim, 0.0f, 11);
    std::vector<float> din(rows * in_dim, 123.0f);  // overwritten, whatever it held
    auto dw = dw0, db = db0;
    cpu::linear_backward(din.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), rows, in_dim, out_dim);

    auto want_dw = as_double(dw0), want_db = as_double(db0);
    const auto want_din = reference::dense_backward(as_double(x), as_double(dout), in_dim, out_dim,
                                                    reference::TensorView{w.data()}, want_dw.data(), want_db.data());
    CHECK(relative_error(din, want_din) < 1e-5);
    CHECK(relative_error(dw, want_dw) < 1e-5);
    CHECK(relative_error(db, want_db) < 1e-5);

    // Without a bias (lm_head) the weight's gradient is the same.
    auto dw_no_bias = dw0;
    cpu::linear_backward(din.data(), dw_no_bias.data(), nullptr, dout.data(), x.data(), w.data(), rows, in_dim, out_dim);
    CHECK(relative_error(dw_no_bias, want_dw) < 1e-5);
}

TEST_CASE("host gelu_tanh_backward multiplies by the reference's derivative", "[kernels][backward]") {
    const auto x = random_values(301, 0.0f, 12), dy = random_values(301, 0.0f, 13);
    auto dx = dy;
    cpu::gelu_tanh_backward(dx.data(), x.data(), static_cast<std::int64_t>(x.size()));
    std::vector<double> want(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) want[i] = dy[i] * reference::gelu_tanh_derivative(x[i]);
    CHECK(relative_error(dx, want) < 1e-5);
}

TEST_CASE("gelu_output's constants are GELU's minimum, its value and its curvature there", "[kernels][backward]") {
    // The derivative changes sign at kMinimumX, and float64 finite differences give the rest.
    const double x0 = gelu_output::kMinimumX, e = 1e-4;
    CHECK(reference::gelu_tanh_derivative(x0 - 1e-6) < 0);
    CHECK(reference::gelu_tanh_derivative(x0 + 1e-6) > 0);
    CHECK(std::abs(reference::gelu_tanh(x0) - gelu_output::kMinimum) < 1e-7);
    const double curvature = (reference::gelu_tanh_derivative(x0 + e) - reference::gelu_tanh_derivative(x0 - e)) / (2 * e);
    CHECK(std::abs(curvature - gelu_output::kCurvature) < 1e-6);
    const double third = (reference::gelu_tanh_derivative(x0 + e) - 2 * reference::gelu_tanh_derivative(x0) +
                          reference::gelu_tanh_derivative(x0 - e)) / (e * e);
    CHECK(std::abs(third / (3 * curvature * curvature) - gelu_output::kInverseSecondOrder) < 1e-4);
}

TEST_CASE("host gelu_tanh_with_branch is gelu_tanh, and packs each element's branch into a bit", "[kernels][backward]") {
    // Left of the minimum x0 = -0.75246142: -1, -0.8, -5, -0.76 (byte 0: bits 0, 2, 4, 6 = 0x55);
    // -2, -0.7525, -10 (byte 1: bits 1, 3, 4 = 0x1A). -0.7524 and -0.75 lie right of it.
    const std::vector<float> x = {-1.0f, 0.0f, -0.8f, -0.7f, -5.0f, 3.0f, -0.76f, -0.75f,
                                  2.0f, -2.0f, -0.7524f, -0.7525f, -10.0f};
    auto y = x, want = x;
    std::vector<std::uint8_t> bits(3, 0xFF);  // one byte past the two: untouched
    cpu::gelu_tanh_with_branch(y.data(), bits.data(), static_cast<std::int64_t>(x.size()));
    cpu::gelu_tanh(want.data(), static_cast<std::int64_t>(want.size()));
    CHECK(y == want);
    CHECK(bits == std::vector<std::uint8_t>{0x55, 0x1A, 0xFF});
}

// GELU's derivative from its output y and branch bit, over a dense grid of x in [-10, 10]
// (5e-5 apart, so within 2.5e-5 of the minimum x0), y as the training step keeps it: the fp32
// forward's (gelu_tanh_with_branch), rounded to the dtype.
//
// The bound. On one branch x is a function of y, and d(gelu'(x)²)/dy = 2·gelu'(x)·gelu''(x)·dx/dy
// = 2·gelu''(x). So a kept ŷ = y + δ on the branch, whose x is x̂, has |g(x̂)² − g(x)²| ≤ 2Hδ,
// g = gelu', H = max |gelu''| = √(2/π) (at x = 0). g(x̂) and g(x) have one sign (the branch's), so
// |g(x̂) − g(x)|² ≤ |g(x̂) − g(x)|·|g(x̂) + g(x)| = |g(x̂)² − g(x)²|, and
// |g(x̂) − g(x)| ≤ min(√(2Hδ), 2Hδ / |g(x)|): the square root near x0, where g(x) → 0 and the
// inverse is ill-conditioned; elsewhere proportional to δ. (A ŷ rounded past the minimum counts as
// the minimum, nearer y.) δ is |ŷ − gelu(x)| against the float64 gelu (the fp32 forward's error
// and the dtype's rounding), plus the fp32 inversion's residual, a few roundings of y:
// 4·2^-24·|y|; the fp32 evaluation of gelu'(x̂), whose terms are at most 1.13, adds 4·2^-24. At
// x0, with δ ≈ u·0.17 for the dtype's unit roundoff u, the bound is about 2.8e-4 (fp32, with the
// residual), 1.2e-2 (fp16, u = 2^-11) and 3.3e-2 (bf16, u = 2^-8), where the derivative ranges
// over [-0.17, 1.13]; the training step's y lies there for few elements.
TEST_CASE("gelu's derivative from its output and branch is within the bound y's rounding sets, in every dtype",
          "[kernels][backward]") {
    const std::int64_t n = 400001;
    std::vector<float> x(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(-10.0 + 20.0 * static_cast<double>(i) / static_cast<double>(n - 1));
    auto y = x;
    std::vector<std::uint8_t> bits(static_cast<std::size_t>(gelu_output::branch_bytes(n)));
    cpu::gelu_tanh_with_branch(y.data(), bits.data(), n);
    const double pi = 3.14159265358979323846, h = std::sqrt(2.0 / pi), ulp = std::ldexp(1.0, -24);
    for (const DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
        auto kept = y;
        round_through_dtype(kept, dtype);
        std::vector<float> g(kept.size(), 1.0f);
        cpu::gelu_tanh_backward_from_output(g.data(), kept.data(), bits.data(), n);
        double worst = 0, worst_error = 0, worst_x = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            const double exact = reference::gelu_tanh_derivative(x[i]);
            const double delta = std::abs(kept[i] - reference::gelu_tanh(x[i])) + 4 * ulp * std::abs(kept[i]);
            const double bound = std::min(std::sqrt(2 * h * delta), 2 * h * delta / std::abs(exact)) + 4 * ulp;
            const double error = std::abs(g[i] - exact);
            if (!(error / bound <= worst)) {  // NaN included
                worst = error / bound;
                worst_error = error;
                worst_x = x[i];
            }
        }
        INFO(enum_name(dtype) << ": worst at x = " << worst_x << ", |error| " << worst_error << " = " << worst
                              << " of the bound");
        CHECK(worst <= 1.0);
    }
}

TEST_CASE("gelu's derivative from its fp32 output is gelu_tanh_backward's within a few ulps away from the minimum",
          "[kernels][backward]") {
    // Beyond 0.2 of x0 the inverse is well-conditioned (2Hδ / |g| of a few ulps of y). Both sides
    // still carry the tails' cancellation: the forward's 1 + tanh a (y, left of x0) and
    // gelu_tanh_backward's 1 − tanh² a keep tanhf's absolute rounding near ±1, 2^-25, which
    // 0.5·|x|·√(2/π)·(1 + 0.134·x²) (≈ 9 at |x| = 5, where tanhf last differs from ±1) scales:
    // 16 units of 2^-24 on the derivative, whose values reach 1.13.
    const std::int64_t n = 400001;
    std::vector<float> x;
    for (std::int64_t i = 0; i < n; ++i) {
        const auto v = static_cast<float>(-10.0 + 20.0 * static_cast<double>(i) / static_cast<double>(n - 1));
        if (std::abs(v - gelu_output::kMinimumX) >= 0.2f) x.push_back(v);
    }
    const auto m = static_cast<std::int64_t>(x.size());
    auto y = x;
    std::vector<std::uint8_t> bits(static_cast<std::size_t>(gelu_output::branch_bytes(m)));
    cpu::gelu_tanh_with_branch(y.data(), bits.data(), m);
    std::vector<float> from_output(x.size(), 1.0f), from_input(x.size(), 1.0f);
    cpu::gelu_tanh_backward_from_output(from_output.data(), y.data(), bits.data(), m);
    cpu::gelu_tanh_backward(from_input.data(), x.data(), m);
    double worst = 0, worst_x = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double diff = std::abs(static_cast<double>(from_output[i]) - from_input[i]);
        if (!(diff <= worst)) {
            worst = diff;
            worst_x = x[i];
        }
    }
    INFO("worst at x = " << worst_x << ": " << worst / std::ldexp(1.0, -24) << " units of 2^-24");
    CHECK(worst <= 16 * std::ldexp(1.0, -24));
}

TEST_CASE("host cross_entropy returns the summed loss and leaves the scaled gradient of the logits",
          "[kernels][backward]") {
    const int rows = 4, vocab = 29;
    const auto logits = random_values(rows * vocab, 0.5f, 14);
    const std::vector<std::int32_t> targets = {0, 28, 7, 7};
    const float scale = 0.25f;
    auto grad = logits;
    const double loss = cpu::cross_entropy(grad.data(), targets.data(), rows, vocab, scale);

    double want_loss = 0.0;
    std::vector<double> want(logits.size());
    for (int r = 0; r < rows; ++r) {
        const float* z = &logits[static_cast<std::size_t>(r * vocab)];
        double total = 0.0;
        for (int v = 0; v < vocab; ++v) total += std::exp(static_cast<double>(z[v]));
        want_loss += std::log(total) - z[targets[static_cast<std::size_t>(r)]];
        for (int v = 0; v < vocab; ++v)
            want[static_cast<std::size_t>(r * vocab + v)] =
                (std::exp(static_cast<double>(z[v])) / total - (v == targets[static_cast<std::size_t>(r)] ? 1.0 : 0.0)) * scale;
    }
    CHECK(std::abs(loss - want_loss) < 1e-6 * want_loss);
    CHECK(relative_error(grad, want) < 1e-5);
}

TEST_CASE("host attention_backward gives the reference's gradient of q, k and v, with and without dropout",
          "[kernels][backward]") {
    const ModelConfig m{"attention_check", 1, 15, 3, 10, 16, 1e-5f};  // head dimension 5
    const int batch = 2, seq = 7, c = m.n_embd;
    const std::uint32_t site = Dropout::site_word(DropoutSite::attention_probs, 0);
    const auto qkv = random_values(static_cast<std::size_t>(batch * seq * 3 * c), 0.0f, 15);
    const auto dout = random_values(static_cast<std::size_t>(batch * seq * c), 0.0f, 16);
    for (const float p : {0.0f, 0.1f}) {
        INFO("dropout " << p);
        const Dropout dropout = Dropout{p, 5}.for_shape(seq, m.max_positions);
        std::vector<float> dqkv(qkv.size(), 99.0f), probs(seq * seq), grad(seq * seq);
        cpu::attention_backward(dqkv.data(), probs.data(), grad.data(), dout.data(), qkv.data(), batch, seq, c, m.n_head,
                                dropout, site);

        reference::Dims d = reference::dims_of(m, dropout);
        std::vector<double> want;
        for (int b = 0; b < batch; ++b) {
            d.sequence = static_cast<std::size_t>(b);
            const auto rows = [&](const std::vector<float>& v, int width) {
                const auto begin = v.begin() + static_cast<std::ptrdiff_t>(b) * seq * width;
                return std::vector<double>(begin, begin + static_cast<std::ptrdiff_t>(seq) * width);
            };
            const auto qkv_b = rows(qkv, 3 * c);
            reference::Rows ps;
            reference::causal_self_attention(qkv_b, d, site, &ps);
            const auto dqkv_b = reference::causal_self_attention_backward(qkv_b, ps, rows(dout, c), d, site);
            want.insert(want.end(), dqkv_b.begin(), dqkv_b.end());
        }
        CHECK(relative_error(dqkv, want) < 1e-5);
    }
}

TEST_CASE("the host's gradients of a training step are the float64 reference's, tensor by tensor",
          "[kernels][backward]") {
    const ModelConfig m{"step_check", 2, 20, 4, 37, 16, 1e-5f};  // head dimension 5
    const auto layout = WeightLayout::for_model(m);
    std::vector<std::vector<float>> weights;
    std::vector<const float*> pointers;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        weights.emplace_back(static_cast<std::size_t>(layout.units[u].numel));
        fill_synthetic_unit(m, layout, static_cast<int>(u), 9, weights.back());
    }
    for (const auto& w : weights) pointers.push_back(w.data());
    const int batch = 2, seq = 9;
    std::vector<std::int32_t> tokens, targets;
    for (int i = 0; i < batch * seq; ++i) {
        tokens.push_back((i * 11 + 5) % m.vocab_size);
        targets.push_back((i * 13 + 2) % m.vocab_size);
    }
    for (const float p : {0.0f, 0.1f}) {
        INFO("dropout " << p);
        const Dropout dropout{p, 21};
        const auto got = cpu_gradients(m, layout, pointers, tokens, targets, BatchShape::rectangular(batch, seq), dropout);
        const auto want = reference_gradients(m, layout, pointers, tokens, targets, batch, seq, dropout);
        CHECK(std::abs(got.loss - want.loss) < 1e-5 * want.loss);
        for (std::size_t u = 0; u < layout.units.size(); ++u) {
            for (const TensorSpec& tensor : layout.units[u].tensors) {
                INFO(tensor.name);
                const auto begin = static_cast<std::size_t>(tensor.offset), end = begin + static_cast<std::size_t>(tensor.numel);
                const std::vector<float> g(got.units[u].begin() + static_cast<std::ptrdiff_t>(begin),
                                           got.units[u].begin() + static_cast<std::ptrdiff_t>(end));
                const std::vector<double> r(want.units[u].begin() + static_cast<std::ptrdiff_t>(begin),
                                            want.units[u].begin() + static_cast<std::ptrdiff_t>(end));
                CHECK(relative_error(g, r) < 1e-4);
            }
        }
    }
}

TEST_CASE("host AdamW with global-norm clipping follows the float64 reference over two steps", "[kernels][backward]") {
    const ModelConfig m{"adamw_host", 1, 6, 2, 13, 8, 1e-5f};
    const auto layout = WeightLayout::for_model(m);
    const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, decay = 0.1f, max_norm = 1.0f;
    std::vector<std::vector<float>> params, m1, v1;
    UnitValues ref_params;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        params.push_back(random_values(static_cast<std::size_t>(layout.units[u].numel), 0.0f, 30 + static_cast<std::uint32_t>(u)));
        m1.emplace_back(params.back().size(), 0.0f);
        v1.emplace_back(params.back().size(), 0.0f);
        ref_params.push_back(as_double(params.back()));
    }
    AdamWState state;
    for (int step = 1; step <= 2; ++step) {
        INFO("step " << step);
        std::vector<std::vector<float>> grads;
        UnitValues ref_grads;
        for (std::size_t u = 0; u < layout.units.size(); ++u) {
            grads.push_back(random_values(params[u].size(), 0.0f, 100 * static_cast<std::uint32_t>(step) + static_cast<std::uint32_t>(u)));
            ref_grads.push_back(as_double(grads.back()));
        }
        const double ref_norm = reference_clip_gradients(ref_grads, max_norm);
        REQUIRE(ref_norm > max_norm);  // the clipping acts
        reference_adamw_step(layout, ref_params, ref_grads, state,
                             {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = decay});

        double squares = 0.0;
        for (const auto& g : grads) squares += cpu::squared_norm(g.data(), static_cast<std::int64_t>(g.size()));
        const double norm = std::sqrt(squares);
        CHECK(std::abs(norm - ref_norm) < 1e-6 * ref_norm);
        const float scale = static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6)));
        for (std::size_t u = 0; u < layout.units.size(); ++u) {
            for (const TensorSpec& t : layout.units[u].tensors) {
                const auto off = static_cast<std::size_t>(t.offset);
                cpu::adamw(params[u].data() + off, grads[u].data() + off, m1[u].data() + off, v1[u].data() + off, t.numel,
                           {lr, beta1, beta2, eps, decays_weights(t) ? decay : 0.0f, step, scale});
            }
        }
        for (std::size_t u = 0; u < layout.units.size(); ++u) {
            std::vector<float> tensors_only;
            std::vector<double> ref_only;
            for (const TensorSpec& t : layout.units[u].tensors)
                for (std::int64_t e = 0; e < t.numel; ++e) {
                    tensors_only.push_back(params[u][static_cast<std::size_t>(t.offset + e)]);
                    ref_only.push_back(ref_params[u][static_cast<std::size_t>(t.offset + e)]);
                }
            CHECK(relative_error(tensors_only, ref_only) < 1e-6);
        }
    }
}

namespace {

// A small GPT-2 (2 layers, 20 channels, 4 heads, vocabulary 37) with synthetic weights (seed 9),
// and a batch of 2 × 9 token ids with their targets.
struct SmallTraining {
    static constexpr int batch = 2, seq = 9;
    ModelConfig model{"train_check", 2, 20, 4, 37, 16, 1e-5f};
    WeightLayout layout = WeightLayout::for_model(model);
    std::vector<std::vector<float>> weights;
    std::vector<std::int32_t> tokens, targets;
};

SmallTraining small_training() {
    SmallTraining t;
    for (std::size_t u = 0; u < t.layout.units.size(); ++u) {
        t.weights.emplace_back(static_cast<std::size_t>(t.layout.units[u].numel));
        fill_synthetic_unit(t.model, t.layout, static_cast<int>(u), 9, t.weights.back());
    }
    for (int i = 0; i < SmallTraining::batch * SmallTraining::seq; ++i) {
        t.tokens.push_back((i * 11 + 5) % t.model.vocab_size);
        t.targets.push_back((i * 13 + 2) % t.model.vocab_size);
    }
    return t;
}

}  // namespace

TEST_CASE("a host training step is the float64 reference's step, and steps on one batch lower its loss",
          "[kernels][backward]") {
    const SmallTraining small = small_training();
    const auto& [m, layout, weights, tokens, targets] = small;
    constexpr int batch = SmallTraining::batch, seq = SmallTraining::seq;
    const TrainSettings settings{.lr = 1e-2f, .weight_decay = 0.1f, .max_grad_norm = 1.0f};

    // The reference's step: its gradients of the same fp32 weights, clipped, and AdamW in float64.
    std::vector<const float*> pointers;
    for (const auto& w : weights) pointers.push_back(w.data());
    auto want = reference_gradients(m, layout, pointers, tokens, targets, batch, seq);
    const double want_norm = reference_clip_gradients(want.units, settings.max_grad_norm);
    UnitValues want_weights;
    for (const auto& w : weights) want_weights.push_back(as_double(w));
    AdamWState state;
    reference_adamw_step(layout, want_weights, want.units, state,
                         {.lr = settings.lr, .beta1 = settings.beta1, .beta2 = settings.beta2, .eps = settings.eps,
                          .weight_decay = settings.weight_decay});

    // The host backend holds the weights, their gradients and AdamW's moments.
    HostBackend backend;
    backend.place(layout, [&](int unit, std::span<float> dst) { std::ranges::copy(weights[static_cast<std::size_t>(unit)], dst.begin()); },
                  UnitSchedule::training(layout.unit_count()));
    CpuTrainStep trainer(m, layout, BatchShape::rectangular(batch, seq), {}, settings);
    const auto first = trainer.step(backend, tokens, targets);
    CHECK(std::abs(first.loss - want.loss) < 1e-5 * want.loss);
    CHECK(std::abs(first.grad_norm - want_norm) < 1e-4 * want_norm);
    for (int u = 0; u < layout.unit_count(); ++u) {
        const auto* placed = static_cast<const float*>(backend.acquire(u));
        const std::vector<float> after(placed, placed + layout.units[static_cast<std::size_t>(u)].numel);
        CHECK(relative_error(after, want_weights[static_cast<std::size_t>(u)]) < 1e-5);
    }

    // Each step starts from the state the last one left: on one batch the loss keeps falling.
    double last = first.loss;
    for (int i = 0; i < 20; ++i) last = trainer.step(backend, tokens, targets).loss;
    CHECK(trainer.steps() == 21);
    INFO("loss " << first.loss << " at the first step, " << last << " at the 21st");
    CHECK(last < 0.5 * first.loss);
}

TEST_CASE("a host training step with max_grad_norm 0 updates by the unclipped gradients", "[kernels][backward]") {
    const SmallTraining small = small_training();
    const auto& [m, layout, weights, tokens, targets] = small;
    constexpr int batch = SmallTraining::batch, seq = SmallTraining::seq;
    // An eps near the gradients' size, so that AdamW's step depends on their scale (with a tiny
    // eps its first step is the gradients' signs, clipped or not).
    const TrainSettings settings{.lr = 1e-2f, .eps = 1e-2f, .weight_decay = 0.1f, .max_grad_norm = 0.0f};
    HostBackend backend;
    backend.place(layout, [&](int unit, std::span<float> dst) { std::ranges::copy(weights[static_cast<std::size_t>(unit)], dst.begin()); },
                  UnitSchedule::training(layout.unit_count()));
    CpuTrainStep trainer(m, layout, BatchShape::rectangular(batch, seq), {}, settings);
    trainer.forward(backend, tokens, targets);
    const double norm = trainer.backward(backend);
    // Clipping to 1 would have scaled these gradients down: the test tells the two apart.
    REQUIRE(norm > 1.2);
    UnitValues gradients, clipped, want, want_clipped;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        const auto* g = static_cast<const float*>(backend.gradient(static_cast<int>(u)));
        gradients.emplace_back(g, g + layout.units[u].numel);
        clipped.push_back(gradients.back());
        for (double& v : clipped.back()) v /= norm + 1e-6;
        want.push_back(as_double(weights[u]));
    }
    want_clipped = want;
    trainer.update(backend);
    // AdamW in float64 on the gradients as they are, and on them clipped to 1 for contrast.
    const AdamWSettings adamw{.lr = settings.lr, .beta1 = settings.beta1, .beta2 = settings.beta2, .eps = settings.eps,
                              .weight_decay = settings.weight_decay};
    AdamWState state, state_clipped;
    reference_adamw_step(layout, want, gradients, state, adamw);
    reference_adamw_step(layout, want_clipped, clipped, state_clipped, adamw);
    for (int u = 0; u < layout.unit_count(); ++u) {
        const auto i = static_cast<std::size_t>(u);
        const auto* placed = static_cast<const float*>(backend.acquire(u));
        const std::vector<float> after(placed, placed + layout.units[i].numel);
        backend.release(u);
        CHECK(relative_error(after, want[i]) < 1e-6);
        CHECK(relative_error(after, want_clipped[i]) > 1e-4);
    }
}

namespace {

// A host training step's first phases on `weights` against the float64 reference: the loss, every
// tensor's gradient, the gradient norm, and the update AdamW made.
void check_first_host_step(const ModelConfig& m, const WeightLayout& layout,
                           const std::vector<std::vector<float>>& weights, std::span<const std::int32_t> tokens,
                           std::span<const std::int32_t> targets, int batch, int seq, const Dropout& dropout,
                           const TrainSettings& settings) {
    std::vector<const float*> pointers;
    for (const auto& w : weights) pointers.push_back(w.data());
    auto want = reference_gradients(m, layout, pointers, tokens, targets, batch, seq, dropout);
    HostBackend backend;
    backend.place(layout,
                  [&](int unit, std::span<float> dst) { std::ranges::copy(weights[static_cast<std::size_t>(unit)], dst.begin()); },
                  UnitSchedule::training(layout.unit_count()));
    CpuTrainStep trainer(m, layout, BatchShape::rectangular(batch, seq), dropout, settings);
    const double loss = trainer.forward(backend, tokens, targets);
    const double norm = trainer.backward(backend);
    CHECK(std::abs(loss - want.loss) < 1e-5 * want.loss);
    UnitValues own_gradients, before;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        const auto* g = static_cast<const float*>(backend.gradient(static_cast<int>(u)));
        own_gradients.emplace_back(g, g + layout.units[u].numel);
        before.push_back(as_double(weights[u]));
        for (const TensorSpec& tensor : layout.units[u].tensors) {
            INFO(tensor.name);
            const std::vector<float> got(g + tensor.offset, g + tensor.offset + tensor.numel);
            const auto begin = want.units[u].begin() + static_cast<std::ptrdiff_t>(tensor.offset);
            const std::vector<double> expected(begin, begin + static_cast<std::ptrdiff_t>(tensor.numel));
            // At one position the softmax is constant: LLaMA's q and k projections get no gradient.
            if (std::ranges::all_of(expected, [](double v) { return v == 0.0; }))
                CHECK(std::ranges::all_of(got, [](float v) { return v == 0.0f; }));
            else
                CHECK(relative_error(got, expected) < 1e-4);
        }
    }
    trainer.update(backend);
    CHECK(std::abs(norm - reference_clip_gradients(want.units, settings.max_grad_norm)) < 1e-4 * norm);

    // AdamW's first step divides each gradient by its own magnitude, so the update is judged on
    // the host's own gradients (as step_check.cpp does): the float64 clipping and AdamW of them,
    // against the update's size, beyond each fp32 weight's rounding.
    UnitValues want_weights = before;
    reference_clip_gradients(own_gradients, settings.max_grad_norm);
    AdamWState state;
    reference_adamw_step(layout, want_weights, own_gradients, state,
                         {.lr = settings.lr, .beta1 = settings.beta1, .beta2 = settings.beta2, .eps = settings.eps,
                          .weight_decay = settings.weight_decay});
    for (int u = 0; u < layout.unit_count(); ++u) {
        const auto i = static_cast<std::size_t>(u);
        const auto* placed = static_cast<const float*>(backend.acquire(u));
        std::vector<float> update;
        std::vector<double> want_update;
        for (std::int64_t e = 0; e < layout.units[i].numel; ++e) {
            const auto k = static_cast<std::size_t>(e);
            const double want_w = want_weights[i][k], diff = placed[k] - want_w;
            const double beyond = std::copysign(std::max(0.0, std::abs(diff) - std::ldexp(std::abs(want_w), -23)), diff);
            want_update.push_back(want_w - before[i][k]);
            update.push_back(static_cast<float>(want_update.back() + beyond));
        }
        backend.release(u);
        CHECK(relative_error(update, want_update) < 1e-4);
    }
}

std::vector<std::vector<float>> synthetic_weights(const ModelConfig& m, const WeightLayout& layout, std::uint64_t seed) {
    std::vector<std::vector<float>> weights;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        weights.emplace_back(static_cast<std::size_t>(layout.units[u].numel));
        fill_synthetic_unit(m, layout, static_cast<int>(u), seed, weights.back());
    }
    return weights;
}

}  // namespace

TEST_CASE("the host's first training step matches the float64 loss, gradients and AdamW at odd shapes",
          "[kernels][backward]") {
    // test_gpu_train.cpp's shapes: head dimensions 25 and 80, odd vocabularies, an untied head,
    // one position, a few dozen and most of the 1024 positions (one sequence: the float64 loops
    // of a long one take seconds).
    const ModelConfig models[] = {{"head25", 2, 50, 2, 97, 1024, 1e-5f}, {"head80", 2, 160, 2, 131, 1024, 1e-5f}};
    const TrainSettings settings{.lr = 1e-2f, .weight_decay = 0.1f, .max_grad_norm = 1.0f};
    for (const ModelConfig& m : models) {
        const auto layout = WeightLayout::for_model(m);
        const auto weights = synthetic_weights(m, layout, 4321);
        for (const int seq : {1, 33, 777}) {
            const int batch = seq == 777 ? 1 : 2;
            std::vector<std::int32_t> tokens, targets;
            for (int i = 0; i < batch * seq; ++i) {
                tokens.push_back((i * 11 + 5) % m.vocab_size);
                targets.push_back((i * 13 + 2) % m.vocab_size);
            }
            for (const float p : {0.0f, 0.1f}) {
                INFO(m.name << " batch " << batch << " seq " << seq << " dropout " << p);
                check_first_host_step(m, layout, weights, tokens, targets, batch, seq, Dropout{p, 21}, settings);
            }
        }
    }
}

TEST_CASE("LLaMA's first host training step matches the float64 loss, gradients and AdamW", "[kernels][backward][llama]") {
    // Grouped-query attention 4 / 2 (tiny_llama), one kv head with Llama 3's rope scaling
    // (tiny_llama_odd), and as many kv heads as heads; one position and 33, batches of 1 to 3. The
    // RMSNorm weights are moved off their synthetic 1 so that a backward forgetting them fails.
    ModelConfig mha = *find_builtin_model("tiny_llama");
    mha.name = "tiny_llama_mha";
    mha.n_kv_head = mha.n_head;
    const ModelConfig models[] = {*find_builtin_model("tiny_llama"), *find_builtin_model("tiny_llama_odd"), mha};
    const TrainSettings settings{.lr = 1e-2f, .weight_decay = 0.1f, .max_grad_norm = 1.0f};
    for (const ModelConfig& m : models) {
        const auto layout = WeightLayout::for_model(m);
        auto weights = synthetic_weights(m, layout, 4321);
        for (std::size_t u = 0; u < layout.units.size(); ++u)
            for (const TensorSpec& t : layout.units[u].tensors)
                if (t.shape.size() == 1) {
                    const auto jitter = random_values(static_cast<std::size_t>(t.numel), 1.0f, 60 + static_cast<std::uint32_t>(u));
                    for (std::int64_t e = 0; e < t.numel; ++e)
                        weights[u][static_cast<std::size_t>(t.offset + e)] = 0.75f + 0.25f * jitter[static_cast<std::size_t>(e)];
                }
        for (const int seq : {1, 33}) {
            for (const int batch : {1, 2, 3}) {
                std::vector<std::int32_t> tokens, targets;
                for (int i = 0; i < batch * seq; ++i) {
                    tokens.push_back((i * 11 + 5) % m.vocab_size);
                    targets.push_back((i * 13 + 2) % m.vocab_size);
                }
                INFO(m.name << " batch " << batch << " seq " << seq);
                check_first_host_step(m, layout, weights, tokens, targets, batch, seq, {}, settings);
            }
        }
    }
}

TEST_CASE("LLaMA's host training step refuses dropout, and holds the buffers its estimate counts",
          "[kernels][backward][llama]") {
    const ModelConfig m = *find_builtin_model("tiny_llama");
    const auto layout = WeightLayout::for_model(m);
    CHECK_THROWS_AS(CpuBackprop(m, layout, BatchShape::rectangular(1, 4), Dropout{0.1f, 1}), std::invalid_argument);
    // What the memory estimator counts for a step (CpuBackprop::buffer_bytes_for) is what one
    // allocates, for both families.
    const ModelConfig gpt2 = *find_builtin_model("tiny_odd");
    for (const ModelConfig& model : {m, *find_builtin_model("tiny_llama_odd"), gpt2}) {
        for (const auto& [batch, seq] : {std::pair{1, 1}, std::pair{3, 33}}) {
            INFO(model.name << " batch " << batch << " seq " << seq);
            const BatchShape shape = BatchShape::rectangular(batch, seq);
            const CpuBackprop step(model, WeightLayout::for_model(model), shape);
            CHECK(step.buffer_bytes() == CpuBackprop::buffer_bytes_for(model, shape));
        }
    }
    // tiny_llama at 2 × 9, by hand: per layer x_in, ln1, att, x_mid, ln2 (5 · 64), the packed qkv
    // ((4 + 2 · 2) · 16 = 128), gate, up and act (3 · 176) a token; x, y, the projection, xf,
    // dxf, dx (6 · 64) a token and the scores (9²); the scratch (4 · 64 + 128 + 3 · 176 a token,
    // two 9²); the logits (512 a token); a position a token and 8 frequencies.
    const std::int64_t bt = 18;
    const std::int64_t floats = 2 * bt * (5 * 64 + 128 + 3 * 176) + bt * 6 * 64 + 81 + bt * (4 * 64 + 128 + 3 * 176) +
                                2 * 81 + bt * 512 + 8;
    CHECK(CpuBackprop::buffer_bytes_for(m, BatchShape::rectangular(2, 9)) == floats * 4 + bt * 4);
}
