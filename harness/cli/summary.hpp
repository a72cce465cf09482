#pragma once
// `sweetspot summary`: the runs of a results database and a per-cell table, like `nsys stats`
// gives for a report.
#include <cstdint>
#include <optional>
#include <ostream>

#include "harness/cli/table.hpp"
#include "harness/store/store.hpp"

namespace sweetspot {

struct SummaryOptions {
    std::optional<std::int64_t> run_id;   // only the cells this run measured
    std::optional<std::int64_t> cell_id;  // instead of runs and cells: this cell's kernels, NVTX ranges and UM totals
    // text: every section for people. csv, json, markdown: the cells table alone for other
    // tools, the numbers unrounded in CSV and JSON.
    TableFormat format = TableFormat::text;
    bool cells_only = false;  // the cells table and the status counts, without the other sections
    // The earlier measurements of each cell too (cell_history); with csv, json or markdown
    // their table instead of the cells table.
    bool history = false;
};

void print_summary(Store& store, const SummaryOptions& options, std::ostream& out);

}  // namespace sweetspot
