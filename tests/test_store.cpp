// The results database: schema, one-transaction-per-cell writes, and the documentation in
// results/README.md (its column tables and its example queries) checked against the real thing.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <chrono>
#include <map>
#include <numeric>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "harness/collect/event_totals.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "harness/measure/memory_estimate.hpp"
#include "harness/matrix/sequence_lengths.hpp"
#include "harness/store/event_tables.hpp"
#include "harness/store/store.hpp"
#include "harness/cli/summary.hpp"
#include "kernels/model/model_config.hpp"
#include "store_fixture.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using namespace sweetspot::test;

namespace {

// CellEvents has no comparison of its own (events.hpp is the collector's contract); these compare
// every field, so a column lost on the way through the database fails the round-trip test.
bool same(const KernelRecord& a, const KernelRecord& b) {
    auto t = [](const KernelRecord& k) {
        return std::tie(k.start_ns, k.end_ns, k.device_id, k.context_id, k.stream_id, k.correlation_id, k.grid_x,
                        k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.registers_per_thread,
                        k.static_shared_memory, k.dynamic_shared_memory, k.name);
    };
    return t(a) == t(b);
}
bool same(const MemcpyRecord& a, const MemcpyRecord& b) {
    auto t = [](const MemcpyRecord& m) {
        return std::tie(m.start_ns, m.end_ns, m.device_id, m.context_id, m.stream_id, m.correlation_id, m.copy_kind,
                        m.src_kind, m.dst_kind, m.bytes, m.migration_cause, m.address);
    };
    return t(a) == t(b);
}
bool same(const GpuPageFaultRecord& a, const GpuPageFaultRecord& b) {
    auto t = [](const GpuPageFaultRecord& f) {
        return std::tie(f.start_ns, f.end_ns, f.device_id, f.address, f.faults, f.access_type);
    };
    return t(a) == t(b);
}
bool same(const CpuPageFaultRecord& a, const CpuPageFaultRecord& b) {
    return std::tie(a.start_ns, a.address, a.fault_pc) == std::tie(b.start_ns, b.address, b.fault_pc);
}
bool same(const UmOtherRecord& a, const UmOtherRecord& b) {
    return std::tie(a.kind, a.start_ns, a.end_ns, a.address, a.value) ==
           std::tie(b.kind, b.start_ns, b.end_ns, b.address, b.value);
}
bool same(const RangeRecord& a, const RangeRecord& b) {
    return std::tie(a.start_ns, a.end_ns, a.text, a.thread_id) == std::tie(b.start_ns, b.end_ns, b.text, b.thread_id);
}
bool same(const ApiCallRecord& a, const ApiCallRecord& b) {
    return std::tie(a.start_ns, a.end_ns, a.thread_id, a.correlation_id, a.name, a.return_value) ==
           std::tie(b.start_ns, b.end_ns, b.thread_id, b.correlation_id, b.name, b.return_value);
}
bool same(const OverheadRecord& a, const OverheadRecord& b) {
    return std::tie(a.kind, a.start_ns, a.end_ns) == std::tie(b.kind, b.start_ns, b.end_ns);
}
template <class Record>
bool same(const std::vector<Record>& a, const std::vector<Record>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [](const Record& x, const Record& y) { return same(x, y); });
}

void check_same_events(const CellEvents& a, const CellEvents& b) {
    CHECK(same(a.kernels, b.kernels));
    CHECK(same(a.memcpys, b.memcpys));
    CHECK(same(a.gpu_page_faults, b.gpu_page_faults));
    CHECK(same(a.cpu_page_faults, b.cpu_page_faults));
    CHECK(same(a.um_other, b.um_other));
    CHECK(same(a.ranges, b.ranges));
    CHECK(same(a.api_calls, b.api_calls));
    CHECK(same(a.overheads, b.overheads));
    CHECK(a.dropped_records == b.dropped_records);
    CHECK(a.um_supported == b.um_supported);
    CHECK(a.um_note == b.um_note);
}

// The latencies stored for the cell `key` in one phase, in iteration order.
std::vector<double> stored_latencies(Store& s, const std::string& key, const std::string& phase) {
    auto st = s.db().prepare("SELECT latency_ms FROM iterations JOIN cells USING (cell_id) WHERE cell_key = ? AND phase = ?"
                             " ORDER BY iteration");
    st.bind(1, key).bind(2, phase);
    std::vector<double> ms;
    while (st.step()) ms.push_back(st.real(0));
    return ms;
}

// The events stored for `cell_id`, with what its row says of them (dropped records, UM profiling).
CellEvents stored_events(Store& s, std::int64_t cell_id) {
    CellEvents e = load_events(s.db(), cell_id);
    auto st = s.db().prepare("SELECT um_profiling, dropped_records FROM cells WHERE cell_id = ?");
    st.bind(1, cell_id);
    REQUIRE(st.step());
    e.um_supported = st.text(0) == "supported";
    if (!e.um_supported) e.um_note = st.text(0);
    e.dropped_records = st.int64(1);
    return e;
}

std::int64_t count_cell_rows(Store& s, const std::string& table, std::int64_t cell_id) {
    auto st = s.db().prepare("SELECT count(*) FROM " + table + " WHERE cell_id = ?");
    st.bind(1, cell_id);
    st.step();
    return st.int64(0);
}

// Columns per table as documented: a "### `name`" heading followed by a markdown table.
std::map<std::string, std::set<std::string>> documented_columns() {
    std::map<std::string, std::set<std::string>> out;
    std::istringstream in(read_bytes(test::source_path("results/README.md")));
    std::string line, table;
    const std::regex heading(R"(^### `(\w+)`)");
    const std::regex row(R"(^\| (\w+) \| [A-Z]+ \|)");
    std::smatch m;
    while (std::getline(in, line)) {
        if (std::regex_search(line, m, heading)) table = m[1];
        else if (!table.empty() && std::regex_search(line, m, row)) out[table].insert(m[1]);
    }
    return out;
}

std::map<std::string, std::string> documented_queries() {
    std::map<std::string, std::string> out;
    const std::string text = read_bytes(test::source_path("results/README.md"));
    const std::regex block(R"(```sql\n-- query: ([\w-]+)\n([\s\S]*?)```)");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), block); it != std::sregex_iterator(); ++it)
        out[(*it)[1]] = (*it)[2];
    return out;
}

}  // namespace

TEST_CASE("a new database gets the current schema version in WAL mode", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("sub/dir/r.db"));
    auto v = s.db().prepare("SELECT version, created_by FROM schema_info");
    REQUIRE(v.step());
    CHECK(v.int64(0) == schema_version());
    CHECK(v.text(1).rfind("sweetspot ", 0) == 0);
    auto wal = s.db().prepare("PRAGMA journal_mode");
    REQUIRE(wal.step());
    CHECK(wal.text(0) == "wal");
    auto uv = s.db().prepare("PRAGMA user_version");
    REQUIRE(uv.step());
    CHECK(uv.int64(0) == schema_version());
}

TEST_CASE("opening again keeps the data; read-only opening checks the file", "[store]") {
    TempDir tmp;
    const auto path = tmp.file("r.db");
    {
        auto s = Store::open(path);
        fill_fixture(s);
    }
    auto again = Store::open(path);
    CHECK(count_rows(again, "cells") == 4);
    auto ro = Store::open_read_only(path);
    CHECK(count_rows(ro, "cells") == 4);

    CHECK_THROWS_WITH(Store::open_read_only(tmp.file("missing.db")), "no such database: " + tmp.file("missing.db"));
    test::write_file(tmp.file("garbage.db"), "this is not a database at all, just text that is long enough to matter");
    CHECK_THROWS(Store::open_read_only(tmp.file("garbage.db")));
    CHECK_THROWS(Store::open(tmp.file("garbage.db")));
    {
        Database other(tmp.file("other.db"), Database::Mode::read_write_create);
        other.exec("CREATE TABLE t (x)");
    }
    CHECK_THROWS_WITH(Store::open(tmp.file("other.db")),
                      tmp.file("other.db") + " is an SQLite database but not a sweetspot results database");
    {
        Database db(path, Database::Mode::read_write_create);
        db.exec("UPDATE schema_info SET version = 99");
    }
    CHECK_THROWS_WITH(Store::open_read_only(path),
                      path + " has schema version 99; this sweetspot reads versions 2 to " + std::to_string(schema_version()));
}

