// LLaMA's ops: the float64 reference's backwards (kernels/compute/reference_ops) against central
// differences of its forwards, the fp32 CPU ops (kernels/compute/cpu_ops) against the reference,
// RoPE's frequencies (kernels/compute/rope_frequencies) against transformers' rule, and values
// worked out by hand.
#include <cmath>
#include <cstdint>
#include <functional>
#include <numbers>
#include <stdexcept>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/reference_ops.hpp"
#include "kernels/compute/rope_frequencies.hpp"
#include "host_op_support.hpp"

using namespace sweetspot;

namespace {

using test::as_double;
using test::random_values;
using test::relative_error;

double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

// Central differences of L(x) = Σ dy · forward(x) at each element of x, against `analytic`
// (dL/dx): within 1e-7 absolute and 1e-6 relative. A step of 1e-5 makes the O(step²) error of the
// ops' smooth forwards ~1e-10, far below the bound, and the roundings of L ~1e-11.
void check_central_differences(std::vector<double> x, const std::vector<double>& dy,
                               const std::function<std::vector<double>(const std::vector<double>&)>& forward,
                               const std::vector<double>& analytic) {
    REQUIRE(analytic.size() == x.size());
    const double step = 1e-5;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double original = x[i];
        x[i] = original + step;
        const double up = dot(dy, forward(x));
        x[i] = original - step;
        const double down = dot(dy, forward(x));
        x[i] = original;
        const double numeric = (up - down) / (2.0 * step);
        INFO("element " << i << ": analytic " << analytic[i] << ", numeric " << numeric);
        CHECK(std::abs(analytic[i] - numeric) <= 1e-7 + 1e-6 * std::abs(numeric));
    }
}

// Positions of two packed sequences: 0 .. 4, then one restarting at 0 in steps of 11 (mod 37).
std::vector<std::int32_t> restarting_positions(std::size_t rows) {
    std::vector<std::int32_t> p(rows);
    for (std::size_t r = 0; r < rows; ++r) p[r] = static_cast<std::int32_t>(r < 5 ? r : (r - 5) * 11 % 37);
    return p;
}

}  // namespace

// ---- RMSNorm --------------------------------------------------------------------------------

TEST_CASE("RMSNorm of [3, 4] is [3, 4] / sqrt(12.5), scaled by the weight", "[kernels][llama]") {
    // mean(x²) = (9 + 16) / 2 = 12.5 = 25 / 2, so x / rms = x · √2 / 5: [0.6√2, 0.8√2].
    const double root2 = std::sqrt(2.0);
    const std::vector<float> unit{1.0f, 1.0f}, w{2.0f, -0.5f};
    const auto y = reference::rms_norm({3.0, 4.0}, 2, reference::TensorView{unit.data()}, 0.0);
    CHECK(std::abs(y[0] - 0.6 * root2) < 1e-15);
    CHECK(std::abs(y[1] - 0.8 * root2) < 1e-15);
    const auto scaled = reference::rms_norm({3.0, 4.0}, 2, reference::TensorView{w.data()}, 0.0);
    CHECK(std::abs(scaled[0] - 1.2 * root2) < 1e-15);
    CHECK(std::abs(scaled[1] + 0.4 * root2) < 1e-15);
    // eps enters under the root: 12.5 + 0.5 = 13.
    const auto with_eps = reference::rms_norm({3.0, 4.0}, 2, reference::TensorView{unit.data()}, 0.5);
    CHECK(std::abs(with_eps[0] - 3.0 / std::sqrt(13.0)) < 1e-15);

    const std::vector<float> x{3.0f, 4.0f};
    std::vector<float> out(2);
    cpu::rmsnorm(out.data(), x.data(), w.data(), 1, 2, 0.0f);
    CHECK(std::abs(out[0] - 1.2 * root2) < 1e-6);
    CHECK(std::abs(out[1] + 0.4 * root2) < 1e-6);
}

