#pragma once
// `sweetspot compare A B`: the same workloads measured twice (two databases, or two runs of one),
// matched by their parameters, with the change of each median and whether it is significant.
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "harness/cli/table.hpp"

namespace sweetspot {

// One side of a comparison: a database's ok cells, or those of one run, or of the runs of one matrix.
struct CompareSide {
    std::string path;
    std::optional<std::int64_t> run_id;
    std::optional<std::string> matrix;  // runs.matrix_name
    std::string name() const;
};
// "results.db", "results.db@3" (a run id) or "results.db@bench-backends" (a matrix's name);
// throws std::invalid_argument for an empty name after '@'.
CompareSide parse_compare_side(const std::string& text);

struct CompareOptions {
    double alpha = 0.05;         // significance level of the two-sided Mann–Whitney U test
    double threshold_pct = 2.0;  // a significant change smaller than this reads "same"
    TableFormat format = TableFormat::text;
};

struct CompareCounts {
    int matched = 0, only_a = 0, only_b = 0;
    int kernels_matched = 0, kernels_only_a = 0, kernels_only_b = 0;  // GPU ops (op, dtype, shape)
    double worst_slowdown_pct = 0;  // the largest significant slowdown of B against A (0 without one)
    int untestable = 0;             // workloads with too few iterations for any p below alpha
};

// Matches the ok cells of A and B by their workload and placement axes (axes.hpp's roles), pooling
// the timed iterations of cells that differ only in how they were measured (the protocol and limit
// axes: warm-ups, iterations, the noise criterion, the seed, the repeat, the timeout...), and
// prints a row per workload in both: the medians, B ÷ A (the Hodges–Lehmann estimate) with its
// 1 − alpha confidence interval, the p-value and the verdict (faster, slower, same; untestable when
// the two sides' iterations are too few for any p below alpha, with how many would do). Before it,
// the same for the GPU ops both sides timed (kernel_timings, matched by op, dtype and shape), whose
// slowdowns count in worst_slowdown_pct too. csv, json and markdown: the cells' table alone, keys
// as results/README.md documents them, or the ops' where neither side has cells.
CompareCounts print_comparison(const CompareSide& a, const CompareSide& b, const CompareOptions& options, std::ostream& out);

}  // namespace sweetspot
