#include "harness/cli/compare.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <variant>
#include <vector>

#include "base/number_text.hpp"
#include "harness/cli/cell_columns.hpp"
#include "harness/cli/rank_test.hpp"
#include "harness/matrix/axes.hpp"
#include "harness/matrix/measures.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "harness/store/kernel_timings.hpp"

namespace sweetspot {
namespace {

// The measure compare sets side by side: the one measures.hpp declares in_compare, compared through
// the samples it is the median of, the timed iterations of a workload's cells, pooled. Another
// measure needs its samples read here, and names for its ratio, change and p-value.
consteval std::size_t compared_measure() {
    std::size_t found = kMeasures.size();
    for (std::size_t i = 0; i < kMeasures.size(); ++i) {
        if (!kMeasures[i].in_compare) continue;
        if (found != kMeasures.size()) throw "compare compares one measure (in_compare in measures.hpp)";
        found = i;
    }
    if (found == kMeasures.size() || kMeasures[found].name != "latency_median_ms")
        throw "compare reads the samples of latency_median_ms (the timed iterations) alone";
    return found;
}
constexpr const Measure& kCompared = kMeasures[compared_measure()];

struct Workload {
    std::vector<Field> fields;    // of the identifying axes, in order
    std::vector<double> samples;  // every timed iteration of its ok cells, ms