TEST_CASE("RMSNorm's reference backward is the central differences of its forward", "[kernels][llama][backward]") {
    const std::size_t rows = 3, c = 7;
    const double eps = 1e-5;
    const auto x = as_double(random_values(rows * c, 0.3f, 11)), dy = as_double(random_values(rows * c, 0.0f, 12));
    std::vector<float> w = random_values(c, 1.0f, 13);
    std::vector<double> dw(c, 0.0);
    const auto dx = reference::rms_norm_backward(x, dy, c, reference::TensorView{w.data()}, eps, dw.data());
    check_central_differences(
        x, dy, [&](const std::vector<double>& v) { return reference::rms_norm(v, c, reference::TensorView{w.data()}, eps); },
        dx);

    // dw through the weights, which the reference reads as fp32: a step of 2^-12, exact at these
    // magnitudes; the quotient's denominator is the difference of the stored values.
    for (std::size_t i = 0; i < c; ++i) {
        const float original = w[i];
        w[i] = original + 0x1p-12f;
        const double up = dot(dy, reference::rms_norm(x, c, reference::TensorView{w.data()}, eps));
        w[i] = original - 0x1p-12f;
        const double down = dot(dy, reference::rms_norm(x, c, reference::TensorView{w.data()}, eps));
        w[i] = original;
        // y is linear in w: the difference is exact but for rounding.
        const double numeric = (up - down) / (2.0 * 0x1p-12);
        INFO("dw[" << i << "]: analytic " << dw[i] << ", numeric " << numeric);
        CHECK(std::abs(dw[i] - numeric) <= 1e-9 + 1e-9 * std::abs(numeric));
    }
}

TEST_CASE("host rmsnorm and rmsnorm_backward match the reference", "[kernels][llama][backward]") {
    const int rows = 5, c = 37;
    const float eps = 1e-5f;
    const auto x = random_values(rows * c, 0.7f, 1), w = random_values(c, 1.0f, 2), dout = random_values(rows * c, 0.0f, 3);
    std::vector<float> y(x.size());
    cpu::rmsnorm(y.data(), x.data(), w.data(), rows, c, eps);
    CHECK(relative_error(y, reference::rms_norm(as_double(x), c, reference::TensorView{w.data()}, eps)) < 1e-6);

    // dx and dw start non-zero: the op adds.
    const auto dx0 = random_values(rows * c, 0.0f, 4), dw0 = random_values(c, 0.0f, 5);
    auto dx = dx0, dw = dw0;
    cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rows, c, eps);
    auto want_dw = as_double(dw0);
    const auto want_in = reference::rms_norm_backward(as_double(x), as_double(dout), c, reference::TensorView{w.data()},
                                                      eps, want_dw.data());
    std::vector<double> want_dx(dx0.size());
    for (std::size_t i = 0; i < dx0.size(); ++i) want_dx[i] = dx0[i] + want_in[i];
    CHECK(relative_error(dx, want_dx) < 1e-5);
    CHECK(relative_error(dw, want_dw) < 1e-5);
}

// ---- SwiGLU ---------------------------------------------------------------------------------

TEST_CASE("SwiGLU at known points", "[kernels][llama]") {
    // silu(0) = 0; silu(1) = 1 / (1 + e^-1); silu(−1) = −1 / (1 + e); silu'(0) = σ(0) = 1/2.
    const double e = std::numbers::e;
    const auto out = reference::swiglu({0.0, 1.0, -1.0}, {5.0, 2.0, 3.0});
    CHECK(out[0] == 0.0);
    CHECK(std::abs(out[1] - 2.0 / (1.0 + 1.0 / e)) < 1e-15);
    CHECK(std::abs(out[2] + 3.0 / (1.0 + e)) < 1e-15);
    const auto g = reference::swiglu_backward({0.0}, {5.0}, {2.0});
    CHECK(std::abs(g.dgate[0] - 5.0) < 1e-15);  // 2 · 5 · 1/2
    CHECK(g.dup[0] == 0.0);

    const std::vector<float> gate{0.0f, 1.0f, -1.0f}, up{5.0f, 2.0f, 3.0f};
    std::vector<float> host(3);
    cpu::swiglu(host.data(), gate.data(), up.data(), 3);
    CHECK(host[0] == 0.0f);
    CHECK(std::abs(host[1] - 2.0 / (1.0 + 1.0 / e)) < 1e-6);
    CHECK(std::abs(host[2] + 3.0 / (1.0 + e)) < 1e-6);
}

