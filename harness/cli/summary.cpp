#include "harness/cli/summary.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "base/number_text.hpp"
#include "harness/cli/bound_check.hpp"
#include "harness/cli/cell_columns.hpp"
#include "harness/cli/table.hpp"
#include "harness/cli/traced_timing.hpp"
#include "harness/matrix/axes.hpp"
#include "harness/matrix/measures.hpp"
#include "harness/store/event_tables.hpp"
#include "harness/store/sql_values.hpp"

namespace sweetspot {
namespace {

void print_runs(Store& store, const SummaryOptions& opt, std::ostream& out) {
    auto st = store.db().prepare(
        "SELECT r.run_id, r.started_at, coalesce(r.finished_at, '-'), r.status, coalesce(r.matrix_name, ''),"
        " coalesce(r.matrix_path, ''), coalesce(r.host, ''), coalesce(r.gpu_name, 'none'), r.cells_total,"
        " (SELECT count(*) FROM cells c WHERE c.run_id = r.run_id)"
        " FROM runs r WHERE ?1 IS NULL OR r.run_id = ?1 ORDER BY r.run_id");
    st.bind(1, opt.run_id);
    TextTable t;
    for (const char* h : {"run", "started (UTC)", "finished (UTC)", "status", "matrix", "host", "GPU"}) t.add_column(h);
    t.add_column("cells measured", TextTable::Align::right);
    while (st.step()) {
        t.add_row({st.text(0), st.text(1), st.text(2), st.text(3), st.text(4) + " (" + st.text(5) + ")", st.text(6),
                   st.text(7), st.text(9) + " of " + st.text(8)});
    }
    out << "Runs\n";
    t.print(out);
}

// What Unified Memory can do on each run's GPU and the rates its probe measured; nothing for runs
// without them (no GPU, or a database before version 4).
void print_managed_memory(Store& store, const SummaryOptions& opt, std::ostream& out) {
    if (!has_table(store.db(), "managed_probe")) return;
    auto abilities = store.db().prepare(
        "SELECT run_id, concurrent_managed_access, pageable_memory_access, pageable_memory_access_uses_host_page_tables,"
        " direct_managed_mem_access_from_host FROM runs"
        " WHERE concurrent_managed_access IS NOT NULL AND (?1 IS NULL OR run_id = ?1) ORDER BY run_id");
    abilities.bind(1, opt.run_id);
    TextTable a;
    a.add_column("run");
    for (const char* h : {"concurrentManagedAccess", "pageableMemoryAccess", "...UsesHostPageTables",
                          "directManagedMemAccessFromHost"})
        a.add_column(h, TextTable::Align::right);
    bool any = false;
    while (abilities.step()) {
        any = true;
        a.add_row({abilities.text(0), abilities.text(1), abilities.text(2), abilities.text(3), abilities.text(4)});
    }
    if (!any) return;
    out << "\nManaged memory: the GPU's abilities\n";
    a.print(out);

    auto rates = store.db().prepare("SELECT run_id, operation, bytes, calls, gbps, host_ms FROM managed_probe"
                                    " WHERE ?1 IS NULL OR run_id = ?1 ORDER BY run_id, rowid");
    rates.bind(1, opt.run_id);
    TextTable r;
    r.add_column("run");
    r.add_column("operation");
    for (const char* h : {"range", "calls", "GB/s", "host ms per call"}) r.add_column(h, TextTable::Align::right);
    any = false;
    while (rates.step()) {
        any = true;
        r.add_row({rates.text(0), rates.text(1), human_bytes(rates.int64(2)), rates.text(3), fixed(rates.real(4), 1),
                   fixed(rates.real(5), 2)});
    }
    if (!any) return;
    out << "\nManaged memory: the run's probe (medians)\n";
    r.print(out);
}

// The summary's rule (axes.hpp) for one axis, decided on the stored cells.
bool summary_shows(Store& store, const SummaryOptions& opt, const Axis& axis) {
    const std::string column(axis.column);
    const std::string in_run = "(?1 IS NULL OR run_id = ?1)";
    switch (axis.in_summary) {
        case Axis::Shown::always: return true;
        case Axis::Shown::never: return false;
        case Axis::Shown::when_set: {
            auto st = store.db().prepare("SELECT 1 FROM cells WHERE " + in_run + " AND " + column + " IS NOT ?2 LIMIT 1");
            st.bind(1, opt.run_id);
            bind_sql(st, 2, axis_column_value(axis, axis.default_text));
            return st.step();
        }
        case Axis::Shown::when_varies: {
            auto st = store.db().prepare("SELECT count(DISTINCT " + column + ") > 1 FROM cells WHERE " + in_run);
            st.bind(1, opt.run_id);
            return st.step() && st.int64(0) != 0;
        }
    }
    return false;
}


// A table of cells, or of rows shaped like them, read by column name: each column goes into the
// statement and into the table at once, under its name, and a row is read name by name.
class CellTable {
public:
    using Align = TextTable::Align;
    explicit CellTable(std::set<std::string> present) : columns_(std::move(present)) {}
    // A column of `cells`, or `expression` under `name`.
    void add(std::string header, const std::string& name, SqlType type, Align align, std::string expression = "") {
        columns_.add(name, type, std::move(expression));
        add_column(std::move(header), name, align);
    }
    // An empty `header` leaves the axis to other tools.
    void add(std::string header, const Axis& axis) {
        columns_.add(axis);
        add_column(std::move(header), std::string(axis.column),
                   axis.column_type == Axis::Column::text ? Align::left : Align::right);
    }
    // Under its label, rounded to its decimals for people; `expression`: where a row not in `cells` holds it.
    void add(const Measure& measure, const std::string& expression = "") {
        if (expression.empty()) columns_.add(measure);
        else columns_.add(std::string(measure.name), measure.type, expression);
        add_column(std::string(measure.label), std::string(measure.name), Align::right);
    }
    std::string select_list() const { return columns_.select_list(); }
    const CellColumns& columns() const { return columns_; }
    // The row's fields in the table's order.
    std::vector<Field> row(const Statement& st) const {
        std::vector<Field> fields;
        for (const std::string& name : names_) {
            fields.push_back(columns_.field(st, name));
            const Measure* measure = find_measure(name);
            if (const double* v = std::get_if<double>(&fields.back().value); v && measure)
                fields.back().text = number_field(*v, measure->decimals).text;
        }
        return fields;
    }
    // The field of the column `name` in a row from row().
    Field& field(std::vector<Field>& row, std::string_view name) const {
        return row.at(static_cast<std::size_t>(std::find(names_.begin(), names_.end(), name) - names_.begin()));
    }
    DataTable table;

private:
    CellColumns columns_;
    std::vector<std::string> names_;

