#include "harness/cli/rank_test.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace sweetspot {
namespace {

// Exact counts stay cheap up to this many pairs (a table of (m + 1)(n + 1)(mn + 1) doubles).
constexpr std::size_t kMaxExactPairs = 400;

// How many arrangements of the ranks of m x-values and n y-values without ties give U = k, for
// k = 0 ... mn (U: pairs with the x-value above); all of them add up to C(m + n, m).
// ways[i][j][k] counts them for i x-values and j y-values.
std::vector<double> exact_counts(std::size_t m, std::size_t n) {
    std::vector<std::vector<std::vector<double>>> ways(
        m + 1, std::vector<std::vector<double>>(n + 1, std::vector<double>(m * n + 1, 0.0)));
    for (std::size_t i = 0; i <= m; ++i)
        for (std::size_t j = 0; j <= n; ++j) {
            if (i == 0 || j == 0) {
                ways[i][j][0] = 1;
                continue;
            }
            // The largest value is an x (above all j y-values) or a y.
            for (std::size_t k = 0; k <= i * j; ++k) ways[i][j][k] = (k >= j ? ways[i - 1][j][k - j] : 0) + ways[i][j - 1][k];
        }
    return ways[m][n];
}

// P(U <= u) under the null hypothesis, from exact_counts.
double exact_cdf(const std::vector<double>& ways, std::size_t u) {
    return std::accumulate(ways.begin(), ways.begin() + static_cast<std::ptrdiff_t>(u) + 1, 0.0) /
           std::accumulate(ways.begin(), ways.end(), 0.0);
}

// The z with P(Z > z) = tail for a standard normal Z (tail <= 1/2), by bisection: the standard
// library has the tail (erfc) but not its inverse.
double normal_upper_quantile(double tail) {
    double lo = 0, hi = 40;
    for (int step = 0; step < 200; ++step) {
        const double mid = (lo + hi) / 2;
        (std::erfc(mid / std::sqrt(2.0)) / 2 > tail ? lo : hi) = mid;
    }
    return (lo + hi) / 2;
}

// The largest k with P(U <= k − 1) <= alpha / 2 under the null hypothesis; 0 when there is none.
std::uint64_t interval_rank(std::size_t m, std::size_t n, double alpha) {
    const std::size_t pairs = m * n;
    if (pairs <= kMaxExactPairs) {
        const std::vector<double> ways = exact_counts(m, n);
        std::uint64_t k = 0;
        while (k <= pairs && exact_cdf(ways, k) <= alpha / 2) ++k;
        return k;
    }
    // P(U <= k − 1) ≈ Φ((k − 1 + ½ − mn/2) / σ), with the continuity correction.
    const double half = static_cast<double>(pairs) / 2;
    const double sigma = std::sqrt(static_cast<double>(pairs) * static_cast<double>(m + n + 1) / 12.0);
    const double k = std::floor(half + 0.5 - normal_upper_quantile(alpha / 2) * sigma);
    return k < 1 ? 0 : static_cast<std::uint64_t>(k);
}

// Doubles as unsigned integers in the same order, so that bisection can step through every double
// between two: positives above negatives, negatives reversed.
constexpr std::uint64_t kSign = std::uint64_t{1} << 63;
std::uint64_t ordered(double v) {
    const auto bits = std::bit_cast<std::uint64_t>(v);
    return bits & kSign ? ~bits : bits | kSign;
}
double from_ordered(std::uint64_t key) { return std::bit_cast<double>(key & kSign ? key & ~kSign : ~key); }

// The k-th smallest (from 1) of the differences y_j − x_i of sorted x and y, without listing the
// m·n of them (pooled samples of thousands of iterations would take gigabytes): the smallest double
// t with at least k differences <= t, which is one of them, by bisection over the doubles.
double kth_difference(const std::vector<double>& x, const std::vector<double>& y, std::uint64_t k) {
    const auto at_most = [&](double t) {
        std::uint64_t count = 0;
        std::size_t first = x.size();  // x[first...] are the x-values with y_j − x <= t
        for (auto b = y.rbegin(); b != y.rend(); ++b) {
            while (first > 0 && *b - x[first - 1] <= t) --first;
            count += x.size() - first;
        }
        return count;
    };
    std::uint64_t lo = ordered(y.front() - x.back()), hi = ordered(y.back() - x.front());
    while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        if (at_most(from_ordered(mid)) >= k) hi = mid;
        else lo = mid + 1;
    }
    return from_ordered(lo);
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
        const std::vector<double> ways = exact_counts(m, n);
        const auto whole = static_cast<std::size_t>(u);
        // By symmetry P(U >= u) = P(U <= mn − u).
        return std::min(1.0, 2.0 * std::min(exact_cdf(ways, whole), exact_cdf(ways, m * n - whole)));
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

double smallest_two_sided_p(std::size_t m, std::size_t n) {
    if (m == 0 || n == 0) return 1.0;
    // C(m + n, m) as the product of (larger + i) / i: every partial product is a whole number.
    const std::size_t fewer = std::min(m, n), more = std::max(m, n);
    double arrangements = 1;
    for (std::size_t i = 1; i <= fewer; ++i) arrangements = arrangements * static_cast<double>(more + i) / static_cast<double>(i);
    return std::min(1.0, 2.0 / arrangements);
}

std::pair<std::size_t, std::size_t> sizes_to_reach(std::size_t m, std::size_t n, double alpha) {
    // Of the sizes with one total, the most even has the most arrangements, so the smallest p:
    // when it cannot reach alpha, no other with that total can.
    for (std::size_t total = m + n;; ++total) {
        const std::size_t a = std::clamp(total / 2, m, total - n);
        if (smallest_two_sided_p(a, total - a) < alpha) return {a, total - a};
    }
}

Shift hodges_lehmann(std::span<const double> x, std::span<const double> y, double alpha) {
    if (x.empty() || y.empty()) throw std::invalid_argument("the Hodges-Lehmann estimate needs a value in each sample");
    std::vector<double> xs(x.begin(), x.end()), ys(y.begin(), y.end());
    std::sort(xs.begin(), xs.end());
    std::sort(ys.begin(), ys.end());
    const std::uint64_t pairs = static_cast<std::uint64_t>(xs.size()) * ys.size();
    Shift s;
    s.estimate = pairs % 2 ? kth_difference(xs, ys, pairs / 2 + 1)
                           : (kth_difference(xs, ys, pairs / 2) + kth_difference(xs, ys, pairs / 2 + 1)) / 2;
    if (const std::uint64_t k = interval_rank(xs.size(), ys.size(), alpha); k >= 1) {
        s.low = kth_difference(xs, ys, k);
        s.high = kth_difference(xs, ys, pairs + 1 - k);
    }
    return s;
}

}  // namespace sweetspot