TEST_CASE("SwiGLU's reference backward is the central differences of its forward", "[kernels][llama][backward]") {
    const std::size_t n = 23;
    // Gates over ±6: both tails of the sigmoid and the middle.
    auto gate = as_double(random_values(n, 0.0f, 21));
    for (double& v : gate) v *= 3.0;
    const auto up = as_double(random_values(n, 0.0f, 22)), dout = as_double(random_values(n, 0.0f, 23));
    const auto g = reference::swiglu_backward(gate, up, dout);
    check_central_differences(gate, dout, [&](const std::vector<double>& v) { return reference::swiglu(v, up); },
                              g.dgate);
    check_central_differences(up, dout, [&](const std::vector<double>& v) { return reference::swiglu(gate, v); },
                              g.dup);
}

TEST_CASE("host swiglu and swiglu_backward match the reference", "[kernels][llama][backward]") {
    const std::size_t n = 301;
    auto gate = random_values(n, 0.0f, 31);
    for (float& v : gate) v *= 3.0f;
    const auto up = random_values(n, 0.0f, 32), dout = random_values(n, 0.0f, 33);
    std::vector<float> out(n), dgate(n), dup(n);
    cpu::swiglu(out.data(), gate.data(), up.data(), static_cast<std::int64_t>(n));
    CHECK(relative_error(out, reference::swiglu(as_double(gate), as_double(up))) < 1e-6);
    cpu::swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), static_cast<std::int64_t>(n));
    const auto want = reference::swiglu_backward(as_double(gate), as_double(up), as_double(dout));
    CHECK(relative_error(dgate, want.dgate) < 1e-6);
    CHECK(relative_error(dup, want.dup) < 1e-6);
}

// ---- RoPE -----------------------------------------------------------------------------------

TEST_CASE("RoPE's frequencies are theta^(-2i/head_dim), and Llama 3's scaling follows transformers' rule",
          "[kernels][llama]") {
    // theta 10000, head_dim 8: 10000^(−i/4) = 10^−i.
    const auto plain = rope_inv_frequencies(8, 10000.0);
    REQUIRE(plain.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) CHECK(std::abs(plain[i] - std::pow(10.0, -static_cast<double>(i))) < 1e-15);

    // head_dim 4: inv_freq = [1, theta^(−1/2)]. With original 8192, low 1, high 4, factor 8 the
    // wavelengths 2π/inv_freq above 8192 are slowed 8×, those below 2048 kept, those between blended.
    const RopeScaling llama3{.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_positions = 8192,
                             .enabled = true};
    // theta 1e8: inv_freq[1] = 1e-4, wavelength 62832 > 8192: 1e-4 / 8. inv_freq[0] = 1 (2π < 2048): kept.
    const auto low = rope_inv_frequencies(4, 1e8, llama3);
    CHECK(low[0] == 1.0);
    CHECK(std::abs(low[1] - 1.25e-5) < 1e-18);
    // theta 1e6: inv_freq[1] = 1e-3, wavelength 2000π ≈ 6283, between: s = (8192 / 2000π − 1) / 3
    // = 0.10126576..., inv_freq = (1 − s) · 1e-3 / 8 + s · 1e-3 = 1e-3 · (1 + 7s) / 8.
    const auto mid = rope_inv_frequencies(4, 1e6, llama3);
    const double s = (8192.0 / (2000.0 * std::numbers::pi) - 1.0) / 3.0;
    CHECK(std::abs(s - 0.1012657646) < 1e-9);
    CHECK(std::abs(mid[1] - 1e-3 * (1.0 + 7.0 * s) / 8.0) < 1e-18);
    CHECK(std::abs(mid[1] - 2.13607544e-4) < 1e-12);
    // Without `enabled` the scaling is ignored.
    CHECK(rope_inv_frequencies(4, 1e6, RopeScaling{.factor = 8})[1] == rope_inv_frequencies(4, 1e6)[1]);
    // fp32: the same values rounded.
    CHECK(rope_inv_frequencies_f32(4, 1e6, llama3)[1] == static_cast<float>(mid[1]));

    CHECK_THROWS_AS(rope_inv_frequencies(5, 10000.0), std::invalid_argument);
    CHECK_THROWS_AS(rope_inv_frequencies(0, 10000.0), std::invalid_argument);
    CHECK_THROWS_AS(rope_inv_frequencies(4, 0.0), std::invalid_argument);
    CHECK_THROWS_AS(rope_inv_frequencies(4, 1e4, RopeScaling{.factor = 0, .enabled = true}), std::invalid_argument);
    CHECK_THROWS_AS(rope_inv_frequencies(4, 1e4, RopeScaling{.low_freq_factor = 4, .enabled = true}),
                    std::invalid_argument);
}

