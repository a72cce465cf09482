#pragma once
// The significance test of `sweetspot compare`: whether two sets of latencies come from the same
// distribution, without assuming a normal one (latencies are skewed, with long tails).
#include <span>

namespace sweetspot {

// The two-sided p-value of the Mann–Whitney U test of samples `x` and `y`: exact (every
// arrangement of the ranks counted) when both are small and no value ties; otherwise the normal
// approximation with the tie correction of the variance and a continuity correction. 1 when
// either sample is empty.
double mann_whitney_p(std::span<const double> x, std::span<const double> y);

}  // namespace sweetspot
