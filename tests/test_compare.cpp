// `sweetspot compare` and its significance test (harness/cli/compare.hpp, rank_test.hpp): exact
// p-values against counted arrangements, and two databases with a known 10 % slowdown.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "harness/cli/compare.hpp"
#include "harness/cli/rank_test.hpp"
#include "harness/matrix/matrix.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "harness/store/sqlite.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;

namespace {

// The cell of the tiny model on the host backend at this batch, measured with `iterations`.
CellParams tiny_at(int batch, int iterations) {
    const Matrix m = parse_matrix("name = \"c\"\n[defaults]\nmodel = \"tiny\"\nbatch = " + std::to_string(batch) +
                                      "\niterations = " + std::to_string(iterations) + "\nmax_iterations = " +
                                      std::to_string(iterations * 2) + "\n[[sweep]]\nname = \"s\"\n",
                                  "test");
    return m.cells.at(0);
}

// `n` latencies spread evenly over ±1 % of `centre` ms, in a scrambled order, their median
// `centre` (n coprime with 7).
std::vector<double> around(double centre, int n) {
    std::vector<double> ms;
    for (int i = 0; i < n; ++i) ms.push_back(centre * (1.0 + 0.02 * ((i * 7 % n) - (n - 1) / 2.0) / n));
    return ms;
}

void record(Store& store, std::int64_t run, int index, const CellParams& cell, std::vector<double> timed_ms) {
    CellOutcome o;
    o.status = CellStatus::ok;
    o.set<"started_at">("2026-11-23T00:00:00Z");
    o.set<"finished_at">("2026-11-23T00:00:00Z");
    o.timed_ms = std::move(timed_ms);
    record_outcome(store, run, index, cell, o);
}

}  // namespace

TEST_CASE("Mann-Whitney U: exact p-values for small samples, the normal approximation beyond", "[compare]") {
    // m = n = 5: 252 arrangements; U = 0 once, U = 1 once, U = 2 twice.
    const std::vector<double> low = {1, 2, 3, 4, 5}, high = {6, 7, 8, 9, 10};
    CHECK(mann_whitney_p(low, high) == Catch::Approx(2.0 / 252));
    CHECK(mann_whitney_p(high, low) == Catch::Approx(2.0 / 252));
    const std::vector<double> two_above = {1, 2, 3, 4, 7}, rest = {5, 6, 8, 9, 10};
    CHECK(mann_whitney_p(two_above, rest) == Catch::Approx(8.0 / 252));
    // Interleaved samples: no evidence of a difference.
    const std::vector<double> odd = {1, 3, 5, 7, 9}, even = {2, 4, 6, 8, 10};
    CHECK(mann_whitney_p(odd, even) > 0.5);
    CHECK(mann_whitney_p(odd, odd) == Catch::Approx(1.0));  // every value tied: no difference
    // Large samples, fully separated: the normal approximation, far below any threshold.
    std::vector<double> x, y;
    for (int i = 0; i < 40; ++i) {
        x.push_back(i);
        y.push_back(i + 100);
    }
    CHECK(mann_whitney_p(x, y) < 1e-9);
    CHECK(mann_whitney_p({}, y) == 1.0);
}

