// `sweetspot compare` and its significance test (harness/cli/compare.hpp, rank_test.hpp): exact
// p-values against counted arrangements, the tie-corrected normal approximation worked out by
// hand, and two databases with a known 10 % slowdown.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
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

TEST_CASE("Mann-Whitney U with ties: the normal approximation with the tie-corrected variance", "[compare]") {
    // x: 1 six times, 2 three times, 3 once; y: 1 once, 2 three times, 3 six times (m = n = 10).
    const std::vector<double> x = {1, 1, 1, 1, 1, 1, 2, 2, 2, 3}, y = {1, 2, 2, 2, 3, 3, 3, 3, 3, 3};
    // U, the pairs with the x-value above, a tie counting one half:
    //   the six 1s of x tie with y's 1:                 6 · ½           =  3
    //   the three 2s are above y's 1, tie with its 2s:  3 · (1 + 3 · ½) =  7.5
    //   the 3 is above y's 1 and 2s, ties with its 3s:  1 · (4 + 6 · ½) =  7
    const double u = 3 + 7.5 + 7;  // 17.5, against a mean of mn/2 = 50
    // Var U = mn/12 · ((N + 1) − Σ(t³ − t) / (N(N − 1))), N = 20, t the size of each group of tied
    // values (1: 7, 2: 6, 3: 7): Σ(t³ − t) = 336 + 210 + 336 = 882, so Var U = 100/12 · (21 − 882/380)
    // = 155.658 (without the correction 175).
    const double corrected = 100.0 / 12.0 * (21.0 - 882.0 / 380.0);
    // The same variance from the midranks a of all N values (1s: 4, 2s: 10.5, 3s: 17; mean 10.5), as
    // a sum of m of N scores drawn without replacement: mn / (N(N − 1)) · Σ(a − 10.5)².
    CHECK(corrected == Catch::Approx(100.0 / 380.0 * (7 * 6.5 * 6.5 + 6 * 0.0 + 7 * 6.5 * 6.5)));
    // z = (|U − mn/2| − ½) / √Var U = 32 / 12.476 = 2.5649 (continuity corrected); p = 2(1 − Φ(z))
    // = erfc(z / √2) = 0.01032; without the tie correction z = 2.4190 and p = 0.01556.
    const double z = (std::abs(u - 50.0) - 0.5) / std::sqrt(corrected);
    CHECK(z == Catch::Approx(2.564864).epsilon(1e-6));
    const double p = std::erfc(z / std::sqrt(2.0));
    CHECK(p == Catch::Approx(0.0103216).epsilon(1e-5));
    CHECK(mann_whitney_p(x, y) == Catch::Approx(p).epsilon(1e-12));
    CHECK(mann_whitney_p(y, x) == Catch::Approx(p).epsilon(1e-12));
    CHECK(std::abs(mann_whitney_p(x, y) - 0.015564) > 0.005);  // not the uncorrected variance

    // Small samples with a tie take the normal approximation too (the exact counts assume no ties):
    // x = {1, 2, 3}, y = {3, 4, 5}: U = ½ (the tied 3s), mean 4.5, one pair of ties, so
    // Var U = 9/12 · (7 − 6/30) = 5.1, z = 3.5 / √5.1 = 1.5498, p = 0.12118.
    const std::vector<double> low = {1, 2, 3}, high = {3, 4, 5};
    CHECK(mann_whitney_p(low, high) == Catch::Approx(std::erfc(3.5 / std::sqrt(5.1) / std::sqrt(2.0))).epsilon(1e-12));
    CHECK(mann_whitney_p(low, high) == Catch::Approx(0.121183).epsilon(1e-5));
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
    CHECK_THAT(test::run_sweetspot("compare '" + a + "@2' '" + b + "@1'").output,
               ContainsSubstring("0 workloads in both, 0 only in A, 3 only in B"));
    // The runs of one matrix, by its name; a name no run has is bad input that lists those there are.
    CHECK_THAT(test::run_sweetspot("compare '" + a + "@cmp' '" + b + "@cmp'").output, ContainsSubstring("2 workloads in both"));
    const auto bad = test::run_sweetspot("compare '" + a + "@x' '" + b + "'");
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.output, ContainsSubstring("no run of " + a + " ran a matrix named 'x' (its matrices: cmp)"));
    CHECK_THAT(bad.output, ContainsSubstring("DB@RUN"));
    CHECK(test::run_sweetspot("compare '" + a + "@' '" + b + "'").exit_code == 2);
}
