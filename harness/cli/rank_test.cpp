#include "harness/cli/rank_test.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <vector>

namespace sweetspot {
namespace {

// Exact counts stay cheap up to this many pairs (a table of (m + 1)(n + 1)(mn + 1) doubles).
constexpr std::size_t kMaxExactPairs = 400;

// P(U ≤ u) under the null hypothesis for samples of m and n without ties: the number of
// arrangements of the ranks with U ≤ u over all C(m + n, m) of them. ways[i][j][k] counts the
// arrangements of i x-values and j y-values with U = k (U: pairs with the x-value above).
double exact_cdf(std::size_t m, std::size_t n, std::size_t u) {
    const std::size_t top = m * n;
    std::vector<std::vector<std::vector<double>>> ways(
        m + 1, std::vector<std::vector<double>>(n + 1, std::vector<double>(top + 1, 0.0)));
    for (std::size_t i = 0; i <= m; ++i)
        for (std::size_t j = 0; j <= n; ++j) {
            if (i == 0 || j == 0) {
                ways[i][j][0] = 1;
                continue;
            }
            // The largest value is an x (above all j y-values) or a y.
            for (std::size_t k = 0; k <= i * j; ++k) ways[i][j][k] = (k >= j ? ways[i - 1][j][k - j] : 0) + ways[i][j - 1][k];
        }
    double below = 0, all = 0;
    for (std::size_t k = 0; k <= top; ++k) {
        all += ways[m][n][k];
        if (k <= u) below += ways[m][n][k];
    }
    return below / all;
}

}  // namespace

double mann_whitney_p(std::span<const double> x, std::span<const double> y) {
    const std::size_t m = x.size(), n = y.size();
    if (m == 0 || n == 0) return 1.0;
    double u = 0;  // pairs with the x-value above the y-value, ties counting one half
    for (const double a : x)
        for (const double b : y) u += a > b ? 1.0 : a == b ? 0.5 : 0.0;

    std::map<double, std::size_t> counts;  // how often each value occurs, for the tie correction
    for (const double a : x) ++counts[a];
    for (const double b : y) ++counts[b];
    const bool ties = counts.size() < m + n;
    if (!ties && m * n <= kMaxExactPairs) {
        const auto whole = static_cast<std::size_t>(u);
        const double lower = exact_cdf(m, n, whole);
        // By symmetry P(U ≥ u) = P(U ≤ mn − u).
        const double upper = exact_cdf(m, n, m * n - whole);
        return std::min(1.0, 2.0 * std::min(lower, upper));
    }
    const double total = static_cast<double>(m + n);
    double tie_sum = 0;
    for (const auto& [value, t] : counts) tie_sum += std::pow(static_cast<double>(t), 3) - static_cast<double>(t);
    const double mean = static_cast<double>(m * n) / 2.0;
    const double variance =
        static_cast<double>(m * n) / 12.0 * ((total + 1.0) - tie_sum / (total * (total - 1.0)));
    if (variance <= 0) return 1.0;  // every value the same
    const double z = std::max(0.0, std::abs(u - mean) - 0.5) / std::sqrt(variance);
    return std::min(1.0, std::erfc(z / std::sqrt(2.0)));
}

}  // namespace sweetspot