RunInfo run_with_managed_probe() {
    RunInfo info;
    info.started_at = "2026-01-03T00:00:00Z";
    info.gpu_name = "Fixture GPU";
    info.managed.concurrent_managed_access = 1;
    info.managed.pageable_memory_access = 0;
    info.managed.pageable_memory_access_uses_host_page_tables = 0;
    info.managed.direct_managed_mem_access_from_host = 0;
    info.managed_rates = {{"prefetch_to_gpu", 512 << 20, 5, 41.25, 12.5}, {"drop_read_mostly_copy", 512 << 20, 5, 60.0, 8.75}};
    return info;
}

TEST_CASE("the managed-memory abilities and probe of a run are stored and summarised", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("m.db"));
    const auto run = s.begin_run(run_with_managed_probe());
    auto st = s.db().prepare("SELECT concurrent_managed_access, pageable_memory_access, operation, bytes, calls, gbps, host_ms"
                             " FROM runs JOIN managed_probe USING (run_id) WHERE run_id = ? ORDER BY managed_probe.rowid");
    st.bind(1, run);
    REQUIRE(st.step());
    CHECK(st.int64(0) == 1);
    CHECK(st.int64(1) == 0);
    CHECK(st.text(2) == "prefetch_to_gpu");
    CHECK(st.int64(3) == 512 << 20);
    CHECK(st.int64(4) == 5);
    CHECK(st.real(5) == 41.25);
    CHECK(st.real(6) == 12.5);
    REQUIRE(st.step());
    CHECK(st.text(2) == "drop_read_mostly_copy");
    CHECK_FALSE(st.step());

    std::ostringstream out;
    print_summary(s, SummaryOptions{}, out);
    using Catch::Matchers::ContainsSubstring;
    CHECK_THAT(out.str(), ContainsSubstring("Managed memory: the GPU's abilities"));
    CHECK_THAT(out.str(), ContainsSubstring("prefetch_to_gpu"));
    CHECK_THAT(out.str(), ContainsSubstring("512.0 MiB"));
    CHECK_THAT(out.str(), ContainsSubstring("41.2"));   // GB/s, one decimal
    CHECK_THAT(out.str(), ContainsSubstring("12.50"));  // host ms per call

    // A run without a GPU has neither section.
    TempDir other;
    auto plain = Store::open(other.file("p.db"));
    RunInfo info;
    info.started_at = "2026-01-03T00:00:00Z";
    plain.begin_run(info);
    std::ostringstream none;
    print_summary(plain, SummaryOptions{}, none);
    CHECK_THAT(none.str(), !ContainsSubstring("Managed memory"));
}

// What a version-7 database stored for `c`: a key and canonical text that still had the cell's
// warmups and iterations in them.
void store_as_version_7(Store& s, const CellParams& c) {
    const std::string old_canonical = c.canonical() + "iterations=" + std::to_string(c.iterations) +
                                      "\nwarmups=" + std::to_string(c.warmups) + "\n";
    s.db().prepare("UPDATE cells SET cell_key = ?1, canonical = ?2 WHERE cell_key = ?3")
        .bind(1, fnv1a64_hex(old_canonical))
        .bind(2, old_canonical)
        .bind(3, c.key())
        .run();
}

TEST_CASE("upgrading to version 8 re-keys cells without their iterations; cells that differed only there become "
          "one cell with history",
          "[store]") {
    TempDir tmp;
    const auto path = tmp.file("v7.db");
    CellParams five = tiny_cell(2, 8), seven = tiny_cell(2, 8), other = tiny_cell(1, 8);
    seven.iterations = 7;
    std::string five_old_key;
    {
        auto s = Store::open(path);
        RunInfo info;
        info.started_at = "2026-01-01T00:00:00Z";
        const auto run = s.begin_run(info);
        record_outcome(s, run, 0, five, ok_outcome(1.0));
        record_outcome(s, run, 0, five, ok_outcome(1.5));  // a rerun: one row of history under five's key
        store_as_version_7(s, five);
        s.db().exec("UPDATE cell_history SET cell_key = (SELECT cell_key FROM cells)");
        record_outcome(s, run, 1, seven, ok_outcome(2.0));  // under the new key nobody holds yet
        store_as_version_7(s, seven);
        record_outcome(s, run, 2, other, ok_outcome(3.0));
        store_as_version_7(s, other);
        five_old_key = fnv1a64_hex(five.canonical() + "iterations=5\nwarmups=1\n");
        downgrade_schema(s.db(), 7);
    }
    {
        auto read = Store::open_read_only(path);
        CHECK(count_rows(read, "cells") == 3);  // reading changed nothing
    }

    auto s = Store::open(path);
    CHECK(count_rows(s, "cells") == 2);
    // The cell with 7 iterations, recorded last, is the cell now, under the key without them.
    auto kept = s.db().prepare("SELECT iterations, latency_median_ms, canonical FROM cells WHERE cell_key = ?");
    kept.bind(1, five.key());
    REQUIRE(kept.step());
    CHECK(kept.int64(0) == 7);
    CHECK(kept.real(1) == Catch::Approx(2.0 * 1.05));  // ok_outcome's median is 1.05 × its base
    CHECK(kept.text(2) == five.canonical());
    auto other_kept = s.db().prepare("SELECT count(*) FROM cells WHERE cell_key = ?");
    other_kept.bind(1, other.key());
    REQUIRE(other_kept.step());
    CHECK(other_kept.int64(0) == 1);
    // Its history: the 5-iteration cell's first measurement and its last, in recording order.
    auto history = s.db().prepare("SELECT json_extract(cell, '$.latency_median_ms'), json_extract(cell, '$.cell_key')"
                                  " FROM cell_history WHERE cell_key = ? ORDER BY history_id");
    history.bind(1, five.key());
    REQUIRE(history.step());
    CHECK(history.real(0) == Catch::Approx(1.0 * 1.05));
    REQUIRE(history.step());
    CHECK(history.real(0) == Catch::Approx(1.5 * 1.05));
    CHECK(history.text(1) == five_old_key);  // the row as version 7 stored it
    CHECK_FALSE(history.step());
    CHECK(count_rows(s, "cell_history") == 2);
    // The kept cell's iterations came through; the replaced one's went to its history.
    auto iterations = s.db().prepare("SELECT count(*) FROM iterations JOIN cells USING (cell_id) WHERE cell_key = ?");
    iterations.bind(1, five.key());
    REQUIRE(iterations.step());
    CHECK(iterations.int64(0) == 6);  // one warm-up and five timed
    auto v = s.db().prepare("SELECT version FROM schema_info");
    REQUIRE(v.step());
    CHECK(v.int64(0) == schema_version());
}

TEST_CASE("a version-8 database is read as it is and upgraded when a run writes to it", "[store]") {
    TempDir tmp;
    const auto path = tmp.file("v8.db");
    write_old_version(path, 8);
    CHECK_FALSE(has_column(Store::open_read_only(path).db(), "cells", "predicted_host_peak_bytes"));  // reading changed nothing
    auto s = Store::open(path);
    CHECK(has_column(s.db(), "cells", "check_reference_computed"));
    // A cell recorded after the upgrade stores both; the one before has neither.
    CellOutcome o = ok_outcome(1.0);
    o.set<"predicted_host_peak_bytes">(123456789);
    o.set<"check_reference_computed">(false);
    RunInfo info;
    info.started_at = "2026-01-02T00:00:00Z";
    record_outcome(s, s.begin_run(info), 1, tiny_cell(2, 16), o);
    auto v = s.db().prepare("SELECT version, (SELECT count(*) FROM host_memory_accuracy) FROM schema_info");
    REQUIRE(v.step());
    CHECK(v.int64(0) == schema_version());
    CHECK(v.int64(1) == 0);  // ok_outcome has no host reading
    auto cells = s.db().prepare("SELECT predicted_host_peak_bytes, check_reference_computed FROM cells ORDER BY cell_index");
    REQUIRE(cells.step());
    CHECK(cells.is_null(0));
    CHECK(cells.is_null(1));
    REQUIRE(cells.step());
    CHECK(cells.int64(0) == 123456789);
    CHECK(cells.int64(1) == 0);
}

