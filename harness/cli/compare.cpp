#include "harness/cli/compare.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "harness/cli/rank_test.hpp"
#include "harness/matrix/axes.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "kernels/model/number_text.hpp"

namespace sweetspot {
namespace {

// Keyed axes that do not tell two workloads apart here: whether the cell also traced (its timed
// iterations are compared all the same) and the repeat (repeats are pooled). The axes the key
// leaves out (warm-ups, iterations, the noise criterion, the timeout) never do.
constexpr std::string_view kMeasurementSettings[] = {"trace_iterations", "repeat"};
// Named in every row; the other identifying axes only where the matched workloads differ in them.
constexpr std::string_view kAlwaysShown[] = {"model", "variant", "backend", "dtype", "batch", "seq"};

bool listed(std::string_view name, std::span<const std::string_view> names) {
    return std::find(names.begin(), names.end(), name) != names.end();
}


struct Workload {
    std::vector<std::string> values;  // of the identifying axes, in order
    std::vector<double> timed_ms;     // every timed iteration of its ok cells
};

// The ok cells' workloads of one side, in the order their first cell was measured.
std::vector<Workload> read_workloads(Store& store, const CompareSide& side, const std::vector<const Axis*>& identity) {
    std::string columns;
    for (const Axis* axis : identity) columns += ", c." + std::string(axis->column);
    auto st = store.db().prepare("SELECT i.latency_ms" + columns +
                                 " FROM cells c JOIN iterations i USING (cell_id)"
                                 " WHERE c.status = 'ok' AND i.phase = 'timed' AND (?1 IS NULL OR c.run_id = ?1)"
                                 " AND (?2 IS NULL OR c.run_id IN (SELECT run_id FROM runs WHERE matrix_name = ?2))"
                                 " ORDER BY c.cell_id, i.iteration");
    st.bind(1, side.run_id);
    st.bind(2, side.matrix);
    std::vector<Workload> workloads;
    std::map<std::vector<std::string>, std::size_t> index;
    while (st.step()) {
        std::vector<std::string> values;
        for (std::size_t i = 0; i < identity.size(); ++i) values.push_back(st.text(static_cast<int>(i) + 1));
        const auto [it, added] = index.emplace(values, workloads.size());
        if (added) workloads.push_back({std::move(values), {}});
        workloads[it->second].timed_ms.push_back(st.real(0));
    }
    return workloads;
}

std::string pct(double fraction) { return (fraction >= 0 ? "+" : "") + fixed(100.0 * fraction, 1) + " %"; }

// A side's matrix must have runs in its database: a misspelt name would otherwise compare nothing.
void require_matrix(Store& store, const CompareSide& side) {
    if (!side.matrix) return;
    std::vector<std::string> names;
    auto st = store.db().prepare("SELECT DISTINCT matrix_name FROM runs WHERE matrix_name IS NOT NULL ORDER BY 1");
    while (st.step()) names.push_back(st.text(0));
    if (std::find(names.begin(), names.end(), *side.matrix) != names.end()) return;
    std::string known;
    for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("'" + side.path + "@" + *side.matrix + "': no run of " + side.path +
                                " ran a matrix named '" + *side.matrix + "' (its matrices: " +
                                (known.empty() ? "none" : known) +
                                "); DB@RUN names a run by its id (see `sweetspot summary DB`), DB@MATRIX the runs of a matrix");
}

}  // namespace

std::string CompareSide::name() const {
    if (run_id) return path + " (run " + std::to_string(*run_id) + ")";
    if (matrix) return path + " (matrix " + *matrix + ")";
    return path;
}

CompareSide parse_compare_side(const std::string& text) {
    const auto at = text.rfind('@');
    if (at == std::string::npos) return {text, std::nullopt, std::nullopt};
    const std::string name = text.substr(at + 1);
    if (name.empty())
        throw std::invalid_argument("'" + text + "': DB@RUN names a run by its id (see `sweetspot summary DB`), "
                                    "DB@MATRIX the runs of a matrix by its name");
    const bool digits = std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits && name.size() <= 18) return {text.substr(0, at), std::stoll(name), std::nullopt};
    return {text.substr(0, at), std::nullopt, name};
}

