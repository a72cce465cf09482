#pragma once
// What the tests of the host ops against the float64 reference share (test_cpu_backward.cpp,
// test_llama_ops.cpp): seeded normal inputs, and the error measure they are judged by.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch_test_macros.hpp>

namespace sweetspot::test {

// n values drawn from N(offset, 1) with `seed`.
inline std::vector<float> random_values(std::size_t n, float offset, std::uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> dist(offset, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

inline std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// max |got − want| / max |want|, over the elements.
inline double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    double err = 0.0, scale = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
        scale = std::max(scale, std::abs(want[i]));
    }
    REQUIRE(scale > 0.0);
    return err / scale;
}

}  // namespace sweetspot::test