TEST_CASE("a version-9 database is read as it is and upgraded when a run writes to it; its cells launched kernels",
          "[store]") {
    TempDir tmp;
    const auto path = tmp.file("v9.db");
    write_old_version(path, 9);
    CHECK_FALSE(has_column(Store::open_read_only(path).db(), "cells", "launch"));  // reading changed nothing
    auto s = Store::open(path);
    CellParams graphs = tiny_cell(2, 16);
    graphs.launch = Launch::graphs;
    RunInfo info;
    info.started_at = "2026-01-02T00:00:00Z";
    record_outcome(s, s.begin_run(info), 1, graphs, ok_outcome(1.0));
    auto v = s.db().prepare("SELECT version FROM schema_info");
    REQUIRE(v.step());
    CHECK(v.int64(0) == schema_version());
    auto cells = s.db().prepare("SELECT launch, canonical FROM cells ORDER BY cell_index");
    REQUIRE(cells.step());
    CHECK(cells.text(0) == "kernels");
    REQUIRE(cells.step());
    CHECK(cells.text(0) == "graphs");
    CHECK(CellParams::from_canonical(cells.text(1)).launch == Launch::graphs);
    // The default stays out of the key: the cells of version 9 keep theirs.
    CHECK(tiny_cell(2, 8).canonical().find("launch") == std::string::npos);
}

TEST_CASE("a version-23 database is upgraded with every cell of the gpt2 family, under the key it had", "[store]") {
    TempDir tmp;
    const auto path = tmp.file("v23.db");
    const CellParams cell = tiny_cell(2, 16);
    const std::string key = cell.key();
    write_old_version(path, 23, cell);
    CHECK_FALSE(has_column(Store::open_read_only(path).db(), "cells", "family"));  // reading changed nothing
    auto s = Store::open(path);
    auto v = s.db().prepare("SELECT version FROM schema_info");
    REQUIRE(v.step());
    CHECK(v.int64(0) == schema_version());
    // Measured again after the upgrade: the same row, as its key did not change.
    RunInfo info;
    info.started_at = "2026-01-02T00:00:00Z";
    record_outcome(s, s.begin_run(info), 0, cell, ok_outcome(2.0));
    auto cells = s.db().prepare("SELECT family, cell_key, canonical FROM cells");
    REQUIRE(cells.step());
    CHECK(cells.text(0) == "gpt2");
    CHECK(cells.text(1) == key);
    CHECK(CellParams::from_canonical(cells.text(2)).model.family == ModelFamily::gpt2);
    CHECK_FALSE(cells.step());
    CHECK(count_rows(s, "cell_history") == 1);
}

TEST_CASE("a version-24 database reads and is upgraded with each cell's kv heads and MLP width in effect", "[store]") {
    TempDir tmp;
    const auto path = tmp.file("v24.db");
    // tiny: 4 heads, hidden 64, neither count in its text; tiny_llama: 2 kv heads of 4, width 176;
    // a custom LLaMA model whose text leaves both at 0: its 6 heads and 4 × 48.
    std::vector<CellParams> cells = {tiny_cell(1, 8), tiny_cell(1, 8), tiny_cell(1, 8)};
    cells[1].model = *find_builtin_model("tiny_llama");
    cells[2].model = *find_builtin_model("tiny_llama");
    cells[2].model.name = "plain_llama";
    cells[2].model.n_embd = 48;
    cells[2].model.n_head = 6;
    cells[2].model.n_kv_head = 0;
    cells[2].model.ffn_hidden = 0;
    {
        auto s = Store::open(path);
        RunInfo info;
        info.started_at = "2026-01-01T00:00:00Z";
        const std::int64_t run = s.begin_run(info);
        for (std::size_t i = 0; i < cells.size(); ++i) record_outcome(s, run, static_cast<int>(i), cells[i], ok_outcome(1.0));
        downgrade_schema(s.db(), 24);
    }
    const std::vector<std::tuple<std::string, int, int>> expected = {{"tiny", 4, 256}, {"tiny_llama", 2, 176},
                                                                     {"plain_llama", 6, 192}};
    {
        // Read as it is: the counts come from each row's text and shape.
        auto r = Store::open_read_only(path);
        CHECK_FALSE(has_column(r.db(), "cells", "n_kv_head"));
        std::ostringstream out;
        SummaryOptions json;
        json.format = TableFormat::json;
        print_summary(r, json, out);
        const auto rows = nlohmann::json::parse(out.str());
        REQUIRE(rows.size() == 3);
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const auto& [model, kv_heads, ffn] = expected[i];
            INFO(model);
            CHECK(rows[i].at("model") == model);
            CHECK(rows[i].at("n_kv_head") == kv_heads);
            CHECK(rows[i].at("ffn_hidden") == ffn);
        }
    }
    auto s = Store::open(path);
    auto v = s.db().prepare("SELECT version FROM schema_info");
    REQUIRE(v.step());
    CHECK(v.int64(0) == schema_version());
    auto stored = s.db().prepare("SELECT model, n_kv_head, ffn_hidden, cell_key FROM cells ORDER BY cell_index");
    for (std::size_t i = 0; i < expected.size(); ++i) {
        const auto& [model, kv_heads, ffn] = expected[i];
        INFO(model);
        REQUIRE(stored.step());
        CHECK(stored.text(0) == model);
        CHECK(stored.int64(1) == kv_heads);
        CHECK(stored.int64(2) == ffn);
        CHECK(stored.text(3) == cells[i].key());  // the keys stay
    }
    // A cell written now stores the same counts.
    RunInfo info;
    info.started_at = "2026-01-02T00:00:00Z";
    record_outcome(s, s.begin_run(info), 0, cells[1], ok_outcome(2.0));
    auto again = s.db().prepare("SELECT n_kv_head, ffn_hidden FROM cells WHERE model = 'tiny_llama'");
    REQUIRE(again.step());
    CHECK(again.int64(0) == 2);
    CHECK(again.int64(1) == 176);
    CHECK_FALSE(again.step());
}

TEST_CASE("a version-6 database is read as it is and upgraded when a run writes to it", "[store]") {
    TempDir tmp;
    const auto path = tmp.file("v6.db");
    write_old_version(path, 6);
    CHECK(has_column(Store::open_read_only(path).db(), "cells", "prefetch_api"));  // reading changed nothing
    CHECK_FALSE(Store::open_read_only(path).load_reference("any"));
    auto s = Store::open(path);
    CHECK_FALSE(has_column(s.db(), "cells", "prefetch_api"));
    CHECK(has_column(s.db(), "cells", "check_reference_key"));
    CHECK(has_table(s.db(), "reference_logits"));
    auto v = s.db().prepare("SELECT version, (SELECT count(*) FROM cells) FROM schema_info");
    REQUIRE(v.step());
    CHECK(v.int64(0) == schema_version());
    CHECK(v.int64(1) == 1);
}

TEST_CASE("a version-5 database is read as it is and upgraded when a run writes to it", "[store]") {
    TempDir tmp;
    const auto path = tmp.file("v5.db");
    write_old_version(path, 5);
    CHECK_FALSE(has_column(Store::open_read_only(path).db(), "cells", "gpu_peak_bytes"));  // reading changed nothing
    // The estimator's calibration reads a version-5 database as it is.
    CHECK(measured_fixed_costs(Store::open_read_only(path).db()).empty());
    auto s = Store::open(path);
    auto v = s.db().prepare("SELECT version, (SELECT count(*) FROM memory_accuracy), (SELECT gpu_peak_bytes FROM cells)"
                            " FROM schema_info");
    REQUIRE(v.step());
    CHECK(v.int64(0) == schema_version());
    CHECK(v.int64(1) == 0);
    CHECK(v.is_null(2));
}

TEST_CASE("a version-3 database is read as it is and upgraded when a run writes to it", "[store]") {
    TempDir tmp;
    const auto path = tmp.file("v3.db");
    write_old_version(path, 3);
    CHECK_FALSE(has_table(Store::open_read_only(path).db(), "managed_probe"));  // reading changed nothing
    auto s = Store::open(path);
    auto v = s.db().prepare("SELECT version, (SELECT count(*) FROM managed_probe) FROM schema_info");
    REQUIRE(v.step());
    CHECK(v.int64(0) == schema_version());
    CHECK(v.int64(1) == 0);
    s.begin_run(run_with_managed_probe());
    auto n = s.db().prepare("SELECT count(*) FROM managed_probe");
    REQUIRE(n.step());
    CHECK(n.int64(0) == 2);
}

TEST_CASE("a version-2 database is read as it is and upgraded when a run writes to it", "[store]") {
    TempDir tmp;
    const auto path = tmp.file("v2.db");
    write_old_version(path, 2);
    auto s = Store::open(path);
    auto v = s.db().prepare("SELECT version, (SELECT dropout FROM cells), (SELECT count(*) FROM cells) FROM schema_info");
    REQUIRE(v.step());
    CHECK(v.int64(0) == schema_version());
    CHECK(v.real(1) == 0.0);
    CHECK(v.int64(2) == 1);
    RunInfo info;
    info.started_at = "2026-01-02T00:00:00Z";
    const auto run = s.begin_run(info);
    CellParams dropped = tiny_cell(2, 8);
    dropped.dropout = 0.1;
    record_outcome(s, run, 1, dropped, ok_outcome(1.0));
    auto d = s.db().prepare("SELECT dropout FROM cells WHERE cell_index = 1");
    REQUIRE(d.step());
    CHECK(d.real(0) == Catch::Approx(0.1));
}

