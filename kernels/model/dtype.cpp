#include "kernels/model/dtype.hpp"

#include "base/parallel_for.hpp"

#include <cstring>

#include <bit>

// Integer-only conversions: no FPU rounding mode, flush-to-zero setting or compiler intrinsic
// is involved, so the same input gives the same bits on every host and can be reproduced
// line for line in a GPU kernel.
namespace sweetspot {

namespace {

constexpr std::uint32_t kF32SignMask = 0x80000000u;
constexpr std::uint32_t kF32AbsMask = 0x7FFFFFFFu;
constexpr std::uint32_t kF32Inf = 0x7F800000u;

// Shifts `value` right by `shift` bits (1..31), rounding to nearest with ties to even.
std::uint32_t shift_right_rne(std::uint32_t value, int shift) {
    const std::uint32_t kept = value >> shift;
    const std::uint32_t rest = value & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1);
    return (rest > half || (rest == half && (kept & 1u))) ? kept + 1u : kept;
}

}  // namespace

std::uint16_t float_to_fp16_bits(float f) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
    const auto sign = static_cast<std::uint16_t>((bits & kF32SignMask) >> 16);
    const std::uint32_t abs = bits & kF32AbsMask;

    if (abs > kF32Inf) {  // NaN: quiet, keep the top payload bits
        return static_cast<std::uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x03FFu));
    }
    // 65520 is halfway between 65504 (the largest fp16, odd mantissa) and 65536: ties to even
    // round it, and everything above, to Inf.
    if (abs >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
    if (abs >= 0x38800000u) {  // >= 2^-14: normal fp16; rebias the exponent from 127 to 15
        return static_cast<std::uint16_t>(sign | shift_right_rne(abs - (112u << 23), 13));
    }
    // 2^-25 is halfway between 0 and the smallest subnormal 2^-24; ties to even give 0.
    if (abs <= 0x33000000u) return sign;
    // fp16 subnormal: the value in units of 2^-24 is the full fp32 significand shifted right by
    // 126 - exponent (14..24 here). A round up to 0x400 is exactly the smallest normal.
    const int exponent = static_cast<int>(abs >> 23);
    const std::uint32_t significand = (abs & 0x007FFFFFu) | 0x00800000u;
    return static_cast<std::uint16_t>(sign | shift_right_rne(significand, 126 - exponent));
}

float fp16_bits_to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1Fu;
    std::uint32_t mantissa = h & 0x03FFu;

    if (exponent == 0x1Fu) return std::bit_cast<float>(sign | kF32Inf | (mantissa << 13));
    if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    if (mantissa == 0) return std::bit_cast<float>(sign);
    // Subnormal fp16 (mantissa · 2^-24) is a normal fp32: shift the leading one up to the
    // implicit bit position, lowering the exponent by one per shift.
    std::uint32_t f32_exponent = 127u - 14u;
    while ((mantissa & 0x0400u) == 0) {
        mantissa <<= 1;
        --f32_exponent;
    }
    return std::bit_cast<float>(sign | (f32_exponent << 23) | ((mantissa & 0x03FFu) << 13));
}

void convert_from_f32(std::span<const float> src, DType to, void* dst) {
    const auto n = static_cast<std::int64_t>(src.size());
    switch (to) {
        case DType::fp32:
            std::memcpy(dst, src.data(), src.size_bytes());
            return;
        case DType::fp16:
        case DType::bf16: {
            auto* out = static_cast<std::uint16_t*>(dst);
            const bool bf16 = to == DType::bf16;
            parallel_for(n, [&](std::int64_t begin, std::int64_t end) {
                for (std::int64_t i = begin; i < end; ++i)
                    out[i] = bf16 ? float_to_bf16_bits(src[static_cast<std::size_t>(i)])
                                  : float_to_fp16_bits(src[static_cast<std::size_t>(i)]);
            });
            return;
        }
    }
}

std::vector<float> convert_to_f32(const void* src, std::size_t n, DType from) {
    std::vector<float> out(n);
    if (from == DType::fp32) {
        std::memcpy(out.data(), src, n * sizeof(float));
        return out;
    }
    const auto* in = static_cast<const std::uint16_t*>(src);
    const bool bf16 = from == DType::bf16;
    parallel_for(static_cast<std::int64_t>(n), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
            const auto k = static_cast<std::size_t>(i);
            out[k] = bf16 ? bf16_bits_to_float(in[k]) : fp16_bits_to_float(in[k]);
        }
    });
    return out;
}

void round_through_dtype(std::span<float> values, DType dtype) {
    if (dtype == DType::fp32) return;
    const bool bf16 = dtype == DType::bf16;
    parallel_for(static_cast<std::int64_t>(values.size()), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
            float& v = values[static_cast<std::size_t>(i)];
            v = bf16 ? bf16_bits_to_float(float_to_bf16_bits(v)) : fp16_bits_to_float(float_to_fp16_bits(v));
        }
    });
}

}  // namespace sweetspot