CompareCounts print_comparison(const CompareSide& a, const CompareSide& b, const CompareOptions& options, std::ostream& out) {
    Store store_a = Store::open_read_only(a.path);
    Store store_b = Store::open_read_only(b.path);
    // The identifying axes both databases record (an older one lacks later axes' columns).
    const std::set<std::string> in_a = column_names(store_a.db(), "cells"), in_b = column_names(store_b.db(), "cells");
    std::vector<const Axis*> identity;
    for (const Axis& axis : axes()) {
        const std::string column(axis.column);
        if (axis.column_type != Axis::Column::none && axis.keyed != Axis::Keyed::no &&
            !listed(axis.name, kMeasurementSettings) && in_a.count(column) && in_b.count(column))
            identity.push_back(&axis);
    }
    require_matrix(store_a, a);
    require_matrix(store_b, b);
    const std::vector<Workload> side_a = read_workloads(store_a, a, identity);
    const std::vector<Workload> side_b = read_workloads(store_b, b, identity);
    std::map<std::vector<std::string>, const Workload*> by_values;
    for (const Workload& w : side_b) by_values.emplace(w.values, &w);

    std::vector<std::pair<const Workload*, const Workload*>> matched;
    for (const Workload& w : side_a)
        if (const auto it = by_values.find(w.values); it != by_values.end()) matched.emplace_back(&w, it->second);
    CompareCounts counts;
    counts.matched = static_cast<int>(matched.size());
    counts.only_a = static_cast<int>(side_a.size() - matched.size());
    counts.only_b = static_cast<int>(side_b.size() - matched.size());

    std::vector<std::size_t> shown;  // indices into identity
    for (std::size_t i = 0; i < identity.size(); ++i) {
        bool varies = false;
        for (const auto& [wa, wb] : matched) varies = varies || wa->values[i] != matched.front().first->values[i];
        if (listed(identity[i]->name, kAlwaysShown) || varies) shown.push_back(i);
    }
    using Align = TextTable::Align;
    TextTable t;
    for (const std::size_t i : shown)
        t.add_column(std::string(identity[i]->name), identity[i]->column_type == Axis::Column::text ? Align::left : Align::right);
    for (const char* h : {"A median ms", "B median ms", "B ÷ A", "change", "p"}) t.add_column(h, Align::right);
    t.add_column("verdict");
    for (const auto& [wa, wb] : matched) {
        std::vector<std::string> row;
        for (const std::size_t i : shown) row.push_back(wa->values[i]);
        const double median_a = LatencyStats::of(wa->timed_ms).median, median_b = LatencyStats::of(wb->timed_ms).median;
        const double change = median_b / median_a - 1.0;
        std::string verdict = "too few", p_text = "-";
        if (wa->timed_ms.size() >= 2 && wb->timed_ms.size() >= 2) {
            const double p = mann_whitney_p(wa->timed_ms, wb->timed_ms);
            p_text = p < 0.001 ? "<0.001" : fixed(p, 3);
            const bool differs = p < options.alpha && std::abs(change) * 100.0 >= options.threshold_pct;
            verdict = !differs ? "same" : change > 0 ? "slower" : "faster";
            if (verdict == "slower") counts.worst_slowdown_pct = std::max(counts.worst_slowdown_pct, change * 100.0);
        }
        for (auto&& cell : {fixed(median_a, 3), fixed(median_b, 3), fixed(median_b / median_a, 3), pct(change), p_text, verdict})
            row.push_back(cell);
        t.add_row(std::move(row));
    }
    if (options.format != TableFormat::text) {
        t.print(out, options.format);
        return counts;
    }
    out << "A: " << a.name() << "\nB: " << b.name() << "\n\n";
    if (t.empty()) out << "(no workload measured ok in both)\n";
    else t.print(out);
    out << "\n" << counts.matched << " workloads in both, " << counts.only_a << " only in A, " << counts.only_b
        << " only in B. Matched by every parameter but warmups, iterations, trace_iterations, repeat, the\n"
           "timeout and the noise criterion (the timed iterations of repeats are pooled). p: the two-sided Mann-Whitney U test of the timed\n"
           "iterations (exact for small samples without ties); a change is 'faster' or 'slower' when p < "
        << fixed(options.alpha, 3) << " and it is at\nleast " << fixed(options.threshold_pct, 1) << " %, else 'same'.\n";
    return counts;
}

}  // namespace sweetspot
