// sweetspot merge: shards combined into one database, every row kept once, and shards refused
// before anything is written.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "harness/store/merge.hpp"
#include "harness/store/store.hpp"
#include "store_fixture.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using namespace sweetspot::test;
using Catch::Matchers::ContainsSubstring;
namespace fs = std::filesystem;

namespace {

std::string quoted(const std::string& path) { return "'" + path + "'"; }

// ok_outcome(base_ms) measured at `at` (ISO 8601), which tells one measurement from another.
CellOutcome measured_at(double base_ms, const std::string& at) {
    CellOutcome o = ok_outcome(base_ms);
    o.set<"started_at">(at);
    o.set<"finished_at">(at);
    return o;
}

// A shard whose cell `orphan` names a run that its runs table lacks, as a database written with
// foreign keys off (another tool, a hand edit) can be. Returns that cell's id and the run's.
std::pair<std::int64_t, std::int64_t> write_orphaned_shard(const std::string& path, const CellParams& orphan) {
    std::int64_t cell = 0, run = 0;
    {
        auto shard = Store::open(path);
        record_outcome(shard, shard.begin_run(sample_run()), 0, tiny_cell(1, 16), ok_outcome(1.0));
        run = shard.begin_run(sample_run("2026-11-23T00:00:00Z"));
        cell = record_outcome(shard, run, 1, orphan, ok_outcome(2.0));
    }
    Database db(path, Database::Mode::read_write);  // foreign keys are off unless a connection turns them on
    db.prepare("DELETE FROM runs WHERE run_id = ?").bind(1, run).run();
    return {cell, run};
}

// The keys of the cells in the database at `path`.
std::set<std::string> cell_keys(const std::string& path) {
    auto db = Store::open_read_only(path);
    std::set<std::string> keys;
    auto st = db.db().prepare("SELECT cell_key FROM cells");
    while (st.step()) keys.insert(st.text(0));
    return keys;
}

// Makes a folder read-only (0555) for as long as it lives, writable again after.
class ReadOnlyFolder {
public:
    explicit ReadOnlyFolder(std::string path) : path_(std::move(path)) {
        fs::permissions(path_, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                   fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
    }
    ~ReadOnlyFolder() {
        std::error_code ec;
        fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    }
    ReadOnlyFolder(const ReadOnlyFolder&) = delete;
    ReadOnlyFolder& operator=(const ReadOnlyFolder&) = delete;
    // Whether this process really cannot create a file there (root can, whatever the permissions).
    bool holds() const {
        const std::string probe = path_ + "/probe";
        if (!std::ofstream(probe)) return true;
        fs::remove(probe);
        return false;
    }

private:
    std::string path_;
};

}  // namespace

TEST_CASE("merge: shards into one, every row kept, string ids remapped, idempotent, conflicts as history", "[merge]") {
    TempDir tmp;
    // Shard A: the fixture (events of two cells). Shard B: its own string table first, so the same
    // kernel names have other ids there, then a cell that A also has, measured later.
    {
        auto a = Store::open(tmp.file("a.db"));
        fill_fixture(a);
    }
    {
        auto b = Store::open(tmp.file("b.db"));
        const auto run = b.begin_run(sample_run("2026-11-23T09:00:00Z"));
        auto traced = ok_outcome(5.0);
        traced.set<"started_at">("2026-11-23T09:00:05Z");
        traced.set<"finished_at">("2026-11-23T09:00:05Z");
        traced.events = sample_events();
        traced.events->kernels.insert(traced.events->kernels.begin(), kernel(500'000, 600'000, "layernorm_kernel", 13));
        std::reverse(traced.events->ranges.begin(), traced.events->ranges.end());
        record_outcome(b, run, 0, tiny_cell(64, 8), traced);  // only in B
        auto later = ok_outcome(7.0);
        later.set<"started_at">("2099-01-01T00:00:00Z");
        later.set<"finished_at">("2099-01-01T00:00:00Z");
        record_outcome(b, run, 1, tiny_cell(2, 16), later);  // also in A, measured later
    }
    const auto kernel_names = [](Database& db, const std::string& key) {
        auto st = db.prepare("SELECT group_concat(s.value, '|') FROM (SELECT k.shortName FROM CUPTI_ACTIVITY_KIND_KERNEL k"
                             " JOIN cells c USING (cell_id) WHERE c.cell_key = ? ORDER BY k.start) k"
                             " JOIN StringIds s ON s.id = k.shortName");
        st.bind(1, key);
        st.step();
        return st.is_null(0) ? std::string() : st.text(0);
    };
    std::string a_names, b_names;
    {
        auto a = Store::open_read_only(tmp.file("a.db"));
        a_names = kernel_names(a.db(), tiny_cell(1, 16).key());
        auto b = Store::open_read_only(tmp.file("b.db"));
        b_names = kernel_names(b.db(), tiny_cell(64, 8).key());
        // B numbered the names in another order than A (what the remapping is for).
        auto ids = b.db().prepare("SELECT id FROM StringIds WHERE value = 'softmax_kernel'");
        REQUIRE(ids.step());
        auto a_ids = a.db().prepare("SELECT id FROM StringIds WHERE value = 'softmax_kernel'");
        REQUIRE(a_ids.step());
        CHECK(ids.int64(0) != a_ids.int64(0));
    }
    const std::string out_path = tmp.file("out.db");
    const MergeCounts first = merge_databases(out_path, {tmp.file("a.db")}).at(0);
    CHECK(first.cells_added == 4);
    CHECK(first.runs_added == 1);
    const MergeCounts again = merge_databases(out_path, {tmp.file("a.db")}).at(0);
    CHECK(again.cells_added == 0);
    CHECK(again.cells_already_there == 4);
    CHECK(again.runs_added == 0);
    const MergeCounts second = merge_databases(out_path, {tmp.file("b.db")}).at(0);
    CHECK(second.cells_added == 2);
    CHECK(second.conflicts == 1);
    CHECK(second.runs_added == 1);

    auto out = Store::open_read_only(out_path);

    CHECK(count_rows(out, "cells") == 5);
    CHECK(count_rows(out, "runs") == 2);
    CHECK(count_rows(out, "cell_history") == 1);  // A's measurement of the cell B measured later
    CHECK(kernel_names(out.db(), tiny_cell(1, 16).key()) == a_names);
    CHECK(kernel_names(out.db(), tiny_cell(64, 8).key()) == b_names);
    CHECK_FALSE(a_names.empty());
    CHECK_FALSE(b_names.empty());
    auto newer = out.db().prepare("SELECT latency_median_ms FROM cells WHERE cell_key = ?");
    newer.bind(1, tiny_cell(2, 16).key());
    REQUIRE(newer.step());
    CHECK(newer.real(0) == Catch::Approx(7.0).epsilon(0.2));
    for (const std::string& table : kEventTables) {
        INFO(table);
        Store a = Store::open_read_only(tmp.file("a.db"));
        Store b = Store::open_read_only(tmp.file("b.db"));
        // A's events, less those of the cell B replaced, plus all of B's.
        auto replaced = a.db().prepare("SELECT count(*) FROM " + table + " t JOIN cells c USING (cell_id) WHERE c.cell_key = ?");
        replaced.bind(1, tiny_cell(2, 16).key());
        replaced.step();
        CHECK(count_rows(out, table) == count_rows(a, table) - replaced.int64(0) + count_rows(b, table));
    }
    auto check = out.db().prepare("PRAGMA integrity_check");
    REQUIRE(check.step());
    CHECK(check.text(0) == "ok");

    CHECK_THROWS_WITH(merge_databases(out_path, {tmp.file("missing.db")}), ContainsSubstring("no such database"));
}

TEST_CASE("merge keeps one row of reference logits per key", "[merge]") {
    TempDir tmp;
    const ReferenceLogits ref{"0123456789abcdef", "tiny", 1, 2, 3, {0.5f, -1.25f, 3.0f, 1e-30f, -0.0f, 7.75f}};
    {
        auto shard = Store::open(tmp.file("a.db"));
        auto o = ok_outcome(1.0);
        o.reference = ref;
        record_outcome(shard, shard.begin_run(sample_run()), 0, tiny_cell(1, 16), o);
    }
    merge_databases(tmp.file("out.db"), {tmp.file("a.db"), tmp.file("a.db")});
    auto out = Store::open_read_only(tmp.file("out.db"));
    CHECK(count_rows(out, "reference_logits") == 1);
    const auto merged = out.load_reference(ref.key);
    REQUIRE(merged);
    CHECK(merged->logits == ref.logits);
}

TEST_CASE("merge refuses a shard whose cell names a run the shard lacks, naming the cell and the run", "[merge]") {
    TempDir tmp;
    const CellParams orphan = tiny_cell(16, 8);  // a cell fill_fixture has not
    const auto [cell, run] = write_orphaned_shard(tmp.file("shard.db"), orphan);
    // OUT has runs of its own, under one of which the cell could otherwise end up.
    {
        auto out = Store::open(tmp.file("out.db"));
        fill_fixture(out);
    }
    CHECK_THROWS_WITH(merge_databases(tmp.file("out.db"), {tmp.file("shard.db")}),
                      ContainsSubstring(tmp.file("shard.db")) && ContainsSubstring("cell " + std::to_string(cell)) &&
                          ContainsSubstring(orphan.key()) && ContainsSubstring("run " + std::to_string(run)));
    CHECK_FALSE(cell_keys(tmp.file("out.db")).contains(orphan.key()));
}

TEST_CASE("merge copies a shard's cell history once, naming OUT's runs, however often and in whatever order it merges",
          "[merge]") {
    TempDir tmp;
    const CellParams both = tiny_cell(1, 16), early_only = tiny_cell(2, 16);
    // early.db: `both` measured twice (the first measurement its history), `early_only` once.
    {
        auto early = Store::open(tmp.file("early.db"));
        RunInfo info = sample_run("2026-01-01T00:00:00Z");
        info.host = "early";
        const auto run = early.begin_run(info);
        record_outcome(early, run, 0, both, measured_at(1.0, "2026-01-01T00:00:01Z"));
        record_outcome(early, run, 0, both, measured_at(2.0, "2026-01-01T00:00:02Z"));
        record_outcome(early, run, 1, early_only, measured_at(3.0, "2026-01-01T00:00:03Z"));
    }
    // late.db: `both` measured once more, later.
    {
        auto late = Store::open(tmp.file("late.db"));
        RunInfo info = sample_run("2026-02-01T00:00:00Z");
        info.host = "late";
        record_outcome(late, late.begin_run(info), 0, both, measured_at(4.0, "2026-02-01T00:00:01Z"));
    }
    // late's run comes first in OUT, so early's run has another id there than in its shard.
    const std::string out_path = tmp.file("out.db");
    merge_databases(out_path, {tmp.file("late.db")});
    const MergeCounts counts = merge_databases(out_path, {tmp.file("early.db")}).at(0);
    CHECK(counts.history_added == 1);  // the first measurement; the second, early's cell, is the conflict's
    CHECK(counts.conflicts == 1);

    // `both`'s history in OUT: when each measurement finished, and the host of the run it names.
    using Rows = std::vector<std::pair<std::string, std::string>>;
    const auto history = [&] {
        auto out = Store::open_read_only(out_path);
        auto st = out.db().prepare("SELECT json_extract(h.cell, '$.finished_at'), r.host FROM cell_history h"
                                   " LEFT JOIN runs r ON r.run_id = json_extract(h.cell, '$.run_id')"
                                   " WHERE h.cell_key = ? ORDER BY 1");
        st.bind(1, both.key());
        Rows rows;
        while (st.step()) rows.emplace_back(st.text(0), st.text(1));
        return rows;
    };
    // Both of early's measurements: the one its history kept, and its cell, older than late's.
    const Rows expected = {{"2026-01-01T00:00:01Z", "early"}, {"2026-01-01T00:00:02Z", "early"}};
    CHECK(history() == expected);

    for (const auto& shards : std::vector<std::vector<std::string>>{
             {tmp.file("early.db")}, {tmp.file("late.db"), tmp.file("early.db")}, {tmp.file("early.db"), tmp.file("late.db")}})
        for (const MergeCounts& again : merge_databases(out_path, shards)) {
            CHECK(again.cells_added + again.conflicts + again.history_added + again.runs_added == 0);
            CHECK(again.cells_already_there > 0);
        }
    CHECK(history() == expected);
    auto out = Store::open_read_only(out_path);
    CHECK(count_rows(out, "cell_history") == 2);
    CHECK(count_rows(out, "cells") == 2);
    auto cell = out.db().prepare("SELECT c.finished_at, r.host FROM cells c JOIN runs r USING (run_id) WHERE c.cell_key = ?");
    cell.bind(1, both.key());
    REQUIRE(cell.step());
    CHECK(cell.text(0) == "2026-02-01T00:00:01Z");
    CHECK(cell.text(1) == "late");
}

TEST_CASE("merge takes more shards than SQLite attaches at once", "[merge]") {
    TempDir tmp;
    // Twelve: SQLite attaches ten databases to a connection unless built otherwise.
    std::vector<std::string> shards;
    std::set<std::string> keys;
    for (int i = 1; i <= 12; ++i) {
        shards.push_back(tmp.file("shard" + std::to_string(i) + ".db"));
        auto shard = Store::open(shards.back());
        record_outcome(shard, shard.begin_run(sample_run()), 0, tiny_cell(i, 8), ok_outcome(i));
        keys.insert(tiny_cell(i, 8).key());
    }
    const std::vector<MergeCounts> counts = merge_databases(tmp.file("out.db"), shards);
    REQUIRE(counts.size() == shards.size());
    for (const MergeCounts& c : counts) CHECK(c.cells_added == 1);
    CHECK(cell_keys(tmp.file("out.db")) == keys);
}

TEST_CASE("merge checks every shard before it creates or changes OUT", "[merge][refusal]") {
    TempDir tmp;
    {
        auto good = Store::open(tmp.file("good.db"));
        fill_fixture(good);
        auto more = Store::open(tmp.file("more.db"));
        record_outcome(more, more.begin_run(sample_run("2026-11-24T00:00:00Z")), 0, tiny_cell(64, 8), ok_outcome(5.0));
    }
    const std::string existing = tmp.file("existing.db"), fresh = tmp.file("fresh.db");
    merge_databases(existing, {tmp.file("good.db")});
    const std::string before = read_bytes(existing);
    // Merging good shards and then `bad`: exit 2, a message naming `bad` and saying `says`, OUT
    // byte for byte as it was, or not there at all.
    const auto refused = [&](const std::string& bad, const std::string& says) {
        for (const std::string& out : {existing, fresh}) {
            const auto r = run_sweetspot("merge -o " + quoted(out) + " " + quoted(tmp.file("good.db")) + " " +
                                         quoted(tmp.file("more.db")) + " " + quoted(bad));
            INFO(r.output);
            CHECK(r.exit_code == 2);
            CHECK_THAT(r.output, ContainsSubstring(bad) && ContainsSubstring(says));
        }
        const bool unchanged = read_bytes(existing) == before;
        CHECK(unchanged);
        CHECK_FALSE(fs::exists(fresh));
        CHECK_FALSE(fs::exists(fresh + "-wal"));
    };

    SECTION("a file that is not SQLite") {
        write_file(tmp.file("junk.db"), std::string(3000, 'j'));
        refused(tmp.file("junk.db"), "is not an SQLite database");
    }
    SECTION("an SQLite database of another program") {
        Database(tmp.file("other.db"), Database::Mode::read_write_create).exec("CREATE TABLE notes (text TEXT)");
        refused(tmp.file("other.db"), "is an SQLite database but not a sweetspot results database");
    }
    SECTION("a schema version this sweetspot does not know") {
        merge_databases(tmp.file("future.db"), {tmp.file("more.db")});
        Database(tmp.file("future.db"), Database::Mode::read_write).exec("UPDATE schema_info SET version = 99");
        refused(tmp.file("future.db"), "schema version 99");
    }
    SECTION("a cell whose run is missing") {
        const auto [cell, run] = write_orphaned_shard(tmp.file("orphan.db"), tiny_cell(2, 16));
        refused(tmp.file("orphan.db"), "names run " + std::to_string(run));
    }
}

TEST_CASE("merge reads a WAL shard in a folder it cannot write", "[merge]") {
    TempDir tmp;
    fs::create_directory(tmp.file("shards"));
    const std::string shard = tmp.file("shards/shard.db");
    std::set<std::string> keys;
    const auto record = [&](Store& s) {
        const auto run = s.begin_run(sample_run());
        for (const int batch : {1, 2, 4}) {
            record_outcome(s, run, batch, tiny_cell(batch, 16), ok_outcome(batch));
            keys.insert(tiny_cell(batch, 16).key());
        }
    };
    SECTION("its last transactions still in its -wal file") {
        // A copy taken while the writer is open: the cells are in the -wal file, not yet in the database.
        auto live = Store::open(tmp.file("live.db"));
        record(live);
        fs::copy_file(tmp.file("live.db"), shard);
        fs::copy_file(tmp.file("live.db-wal"), shard + "-wal");
        REQUIRE(fs::file_size(shard + "-wal") > 0);
    }
    SECTION("no -wal file") {
        auto s = Store::open(shard);
        record(s);
    }
    ReadOnlyFolder read_only(tmp.file("shards"));
    if (!read_only.holds()) SKIP("this user (root) can write into a folder of mode 0555: nothing to test");
    const std::string before = read_bytes(shard);
    merge_databases(tmp.file("out.db"), {shard});
    CHECK(cell_keys(tmp.file("out.db")) == keys);
    const bool unchanged = read_bytes(shard) == before;
    CHECK(unchanged);
}

TEST_CASE("merge takes shards of older schema versions from upgraded copies, the shards left as they were", "[merge]") {
    TempDir tmp;
    const CellParams v9 = tiny_cell(2, 8), v2 = tiny_cell(4, 8);
    CellParams current = tiny_cell(8, 8);
    current.launch = Launch::graphs;
    write_old_version(tmp.file("v9.db"), 9, v9);
    write_old_version(tmp.file("v2.db"), 2, v2);
    {
        auto s = Store::open(tmp.file("current.db"));
        record_outcome(s, s.begin_run(sample_run()), 0, current, ok_outcome(1.0));
    }
    const std::string v9_bytes = read_bytes(tmp.file("v9.db")), v2_bytes = read_bytes(tmp.file("v2.db"));
    fs::create_directory(tmp.file("scratch"));
    const auto r = run_command("TMPDIR=" + quoted(tmp.file("scratch")) + " " + quoted(sweetspot_binary()) + " merge -o " +
                               quoted(tmp.file("out.db")) + " " + quoted(tmp.file("v9.db")) + " " + quoted(tmp.file("v2.db")) +
                               " " + quoted(tmp.file("current.db")));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);