TEST_CASE("compare: workloads matched by parameters, a 10 % slowdown reported significant", "[compare][cli]") {
    test::TempDir tmp;
    const auto a = tmp.file("a.db"), b = tmp.file("b.db");
    {
        auto s = Store::open(a);
        RunInfo info;
        info.started_at = "2026-11-23T00:00:00Z";
        info.matrix_name = "cmp";
        const auto run = s.begin_run(info);
        record(s, run, 0, tiny_at(1, 10), around(100.0, 10));
        record(s, run, 1, tiny_at(2, 10), around(200.0, 10));
        record(s, run, 2, tiny_at(4, 10), around(400.0, 10));  // only in A
    }
    {
        auto s = Store::open(b);
        RunInfo info;
        info.started_at = "2026-11-24T00:00:00Z";
        info.matrix_name = "cmp";
        const auto run = s.begin_run(info);
        // Measured with more iterations and another noise criterion: the same workloads all the same.
        record(s, run, 0, tiny_at(1, 12), around(110.0, 12));  // 10 % slower
        std::vector<double> same = around(200.0, 10);
        std::reverse(same.begin(), same.end());
        record(s, run, 1, tiny_at(2, 12), same);
        record(s, run, 2, tiny_at(8, 12), around(800.0, 12));  // only in B
    }
    const auto r = test::run_sweetspot("compare '" + a + "' '" + b + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, ContainsSubstring("2 workloads in both, 1 only in A, 1 only in B"));
    CHECK_THAT(r.output, ContainsSubstring("+10.0 %"));
    CHECK_THAT(r.output, ContainsSubstring("<0.001  slower"));
    CHECK_THAT(r.output, ContainsSubstring("+0.0 %   1.000  same"));
    CHECK_THAT(r.output, ContainsSubstring("Mann-Whitney U"));
    // It says which parameters it pooled over: the database's protocol and limit axes.
    {
        Database d(a, Database::Mode::read_only);
        auto st = d.prepare("SELECT group_concat(name, ', ') FROM"
                            " (SELECT name FROM axes WHERE role IN ('protocol', 'limit') ORDER BY rowid)");
        REQUIRE(st.step());
        CHECK_THAT(r.output, ContainsSubstring("(" + st.text(0) + ")"));
    }

    std::ostringstream table;
    const CompareCounts counts = print_comparison(parse_compare_side(a), parse_compare_side(b), CompareOptions{}, table);
    CHECK(counts.matched == 2);
    CHECK(counts.worst_slowdown_pct == Catch::Approx(10.0));

    // For CI: a slowdown beyond the limit fails the command, one within it does not.
    CHECK(test::run_sweetspot("compare '" + a + "' '" + b + "' --fail-if-slower 5").exit_code == 1);
    CHECK(test::run_sweetspot("compare '" + a + "' '" + b + "' --fail-if-slower 20").exit_code == 0);
    // A threshold above the change reads it as the same.
    const auto lenient = test::run_sweetspot("compare '" + a + "' '" + b + "' --threshold 15");
    CHECK_THAT(lenient.output, ContainsSubstring("<0.001  same"));

    const auto md = test::run_sweetspot("compare '" + a + "' '" + b + "' --format markdown");
    INFO(md.output);
    REQUIRE(md.exit_code == 0);
    CHECK(md.output.rfind("| model |", 0) == 0);
    CHECK_THAT(md.output, ContainsSubstring("| slower |"));

    // One run of a database against another run; a malformed run id is bad input.
    CHECK_THAT(test::run_sweetspot("compare '" + a + "@1' '" + b + "@1'").output,
               ContainsSubstring("2 workloads in both"));
    // The runs of one matrix, by its name; a name no run has is bad input that lists those there are.
    CHECK_THAT(test::run_sweetspot("compare '" + a + "@cmp' '" + b + "@cmp'").output, ContainsSubstring("2 workloads in both"));
    const auto bad = test::run_sweetspot("compare '" + a + "@x' '" + b + "'");
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.output, ContainsSubstring("no run of " + a + " ran a matrix named 'x' (its matrices: cmp)"));
    CHECK_THAT(bad.output, ContainsSubstring("DB@RUN"));
    CHECK(test::run_sweetspot("compare '" + a + "@' '" + b + "'").exit_code == 2);
}

TEST_CASE("compare: a run the database lacks is bad input; --fail-if-slower fails when no workload is in both", "[compare][cli]") {
    test::TempDir tmp;
    const auto a = tmp.file("a.db"), b = tmp.file("b.db"), empty = tmp.file("empty.db");
    const auto one_cell = [](const std::string& path, int batch) {
        auto s = Store::open(path);
        RunInfo info;
        info.started_at = "2026-11-23T00:00:00Z";
        record(s, s.begin_run(info), 0, tiny_at(batch, 10), around(100.0, 10));
    };
    one_cell(a, 1);
    one_cell(b, 2);
    Store::open(empty);

    for (const std::string option : {"", " --fail-if-slower 5"}) {
        const auto unknown = test::run_sweetspot("compare '" + a + "@7' '" + a + "'" + option);
        INFO(unknown.output);
        CHECK(unknown.exit_code == 2);
        CHECK_THAT(unknown.output, ContainsSubstring("'" + a + "@7': " + a + " has no run 7 (its runs: 1)"));
        const auto unknown_b = test::run_sweetspot("compare '" + a + "' '" + empty + "@1'" + option);
        CHECK(unknown_b.exit_code == 2);
        CHECK_THAT(unknown_b.output, ContainsSubstring(empty + " has no run 1 (its runs: none)"));
    }

    // Nothing in common passes no check: for CI, exit 2 saying which side lacks what.
    const auto disjoint = test::run_sweetspot("compare '" + a + "' '" + b + "' --fail-if-slower 5");
    INFO(disjoint.output);
    CHECK(disjoint.exit_code == 2);
    CHECK_THAT(disjoint.output, ContainsSubstring("--fail-if-slower: nothing compared: A (" + a + ") and B (" + b +
                                                  ") have no workload in common (1 only in A, 1 only in B)"));
    const auto none_in_a = test::run_sweetspot("compare '" + empty + "' '" + b + "' --fail-if-slower 5");
    CHECK(none_in_a.exit_code == 2);
    CHECK_THAT(none_in_a.output, ContainsSubstring("nothing compared: A (" + empty + ") has no workload measured ok"));
    const auto none_in_b = test::run_sweetspot("compare '" + a + "' '" + empty + "' --fail-if-slower 5");
    CHECK(none_in_b.exit_code == 2);
    CHECK_THAT(none_in_b.output, ContainsSubstring("nothing compared: B (" + empty + ") has no workload measured ok"));
    // Without --fail-if-slower, an empty comparison is still printed as one.
    CHECK(test::run_sweetspot("compare '" + a + "' '" + b + "'").exit_code == 0);
    CHECK(test::run_sweetspot("compare '" + a + "' '" + a + "' --fail-if-slower 5").exit_code == 0);
}