TEST_CASE("a cell and its iterations round-trip through the store", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    const auto run = s.begin_run(sample_run());
    const auto cell = tiny_cell(2, 16);
    const auto in = ok_outcome(4.0);
    record_outcome(s, run, 7, cell, in);

    CHECK(stored_latencies(s, cell.key(), "timed") == in.timed_ms);
    CHECK(stored_latencies(s, cell.key(), "warmup") == in.warmup_ms);

    auto st = s.db().prepare(
        "SELECT cell_index, sweep, model, n_params, batch, seq, latency_median_ms, latency_p10_ms, weight_bytes,"
        " budget_bytes, oversubscription, canonical, status, check_rel_err, tokens_per_s FROM cells WHERE cell_key = ?");
    st.bind(1, cell.key());
    REQUIRE(st.step());
    CHECK(st.int64(0) == 7);
    CHECK(st.text(1) == "unit");
    CHECK(st.text(2) == "tiny");
    CHECK(st.int64(3) == n_params(cell.model));
    CHECK(st.int64(4) == 2);
    CHECK(st.int64(5) == 16);
    CHECK(st.real(6) == Catch::Approx(4.2));  // median of 3.6, 4.0, 4.2, 4.4, 4.8
    CHECK(st.real(7) == Catch::Approx(3.76));
    CHECK(st.int64(8) == cell.weight_bytes());
    CHECK(st.int64(8) >= n_params(cell.model) * 4);  // padded for alignment
    CHECK(st.int64(9) == st.int64(8));  // budget 100%
    CHECK(st.real(10) == Catch::Approx(1.0));
    CHECK(st.text(11) == cell.canonical());
    CHECK(st.text(12) == "ok");
    CHECK(st.real(13) == 2e-7);
    CHECK(st.real(14) == Catch::Approx(2 * 16 / 4.2e-3));  // batch x seq / median
}

TEST_CASE("derived columns: oversubscription is weights over budget, streamed_gbps uses the median", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    const auto run = s.begin_run(sample_run());
    auto cell = tiny_cell(2, 16);
    cell.backend = BackendId::explicit_copy;
    cell.budget = *Budget::parse("25%");
    auto o = ok_outcome(4.0);
    o.timed_ms = {4.8, 4.0, 4.4, 3.6, 4.3};  // median 4.3; the mean (4.22) would give another rate
    o.set<"streamed_bytes">(301'000'000);
    record_outcome(s, run, 0, cell, o);

    auto st = s.db().prepare("SELECT oversubscription, streamed_gbps, latency_median_ms FROM cells");
    REQUIRE(st.step());
    // A quarter of the weights as budget: the weights are 4 times the budget. The weights are a
    // whole number of fp32 elements, so 25 % of their bytes is exact.
    CHECK(st.real(0) == 4.0);
    // 301e6 bytes in 4.3 ms: 301e6 / 4.3e-3 s = 7.0e10 B/s = 70 GB/s.
    CHECK(st.real(1) == Catch::Approx(70.0).epsilon(1e-12));
    CHECK(st.real(2) == Catch::Approx(4.3).epsilon(1e-12));
}

TEST_CASE("recording a key again replaces the row and its iterations", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    const auto run = s.begin_run(sample_run());
    const auto cell = tiny_cell(1, 16);
    CellOutcome failed;
    failed.status = CellStatus::failed;
    failed.reason = "first try";
    record_outcome(s, run, 0, cell, failed);
    record_outcome(s, run, 0, cell, ok_outcome(2.0));
    CHECK(count_rows(s, "cells") == 1);
    CHECK(count_rows(s, "iterations") == 6);
    CHECK(s.ok_keys() == std::set<std::string>{cell.key()});
}

TEST_CASE("a cell whose write fails leaves nothing behind", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    const auto run = s.begin_run(sample_run());
    auto bad = ok_outcome(2.0);
    bad.status = static_cast<CellStatus>(99);  // violates the CHECK constraint after the iterations are prepared
    CHECK_THROWS_AS(record_outcome(s, run, 0, tiny_cell(1, 16), bad), SqliteError);
    CHECK(count_rows(s, "cells") == 0);
    CHECK(count_rows(s, "iterations") == 0);
    // The connection is usable afterwards.
    record_outcome(s, run, 0, tiny_cell(1, 16), ok_outcome(2.0));
    CHECK(count_rows(s, "cells") == 1);
}

TEST_CASE("a cell's events round-trip through the store, and from a cell's scratch database into the results", "[store]") {
    TempDir tmp;
    auto scratch = Store::open(tmp.file("scratch.db"));
    const auto cell = tiny_cell(2, 16);
    auto in = ok_outcome(4.0);
    in.traced_ms = {5.0, 5.5};
    in.events = sample_events();
    SECTION("UM profiling supported") {}
    SECTION("UM profiling refused") {
        in.events->um_supported = false;
        in.events->um_note = "CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED";
        in.events->gpu_page_faults.clear();
    }
    const auto scratch_cell = record_outcome(scratch, scratch.begin_run(sample_run()), 0, cell, in);
    check_same_events(stored_events(scratch, scratch_cell), *in.events);

    // The results database already holds names the scratch one numbers otherwise: they are renumbered.
    auto s = Store::open(tmp.file("r.db"));
    auto other = ok_outcome(2.0);
    other.events = CellEvents{};
    other.events->kernels = {kernel(0, 10, "another_kernel", 1), kernel(20, 30, "softmax_kernel", 1)};
    record_outcome(s, s.begin_run(sample_run()), 0, tiny_cell(8, 16), other);
    const auto run = s.begin_run(sample_run());
    const auto cell_id = s.import_cell(tmp.file("scratch.db"), cell.key(), run, 3, {}, {});
    REQUIRE(cell_id);
    check_same_events(stored_events(s, *cell_id), *in.events);
    CHECK(stored_latencies(s, cell.key(), "traced") == in.traced_ms);
    CHECK_FALSE(s.import_cell(tmp.file("scratch.db"), "0000000000000000", run, 4, {}, {}));

    // Names are stored once and shared (2 kernels, 6 range texts, 2 API functions); ranges reference
    // them the nsys way (text NULL, textId set).
    CHECK(count_rows(scratch, "StringIds") == 10);
    CHECK(count_rows(s, "StringIds") == 11);
    auto nvtx = s.db().prepare(
        "SELECT count(*) FROM NVTX_EVENTS WHERE text IS NULL AND textId IS NOT NULL AND eventType = 59 AND globalTid = 7");
    REQUIRE(nvtx.step());
    CHECK(nvtx.int64(0) == 8);
    auto names =
        s.db().prepare("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE shortName = demangledName AND cell_id = ?");
    names.bind(1, *cell_id);
    REQUIRE(names.step());
    CHECK(names.int64(0) == 3);

    // The totals on the cell's row are those of totals_of().
    auto st = s.db().prepare(
        "SELECT um_profiling, um_htod_bytes, um_dtoh_bytes, gpu_page_faults, cpu_page_faults, thrashing, throttling,"
        " remote_maps, kernel_busy_ms, copy_ms, copy_compute_overlap_ms, dropped_records, collector_overhead_ms"
        " FROM cells WHERE cell_id = ?");
    st.bind(1, *cell_id);
    REQUIRE(st.step());
    const auto t = totals_of(*in.events);
    CHECK(st.text(0) == (in.events->um_supported ? "supported" : in.events->um_note));
    CHECK(st.int64(1) == 3 << 20);
    CHECK(st.int64(2) == 1 << 19);
    CHECK(st.int64(3) == t.gpu_page_faults);
    CHECK(st.int64(4) == 2);
    CHECK(st.int64(5) == 1);
    CHECK(st.int64(6) == 1);
    CHECK(st.int64(7) == 1);
    CHECK(st.real(8) == Catch::Approx(0.6));  // kernels: [1.1, 1.4) and [1.6, 1.9) ms
    CHECK(st.real(9) == Catch::Approx(t.copy_ms));
    CHECK(st.real(10) == Catch::Approx(t.copy_compute_overlap_ms));
    CHECK(st.int64(11) == 2);
    CHECK(st.real(12) == Catch::Approx(0.025));
}