TEST_CASE("RoPE turns each (x[i], x[i + hd/2]) pair by position · inv_freq[i], q and k only", "[kernels][llama]") {
    // One q head and one kv head of hd 4, theta 10000: inv_freq = [1, 0.01]. Position 2 turns the
    // pairs (x0, x2) by 2 rad and (x1, x3) by 0.02 rad; v passes through.
    const reference::QkvHeads heads{1, 1, 4};
    const std::vector<double> inv_freq = rope_inv_frequencies(4, 10000.0);
    const std::vector<double> qkv{1, 2, 3, 4, -1, 0.5, 2, -3, 7, 8, 9, 10};
    const std::vector<std::int32_t> position{2};
    const auto out = reference::rope(qkv, position, heads, inv_freq);
    const double c2 = std::cos(2.0), s2 = std::sin(2.0), c02 = std::cos(0.02), s02 = std::sin(0.02);
    const std::vector<double> want{1 * c2 - 3 * s2,   2 * c02 - 4 * s02,   3 * c2 + 1 * s2,    4 * c02 + 2 * s02,
                                   -1 * c2 - 2 * s2,  0.5 * c02 + 3 * s02, 2 * c2 - 1 * s2,    -3 * c02 + 0.5 * s02,
                                   7,                 8,                   9,                  10};
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(std::abs(out[i] - want[i]) < 1e-14);

    std::vector<float> host(qkv.begin(), qkv.end());
    const auto inv_freq_f32 = rope_inv_frequencies_f32(4, 10000.0);
    cpu::rope(host.data(), position.data(), inv_freq_f32.data(), 1, 1, 1, 4);
    CHECK(relative_error(host, want) < 1e-6);
}