    // Every cell, the older ones with what the upgrade gives the columns their versions lacked:
    // launch (version 10) 'kernels', dropout (version 3) 0.
    auto out = Store::open_read_only(tmp.file("out.db"));
    std::map<std::string, std::pair<std::string, double>> cells;
    auto st = out.db().prepare("SELECT cell_key, launch, dropout FROM cells");
    while (st.step()) cells[st.text(0)] = {st.text(1), st.real(2)};
    const std::map<std::string, std::pair<std::string, double>> expected = {
        {v9.key(), {"kernels", 0.0}}, {v2.key(), {"kernels", 0.0}}, {current.key(), {"graphs", 0.0}}};
    CHECK(cells == expected);
    const bool unchanged = read_bytes(tmp.file("v9.db")) == v9_bytes && read_bytes(tmp.file("v2.db")) == v2_bytes;
    CHECK(unchanged);
    CHECK(fs::is_empty(tmp.file("scratch")));  // the copies are gone
}

TEST_CASE("merge writes only into the database -o or --out names, never into one of its shards", "[merge][refusal]") {
    TempDir tmp;
    const std::string s1 = tmp.file("s1.db"), s2 = tmp.file("s2.db");
    {
        auto a = Store::open(s1);
        record_outcome(a, a.begin_run(sample_run()), 0, tiny_cell(1, 8), ok_outcome(1.0));
        auto b = Store::open(s2);
        record_outcome(b, b.begin_run(sample_run("2026-11-24T00:00:00Z")), 0, tiny_cell(2, 8), ok_outcome(2.0));
    }
    const std::string s1_bytes = read_bytes(s1), s2_bytes = read_bytes(s2);
    const auto shards_unchanged = [&] {
        const bool unchanged = read_bytes(s1) == s1_bytes && read_bytes(s2) == s2_bytes;
        CHECK(unchanged);
    };

    SECTION("no output named: refused, the first shard left as it was") {
        const auto r = run_sweetspot("merge " + quoted(s1) + " " + quoted(s2));
        INFO(r.output);
        CHECK(r.exit_code == 2);
        CHECK_THAT(r.output, ContainsSubstring("-o OUT.db"));
        shards_unchanged();
        CHECK(cell_keys(s1) == std::set<std::string>{tiny_cell(1, 8).key()});
    }
    SECTION("the output is a shard, by another spelling of its path or a link to it") {
        fs::create_directory(tmp.file("sub"));
        fs::create_symlink(s2, tmp.file("link.db"));
        fs::create_hard_link(s1, tmp.file("hard.db"));
        for (const std::string& out : {s1, tmp.file("sub/../s1.db"), tmp.file("link.db"), tmp.file("hard.db")}) {
            const auto r = run_sweetspot("merge -o " + quoted(out) + " " + quoted(s1) + " " + quoted(s2));
            INFO(out << ": " << r.output);
            CHECK(r.exit_code == 2);
            CHECK_THAT(r.output, ContainsSubstring("is the shard"));
        }
        shards_unchanged();
        CHECK_FALSE(fs::exists(s1 + "-wal"));
        CHECK_FALSE(fs::exists(s2 + "-wal"));
    }
    SECTION("-o and --out, as --help lists them, both work; both at once is refused") {
        const std::set<std::string> both = {tiny_cell(1, 8).key(), tiny_cell(2, 8).key()};
        for (const std::string option : {"-o", "--out", "--output"}) {
            const std::string out = tmp.file("out" + option + ".db");
            const auto r = run_sweetspot("merge " + option + " " + quoted(out) + " " + quoted(s1) + " " + quoted(s2));
            INFO(option << ": " << r.output);
            CHECK(r.exit_code == 0);
            CHECK(cell_keys(out) == both);
        }
        const auto help = run_sweetspot("merge --help");
        CHECK_THAT(help.output, ContainsSubstring("-o [ --output ]") && ContainsSubstring("--out arg"));
        const auto twice = run_sweetspot("merge -o " + quoted(tmp.file("a.db")) + " --out " + quoted(tmp.file("b.db")) + " " +
                                         quoted(s1));
        CHECK(twice.exit_code == 2);
        CHECK_FALSE(fs::exists(tmp.file("a.db")));
        CHECK_FALSE(fs::exists(tmp.file("b.db")));
        shards_unchanged();
    }
}
