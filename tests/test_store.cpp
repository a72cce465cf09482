// The results database: schema, one-transaction-per-cell writes, and the documentation in
// results/README.md (its column tables and its example queries) checked against the real thing.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers.hpp>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "harness/store.hpp"
#include "kernels/model_config.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using sweetspot::test::TempDir;

namespace {

CellParams tiny_cell(int batch, int seq) {
    CellParams c;
    c.model = *find_builtin_model("tiny");
    c.batch = batch;
    c.seq = seq;
    c.sweep = "unit";
    return c;
}

CellOutcome ok_outcome(double base_ms) {
    CellOutcome o;
    o.status = "ok";
    o.started_at = "2026-11-22T10:00:00Z";
    o.finished_at = "2026-11-22T10:00:01Z";
    o.wall_s = 1.0;
    o.init_s = 0.1;
    o.warmup_ms = {base_ms * 3};
    o.timed_ms = {base_ms * 1.2, base_ms, base_ms * 1.1, base_ms * 0.9, base_ms * 1.05};
    o.tokens_per_s = 64 / (base_ms / 1000);
    o.check_reference = "float64 loops";
    o.check_max_abs_err = 1e-6;
    o.check_rel_err = 2e-7;
    o.check_tolerance = 1e-4;
    o.exit_code = 0;
    return o;
}

std::int64_t count_rows(Store& s, const std::string& table) {
    auto st = s.db().prepare("SELECT count(*) FROM " + table);
    st.step();
    return st.int64(0);
}

RunInfo sample_run() {
    RunInfo r;
    r.started_at = "2026-11-22T10:00:00Z";
    r.host = "testhost";
    r.matrix_name = "unit";
    r.cells_total = 3;
    return r;
}

// A database with a few ok cells and one failed one, for the documented queries.
void fill_fixture(Store& s) {
    const auto run = s.begin_run(sample_run());
    s.record_cell(run, 0, tiny_cell(1, 16), ok_outcome(2.0));
    s.record_cell(run, 1, tiny_cell(2, 16), ok_outcome(3.5));
    s.record_cell(run, 2, tiny_cell(4, 32), ok_outcome(9.0));
    CellOutcome failed;
    failed.status = "failed";
    failed.reason = "killed by signal 11 (Segmentation fault)";
    failed.stderr_tail = "debug_fault = \"segfault\": failing on purpose\n";
    failed.signal = 11;
    s.record_cell(run, 3, tiny_cell(8, 32), failed);
    s.finish_run(run, "finished");
}

std::string read_text(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Columns per table as documented: a "### `name`" heading followed by a markdown table.
std::map<std::string, std::set<std::string>> documented_columns() {
    std::map<std::string, std::set<std::string>> out;
    std::istringstream in(read_text(test::source_path("results/README.md")));
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
    const std::string text = read_text(test::source_path("results/README.md"));
    const std::regex block(R"(```sql\n-- query: ([\w-]+)\n([\s\S]*?)```)");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), block); it != std::sregex_iterator(); ++it)
        out[(*it)[1]] = (*it)[2];
    return out;
}

}  // namespace

TEST_CASE("a new database gets schema version 1 in WAL mode", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("sub/dir/r.db"));
    auto v = s.db().prepare("SELECT version, created_by FROM schema_info");
    REQUIRE(v.step());
    CHECK(v.int64(0) == kSchemaVersion);
    CHECK(v.text(1).rfind("sweetspot ", 0) == 0);
    auto wal = s.db().prepare("PRAGMA journal_mode");
    REQUIRE(wal.step());
    CHECK(wal.text(0) == "wal");
    auto uv = s.db().prepare("PRAGMA user_version");
    REQUIRE(uv.step());
    CHECK(uv.int64(0) == kSchemaVersion);
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
                      path + " has schema version 99; this sweetspot reads version 1");
}

TEST_CASE("a cell and its iterations round-trip through the store", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    const auto run = s.begin_run(sample_run());
    const auto cell = tiny_cell(2, 16);
    const auto in = ok_outcome(4.0);
    s.record_cell(run, 7, cell, in);

    const auto out = s.load_outcome(cell.key());
    REQUIRE(out);
    CHECK(out->status == "ok");
    CHECK(out->timed_ms == in.timed_ms);
    CHECK(out->warmup_ms == in.warmup_ms);
    CHECK(out->check_rel_err == in.check_rel_err);
    CHECK(out->tokens_per_s == in.tokens_per_s);
    CHECK_FALSE(s.load_outcome("0000000000000000"));

    auto st = s.db().prepare(
        "SELECT cell_index, sweep, model, n_params, batch, seq, latency_median_ms, latency_p10_ms, weight_bytes,"
        " budget_bytes, oversubscription, canonical FROM cells WHERE cell_key = ?");
    st.bind(1, cell.key());
    REQUIRE(st.step());
    CHECK(st.int64(0) == 7);
    CHECK(st.text(1) == "unit");
    CHECK(st.text(2) == "tiny");
    CHECK(st.int64(3) == cell.model.n_params());
    CHECK(st.int64(4) == 2);
    CHECK(st.int64(5) == 16);
    CHECK(st.real(6) == Catch::Approx(4.2));  // median of 3.6, 4.0, 4.2, 4.4, 4.8
    CHECK(st.real(7) == Catch::Approx(3.76));
    CHECK(st.int64(8) == cell.weight_bytes());
    CHECK(st.int64(8) >= cell.model.n_params() * 4);  // padded for alignment
    CHECK(st.int64(9) == st.int64(8));  // budget 100%
    CHECK(st.real(10) == Catch::Approx(1.0));
    CHECK(st.text(11) == cell.canonical());
}

TEST_CASE("recording a key again replaces the row and its iterations", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    const auto run = s.begin_run(sample_run());
    const auto cell = tiny_cell(1, 16);
    CellOutcome failed;
    failed.status = "failed";
    failed.reason = "first try";
    s.record_cell(run, 0, cell, failed);
    s.record_cell(run, 0, cell, ok_outcome(2.0));
    CHECK(count_rows(s, "cells") == 1);
    CHECK(count_rows(s, "iterations") == 6);
    CHECK(s.ok_keys() == std::set<std::string>{cell.key()});
}

TEST_CASE("a cell whose write fails leaves nothing behind", "[store]") {
    TempDir tmp;
    auto s = Store::open(tmp.file("r.db"));
    const auto run = s.begin_run(sample_run());
    auto bad = ok_outcome(2.0);
    bad.status = "bogus";  // violates the CHECK constraint after the iterations are prepared
    CHECK_THROWS_AS(s.record_cell(run, 0, tiny_cell(1, 16), bad), SqliteError);
    CHECK(count_rows(s, "cells") == 0);
    CHECK(count_rows(s, "iterations") == 0);
    // The connection is usable afterwards.
    s.record_cell(run, 0, tiny_cell(1, 16), ok_outcome(2.0));
    CHECK(count_rows(s, "cells") == 1);
}

TEST_CASE("latency statistics interpolate percentiles", "[store]") {
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
    for (const char* table : {"schema_info", "runs", "cells", "iterations"}) {
        INFO("table " << table);
        std::set<std::string> actual;
        auto st = s.db().prepare(std::string("SELECT name FROM pragma_table_info('") + table + "')");
        while (st.step()) actual.insert(st.text(0));
        REQUIRE(documented.count(table));
        CHECK(documented.at(table) == actual);
    }
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
}