TEST_CASE("RoPE at position 0 is the identity, keeps every pair's norm and leaves v alone", "[kernels][llama]") {
    const reference::QkvHeads heads{4, 2, 10};
    const std::size_t rows = 9, width = (4 + 2 * 2) * 10;
    const auto inv_freq = rope_inv_frequencies(10, 500000.0);
    const auto inv_freq_f32 = rope_inv_frequencies_f32(10, 500000.0);
    const auto x = random_values(rows * width, 0.0f, 41);
    const auto positions = restarting_positions(rows);  // rows 0 and 5 are at position 0

    const auto out = reference::rope(as_double(x), positions, heads, inv_freq);
    std::vector<float> host = x;
    cpu::rope(host.data(), positions.data(), inv_freq_f32.data(), static_cast<int>(rows), 4, 2, 10);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t h = 0; h < 8; ++h) {
            for (std::size_t i = 0; i < 5; ++i) {
                const std::size_t a = r * width + h * 10 + i, b = a + 5;
                INFO("row " << r << " head " << h << " pair " << i);
                if (h >= 6 || positions[r] == 0) {
                    // v, or no turn: cos 0 = 1 and sin 0 = 0 exactly, so the very same values.
                    CHECK(out[a] == x[a]);
                    CHECK(out[b] == x[b]);
                    CHECK(host[a] == x[a]);
                    CHECK(host[b] == x[b]);
                } else {
                    const double before = std::hypot(static_cast<double>(x[a]), static_cast<double>(x[b]));
                    CHECK(std::abs(std::hypot(out[a], out[b]) - before) < 1e-14);
                    CHECK(std::abs(std::hypot(host[a], host[b]) - before) < 1e-6 * (1.0 + before));
                }
            }
        }
    }
    // The positions did turn the others.
    CHECK(out[width] != x[width]);
}

TEST_CASE("RoPE with Llama 3 scaling turns a blended frequency by position · its scaled inv_freq",
          "[kernels][llama]") {
    // head_dim 4, theta 1e6, factor 8: inv_freq[1] = 1e-3 · (1 + 7s) / 8 with s as above, so
    // position 1000 turns the pair (x1, x3) by 1000 · 2.13607544e-4 ≈ 0.2136 rad, and the pair
    // (x0, x2) by 1000 rad (inv_freq[0] = 1 is a short wavelength, kept).
    const RopeScaling llama3{.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_positions = 8192,
                             .enabled = true};
    const double s = (8192.0 / (2000.0 * std::numbers::pi) - 1.0) / 3.0;
    const double angle = 1000.0 * 1e-3 * (1.0 + 7.0 * s) / 8.0;
    const reference::QkvHeads heads{1, 0, 4};
    const std::vector<std::int32_t> position{1000};
    const auto out = reference::rope({0, 1, 0, 0}, position, heads, rope_inv_frequencies(4, 1e6, llama3));
    CHECK(std::abs(out[1] - std::cos(angle)) < 1e-14);
    CHECK(std::abs(out[3] - std::sin(angle)) < 1e-14);
    CHECK(std::abs(std::atan2(out[3], out[1]) - 0.213607544) < 1e-9);

    std::vector<float> host{0, 1, 0, 0};
    const auto inv_freq_f32 = rope_inv_frequencies_f32(4, 1e6, llama3);
    cpu::rope(host.data(), position.data(), inv_freq_f32.data(), 1, 1, 0, 4);
    CHECK(std::abs(host[1] - std::cos(angle)) < 1e-6);
    CHECK(std::abs(host[3] - std::sin(angle)) < 1e-6);
}

TEST_CASE("RoPE's reference backward is the central differences of its forward and undoes it",
          "[kernels][llama][backward]") {
    const reference::QkvHeads heads{3, 1, 6};
    const std::size_t rows = 4, width = (3 + 2 * 1) * 6;
    const auto inv_freq = rope_inv_frequencies(6, 10000.0);
    const auto positions = restarting_positions(rows);
    const auto x = as_double(random_values(rows * width, 0.0f, 51)), dy = as_double(random_values(rows * width, 0.0f, 52));
    const auto dx = reference::rope_backward(dy, positions, heads, inv_freq);
    check_central_differences(
        x, dy, [&](const std::vector<double>& v) { return reference::rope(v, positions, heads, inv_freq); }, dx);
    // The turn by −angle after the turn by angle: x again.
    const auto back = reference::rope_backward(reference::rope(x, positions, heads, inv_freq), positions, heads, inv_freq);
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(std::abs(back[i] - x[i]) < 1e-14);
}