TEST_CASE("a cell without events has NULL totals and no event rows", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    const auto cell = tiny_cell(1, 16);
    const auto cell_id = record_outcome(s, s.begin_run(sample_run()), 0, cell, ok_outcome(2.0));
    auto st = s.db().prepare("SELECT um_profiling IS NULL, kernel_busy_ms IS NULL FROM cells WHERE cell_id = ?");
    st.bind(1, cell_id);
    REQUIRE(st.step());
    CHECK(st.int64(0) == 1);
    CHECK(st.int64(1) == 1);
    for (const auto& table : kEventTables) CHECK(count_rows(s, table) == 0);
}

TEST_CASE("replacing or deleting a cell removes its events", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    const auto run = s.begin_run(sample_run());
    auto with_events = ok_outcome(2.0);
    with_events.events = sample_events();
    const auto first = record_outcome(s, run, 0, tiny_cell(1, 16), with_events);
    const auto other = record_outcome(s, run, 1, tiny_cell(2, 16), with_events);

    // Same key again, now with a single kernel: the old cell's rows go with its row, and the new
    // row keeps its cell_id.
    auto fewer = ok_outcome(2.0);
    fewer.events = CellEvents{};
    fewer.events->kernels = {kernel(0, 10, "only", 1)};
    const auto second = record_outcome(s, run, 0, tiny_cell(1, 16), fewer);
    CHECK(second == first);
    for (const auto& table : kEventTables) {
        INFO(table);
        CHECK(count_cell_rows(s, table, second) == (table == "CUPTI_ACTIVITY_KIND_KERNEL" ? 1 : 0));
        CHECK(count_cell_rows(s, table, other) > 0);
    }

    s.db().prepare("DELETE FROM cells WHERE cell_id = ?").bind(1, other).run();
    for (const auto& table : kEventTables) CHECK(count_cell_rows(s, table, other) == 0);
    CHECK(count_rows(s, "CUPTI_ACTIVITY_KIND_KERNEL") == 1);
}

