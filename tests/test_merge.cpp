// sweetspot merge: shards combined into one database, every row kept once, and shards refused
// before anything is written.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <string>

#include "harness/store/merge.hpp"
#include "harness/store/store.hpp"
#include "store_fixture.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using namespace sweetspot::test;
using Catch::Matchers::ContainsSubstring;

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
        RunInfo info = sample_run();
        info.started_at = "2026-11-23T09:00:00Z";
        const auto run = b.begin_run(info);
        auto traced = ok_outcome(5.0);
        traced.started_at = traced.finished_at = "2026-11-23T09:00:05Z";
        traced.events = sample_events();
        traced.events->kernels.insert(traced.events->kernels.begin(), kernel(500'000, 600'000, "layernorm_kernel", 13));
        std::reverse(traced.events->ranges.begin(), traced.events->ranges.end());
        b.record_cell(run, 0, tiny_cell(64, 8), traced);  // only in B
        auto later = ok_outcome(7.0);
        later.started_at = later.finished_at = "2099-01-01T00:00:00Z";
        b.record_cell(run, 1, tiny_cell(2, 16), later);  // also in A, measured later
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
        shard.record_cell(shard.begin_run(sample_run()), 0, tiny_cell(1, 16), o);
    }
    merge_databases(tmp.file("out.db"), {tmp.file("a.db"), tmp.file("a.db")});
    auto out = Store::open_read_only(tmp.file("out.db"));
    CHECK(count_rows(out, "reference_logits") == 1);
    const auto merged = out.load_reference(ref.key);
    REQUIRE(merged);
    CHECK(merged->logits == ref.logits);
}