TEST_CASE("host rope and rope_backward match the reference", "[kernels][llama][backward]") {
    const int rows = 13, n_head = 4, n_kv = 2, hd = 48;
    const reference::QkvHeads heads{n_head, n_kv, hd};
    const std::size_t n = static_cast<std::size_t>(rows) * (n_head + 2 * n_kv) * hd;
    const RopeScaling llama3{.factor = 32, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_positions = 8192,
                             .enabled = true};
    const auto inv_freq = rope_inv_frequencies(hd, 500000.0, llama3);
    const auto inv_freq_f32 = rope_inv_frequencies_f32(hd, 500000.0, llama3);
    const auto positions = restarting_positions(static_cast<std::size_t>(rows));
    const auto x = random_values(n, 0.0f, 61), dy = random_values(n, 0.0f, 62);

    // The angles reach 36 rad at these positions: fp32's angle and inv_freq roundings are
    // ≲ 36 · 2^-23 ≈ 4e-6 rad.
    auto host = x;
    cpu::rope(host.data(), positions.data(), inv_freq_f32.data(), rows, n_head, n_kv, hd);
    CHECK(relative_error(host, reference::rope(as_double(x), positions, heads, inv_freq)) < 2e-5);
    auto dhost = dy;
    cpu::rope_backward(dhost.data(), positions.data(), inv_freq_f32.data(), rows, n_head, n_kv, hd);
    CHECK(relative_error(dhost, reference::rope_backward(as_double(dy), positions, heads, inv_freq)) < 2e-5);
}

// ---- grouped-query attention ------------------------------------------------------------------

namespace {

// qkv of n_kv_head kv heads widened to n_head by repeating each kv head for its group of q heads:
// multi-head attention over it is grouped-query attention over `qkv`, by the definition of the
// grouping (q head h reads kv head h / (n_head / n_kv_head)).
std::vector<double> repeat_kv_heads(const std::vector<double>& qkv, std::size_t seq, const reference::QkvHeads& g) {
    const std::size_t hd = g.head_dim, width = (g.n_head + 2 * g.n_kv_head) * hd, wide = 3 * g.n_head * hd;
    const std::size_t group = g.n_head / g.n_kv_head;
    std::vector<double> out(seq * wide);
    for (std::size_t t = 0; t < seq; ++t) {
        for (std::size_t i = 0; i < g.n_head * hd; ++i) out[t * wide + i] = qkv[t * width + i];
        for (std::size_t h = 0; h < g.n_head; ++h) {
            for (std::size_t i = 0; i < hd; ++i) {
                const std::size_t k = (g.n_head + h / group) * hd + i, v = k + g.n_kv_head * hd;
                out[t * wide + (g.n_head + h) * hd + i] = qkv[t * width + k];
                out[t * wide + (2 * g.n_head + h) * hd + i] = qkv[t * width + v];
            }
        }
    }
    return out;
}

// The gradient of `qkv` (repeat_kv_heads' input) from that of its widened form: q's as it is, a
// kv head's the sum over the q heads its copies went to (the chain rule of the repetition).
std::vector<double> sum_repeated_kv_heads(const std::vector<double>& dwide, std::size_t seq, const reference::QkvHeads& g) {
    const std::size_t hd = g.head_dim, width = (g.n_head + 2 * g.n_kv_head) * hd, wide = 3 * g.n_head * hd;
    const std::size_t group = g.n_head / g.n_kv_head;
    std::vector<double> out(seq * width, 0.0);
    for (std::size_t t = 0; t < seq; ++t) {
        for (std::size_t i = 0; i < g.n_head * hd; ++i) out[t * width + i] = dwide[t * wide + i];
        for (std::size_t h = 0; h < g.n_head; ++h) {
            for (std::size_t i = 0; i < hd; ++i) {
                const std::size_t k = (g.n_head + h / group) * hd + i, v = k + g.n_kv_head * hd;
                out[t * width + k] += dwide[t * wide + (g.n_head + h) * hd + i];
                out[t * width + v] += dwide[t * wide + (2 * g.n_head + h) * hd + i];
            }
        }
    }
    return out;
}

}  // namespace

