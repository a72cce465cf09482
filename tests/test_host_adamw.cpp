// The host's optimizer step (kernels/compute/host_adamw.hpp) against cpu::adamw, the arithmetic
// the GPU's AdamW repeats line for line.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/host_adamw.hpp"
#include "kernels/model/dtype.hpp"

using namespace sweetspot;

namespace {

std::vector<float> uniform(std::size_t n, float lo, float hi, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> out(n);
    for (float& x : out) x = d(rng);
    return out;
}

std::vector<std::uint16_t> to_bits(const std::vector<float>& values, DType dtype) {
    std::vector<std::uint16_t> bits(values.size());
    convert_from_f32(values, dtype, bits.data());
    return bits;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("host_adamw gives cpu::adamw's master weights and moments bit for bit, and the weights rounded to the dtype",
          "[host_adamw]") {
    // Past several of parallel_for's chunks (256 Ki elements), so that several threads each take a part, and odd.
    const std::int64_t n = (std::int64_t{1} << 21) + 37;
    const auto size = static_cast<std::size_t>(n);
    cpu::AdamW a{.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .step = 3,
                 .grad_scale = 0.25f};
    const auto master0 = uniform(size, -1.0f, 1.0f, 1), m0 = uniform(size, -0.01f, 0.01f, 2),
               v0 = uniform(size, 0.0f, 1e-4f, 3);
    const auto gradient = uniform(size, -2.0f, 2.0f, 4);

    for (const DType dtype : {DType::fp16, DType::bf16}) {
        INFO(enum_name(dtype));
        // The gradient as the GPU stores it, and cpu::adamw on its widened values.
        const auto grad_bits = to_bits(gradient, dtype);
        const auto widened = convert_to_f32(grad_bits.data(), size, dtype);
        auto want_master = master0, want_m = m0, want_v = v0;
        cpu::adamw(want_master.data(), widened.data(), want_m.data(), want_v.data(), n, a);

        auto master = master0, m = m0, v = v0;
        std::vector<std::uint16_t> weights(size, 0);
        host_adamw(dtype, weights.data(), master.data(), grad_bits.data(), m.data(), v.data(), n, a);
        CHECK(same_bits(master, want_master));
        CHECK(same_bits(m, want_m));
        CHECK(same_bits(v, want_v));
        CHECK(weights == to_bits(want_master, dtype));
    }

    // fp32: the weights are the master.
    auto want = master0, want_m = m0, want_v = v0;
    cpu::adamw(want.data(), gradient.data(), want_m.data(), want_v.data(), n, a);
    auto weights = master0, m = m0, v = v0;
    host_adamw(DType::fp32, weights.data(), nullptr, gradient.data(), m.data(), v.data(), n, a);
    CHECK(same_bits(weights, want));
    CHECK(same_bits(m, want_m));
    CHECK(same_bits(v, want_v));

    std::vector<std::uint16_t> bits(4);
    CHECK_THROWS_AS(host_adamw(DType::bf16, bits.data(), nullptr, bits.data(), m.data(), v.data(), 4, a),
                    std::invalid_argument);
}

TEST_CASE("host_adamw rounds bf16 to nearest even, overflows to infinity and keeps a NaN a NaN, as the conversions do",
          "[host_adamw]") {
    // With lr 0 the master values stay (but for -0, which the decay's subtraction of 0 makes +0):
    // the weights are the updated master rounded.
    const std::vector<float> master = {1.0f + 1.0f / 256,  // halfway between two bf16: to even (1.0)
                                       1.0f + 3.0f / 256,  // halfway: to even (1 + 4/256)
                                       3.4e38f,            // past halfway above bf16's largest: infinity
                                       std::bit_cast<float>(0x7fa00001u),  // a signalling NaN: quieted
                                       -0.0f, 1e-40f};                     // signed zero, a subnormal
    const auto n = static_cast<std::int64_t>(master.size());
    cpu::AdamW a{.lr = 0.0f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.0f, .step = 1};
    std::vector<float> m(master.size(), 0.0f), v(master.size(), 0.0f), kept = master;
    const std::vector<std::uint16_t> zero(master.size(), 0);
    std::vector<std::uint16_t> weights(master.size());
    host_adamw(DType::bf16, weights.data(), kept.data(), zero.data(), m.data(), v.data(), n, a);
    for (std::size_t i = 0; i < master.size(); ++i) {
        INFO("element " << i);
        CHECK(weights[i] == float_to_bf16_bits(kept[i]));
    }
    CHECK(weights[0] == 0x3f80);
    CHECK(weights[1] == 0x3f82);
    CHECK(weights[2] == 0x7f80);
}

TEST_CASE("host_adamw over a unit's tensors gives each its own cpu::adamw and leaves the gaps between them alone",
          "[host_adamw]") {
    // Three tensors with gaps between them, the first two ending inside one of parallel_for's
    // chunks (256 Ki elements), so that one chunk spans all three; the middle one tiny and without
    // weight decay, as a bias is.
    struct Part {
        std::int64_t offset, numel;
        float decay;
    };
    const std::vector<Part> parts = {{0, 300'001, 0.1f}, {300'032, 5, 0.0f}, {300'064, 600'011, 0.1f}};
    const std::int64_t total = parts.back().offset + parts.back().numel + 17;
    const auto size = static_cast<std::size_t>(total);
    const auto master0 = uniform(size, -1.0f, 1.0f, 5), m0 = uniform(size, -0.01f, 0.01f, 6),
               v0 = uniform(size, 0.0f, 1e-4f, 7), gradient = uniform(size, -2.0f, 2.0f, 8);
    std::vector<HostAdamwTensor> tensors;
    for (const Part& p : parts)
        tensors.push_back({p.offset, p.numel,
                           cpu::AdamW{.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                      .weight_decay = p.decay, .step = 4, .grad_scale = 0.5f}});
    // Each tensor alone through cpu::adamw; the gaps keep their values.
    const auto expect = [&](const std::vector<float>& grad, std::vector<float>& master, std::vector<float>& m,
                            std::vector<float>& v) {
        for (std::size_t t = 0; t < parts.size(); ++t) {
            const auto at = static_cast<std::size_t>(parts[t].offset);
            cpu::adamw(master.data() + at, grad.data() + at, m.data() + at, v.data() + at, parts[t].numel,
                       tensors[t].a);
        }
    };

    const auto grad_bits = to_bits(gradient, DType::bf16);
    auto want_master = master0, want_m = m0, want_v = v0;
    expect(convert_to_f32(grad_bits.data(), size, DType::bf16), want_master, want_m, want_v);
    auto master = master0, m = m0, v = v0;
    const std::uint16_t untouched = 0x1234;
    std::vector<std::uint16_t> weights(size, untouched);
    host_adamw(DType::bf16, weights.data(), master.data(), grad_bits.data(), m.data(), v.data(), tensors);
    CHECK(same_bits(master, want_master));
    CHECK(same_bits(m, want_m));
    CHECK(same_bits(v, want_v));
    const auto rounded = to_bits(want_master, DType::bf16);
    std::int64_t written = 0, kept = 0;
    for (std::size_t i = 0; i < size; ++i) {
        const auto in_a_tensor = std::any_of(parts.begin(), parts.end(), [&](const Part& p) {
            return static_cast<std::int64_t>(i) >= p.offset && static_cast<std::int64_t>(i) < p.offset + p.numel;
        });
        if (in_a_tensor) written += weights[i] == rounded[i];
        else kept += weights[i] == untouched;
    }
    CHECK(written == 300'001 + 5 + 600'011);
    CHECK(kept == total - written);

    // fp32: the weights are the master, the gaps untouched.
    auto want = master0;
    want_m = m0;
    want_v = v0;
    expect(gradient, want, want_m, want_v);
    auto fp32_weights = master0;
    m = m0;
    v = v0;
    host_adamw(DType::fp32, fp32_weights.data(), nullptr, gradient.data(), m.data(), v.data(), tensors);
    CHECK(same_bits(fp32_weights, want));
    CHECK(same_bits(m, want_m));
    CHECK(same_bits(v, want_v));
}