TEST_CASE("100k event records store well within a second", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    auto o = ok_outcome(2.0);
    o.events = CellEvents{};
    auto& e = *o.events;
    // Shaped like a long UVM trace: many kernels of few names, migrations, faults and ranges.
    for (int i = 0; i < 40'000; ++i)
        e.kernels.push_back(kernel(i * 1000, i * 1000 + 800, "kernel_" + std::to_string(i % 50), 13));
    for (int i = 0; i < 30'000; ++i)
        e.memcpys.push_back(migration(i * 1000, i * 1000 + 500, 11 + i % 2, 65536, 0x7f0000000000 + i * 65536ull));
    for (int i = 0; i < 20'000; ++i)
        e.gpu_page_faults.push_back({i * 1000, i * 1000 + 100, 0, 0x7f0000000000 + i * 4096ull, 4, 1});
    for (int i = 0; i < 10'000; ++i)
        e.ranges.push_back({i * 4000, i * 4000 + 3000, "layer " + std::to_string(i % 48), 7});

    const auto t0 = std::chrono::steady_clock::now();
    record_outcome(s, s.begin_run(sample_run()), 0, tiny_cell(1, 16), o);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
    CHECK(took.count() < 5.0);
    CHECK(count_rows(s, "CUPTI_ACTIVITY_KIND_KERNEL") + count_rows(s, "CUPTI_ACTIVITY_KIND_MEMCPY") +
              count_rows(s, "CUDA_UM_GPU_PAGE_FAULT_EVENTS") + count_rows(s, "NVTX_EVENTS") ==
          100'000);
    CHECK(count_rows(s, "StringIds") == 98);
}

TEST_CASE("the GPU a run used is in TARGET_INFO_GPU", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    s.begin_run(sample_run());  // no GPU: no row
    auto info = sample_run();
    info.gpu_name = "NVIDIA H100 80GB HBM3";
    info.gpu_memory_bytes = 85'000'000'000;
    const auto run = s.begin_run(info);
    auto st = s.db().prepare("SELECT run_id, id, name, totalMemory FROM TARGET_INFO_GPU");
    REQUIRE(st.step());
    CHECK(st.int64(0) == run);
    CHECK(st.int64(1) == 0);
    CHECK(st.text(2) == "NVIDIA H100 80GB HBM3");
    CHECK(st.int64(3) == 85'000'000'000);
    CHECK_FALSE(st.step());
}

TEST_CASE("the enum tables carry the values nsys exports", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    auto label = [&](const std::string& table, int id) {
        auto st = s.db().prepare("SELECT label FROM " + table + " WHERE id = ?");
        st.bind(1, id);
        return st.step() ? st.text(0) : std::string("(none)");
    };
    CHECK(label("ENUM_CUDA_MEMCPY_OPER", 1) == "Host-to-Device");
    CHECK(label("ENUM_CUDA_MEMCPY_OPER", 11) == "Unified Host-to-Device");
    CHECK(label("ENUM_CUDA_MEMCPY_OPER", 12) == "Unified Device-to-Host");
    CHECK(label("ENUM_CUDA_UNIF_MEM_MIGRATION", 2) == "Page fault");
    CHECK(label("ENUM_CUDA_UNIF_MEM_MIGRATION", 4) == "Eviction");
    CHECK(label("ENUM_CUDA_UNIF_MEM_ACCESS_TYPE", 1) == "Read");
    CHECK(count_rows(s, "ENUM_CUDA_UNIF_MEM_MIGRATION") == 6);
}

TEST_CASE("latency statistics interpolate percentiles", "[measure]") {
    const auto s = LatencyStats::of({5, 1, 4, 2, 3, 6, 7, 8, 9, 10});
    CHECK(s.median == Catch::Approx(5.5));
    CHECK(s.p10 == Catch::Approx(1.9));
    CHECK(s.p90 == Catch::Approx(9.1));
    CHECK(s.min == 1);
    CHECK(s.max == 10);
    CHECK(s.mean == Catch::Approx(5.5));
    CHECK(LatencyStats::of({3.0}).p90 == 3.0);
    CHECK_THROWS(LatencyStats::of({}));
}

TEST_CASE("results/README.md documents exactly the columns of every table", "[store][docs]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    const auto documented = documented_columns();
    for (const char* table :
         {"schema_info", "runs", "cells", "iterations", "kernel_timings", "cell_phases", "cell_history", "reference_logits", "TARGET_INFO_GPU", "StringIds", "CUPTI_ACTIVITY_KIND_KERNEL",
          "CUPTI_ACTIVITY_KIND_MEMCPY", "CUDA_UM_GPU_PAGE_FAULT_EVENTS", "CUDA_UM_CPU_PAGE_FAULT_EVENTS",
          "UM_COUNTER_EVENTS", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_OVERHEAD", "ENUM_CUDA_MEMCPY_OPER",
          "ENUM_CUDA_UNIF_MEM_MIGRATION", "ENUM_CUDA_UNIF_MEM_ACCESS_TYPE", "cuda_gpu_kern_sum", "nvtx_sum",
          "nvtx_gpu_proj_trace", "nvtx_gpu_proj_sum",
          "um_total_sum", "um_sum", "memory_accuracy", "axes", "measures"}) {
        INFO("table " << table);
        std::set<std::string> actual;
        auto st = s.db().prepare(std::string("SELECT name FROM pragma_table_info('") + table + "')");
        while (st.step()) actual.insert(st.text(0));
        REQUIRE(documented.count(table));
        CHECK(documented.at(table) == actual);
    }
}

namespace {

// The comma-separated column names between `from` and `to` in `sql`, the first such list.
std::set<std::string> listed_columns(const std::string& sql, const std::string& from, const std::string& to) {
    std::smatch m;
    REQUIRE(std::regex_search(sql, m, std::regex(from + R"(([\s\S]*?))" + to)));
    std::set<std::string> names;
    std::istringstream list(m[1].str());
    for (std::string name; std::getline(list, name, ',');) {
        name.erase(0, name.find_first_not_of(" \n"));
        name.erase(name.find_last_not_of(" \n") + 1);
        names.insert(name);
    }
    return names;
}

}  // namespace

TEST_CASE("the batch-scaling query of results/README.md keeps apart what differs in any axis but batch", "[store][docs]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    const auto run = s.begin_run(sample_run());
    // tokens/s is batch * seq over the median latency, which ok_outcome(base) puts at 1.05 * base
    // ms: against batch 1, batch 2 has 2 * base1 / base2 times the throughput.
    int index = 0;
    for (const auto& [backend, base1, base2] : {std::tuple{BackendId::host, 2.0, 2.0}, std::tuple{BackendId::device, 1.0, 4.0}}) {
        CellParams cell = tiny_cell(1, 16);
        cell.backend = backend;
        record_outcome(s, run, index++, cell, ok_outcome(base1));
        cell.batch = 2;
        record_outcome(s, run, index++, cell, ok_outcome(base2));
    }
    std::string sql = documented_queries().at("batch-scaling");
    sql.erase(sql.find_last_of(';'));
    auto st = s.db().prepare("SELECT backend, batch, vs_smallest_batch FROM (" + sql + ") ORDER BY backend, batch");
    std::vector<std::tuple<std::string, std::int64_t, double>> rows;
    while (st.step()) rows.emplace_back(st.text(0), st.int64(1), st.real(2));
    REQUIRE(rows.size() == 4);
    CHECK(rows[0] == std::tuple{std::string("device"), std::int64_t{1}, 1.0});
    CHECK(std::get<1>(rows[1]) == 2);
    CHECK(std::get<2>(rows[1]) == Catch::Approx(2 * 1.0 / 4.0));
    CHECK(rows[2] == std::tuple{std::string("host"), std::int64_t{1}, 1.0});
    CHECK(std::get<2>(rows[3]) == Catch::Approx(2 * 2.0 / 2.0));

    // A workload is every workload and placement axis a matrix sets, as the database declares them.
    std::set<std::string> axes;
    for (auto a = s.db().prepare("SELECT column_name FROM axes WHERE in_matrix = 1 AND role IN ('workload', 'placement')"
                                 " AND name != 'batch'");
         a.step();)
        axes.insert(a.text(0));
    CHECK(listed_columns(sql, "PARTITION BY", "ORDER BY") == axes);
    axes.insert("batch");
    CHECK(listed_columns(sql, "GROUP BY", "\\)") == axes);
}

TEST_CASE("the drawn-lengths query of results/README.md reads a ragged cell's sequences and a fixed cell's shape",
          "[store][docs]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    const auto run = s.begin_run(sample_run());
    CellParams ragged = tiny_cell(5, 16);
    ragged.lengths = *LengthSpec::parse("uniform:2-16");
    ragged.packing = Packing::packed;
    record_outcome(s, run, 0, ragged, ok_outcome(1.0));
    record_outcome(s, run, 1, tiny_cell(3, 8), ok_outcome(1.0));
    const std::vector<int> drawn = draw_lengths(ragged.lengths, 5, 16, ragged.seed);
    auto st = s.db().prepare(documented_queries().at("drawn-lengths"));
    REQUIRE(st.step());
    CHECK(st.int64(5) == 5);
    CHECK(st.int64(6) == *std::min_element(drawn.begin(), drawn.end()));
    CHECK(st.real(7) == Catch::Approx(std::accumulate(drawn.begin(), drawn.end(), 0.0) / 5));
    CHECK(st.int64(8) == *std::max_element(drawn.begin(), drawn.end()));
    REQUIRE(st.step());
    CHECK(st.int64(5) == 3);
    CHECK(st.int64(6) == 8);
    CHECK(st.real(7) == 8.0);
    CHECK(st.int64(8) == 8);
    CHECK_FALSE(st.step());
}

TEST_CASE("the example queries in results/README.md run and answer correctly", "[store][docs]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    fill_fixture(s);
    const auto queries = documented_queries();
    REQUIRE(queries.size() >= 8);
    std::map<std::string, std::vector<std::vector<std::string>>> results;
    for (const auto& [name, sql] : queries) {
        INFO("query " << name);
        auto st = s.db().prepare(sql);
        auto& rows = results[name];
        while (st.step()) {
            std::vector<std::string> row;
            for (int i = 0; i < st.column_count(); ++i) row.push_back(st.text(i));
            rows.push_back(row);
        }
        CHECK_FALSE(rows.empty());
    }
    // Spot checks of what the queries say about the fixture.
    CHECK(results["status-counts"] == std::vector<std::vector<std::string>>{{"failed", "1"}, {"ok", "3"}});
    CHECK(results["not-ok"].size() == 1);
    CHECK(results["not-ok"][0][2] == "killed by signal 11 (Segmentation fault)");
    CHECK(results["latency-by-cell"].size() == 3);
    CHECK(std::stod(results["latency-by-cell"][0][5]) == Catch::Approx(2.1));  // median of base 2.0
    CHECK(results["iteration-spread"].size() == 3);
    CHECK(results["iteration-spread"][0][2] == "5");
    CHECK(std::stod(results["warmup-effect"][0][4]) == Catch::Approx(3.0 / 1.05));
    CHECK(results["runs"][0][6] == "4");

    // The event queries, against what sample_events() stored for cells 1 and 2.
    using Rows = std::vector<std::vector<std::string>>;
    const auto htod = std::to_string(3 << 20), dtoh = std::to_string(1 << 19);
    CHECK(results["um-traffic"] == Rows{{"1", "Unified Host-to-Device", "2", htod, "160000"},
                                        {"1", "Unified Device-to-Host", "1", dtoh, "40000"},
                                        {"2", "Unified Host-to-Device", "2", htod, "160000"},
                                        {"2", "Unified Device-to-Host", "1", dtoh, "40000"}});
    CHECK(results["migration-causes"][0] == std::vector<std::string>{"1", "Unified Host-to-Device", "Page fault", "2", htod});
    CHECK(results["migration-causes"][1][2] == "Eviction");
    REQUIRE(results["um-totals"].size() == 2);  // the cell measured without events has no row
    CHECK(results["um-totals"][0][4] == htod);
    CHECK(results["um-totals"][0][5] == dtoh);
    CHECK(results["um-totals"][0][6] == "20");  // 12 + 5 + 3 faults
    CHECK(results["um-totals"][0][7] == "2");
    CHECK(std::stod(results["um-totals"][0][8]) == Catch::Approx(0.6));
    CHECK(results["kernels"][0] ==
          std::vector<std::string>{"1", "83.3", "500000", "2", "250000.0", "200000", "300000", "gemm_sm90<float>"});
    CHECK(results["kernels"][1][7] == "softmax_kernel");
    CHECK(results["kernels"][2] ==  // cell 2 lost its last gemm: now 2 of 3 kernel-time units
          std::vector<std::string>{"2", "66.7", "200000", "1", "200000.0", "200000", "200000", "gemm_sm90<float>"});
    const auto& nvtx = results["nvtx-ranges"];
    REQUIRE(nvtx.size() == 12);
    CHECK(nvtx[0] == std::vector<std::string>{"1", "traced iteration 0", "1", "1000000", "1000000.0", "1000000", "1000000"});
    CHECK(nvtx[1] == std::vector<std::string>{"1", "compute", "2", "800000", "400000.0", "400000", "400000"});
    // Cell 2 lost layer 1's only kernel, so that layer has no GPU projection to hold its faults.
    CHECK(results["faults-by-layer"] == Rows{{"1", "layer 0", "1", "12"}, {"1", "layer 1", "2", "8"},
                                             {"2", "layer 0", "1", "12"}});
    // Layer 0's fetch: one copy of 4096 bytes in 10 000 ns.
    CHECK(results["copies-by-unit"] ==
          Rows{{"1", "fetch layer 0", "1", "4096", "0.01", "0.41"}, {"2", "fetch layer 0", "1", "4096", "0.01", "0.41"}});
}

namespace {

std::string cell_summary_text(Store& s, std::int64_t cell_id) {
    std::ostringstream out;
    SummaryOptions opt;
    opt.cell_id = cell_id;
    print_summary(s, opt, out);
    return out.str();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("summary --cell prints the documented per-cell reports", "[store][summary]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    fill_fixture(s);
    const auto text = cell_summary_text(s, 1);
    INFO(text);
    for (const char* part : {"Cell 1: tiny, host, fp32, batch 1, seq 16", "Unified Memory profiling: supported",
                             "cuda_gpu_kern_sum", "nvtx_sum", "um_total_sum", "kernels busy 0.600 ms"})
        CHECK(contains(text, part));
    CHECK(contains(text, "Warning: CUPTI dropped 2 records"));

    // Every row the documented queries give for cell 1 appears, with the same numbers.
    const auto queries = documented_queries();
    for (const char* name : {"kernels", "nvtx-ranges"}) {
        auto st = s.db().prepare(queries.at(name));
        int rows = 0;
        while (st.step()) {
            if (st.int64(0) != 1) continue;
            ++rows;
            const bool kernels = std::string(name) == "kernels";
            const auto label = st.text(kernels ? 7 : 1);
            const auto total = st.text(kernels ? 2 : 3);
            INFO(name << ": " << label);
            std::istringstream lines(text);
            std::string line;
            bool found = false;
            while (std::getline(lines, line)) found = found || (contains(line, " " + label) && contains(line, total));
            CHECK(found);
        }
        CHECK(rows > 0);
    }
    auto um = s.db().prepare(queries.at("um-totals"));
    REQUIRE(um.step());
    CHECK(contains(text, um.text(4)));  // HtoD bytes
    CHECK(contains(text, um.text(5)));  // DtoH bytes
    // um_sum: each direction's row of the documented um-traffic query, on one line of the summary.
    CHECK(contains(text, "um_sum (Unified Memory migrations by direction)"));
    auto traffic = s.db().prepare(queries.at("um-traffic"));
    int directions = 0;
    while (traffic.step()) {
        if (traffic.int64(0) != 1) continue;
        ++directions;
        const auto direction = traffic.text(1), migrations = traffic.text(2), bytes = traffic.text(3);
        INFO("um_sum: " << direction);
        std::istringstream lines(text);
        std::string line;
        bool found = false;
        while (std::getline(lines, line))
            found = found || (contains(line, direction) && contains(line, " " + migrations + " ") && contains(line, bytes));
        CHECK(found);
    }
    CHECK(directions == 2);

    CHECK(contains(cell_summary_text(s, 3), "No events were recorded for this cell"));
    s.db().exec("UPDATE cells SET um_profiling = 'CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED' WHERE cell_id = 2");
    const auto refused = cell_summary_text(s, 2);
    CHECK(contains(refused, "Unified Memory profiling: CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED"));
    CHECK(contains(refused, "um_total_sum: not recorded"));
    // A version-2 file from before the um_sum view: the summary says so; opening it to write adds the view.
    s.db().exec("DROP VIEW um_sum");
    CHECK(contains(cell_summary_text(s, 1), "predates the um_sum view"));
    auto reopened = Store::open(tmp.file("r.db"));
    CHECK(contains(cell_summary_text(reopened, 1), "um_sum (Unified Memory migrations by direction)"));
    CHECK_THROWS_WITH(cell_summary_text(s, 99), "no cell 99 in " + tmp.file("r.db"));
}

TEST_CASE("sweetspot summary DB --cell ID", "[store][summary]") {
    TempDir tmp;
    const auto db = tmp.file("r.db");
    {
        auto s = Store::open(db);
        fill_fixture(s);
    }
    const auto ok = test::run_sweetspot("summary '" + db + "' --cell 2");
    INFO(ok.output);
    CHECK(ok.exit_code == 0);
    CHECK(contains(ok.output, "gemm_sm90<float>"));
    CHECK(contains(ok.output, "layer 1"));
    const auto missing = test::run_sweetspot("summary '" + db + "' --cell 99");
    CHECK(missing.exit_code == 2);
    CHECK(contains(missing.output, "no cell 99"));
}

TEST_CASE("reference logits: kept once per key with the cell that computed them, read back", "[store]") {
    TempDir tmp;
    ReferenceLogits ref{"0123456789abcdef", "tiny", 1, 2, 3, {0.5f, -1.25f, 3.0f, 1e-30f, -0.0f, 7.75f}};
    auto s = Store::open(tmp.file("a.db"));
    const auto run = s.begin_run(sample_run());
    CHECK_FALSE(s.load_reference(ref.key));
    auto first = ok_outcome(1.0);
    first.reference = ref;
    record_outcome(s, run, 0, tiny_cell(1, 16), first);
    // A second cell of the same workload names the same reference; the row stays the first one's.
    auto second = ok_outcome(2.0);
    second.reference = ref;
    second.reference->logits[0] = 99.0f;
    record_outcome(s, run, 1, tiny_cell(2, 16), second);
    CHECK(count_rows(s, "reference_logits") == 1);
    const auto back = s.load_reference(ref.key);
    REQUIRE(back);
    CHECK(back->model == "tiny");
    CHECK(back->batch == 1);
    CHECK(back->seq == 2);
    CHECK(back->vocab == 3);
    CHECK(back->logits == ref.logits);  // bit for bit, the first cell's
    auto keys = s.db().prepare("SELECT count(*) FROM cells WHERE check_reference_key = ?");
    keys.bind(1, ref.key);
    REQUIRE(keys.step());
    CHECK(keys.int64(0) == 2);
    // A row whose blob does not hold batch × seq × vocab floats is not a reference.
    s.db().exec("UPDATE reference_logits SET vocab = 4");
    CHECK_FALSE(s.load_reference(ref.key));
}

TEST_CASE("a database of every earlier version opens, reads, and upgrades to every declared column", "[store]") {
    for (int version = kOldestReadableSchemaVersion; version < schema_version(); ++version) {
        INFO("version " << version);
        TempDir tmp;
        const auto path = tmp.file("old.db");
        write_old_version(path, version);  // reads it back read-only, unchanged
        auto s = Store::open(path);
        auto v = s.db().prepare("SELECT version FROM schema_info");
        REQUIRE(v.step());
        CHECK(v.int64(0) == schema_version());
        for (const DeclaredColumn& c : declared_columns()) {
            INFO(c.table << "." << c.name);
            CHECK(has_column(s.db(), c.table, c.name));
        }
        // The cell from before: one row, with every later column at what cells before it had.
        CHECK(count_rows(s, "cells") == 1);
        auto launch = s.db().prepare(
            "SELECT launch, dropout, cpu_load_1m IS NULL, family, n_kv_head, ffn_hidden, lengths, packing FROM cells");
        REQUIRE(launch.step());
        CHECK(launch.text(0) == "kernels");
        CHECK(launch.real(1) == 0.0);
        CHECK(launch.int64(2) == 1);
        CHECK(launch.text(3) == "gpt2");
        CHECK(launch.int64(4) == 4);    // tiny's heads
        CHECK(launch.int64(5) == 256);  // 4 × its hidden 64
        CHECK(launch.text(6) == "fixed");
        CHECK(launch.text(7) == "padded");
    }
}

TEST_CASE("a WAL database whose -wal file a reader cannot fold in is refused, not read without it", "[store]") {
    // Only a user who cannot write the folder meets this: run the reader as nobody.
    if (geteuid() != 0 || test::run_command("command -v setpriv").exit_code != 0)
        SKIP("needs root, to read the database as the user nobody with setpriv");
    TempDir tmp;
    const std::string folder = tmp.file("ro");
    std::filesystem::create_directories(folder);
    const std::string path = folder + "/r.db";
    {
        auto s = Store::open(path);
        record_outcome(s, s.begin_run(sample_run()), 0, tiny_cell(1, 16), ok_outcome(1.0));
    }
    {
        // A connection that ends without folding its transactions into the file, as a killed sweep does.
        Database writer(path, Database::Mode::read_write);
        writer.exec("PRAGMA wal_autocheckpoint = 0; UPDATE runs SET host = 'after'");
        std::filesystem::copy_file(path, folder + "/copy.db");
        std::filesystem::copy_file(path + "-wal", folder + "/copy.db-wal");
    }
    namespace fs = std::filesystem;
    fs::permissions(tmp.file(""), fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
    fs::permissions(folder, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                                fs::perms::others_exec);
    const auto as_nobody = [&](const std::string& db) {
        return test::run_command("setpriv --reuid=nobody --regid=nogroup --clear-groups '" + test::sweetspot_binary() +
                                 "' summary '" + db + "'");
    };
    const auto r = as_nobody(folder + "/copy.db");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Matchers::ContainsSubstring("-wal holds transactions not yet in it"));
    // Without such transactions the file is read as it stands.
    fs::remove(folder + "/copy.db-wal");
    const auto plain = as_nobody(folder + "/copy.db");
    INFO(plain.output);
    CHECK(plain.exit_code == 0);
}

namespace {

// A traced iteration as it runs when the host runs ahead of the GPU: the layer ranges close once
// their work is queued (by 1400 ns) while the GPU works from 2000 to 8000 ns. Thread 8 launches a
// kernel inside layer 0's host time but opens no range; a driver call repeats the correlation id
// of the runtime call around it; the synchronize launches nothing. Ranges are listed as the
// collector stores them, in the order they end.
CellEvents host_ahead_events() {
    CellEvents e;
    e.ranges = {{1050, 1200, "compute", 7}, {1000, 1200, "layer 0", 7},  {1250, 1400, "compute", 7},
                {1200, 1400, "layer 1", 7}, {1400, 1450, "release", 7}, {1000, 9000, "traced iteration 0", 7}};
    e.api_calls = {{1060, 1070, 7, 11, "cudaLaunchKernel_v7000", 0},     {1100, 1110, 7, 12, "cudaLaunchKernel_v7000", 0},
                   {1110, 1120, 8, 31, "cudaLaunchKernel_v7000", 0},     {1150, 1160, 7, 13, "cudaMemcpyAsync_v3020", 0},
                   {1260, 1280, 7, 21, "cudaLaunchKernel_v7000", 0},     {1265, 1275, 7, 21, "cuLaunchKernel", 0},
                   {1300, 1310, 7, 22, "cudaLaunchKernel_v7000", 0},     {1500, 8900, 7, 40, "cudaStreamSynchronize_v3020", 0}};
    const auto launched = [](std::int64_t start, std::int64_t end, std::uint32_t correlation_id) {
        KernelRecord k = kernel(start, end, "gemm_sm90<float>", 13);
        k.correlation_id = correlation_id;
        return k;
    };
    e.kernels = {launched(2000, 3000, 11), launched(3000, 4000, 12), launched(2500, 2600, 31),
                 launched(4500, 7000, 21), launched(7000, 8000, 22)};
    MemcpyRecord copy;
    copy.start_ns = 4000;
    copy.end_ns = 4500;
    copy.stream_id = 13;
    copy.correlation_id = 13;
    copy.copy_kind = 1;
    copy.bytes = 4096;
    e.memcpys = {copy, migration(5000, 5100, 11, 1 << 20, 0x7f0000000000)};  // the migration has no correlation id
    e.gpu_page_faults = {{1100, 1101, 0, 0x7f0000000000, 32, 1},  // in layer 0's host time, before the GPU started
                         {2100, 2101, 0, 0x7f0000001000, 4, 1},   {4200, 4201, 0, 0x7f0000002000, 2, 1},
                         {5000, 5001, 0, 0x7f0000003000, 8, 1},   {7500, 7501, 0, 0x7f0000004000, 16, 1},
                         {8500, 8501, 0, 0x7f0000005000, 1, 1}};  // after the last kernel
    return e;
}

std::vector<std::vector<std::string>> query_rows(Store& s, const std::string& sql) {
    auto st = s.db().prepare(sql);
    std::vector<std::vector<std::string>> rows;
    while (st.step()) {
        std::vector<std::string> row;
        for (int i = 0; i < st.column_count(); ++i) row.push_back(st.text(i));
        rows.push_back(row);
    }
    return rows;
}

}  // namespace

TEST_CASE("NVTX ranges are projected onto the GPU through the API calls that launched their work", "[store][nvtx]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    const auto run = s.begin_run(sample_run());
    auto traced = ok_outcome(2.0);
    traced.events = host_ahead_events();
    const auto cell = record_outcome(s, run, 0, tiny_cell(1, 16), traced);
    traced.events->api_calls.clear();  // as recorded before schema version 15
    const auto unprojected = record_outcome(s, run, 1, tiny_cell(2, 16), traced);
    using Rows = std::vector<std::vector<std::string>>;

    // By hand: layer 0 launched kernels 11 and 12 and copy 13 (2000–4500), layer 1 kernel 21 once
    // and kernel 22 (4500–8000); thread 8's kernel and the migration belong to no range.
    CHECK(query_rows(s, "SELECT name, projected_start, projected_end, projected_duration, orig_start, orig_duration,"
                        " num_gpu_ops, lvl FROM nvtx_gpu_proj_trace WHERE cell_id = " + std::to_string(cell) +
                        " ORDER BY orig_start, lvl") ==
          Rows{{"traced iteration 0", "2000", "8000", "6000", "1000", "8000", "5", "0"},
               {"layer 0", "2000", "4500", "2500", "1000", "200", "3", "1"},
               {"compute", "2000", "4500", "2500", "1050", "150", "3", "2"},
               {"layer 1", "4500", "8000", "3500", "1200", "200", "2", "1"},
               {"compute", "4500", "8000", "3500", "1250", "150", "2", "2"}});
    CHECK(query_rows(s, "SELECT total_proj_ns, total_range_ns, range_instances, proj_avg_ns, proj_min_ns, proj_max_ns,"
                        " total_gpu_ops, avg_range_lvl FROM nvtx_gpu_proj_sum WHERE range = 'compute'") ==
          Rows{{"6000", "300", "2", "3000.0", "2500", "3500", "5", "2.0"}});
    CHECK(query_rows(s, "SELECT count(*) FROM nvtx_gpu_proj_trace WHERE cell_id = " + std::to_string(unprojected)) ==
          Rows{{"0"}});

    // The documented query attributes the faults during the GPU work (2100 and 4200 to layer 0,
    // 5000 and 7500 to layer 1), not the one in layer 0's host time nor the one after the last kernel.
    CHECK(query_rows(s, documented_queries().at("faults-by-layer")) ==
          Rows{{std::to_string(cell), "layer 0", "2", "6"}, {std::to_string(cell), "layer 1", "2", "24"}});

    const auto text = cell_summary_text(s, cell);
    INFO(text);
    CHECK(contains(text, "nvtx_gpu_proj_sum (NVTX ranges projected onto the GPU, by text)"));
    std::istringstream lines(text);
    std::string line;
    bool layer1 = false;
    while (std::getline(lines, line)) layer1 = layer1 || (contains(line, "3500") && contains(line, " layer 1"));
    CHECK(layer1);
    CHECK(contains(cell_summary_text(s, unprojected), "nvtx_gpu_proj_sum: not recorded"));
}

TEST_CASE("the copies-by-unit query gives each fetch and gradient copy to the unit its range names", "[store][nvtx]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    const auto run = s.begin_run(sample_run());
    // Thread 7 computes layer 0 while the look-ahead fetches layer 1 inside its range (copy 51),
    // fetches it again for the backward (52), sends its gradient out (53) and, in layer 0's own
    // range, launches a kernel (11). A driver call repeats copy 52's correlation id; thread 8 makes
    // a copy (61) in no range of its own.
    CellEvents e;
    e.ranges = {{1100, 1200, "fetch layer 1", 7},
                {1000, 1300, "layer 0", 7},
                {1400, 1500, "fetch layer 1", 7},
                {1600, 1700, "gradient out layer 1", 7},
                {1000, 9000, "traced iteration 0", 7}};
    e.api_calls = {{1050, 1060, 7, 11, "cudaLaunchKernel_v7000", 0}, {1110, 1120, 7, 51, "cudaMemcpyAsync_v3020", 0},
                   {1410, 1420, 7, 52, "cudaMemcpyAsync_v3020", 0},  {1412, 1418, 7, 52, "cuMemcpyHtoDAsync_v2", 0},
                   {1610, 1620, 7, 53, "cudaMemcpyAsync_v3020", 0},  {1150, 1160, 8, 61, "cudaMemcpyAsync_v3020", 0}};
    KernelRecord k = kernel(2000, 2500, "gemm_sm90<float>", 13);
    k.correlation_id = 11;
    e.kernels = {k};
    const auto copy = [](std::int64_t start, std::int64_t end, std::uint32_t correlation_id, std::int32_t kind) {
        MemcpyRecord m;
        m.start_ns = start;
        m.end_ns = end;
        m.stream_id = 14;
        m.correlation_id = correlation_id;
        m.copy_kind = kind;
        m.bytes = 40'000;
        return m;
    };
    e.memcpys = {copy(2000, 3000, 51, 1), copy(4000, 6000, 52, 1), copy(6000, 7000, 53, 2), copy(2000, 2100, 61, 1)};
    auto traced = ok_outcome(2.0);
    traced.events = e;
    const auto cell = std::to_string(record_outcome(s, run, 0, tiny_cell(1, 16), traced));
    // By hand: layer 1 fetched twice, 80 000 bytes in 3000 ns (26.67 bytes a ns), its gradient
    // 40 000 bytes in 1000 ns; layer 0's kernel and thread 8's copy are no transfer of a unit.
    using Rows = std::vector<std::vector<std::string>>;
    CHECK(query_rows(s, documented_queries().at("copies-by-unit")) ==
          Rows{{cell, "fetch layer 1", "2", "80000", "0.003", "26.67"},
               {cell, "gradient out layer 1", "1", "40000", "0.001", "40.0"}});
}