TEST_CASE("grouped-query attention: the reference is multi-head attention over repeated kv heads, which is GPT-2's",
          "[kernels]") {
    for (const std::size_t kv : {1u, 3u, 6u}) {
        for (const std::size_t seq : {1u, 33u}) {
            INFO("kv heads " << kv << " seq " << seq);
            const reference::QkvHeads g{6, kv, 8};
            const std::size_t width = (g.n_head + 2 * kv) * g.head_dim;
            const auto qkv = as_double(random_values(seq * width, 0.0f, 41));
            const auto wide = repeat_kv_heads(qkv, seq, g);
            const auto got = reference::grouped_causal_attention(qkv, g);
            // GPT-2's attention (its own loops, with dropout off) over the widened heads.
            const ModelConfig m{"mha", 1, static_cast<int>(g.n_head * g.head_dim), static_cast<int>(g.n_head), 8, 64, 1e-5f};
            const auto want = reference::causal_self_attention(wide, reference::dims_of(m, Dropout{}), 0);
            REQUIRE(got.size() == want.size());
            double err = 0.0;
            for (std::size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]));
            CHECK(err < 1e-12);
        }
    }
}

TEST_CASE("grouped-query attention: the fp32 CPU op against the float64 reference", "[kernels]") {
    for (const int kv : {1, 3}) {
        for (const int hd : {48, 80}) {
            for (const int seq : {1, 33}) {
                INFO("kv heads " << kv << " head dim " << hd << " seq " << seq);
                const int n_head = 6, batch = 2, width = (n_head + 2 * kv) * hd;
                const auto qkv = random_values(static_cast<std::size_t>(batch * seq * width), 0.0f, 43);
                std::vector<float> out(static_cast<std::size_t>(batch * seq * n_head * hd));
                std::vector<float> scores(static_cast<std::size_t>(seq * seq));
                cpu::grouped_attention(out.data(), scores.data(), qkv.data(), batch, seq, n_head, kv, hd);
                std::vector<double> want;
                const reference::QkvHeads g{static_cast<std::size_t>(n_head), static_cast<std::size_t>(kv),
                                            static_cast<std::size_t>(hd)};
                for (int b = 0; b < batch; ++b) {
                    const auto first = qkv.begin() + static_cast<std::ptrdiff_t>(b) * seq * width;
                    const auto one = reference::grouped_causal_attention(
                        as_double(std::vector<float>(first, first + static_cast<std::ptrdiff_t>(seq) * width)), g);
                    want.insert(want.end(), one.begin(), one.end());
                }
                CHECK(relative_error(out, want) < 1e-5);
            }
        }
    }
}

TEST_CASE("grouped-query attention's reference backward is the central differences of its forward",
          "[kernels][llama][backward]") {
    for (const std::size_t kv : {1u, 2u, 4u}) {
        INFO("kv heads " << kv);
        const reference::QkvHeads g{4, kv, 3};
        const std::size_t seq = 5, width = (g.n_head + 2 * kv) * g.head_dim;
        const auto qkv = as_double(random_values(seq * width, 0.0f, 47));
        const auto dout = as_double(random_values(seq * g.n_head * g.head_dim, 0.0f, 48));
        check_central_differences(qkv, dout, [&](const std::vector<double>& x) { return reference::grouped_causal_attention(x, g); },
                                  reference::grouped_causal_attention_backward(qkv, dout, g));
    }
}

