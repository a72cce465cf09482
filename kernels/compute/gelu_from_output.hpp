#pragma once
// GPT-2's GELU's derivative from its output, for Tempo's in-place GELU (the inplace_gelu fusion,
// variant.hpp): the training step keeps y = gelu(x), which the MLP's output projection needs for
// its weight gradient anyway, and one bit per element instead of the pre-activation x. One
// definition for the host's operation (cpu_ops) and the GPU's kernel (gelu.cu).
//
// gelu(x) = 0.5·x·(1 + tanh a), a = √(2/π)·(x + 0.044715·x³), falls from 0 (x → −∞) to its
// minimum kMinimum at x0 = kMinimumX and rises after it: every y ≥ kMinimum is the output of one
// x ≥ x0 and, when y < 0, of one more x < x0. The bit says which (left_of_minimum); with it, y
// gives x back and x gives gelu'(x).
//
// Near x0 that is ill-conditioned: gelu' vanishes there, so the x of a y perturbed by δ moves by
// √(2δ / gelu''(x0)) and gelu' by √(2·gelu''(x0)·δ). In general, on one branch d(gelu'²)/dy =
// 2·gelu'', so |gelu'(x̂)² − gelu'(x)²| ≤ 2·H·δ with H = max |gelu''| = √(2/π): y's own rounding δ
// moves the derivative by at most min(√(2Hδ), 2Hδ / |gelu'(x)|) (test_cpu_backward.cpp measures it).
//
// Inverting: y is matched by Newton's method in fp32 from a guess that two steps make exact to
// fp32 rounding (test_cpu_backward.cpp), in one of two variables. Around the minimum and right of
// it, in S = ±√(y − kMinimum) (the sign the branch's): S is smooth through x0, where it is
// √(gelu''(x0) / 2)·(x − x0) to first order, so the steps stay finite where gelu' vanishes. Left
// of x ≈ −1.5 (y > kTailAbove), where y tends to 0 as x·e^(2a), in log(−y). σ(2a) = 0.5·(1 +
// tanh a) and σ(−2a) are computed from e^(−2|a|), which keeps the digits that 1 ± tanh a lose to
// cancellation in the tails.
#include <cmath>
#include <cstdint>

#include "base/host_device.hpp"

