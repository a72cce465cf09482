#pragma once
// Element types a cell can compute in. Weights are stored in the cell's dtype; the host
// backend computes in fp32 only.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/named_enum.hpp"

namespace sweetspot {

enum class DType { fp32, fp16, bf16 };

template <>
struct EnumNames<DType> {
    static constexpr std::array<EnumName<DType>, 3> list = {{
        {DType::fp32, "fp32"}, {DType::fp16, "fp16"}, {DType::bf16, "bf16"}}};
};

constexpr std::size_t dtype_size(DType t) { return t == DType::fp32 ? 4 : 2; }

// Round-to-nearest-even conversions used when synthetic or loaded fp32 weights are stored in
// a half-precision cell; bit-exact on every machine so weights are identical everywhere.
// Overflow rounds to Inf and a NaN stays a NaN (quieted); fp16 subnormals are kept, not flushed.
// The bf16 pair is inline and branch-free, so that loops over whole tensors (host_adamw) vectorise.
// bf16 is the top half of an fp32: rounding adds just under half a unit of the kept part, plus its
// lowest bit for ties to even, and a carry out of the mantissa bumps the exponent, up to Inf past
// the largest bf16. Rounding a NaN could carry it into Inf (payload only in the low half), so a NaN
// gets the quiet bit instead.
inline std::uint16_t float_to_bf16_bits(float f) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
    const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16, quiet_nan = (bits >> 16) | 0x40u;
    return static_cast<std::uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}
inline float bf16_bits_to_float(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }
std::uint16_t float_to_fp16_bits(float f);
float fp16_bits_to_float(std::uint16_t h);

// Writes `src` into `dst` (src.size() elements of type `to`), rounding to nearest even.
void convert_from_f32(std::span<const float> src, DType to, void* dst);
// The inverse: `n` values of type `from` at `src`, widened to float (exactly).
std::vector<float> convert_to_f32(const void* src, std::size_t n, DType from);
// Rounds every value to `dtype` and back to float, in place: what a half-precision cell's
// weights are, seen by an fp32 reference.
void round_through_dtype(std::span<float> values, DType dtype);

}  // namespace sweetspot