TEST_CASE("grouped-query attention's host backward against the float64 reference, dk and dv summed over each group",
          "[kernels][llama][backward]") {
    for (const int kv : {1, 3, 6}) {
        for (const int seq : {1, 33}) {
            INFO("kv heads " << kv << " seq " << seq);
            const int n_head = 6, hd = 10, batch = 2, width = (n_head + 2 * kv) * hd;
            const auto qkv = random_values(static_cast<std::size_t>(batch * seq * width), 0.0f, 49);
            const auto dout = random_values(static_cast<std::size_t>(batch * seq * n_head * hd), 0.0f, 50);
            std::vector<float> dqkv(qkv.size(), 99.0f);  // overwritten, whatever it held
            std::vector<float> probs(static_cast<std::size_t>(seq * seq)), grad(probs.size());
            cpu::grouped_attention_backward(dqkv.data(), probs.data(), grad.data(), dout.data(), qkv.data(), batch, seq,
                                            n_head, kv, hd);
            const reference::QkvHeads g{static_cast<std::size_t>(n_head), static_cast<std::size_t>(kv),
                                        static_cast<std::size_t>(hd)};
            std::vector<double> want;
            for (int b = 0; b < batch; ++b) {
                const auto rows = [&](const std::vector<float>& v, int row_width) {
                    const auto first = v.begin() + static_cast<std::ptrdiff_t>(b) * seq * row_width;
                    return as_double(std::vector<float>(first, first + static_cast<std::ptrdiff_t>(seq) * row_width));
                };
                const auto one = reference::grouped_causal_attention_backward(rows(qkv, width), rows(dout, n_head * hd), g);
                want.insert(want.end(), one.begin(), one.end());
            }
            CHECK(relative_error(dqkv, want) < 1e-5);
        }
    }
}

TEST_CASE("grouped-query attention's backward: the fp32 CPU op against the float64 multi-head backward over repeated "
          "kv heads, dk and dv summed over each group",
          "[kernels]") {
    // Multi-query, 2 and 3 kv heads of 6, and 6 (multi-head attention, which GPT-2's op computes).
    for (const int kv : {1, 2, 3, 6}) {
        for (const int hd : {8, 48}) {
            for (const int seq : {1, 33}) {
                INFO("kv heads " << kv << " head dim " << hd << " seq " << seq);
                const int n_head = 6, batch = 2, width = (n_head + 2 * kv) * hd, c = n_head * hd;
                const auto qkv = random_values(static_cast<std::size_t>(batch * seq * width), 0.0f, 47);
                const auto dout = random_values(static_cast<std::size_t>(batch * seq * c), 0.0f, 53);
                std::vector<float> dqkv(qkv.size());
                std::vector<float> probs(static_cast<std::size_t>(seq * seq)), grad(probs.size());
                cpu::grouped_attention_backward(dqkv.data(), probs.data(), grad.data(), dout.data(), qkv.data(), batch,
                                                seq, n_head, kv, hd);
                const reference::QkvHeads g{static_cast<std::size_t>(n_head), static_cast<std::size_t>(kv),
                                            static_cast<std::size_t>(hd)};
                const ModelConfig m{"mha", 1, c, n_head, 8, 64, 1e-5f};
                const reference::Dims d = reference::dims_of(m, Dropout{});
                std::vector<double> want;
                for (int b = 0; b < batch; ++b) {
                    const auto slice = [&](const std::vector<float>& v, int row_width) {
                        const auto first = v.begin() + static_cast<std::ptrdiff_t>(b) * seq * row_width;
                        return as_double(std::vector<float>(first, first + static_cast<std::ptrdiff_t>(seq) * row_width));
                    };
                    const auto wide = repeat_kv_heads(slice(qkv, width), static_cast<std::size_t>(seq), g);
                    reference::Rows p;
                    reference::causal_self_attention(wide, d, 0, &p);
                    const auto dwide = reference::causal_self_attention_backward(wide, p, slice(dout, c), d, 0);
                    const auto one = sum_repeated_kv_heads(dwide, static_cast<std::size_t>(seq), g);
                    want.insert(want.end(), one.begin(), one.end());
                }
                CHECK(relative_error(dqkv, want) < 1e-5);
            }
        }
    }
}