namespace sweetspot::gelu_output {

// x0, where gelu'(x0) = 0, gelu(x0), gelu''(x0), and gelu'''(x0) / (3·gelu''(x0)²), the second
// order term of x0's inverse x − x0 = S·√(2 / gelu''(x0)) − that·S² (from 40-digit arithmetic).
inline constexpr float kMinimumX = -0.75246142f;
inline constexpr float kMinimum = -0.17004075f;
inline constexpr float kCurvature = 0.43040009f;
inline constexpr float kInverseSecondOrder = 1.3946217f;
// Left of x0, outputs above this (x below about −1.5) are inverted in log(−y).
inline constexpr float kTailAbove = -0.1f;
// From here up gelu'(x) is 1 in fp32: gelu(x) < x, so x ≥ 10, where 1 − σ(2a) < e^−87.
inline constexpr float kLinearFrom = 10.0f;

// The bit kept beside y: whether x lies left of the minimum (the branch where y falls as x rises).
SWEETSPOT_HOST_DEVICE inline bool left_of_minimum(float x) { return x < kMinimumX; }

// The bits of n elements, 8 to a byte: element i is bit i % 8 (the least significant first) of
// byte i / 8; the last byte's bits past n are 0.
SWEETSPOT_HOST_DEVICE inline std::int64_t branch_bytes(std::int64_t n) { return (n + 7) / 8; }
SWEETSPOT_HOST_DEVICE inline bool branch_bit(const std::uint8_t* bits, std::int64_t i) {
    return ((bits[i / 8] >> (i % 8)) & 1u) != 0;
}

namespace detail {

inline constexpr float kSqrt2OverPi = 0.7978845608f;
inline constexpr float kCubic = 0.044715f;
// dx/dS at x0: √(2 / gelu''(x0)).
inline constexpr float kSlopeAtMinimum = 2.1556528f;
// Below this u = gelu(x) − kMinimum (|x − x0| ≲ 2e-3) fp32's rounding of gelu (ulp 2^-26 near the
// minimum) is a visible part of u, and the slope dx/dS = 2√u / gelu' is taken as its value at x0
// (within 0.5 % there) rather than from two noisy small numbers.
inline constexpr float kNoisyBelow = 1e-6f;

SWEETSPOT_HOST_DEVICE inline float tanh_argument(float x) { return kSqrt2OverPi * (x + kCubic * x * x * x); }

// σ(2a) and σ(−2a) = 1 − σ(2a), each to fp32's relative precision.
struct Sigmoids {
    float up, down;
};
SWEETSPOT_HOST_DEVICE inline Sigmoids sigmoids(float a) {
    const float e = expf(-2.0f * fabsf(a));  // ≤ 1: nothing overflows
    const float large = 1.0f / (1.0f + e), small = e * large;
    return a >= 0.0f ? Sigmoids{large, small} : Sigmoids{small, large};
}

// gelu'(x) = σ(2a) + 2x·σ(2a)·σ(−2a)·√(2/π)·(1 + 3·0.044715·x²), since 1 − tanh² a = 4σ(2a)σ(−2a).
SWEETSPOT_HOST_DEVICE inline float derivative_at(float x, Sigmoids s) {
    return s.up * (1.0f + 2.0f * x * s.down * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x));
}
SWEETSPOT_HOST_DEVICE inline float derivative_at(float x) { return derivative_at(x, sigmoids(tanh_argument(x))); }

// Right of x0, or left of it with y ≤ kTailAbove: Newton in S.
SWEETSPOT_HOST_DEVICE inline float derivative_near(float y, bool left) {
    const float u = fmaxf(y - kMinimum, 0.0f), s = sqrtf(u);
    // The guess: left, x0's inverse to second order; right, the smaller of its first order and
    // y / σ(2a(y)), one step of x = y / σ(2a(x)) from x = y. Both overestimate x there, the first
    // less near x0, the second less from y ≈ −0.1 up.
    float x = left ? kMinimumX - s * kSlopeAtMinimum - kInverseSecondOrder * u
                   : fminf(kMinimumX + s * kSlopeAtMinimum, y / sigmoids(tanh_argument(y)).up);
    const float slope_at_minimum = left ? -kSlopeAtMinimum : kSlopeAtMinimum;
    for (int step = 0; step < 2; ++step) {
        const Sigmoids sg = sigmoids(tanh_argument(x));
        const float ux = fmaxf(x * sg.up - kMinimum, 0.0f), sx = sqrtf(ux);
        // dS/dx = gelu'(x) / (2√u) on either branch (with S's sign).
        const float dx_ds = ux > kNoisyBelow ? 2.0f * sx / derivative_at(x, sg) : slope_at_minimum;
        x -= (sx - s) * dx_ds;
        x = left ? fminf(x, kMinimumX) : fmaxf(x, kMinimumX);
    }
    return derivative_at(x);
}

// Left of x0 with kTailAbove < y < 0: Newton in L = log(−y) = log(−x) + log σ(2a), where
// log σ(2a) = 2a − log(1 + e^(2a)) (a < 0) and dL/dx = gelu'/gelu = (1 + 2x·σ(−2a)·√(2/π)·(1 +
// 3·0.044715·x²)) / x.
SWEETSPOT_HOST_DEVICE inline float derivative_tail(float y) {
    const float target = logf(-y);
    // The guess: the cubic 2·√(2/π)·(0.044715·x³ + x) = log(−y) − log(−x) that drops the
    // log(1 + e^(2a)) term, by Cardano's formula, twice, log(−x) taken at the last root (first at
    // the region's edge). Dropping a positive term puts the root left of x, where the steps of
    // Newton's method on this concave L approach it from the left without overshooting.
    float x = -1.5f;
    for (int round = 0; round < 2; ++round) {
        // x³ + p·x = r.
        const float p = 1.0f / kCubic, r = (target - logf(-x)) / (2.0f * kSqrt2OverPi * kCubic);
        const float d = sqrtf(0.25f * r * r + p * p * p / 27.0f);
        x = fminf(cbrtf(0.5f * r + d) + cbrtf(0.5f * r - d), -1.0f);
    }
    for (int step = 0; step < 2; ++step) {
        const float a = tanh_argument(x);
        const Sigmoids sg = sigmoids(a);
        const float log_y = logf(-x) + 2.0f * a - log1pf(expf(2.0f * a));
        const float dlog_y = (1.0f + 2.0f * x * sg.down * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x)) / x;
        x = fminf(x - (log_y - target) / dlog_y, kMinimumX);
    }
    return derivative_at(x);
}

}  // namespace detail

// In a 16-bit dtype y takes 65536 values, so gelu' of its inverse on each branch is a table of
// 2 × 65536 floats (the right branch's first, then the left's, each indexed by y's bits), made
// once from derivative_from_output below: the backward then reads one cached float an element
// where the inversion costs tens of transcendental operations, and gives the same values.
inline constexpr std::int64_t kDerivativeTableSize = 2 * 65536;
SWEETSPOT_HOST_DEVICE inline std::int64_t derivative_table_index(std::uint16_t y_bits, bool left) {
    return (left ? 65536 : 0) + y_bits;
}

// gelu'(x) for the x on the branch `left` (left_of_minimum(x)) with gelu(x) = y. A y below
// kMinimum (rounded past it) counts as kMinimum; y ≥ 0 on the left branch is x → −∞, where
// gelu' → 0 (the forward's fp32 y is 0 below x ≈ −5.2); NaN stays NaN.
SWEETSPOT_HOST_DEVICE inline float derivative_from_output(float y, bool left) {
    if (y != y) return y;
    if (left) {
        if (y >= 0.0f) return 0.0f;
        if (y > kTailAbove) return detail::derivative_tail(y);
    } else if (y >= kLinearFrom) {
        return 1.0f;
    }
    return detail::derivative_near(y, left);
}

}  // namespace sweetspot::gelu_output