    void add_column(std::string header, std::string name, Align align) {
        table.add_column(std::move(header), name, align);
        names_.push_back(std::move(name));
    }
};

void print_cells(Store& store, const SummaryOptions& opt, std::ostream& out) {
    const std::set<std::string> present = column_names(store.db(), "cells");
    using A = TextTable::Align;
    CellTable cells(present);
    cells.add("cell", "cell_id", SqlType::integer, A::right);
    cells.add("#", "cell_index", SqlType::integer, A::right);  // the cell's number in its matrix, as `list` numbers it
    cells.add("", "cell_key", SqlType::text, A::left);
    // Every axis for other tools; for people, those the summary's rule shows (an older database
    // lacks the columns of later axes, whose values its cells did not choose).
    for (const Axis* axis : column_axes()) {
        const bool shown = present.count(std::string(axis->column)) && summary_shows(store, opt, *axis);
        cells.add(shown ? std::string(axis->name) : "", *axis);
    }
    cells.add("status", "status", SqlType::text, A::left);
    // The timed iterations the cell took: `iterations`, or more where its noise criterion asked.
    cells.add("timed", "timed_iterations", SqlType::integer, A::right,
              "(SELECT count(*) FROM iterations i WHERE i.cell_id = cells.cell_id AND i.phase = 'timed')");
    // The measures the summary shows, and the noisy mark: beside the spread for people, a column of
    // its own (without a header) for other tools.
    for (const Measure& m : kMeasures)
        if (m.in_summary || m.name == "noisy") cells.add(m);
    auto st = store.db().prepare("SELECT " + cells.select_list() +
                                 " FROM cells WHERE ?1 IS NULL OR run_id = ?1 ORDER BY cell_index, cell_id");
    st.bind(1, opt.run_id);
    std::map<std::string, int> by_status;
    int noisy = 0;
    while (st.step()) {
        std::vector<Field> row = cells.row(st);
        // A noisy cell is ok, with its noise marked: it stopped on a limit above its max_noise.
        const bool flagged = cells.columns().value(st, "noisy") == Value(true);
        if (flagged) cells.field(row, "spread_pct").text += " noisy";
        cells.table.add_row(std::move(row));
        ++by_status[cells.columns().text(st, "status")];
        noisy += flagged ? 1 : 0;
    }
    if (opt.format != TableFormat::text) {
        cells.table.print(out, opt.format);
        return;
    }
    out << (opt.cells_only ? "" : "\n") << "Cells\n";
    if (cells.table.empty()) {
        out << "(no cells)\n";
        return;
    }
    cells.table.print(out, TableFormat::text);
    out << "\n";
    bool first = true;
    for (const auto& [status, n] : by_status) {
        out << (first ? "" : ", ") << n << " " << status;
        if (status == "ok" && noisy > 0)
            out << " (" << noisy << " noisy: their spread was above max_noise when they stopped)";
        first = false;
    }
    out << "\n";
}

// The earlier measurements of the cells shown (cell_history: what a rerun, a retry of a cell that
// was not ok, a merge or the version-8 re-keying replaced), oldest first under each cell. Without
// --history the text summary says only how many there are.
void print_history(Store& store, const SummaryOptions& opt, std::ostream& out) {
    if (!has_table(store.db(), "cell_history")) return;
    // A replaced row is JSON in cell_history.cell, each value under its column's name.
    const auto stored = [](std::string_view name) { return "json_extract(h.cell, '$." + std::string(name) + "')"; };
    using A = TextTable::Align;
    CellTable history({});
    history.add("cell", "cell_id", SqlType::integer, A::right, "c.cell_id");
    history.add("#", "cell_index", SqlType::integer, A::right, "c.cell_index");
    history.add("key", "cell_key", SqlType::text, A::left, "h.cell_key");
    history.add("measured at", "started_at", SqlType::text, A::left, stored("started_at"));
    history.add("run", "run_id", SqlType::integer, A::right, stored("run_id"));
    history.add("status", "status", SqlType::text, A::left, stored("status"));
    history.add("timed", "timed_iterations", SqlType::integer, A::right,
                "(SELECT count(*) FROM json_each(h.iterations) j WHERE json_extract(j.value, '$.phase') = 'timed')");
    for (const std::string_view name : {"latency_median_ms", "latency_p10_ms", "latency_p90_ms", "noise_pct"})
        history.add(*find_measure(name), stored(name));
    history.add("replaced at", "superseded_at", SqlType::text, A::left, "h.superseded_at");
    auto st = store.db().prepare("SELECT " + history.select_list() +
                                 " FROM cell_history h JOIN cells c USING (cell_key) WHERE ?1 IS NULL OR c.run_id = ?1"
                                 " ORDER BY c.cell_index, c.cell_id, h.history_id");
    st.bind(1, opt.run_id);
    std::set<std::string> cells;
    while (st.step()) {
        history.table.add_row(history.row(st));
        cells.insert(history.columns().text(st, "cell_id"));
    }
    const DataTable& t = history.table;
    if (opt.format != TableFormat::text) {
        t.print(out, opt.format);
        return;
    }
    if (t.empty()) return;
    if (!opt.history) {
        out << "\n" << t.rows() << " earlier measurements of " << cells.size()
            << " of these cells are kept in cell_history (--history shows them)\n";
        return;
    }
    out << "\nEarlier measurements (cell_history; the cells table shows the latest of each cell)\n";
    t.print(out, TableFormat::text);
}

// The memory estimator against NVML's measured peak, per GPU cell that has both (the view
// memory_accuracy), with its peak host memory against the process's where the cell has both
// (host_memory_accuracy, version 9 on); nothing for databases before version 6 or without such cells.
void print_memory_accuracy(Store& store, const SummaryOptions& opt, std::ostream& out) {
    auto has_view = store.db().prepare("SELECT 1 FROM sqlite_master WHERE type = 'view' AND name = 'memory_accuracy'");
    if (!has_view.step()) return;
    auto has_host = store.db().prepare("SELECT 1 FROM sqlite_master WHERE type = 'view' AND name = 'host_memory_accuracy'");
    const bool host = has_host.step();
    auto st = store.db().prepare(
        "SELECT m.cell_id, m.backend, m.predicted_peak_bytes, m.gpu_peak_bytes, m.peak_error_pct, m.gpu_context_bytes,"
        " m.gpu_other_processes, " +
        std::string(host ? "h.predicted_host_peak_bytes, h.peak_host_rss_bytes, h.host_error_pct" : "NULL, NULL, NULL") +
        " FROM memory_accuracy m JOIN cells c USING (cell_id)" +
        (host ? " LEFT JOIN host_memory_accuracy h USING (cell_id)" : "") +
        " WHERE ?1 IS NULL OR c.run_id = ?1 ORDER BY c.cell_index, m.cell_id");
    st.bind(1, opt.run_id);
    TextTable t;
    t.add_column("cell", TextTable::Align::right);
    t.add_column("backend");
    for (const char* h : {"predicted peak", "measured peak", "error", "CUDA context", "other processes", "host: predicted",
                          "measured", "error"})
        t.add_column(h, TextTable::Align::right);
    const auto bytes_or_dash = [&](int i) { return st.is_null(i) ? std::string("-") : human_bytes(st.int64(i)); };
    const auto pct_or_dash = [&](int i) { return st.is_null(i) ? std::string("-") : fixed(st.real(i), 2) + " %"; };
    while (st.step())
        t.add_row({st.text(0), st.text(1), bytes_or_dash(2), human_bytes(st.int64(3)), pct_or_dash(4), human_bytes(st.int64(5)),
                   st.text(6), bytes_or_dash(7), bytes_or_dash(8), pct_or_dash(9)});
    if (t.empty()) return;
    out << "\nGPU memory: predicted peak against NVML's measured peak, and the process's peak host memory against "
           "its prediction\n(results/README.md says what each includes)\n";
    t.print(out);
}

// Where the cells' wall time went, phase by phase, over the cells shown; nothing for databases
// before version 6. The reference forward of a kept check reference is its own phase (a cell of
// a workload runs it for all); before version 14 it was part of that cell's `check`, which is
// then shown as `reference`.
void print_phases(Store& store, const SummaryOptions& opt, std::ostream& out) {
    if (!has_table(store.db(), "cell_phases")) return;
    const std::string shown =
        has_column(store.db(), "cells", "check_reference_computed")
            ? "CASE WHEN p.phase = 'check' AND c.check_reference_computed = 1 AND c.check_reference_key IS NOT NULL"
              " AND NOT EXISTS (SELECT 1 FROM cell_phases r WHERE r.cell_id = p.cell_id AND r.phase = 'reference')"
              " THEN 'reference' ELSE p.phase END"
            : "p.phase";
    auto st = store.db().prepare("SELECT " + shown + " AS shown, sum(p.seconds), count(DISTINCT p.cell_id), min(p.position)"
                                 " FROM cell_phases p JOIN cells c USING (cell_id)"
                                 " WHERE ?1 IS NULL OR c.run_id = ?1 GROUP BY shown ORDER BY min(p.position), shown");
    st.bind(1, opt.run_id);
    std::vector<std::tuple<std::string, double, std::int64_t>> rows;
    double total = 0;
    while (st.step()) {
        rows.emplace_back(st.text(0), st.real(1), st.int64(2));
        total += st.real(1);
    }
    if (rows.empty() || total <= 0) return;
    TextTable t;
    t.add_column("phase");
    for (const char* h : {"cells", "total s", "per cell s", "share"}) t.add_column(h, TextTable::Align::right);
    for (const auto& [phase, seconds, cells] : rows)
        t.add_row({phase, std::to_string(cells), fixed(seconds, 2), fixed(seconds / static_cast<double>(cells), 3),
                   fixed(100 * seconds / total, 1) + " %"});
    out << "\nWhere the cells' time went (cell_phases; results/README.md says what each phase covers)\n";
    t.print(out);
}

void print_problems(Store& store, const SummaryOptions& opt, std::ostream& out) {
    auto st = store.db().prepare(
        "SELECT cell_id, status, coalesce(reason, '') FROM cells"
        " WHERE status != 'ok' AND (?1 IS NULL OR run_id = ?1) ORDER BY cell_index, cell_id");
    st.bind(1, opt.run_id);
    TextTable t;
    t.add_column("cell", TextTable::Align::right);
    t.add_column("status");
    t.add_column("reason");
    while (st.step()) {
        std::string reason = st.text(2);
        if (const auto nl = reason.find('\n'); nl != std::string::npos) reason.resize(nl);
        t.add_row({st.text(0), st.text(1), reason});
    }
    if (t.empty()) return;
    out << "\nCells that are not ok (stderr tails: SELECT stderr_tail FROM cells WHERE cell_id = ...)\n";
    t.print(out);
}

// The cells faster than a bound they are divided by, as the report computes the bounds
// (analysis/bound.py): a bound is a floor on time, so each is a fault to look into.
void print_beaten_bounds(Store& store, const SummaryOptions& opt, std::ostream& out) {
    const BoundCheck check = check_bounds(store.path());
    if (!check.not_checked.empty()) {
        out << "\nBounds not checked: " << check.not_checked << "\n";
        return;
    }
    auto in_run = store.db().prepare("SELECT 1 FROM cells WHERE cell_id = ?1 AND (?2 IS NULL OR run_id = ?2)");
    TextTable t;
    t.add_column("cell", TextTable::Align::right);
    t.add_column("faster than");
    t.add_column("latency / bound", TextTable::Align::right);
    t.add_column("latency / driver bound", TextTable::Align::right);
    for (const auto& b : check.beaten) {
        in_run.reset();
        in_run.bind(1, b.cell_id);
        in_run.bind(2, opt.run_id);
        if (in_run.step()) t.add_row({std::to_string(b.cell_id), b.bounds, b.x_bound, b.x_driver_bound});
    }
    if (t.empty()) return;
    out << "\nCells faster than a bound they are divided by (a bound is a floor: the bound or the measurement is "
           "wrong there; analysis/bound.py defines them, the report shows them)\n";
    t.print(out);
}

// One column of a per-cell report: its header and how its values are printed.
struct ReportColumn {
    enum class Kind { text, integer, decimal } kind;
    const char* header;
};

// Prints the rows `sql` returns for `cell_id` (its only parameter) under `title`, in the column
// order of `columns`. The SQL reads the views the results README documents, so the summary and
// the documented queries give the same answers.
void print_report(Store& store, const char* title, const char* sql, const std::vector<ReportColumn>& columns,
                  std::int64_t cell_id, std::ostream& out) {
    auto st = store.db().prepare(sql);
    st.bind(1, cell_id);
    TextTable t;
    for (const auto& c : columns)
        t.add_column(c.header, c.kind == ReportColumn::Kind::text ? TextTable::Align::left : TextTable::Align::right);
    while (st.step()) {
        std::vector<std::string> row;
        for (std::size_t i = 0; i < columns.size(); ++i) {
            const int col = static_cast<int>(i);
            row.push_back(columns[i].kind == ReportColumn::Kind::decimal ? fixed(st.real(col), 1) : st.text(col));
        }
        t.add_row(std::move(row));
    }
    out << "\n" << title << "\n";
    if (t.empty()) out << "(none)\n";
    else t.print(out);
}

// The cell's parameters and event totals. Returns its um_profiling: nullopt when it has no events.
std::optional<std::string> print_cell_header(Store& store, std::int64_t cell_id, std::ostream& out) {
    auto st = store.db().prepare(
        "SELECT model, backend, dtype, batch, seq, budget, prefetch, status, um_profiling, kernel_busy_ms, copy_ms,"
        " copy_compute_overlap_ms, collector_overhead_ms, dropped_records FROM cells WHERE cell_id = ?");
    st.bind(1, cell_id);
    if (!st.step()) throw std::runtime_error("no cell " + std::to_string(cell_id) + " in " + store.db().path());
    out << "Cell " << cell_id << ": " << st.text(0) << ", " << st.text(1) << ", " << st.text(2) << ", batch "
        << st.text(3) << ", seq " << st.text(4) << ", budget " << st.text(5) << ", prefetch " << st.text(6)
        << "; status " << st.text(7) << "\n";
    if (st.is_null(8)) return std::nullopt;
    out << "Traced iterations: kernels busy " << fixed(st.real(9), 3) << " ms, copies " << fixed(st.real(10), 3)
        << " ms, overlapping " << fixed(st.real(11), 3) << " ms; collector overhead " << fixed(st.real(12), 3)
        << " ms\n";
    if (const auto timing = traced_timing(store.db(), cell_id))
        out << "The events below are of the traced iterations, not the timed ones: " << traced_timing_text(*timing)
            << "\n";
    out << "Unified Memory profiling: " << st.text(8) << "\n";
    if (st.int64(13) > 0)
        out << "Warning: CUPTI dropped " << st.int64(13) << " records; the tables below are incomplete\n";
    return st.text(8);
}

// The NVTX ranges as the GPU ran them (nvtx_gpu_proj_sum), where the cell's events hold the CUDA
// API calls that tie its kernels and copies to the ranges that launched them.
void print_nvtx_projection(Store& store, std::int64_t cell_id, std::ostream& out) {
    if (!has_api_calls(store.db(), cell_id)) {
        out << "\nnvtx_gpu_proj_sum: not recorded (the cell's events hold no CUDA API calls, which sweetspot records "
               "since schema version 15), so its NVTX ranges are not projected onto the GPU\n";
        return;
    }
    using K = ReportColumn::Kind;
    print_report(store, "nvtx_gpu_proj_sum (NVTX ranges projected onto the GPU, by text)",
                 "SELECT total_proj_ns, total_range_ns, range_instances, proj_avg_ns, proj_min_ns, proj_max_ns,"
                 " total_gpu_ops, avg_range_lvl, range FROM nvtx_gpu_proj_sum WHERE cell_id = ?"
                 " ORDER BY total_proj_ns DESC, range",
                 {{K::integer, "Total Proj Time (ns)"}, {K::integer, "Total Range Time (ns)"},
                  {K::integer, "Range Instances"}, {K::decimal, "Proj Avg (ns)"}, {K::integer, "Proj Min (ns)"},
                  {K::integer, "Proj Max (ns)"}, {K::integer, "Total GPU Ops"}, {K::decimal, "Avg Range Lvl"},
                  {K::text, "Range"}},
                 cell_id, out);
}

// Modelled on `nsys stats` reports of the same names.
void print_cell_events(Store& store, std::int64_t cell_id, std::ostream& out) {
    const auto um_profiling = print_cell_header(store, cell_id, out);
    if (!um_profiling) {
        out << "No events were recorded for this cell (no traced iterations, not a GPU cell, or --collector none).\n";
        return;
    }
    using K = ReportColumn::Kind;
    print_report(store, "cuda_gpu_kern_sum (kernels by name)",
                 "SELECT time_percent, total_ns, instances, avg_ns, min_ns, max_ns, name FROM cuda_gpu_kern_sum"
                 " WHERE cell_id = ? ORDER BY total_ns DESC, name",
                 {{K::decimal, "Time (%)"}, {K::integer, "Total Time (ns)"}, {K::integer, "Instances"},
                  {K::decimal, "Avg (ns)"}, {K::integer, "Min (ns)"}, {K::integer, "Max (ns)"}, {K::text, "Name"}},
                 cell_id, out);
    print_report(store, "nvtx_sum (NVTX ranges by text)",
                 "SELECT time_percent, total_ns, instances, avg_ns, min_ns, max_ns, range FROM nvtx_sum"
                 " WHERE cell_id = ? ORDER BY total_ns DESC, range",
                 {{K::decimal, "Time (%)"}, {K::integer, "Total Time (ns)"}, {K::integer, "Instances"},
                  {K::decimal, "Avg (ns)"}, {K::integer, "Min (ns)"}, {K::integer, "Max (ns)"}, {K::text, "Range"}},
                 cell_id, out);
    print_nvtx_projection(store, cell_id, out);
    if (*um_profiling != "supported") {
        out << "\num_total_sum: not recorded (Unified Memory profiling was not available)\n";
        return;
    }
    print_report(store, "um_total_sum (Unified Memory totals)",
                 "SELECT htod_bytes, htod_migrations, dtoh_bytes, dtoh_migrations, cpu_page_faults, gpu_page_faults"
                 " FROM um_total_sum WHERE cell_id = ?",
                 {{K::integer, "HtoD (bytes)"}, {K::integer, "HtoD migrations"}, {K::integer, "DtoH (bytes)"},
                  {K::integer, "DtoH migrations"}, {K::integer, "CPU page faults"}, {K::integer, "GPU page faults"}},
                 cell_id, out);
    auto view = store.db().prepare("SELECT 1 FROM sqlite_master WHERE type = 'view' AND name = 'um_sum'");
    if (!view.step()) {
        out << "\num_sum: this database predates the um_sum view; the um-traffic query of results/README.md gives the same numbers\n";
        return;
    }
    print_report(store, "um_sum (Unified Memory migrations by direction)",
                 "SELECT total_bytes, count, avg_bytes, min_bytes, max_bytes, total_ns, operation FROM um_sum"
                 " WHERE cell_id = ? ORDER BY operation",
                 {{K::integer, "Total (bytes)"}, {K::integer, "Count"}, {K::decimal, "Avg (bytes)"},
                  {K::integer, "Min (bytes)"}, {K::integer, "Max (bytes)"}, {K::integer, "Total Time (ns)"},
                  {K::text, "Operation"}},
                 cell_id, out);
}

}  // namespace

void print_summary(Store& store, const SummaryOptions& options, std::ostream& out) {
    if (options.cell_id) {
        print_cell_events(store, *options.cell_id, out);
        return;
    }
    if (options.format != TableFormat::text && options.history) {
        print_history(store, options, out);
        return;
    }
    if (options.format != TableFormat::text || options.cells_only) {
        print_cells(store, options, out);
        return;
    }
    print_runs(store, options, out);
    print_managed_memory(store, options, out);
    print_cells(store, options, out);
    print_history(store, options, out);
    print_memory_accuracy(store, options, out);
    print_phases(store, options, out);
    print_problems(store, options, out);
    print_beaten_bounds(store, options, out);
}

}  // namespace sweetspot
