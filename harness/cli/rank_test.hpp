#pragma once
// The significance test of `sweetspot compare`: whether two sets of latencies come from the same
// distribution, without assuming a normal one (latencies are skewed, with long tails); and the
// estimate of the shift between them that goes with it.
#include <cstddef>
#include <optional>
#include <span>
#include <utility>

namespace sweetspot {

// The two-sided p-value of the Mann–Whitney U test of samples `x` and `y`: exact (every
// arrangement of the ranks counted) when both are small and no value ties; otherwise the normal
// approximation with the tie correction of the variance and a continuity correction. 1 when
// either sample is empty.
double mann_whitney_p(std::span<const double> x, std::span<const double> y);

// The smallest two-sided p-value samples of m and n values without ties can give: either sample
// wholly above the other, 2 / C(m + n, m) (1 at most). Sizes whose smallest p is not below a
// significance level cannot show a difference at it, whatever they measure (3 and 3: 0.1).
double smallest_two_sided_p(std::size_t m, std::size_t n);

// The fewest values, m' >= m and n' >= n, whose smallest p is below `alpha` (0 < alpha < 1): the
// least m' + n', the most even of those (3 and 3 at 0.05: 4 and 4).
std::pair<std::size_t, std::size_t> sizes_to_reach(std::size_t m, std::size_t n, double alpha);

// The Hodges–Lehmann estimate of how far `y` lies above `x`: the median of the m·n differences
// y_j − x_i. Its confidence interval of level at least 1 − alpha is the set of shifts the two-sided
// Mann–Whitney test at `alpha` does not reject: [D(k), D(mn + 1 − k)] of the differences in
// increasing order, k the largest with P(U <= k − 1) <= alpha / 2 under no difference (exact counts
// for small samples, the normal approximation without the tie correction beyond). No interval when
// even k = 1, every difference, has a lower level. Throws std::invalid_argument for an empty sample.
struct Shift {
    double estimate = 0;
    std::optional<double> low, high;
};
Shift hodges_lehmann(std::span<const double> x, std::span<const double> y, double alpha);

}  // namespace sweetspot