    // What matches it with a workload of the other side.
    std::vector<Value> values() const {
        std::vector<Value> v;
        for (const Field& f : fields) v.push_back(f.value);
        return v;
    }
};

// The ok cells' workloads of one side, in the order their first cell was measured.
std::vector<Workload> read_workloads(Store& store, const CompareSide& side, const std::vector<const Axis*>& identity) {
    CellColumns columns(column_names(store.db(), "cells"), "c.");
    columns.add("latency_ms", SqlType::real, "i.latency_ms");
    for (const Axis* axis : identity) columns.add(*axis);
    auto st = store.db().prepare("SELECT " + columns.select_list() +
                                 " FROM cells c JOIN iterations i USING (cell_id)"
                                 " WHERE c.status = 'ok' AND i.phase = 'timed' AND (?1 IS NULL OR c.run_id = ?1)"
                                 " AND (?2 IS NULL OR c.run_id IN (SELECT run_id FROM runs WHERE matrix_name = ?2))"
                                 " ORDER BY c.cell_id, i.iteration");
    st.bind(1, side.run_id);
    st.bind(2, side.matrix);
    std::vector<Workload> workloads;
    std::map<std::vector<Value>, std::size_t> index;
    while (st.step()) {
        Workload read;
        for (const Axis* axis : identity) read.fields.push_back(columns.field(st, axis->column));
        const auto [it, added] = index.emplace(read.values(), workloads.size());
        if (added) workloads.push_back(std::move(read));
        workloads[it->second].samples.push_back(std::get<double>(columns.value(st, "latency_ms")));
    }
    return workloads;
}

std::vector<double> logs(const std::vector<double>& ms) {
    std::vector<double> out;
    for (const double v : ms) out.push_back(std::log(v));
    return out;
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

// The columns of one comparison's statistics, after those naming what is compared.
void add_statistics_columns(DataTable& t, const CompareOptions& options) {
    using Align = TextTable::Align;
    const std::string label(kCompared.label), name(kCompared.name);
    const std::string level = format_number(100.0 * (1.0 - options.alpha));
    t.add_column("A " + label, "a_" + name, Align::right);
    t.add_column("B " + label, "b_" + name, Align::right);
    t.add_column("", "a_timed_iterations", Align::right);
    t.add_column("", "b_timed_iterations", Align::right);
    t.add_column("B ÷ A (" + level + " % CI)", "", Align::right);
    t.add_column("", "b_over_a", Align::right);
    t.add_column("", "b_over_a_ci_low", Align::right);
    t.add_column("", "b_over_a_ci_high", Align::right);
    t.add_column("change", "change_pct", Align::right);
    t.add_column("p", "p_value", Align::right);
    t.add_column("verdict", "verdict");
}

// The statistics of A's and B's samples (ms, medians shown with `decimals`), as
// add_statistics_columns names them, appended to `row`; an untestable pair or a significant
// slowdown is counted in `counts`.
void add_statistics(std::vector<Field>& row, const std::vector<double>& a, const std::vector<double>& b, int decimals,
                    const CompareOptions& options, CompareCounts& counts) {
    const std::size_t m = a.size(), n = b.size();
    // The ratio on log latencies, where a slowdown by a factor is one shift whatever the latency.
    const Shift shift = hodges_lehmann(logs(a), logs(b), options.alpha);
    const double ratio = std::exp(shift.estimate), change = ratio - 1.0;
    const auto bound = [](std::optional<double> log_bound) {
        return log_bound ? std::optional(std::exp(*log_bound)) : std::nullopt;
    };
    const std::optional<double> low = bound(shift.low), high = bound(shift.high);
    const double p = mann_whitney_p(a, b);
    std::string verdict, verdict_text;
    if (smallest_two_sided_p(m, n) >= options.alpha) {
        const auto [need_a, need_b] = sizes_to_reach(m, n, options.alpha);
        verdict = "untestable";
        verdict_text = "untestable: needs " + std::to_string(need_a) + " and " + std::to_string(need_b) + " iterations";
        ++counts.untestable;
    } else {
        const bool differs = p < options.alpha && std::abs(change) * 100.0 >= options.threshold_pct;
        verdict = verdict_text = !differs ? "same" : change > 0 ? "slower" : "faster";
        if (verdict == "slower") counts.worst_slowdown_pct = std::max(counts.worst_slowdown_pct, change * 100.0);
    }
    for (auto&& field : {number_field(LatencyStats::of(a).median, decimals), number_field(LatencyStats::of(b).median, decimals),
                         integer_field(static_cast<std::int64_t>(m)), integer_field(static_cast<std::int64_t>(n)),
                         text_field(fixed(ratio, 3) + (low ? " [" + fixed(*low, 3) + ", " + fixed(*high, 3) + "]" : "")),
                         number_field(ratio, 3), number_field(low, 3), number_field(high, 3),
                         Field{pct(change), 100.0 * change}, Field{p < 0.001 ? "<0.001" : fixed(p, 3), p},
                         Field{verdict_text, verdict}})
        row.push_back(field);
}

// The GPU ops both sides timed (bench_kernels --db), matched by op, dtype and shape.
DataTable kernel_comparison(Store& store_a, const CompareSide& a, Store& store_b, const CompareSide& b,
                            const CompareOptions& options, CompareCounts& counts) {
    const std::vector<KernelTiming> side_a = read_kernel_timings(store_a.db(), a.run_id, a.matrix);
    const std::vector<KernelTiming> side_b = read_kernel_timings(store_b.db(), b.run_id, b.matrix);
    std::map<std::tuple<std::string, std::string, std::string>, const KernelTiming*> by_key;
    for (const KernelTiming& k : side_b) by_key.emplace(std::tuple(k.op, k.dtype, k.shape), &k);
    DataTable t;
    t.add_column("op", "op");
    t.add_column("dtype", "dtype");
    t.add_column("shape", "shape");
    add_statistics_columns(t, options);
    for (const KernelTiming& ka : side_a) {
        const auto it = by_key.find(std::tuple(ka.op, ka.dtype, ka.shape));
        if (it == by_key.end()) continue;
        std::vector<Field> row = {text_field(ka.op), text_field(ka.dtype), text_field(ka.shape)};
        // A kernel's runs take microseconds: a tenth of one shows.
        add_statistics(row, ka.ms, it->second->ms, 4, options, counts);
        t.add_row(std::move(row));
        ++counts.kernels_matched;
    }
    counts.kernels_only_a = static_cast<int>(side_a.size()) - counts.kernels_matched;
    counts.kernels_only_b = static_cast<int>(side_b.size()) - counts.kernels_matched;
    return t;
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
    // Cells of one workload compute the same function, placed on the machine the same way; how
    // they were measured (the protocol and limit axes) does not tell them apart.
    const std::vector<const Axis*> identity = axes_with_role({Axis::Role::workload, Axis::Role::placement});
    require_matrix(store_a, a);
    require_matrix(store_b, b);
    const std::vector<Workload> side_a = read_workloads(store_a, a, identity);
    const std::vector<Workload> side_b = read_workloads(store_b, b, identity);
    std::map<std::vector<Value>, const Workload*> by_values;
    for (const Workload& w : side_b) by_values.emplace(w.values(), &w);

    std::vector<std::pair<const Workload*, const Workload*>> matched;
    for (const Workload& w : side_a)
        if (const auto it = by_values.find(w.values()); it != by_values.end()) matched.emplace_back(&w, it->second);
    CompareCounts counts;
    counts.matched = static_cast<int>(matched.size());
    counts.only_a = static_cast<int>(side_a.size() - matched.size());
    counts.only_b = static_cast<int>(side_b.size() - matched.size());

    // For people, the axes the summary always shows, and those the matched workloads differ in;
    // for other tools, every identifying axis.
    using Align = TextTable::Align;
    DataTable t;
    for (std::size_t i = 0; i < identity.size(); ++i) {
        bool varies = false;
        for (const auto& [wa, wb] : matched) varies = varies || wa->fields[i].value != matched.front().first->fields[i].value;
        const Axis& axis = *identity[i];
        t.add_column(axis.in_summary == Axis::Shown::always || varies ? std::string(axis.name) : "", std::string(axis.column),
                     axis.column_type == Axis::Column::text ? Align::left : Align::right);
    }
    add_statistics_columns(t, options);
    for (const auto& [wa, wb] : matched) {
        std::vector<Field> row = wa->fields;
        add_statistics(row, wa->samples, wb->samples, kCompared.decimals, options, counts);
        t.add_row(std::move(row));
    }
    DataTable kernels = kernel_comparison(store_a, a, store_b, b, options, counts);
    const bool cells_compared = !side_a.empty() || !side_b.empty() || kernels.empty();
    if (options.format != TableFormat::text) {
        (cells_compared ? t : kernels).print(out, options.format);
        return counts;
    }
    const std::string level = format_number(100.0 * (1.0 - options.alpha));
    std::vector<std::string> pooled;
    for (const Axis* axis : axes_with_role({Axis::Role::protocol, Axis::Role::limit})) pooled.emplace_back(axis->name);
    out << "A: " << a.name() << "\nB: " << b.name() << "\n\n";
    if (!kernels.empty()) {
        out << "GPU ops (bench_kernels --db), their timed runs in ms:\n";
        kernels.print(out, TableFormat::text);
        out << "\n" << counts.kernels_matched << " ops (op, dtype, shape) in both, " << counts.kernels_only_a
            << " only in A, " << counts.kernels_only_b << " only in B.\n\n";
    }
    if (cells_compared) {
        if (t.empty()) out << "(no workload measured ok in both)\n";
        else t.print(out, TableFormat::text);
        out << "\n" << counts.matched << " workloads in both, " << counts.only_a << " only in A, " << counts.only_b
            << " only in B. Matched by every parameter but those of how the cells\nwere measured (" << comma_list(pooled)
            << "):\nthe timed iterations of a workload's cells are pooled. ";
    }
    out << "B ÷ A: the median of the ratios of every B\n"
           "iteration to every A iteration (Hodges-Lehmann), with its "
        << level << " % confidence interval; change: B ÷ A − 1.\n"
           "p: the two-sided Mann-Whitney U test of the timed iterations (exact for small samples without ties);\n"
           "a change is 'faster' or 'slower' when p < "
        << fixed(options.alpha, 3) << " and it is at least " << fixed(options.threshold_pct, 1)
        << " %, else 'same'; 'untestable'\nwhen the iterations are too few for any p below " << fixed(options.alpha, 3)
        << " (3 and 3 give 0.1 at best): the row says how\nmany would do.\n";
    return counts;
}

}  // namespace sweetspot
