#pragma once
// 64-bit size arithmetic that refuses to wrap. Element counts and byte sizes are computed from
// shapes a user wrote (matrix files, checkpoints' config.json); a wrapped size would be a wrong,
// often negative, answer that later code trusts, so it is an error instead.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sweetspot {

// a · b and a + b, or nothing when the exact result does not fit in 64 bits.
inline std::optional<std::int64_t> try_mul(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
    return r;
}

inline std::optional<std::int64_t> try_add(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
    return r;
}

// Throws std::overflow_error naming `what` (e.g. "the weights of model 'x'") when the exact
// result does not fit in 64 bits.
[[noreturn]] inline void throw_overflow(std::string_view what, std::int64_t a, char op, std::int64_t b) {
    throw std::overflow_error(std::string(what) + " overflows 64 bits (" + std::to_string(a) + " " + op + " " +
                              std::to_string(b) + ")");
}

inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, std::string_view what) {
    if (const auto r = try_mul(a, b)) return *r;
    throw_overflow(what, a, '*', b);
}

inline std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view what) {
    if (const auto r = try_add(a, b)) return *r;
    throw_overflow(what, a, '+', b);
}

}  // namespace sweetspot
