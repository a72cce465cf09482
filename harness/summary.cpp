#include "harness/summary.hpp"

#include <map>
#include <string>

#include "harness/table.hpp"

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

bool has_streaming_cells(Store& store, const SummaryOptions& opt) {
    auto st = store.db().prepare(
        "SELECT 1 FROM cells WHERE backend NOT IN ('host', 'device') AND (?1 IS NULL OR run_id = ?1) LIMIT 1");
    st.bind(1, opt.run_id);
    return st.step();
}

void print_cells(Store& store, const SummaryOptions& opt, std::ostream& out) {
    const bool streaming = has_streaming_cells(store, opt);
    auto st = store.db().prepare(
        "SELECT cell_id, model, backend, variant, dtype, batch, seq, streams, prefetch, budget, resident, evict, status,"
        " latency_median_ms, latency_p10_ms, latency_p90_ms, tokens_per_s, check_rel_err"
        " FROM cells WHERE ?1 IS NULL OR run_id = ?1 ORDER BY cell_index, cell_id");
    st.bind(1, opt.run_id);
    using A = TextTable::Align;
    TextTable t;
    t.add_column("cell", A::right);
    for (const char* h : {"model", "backend", "variant", "dtype"}) t.add_column(h);
    t.add_column("batch", A::right);
    t.add_column("seq", A::right);
    if (streaming) {
        t.add_column("streams", A::right);
        t.add_column("prefetch", A::right);
        t.add_column("budget", A::right);
        t.add_column("resident");
        t.add_column("evict");
    }
    t.add_column("status");
    for (const char* h : {"median ms", "p10 ms", "p90 ms", "tokens/s", "rel err"}) t.add_column(h, A::right);
    auto num = [&](int col, int decimals) { return st.is_null(col) ? std::string("-") : fixed(st.real(col), decimals); };
    auto sci = [&](int col) {
        if (st.is_null(col)) return std::string("-");
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1e", st.real(col));
        return std::string(buf);
    };
    std::map<std::string, int> by_status;
    while (st.step()) {
        std::vector<std::string> row = {st.text(0), st.text(1), st.text(2), st.text(3), st.text(4), st.text(5), st.text(6)};
        if (streaming) {
            row.push_back(st.text(7));
            row.push_back(st.text(8));
            row.push_back(st.text(9));
            row.push_back(st.text(10));
            row.push_back(st.text(11));
        }
        for (auto&& cell : {st.text(12), num(13, 3), num(14, 3), num(15, 3), num(16, 0), sci(17)}) row.push_back(cell);
        t.add_row(std::move(row));
        ++by_status[st.text(12)];
    }
    out << "\nCells\n";
    if (t.empty()) {
        out << "(no cells)\n";
        return;
    }
    t.print(out);
    out << "\n";
    bool first = true;
    for (const auto& [status, n] : by_status) {
        out << (first ? "" : ", ") << n << " " << status;
        first = false;
    }
    out << "\n";
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

}  // namespace

void print_summary(Store& store, const SummaryOptions& options, std::ostream& out) {
    print_runs(store, options, out);
    print_cells(store, options, out);
    print_problems(store, options, out);
}

}  // namespace sweetspot
