// `sweetspot compare` and its statistics (harness/cli/compare.hpp, rank_test.hpp): exact p-values
// against counted arrangements, the tie-corrected normal approximation, the Hodges-Lehmann ratio
// and its interval worked out by hand, and databases with a known slowdown, testable or not.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/number_text.hpp"
#include "harness/cli/compare.hpp"
#include "harness/cli/rank_test.hpp"
#include "harness/matrix/matrix.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "harness/store/kernel_timings.hpp"
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

TEST_CASE("The smallest p that sample sizes can give, and the sizes that reach a level", "[compare]") {
    // Either sample wholly above the other: 2 of the C(m + n, m) arrangements.
    CHECK(smallest_two_sided_p(3, 3) == Catch::Approx(2.0 / 20));
    CHECK(smallest_two_sided_p(3, 4) == Catch::Approx(2.0 / 35));
    CHECK(smallest_two_sided_p(4, 4) == Catch::Approx(2.0 / 70));
    CHECK(smallest_two_sided_p(2, 8) == Catch::Approx(2.0 / 45));
    CHECK(smallest_two_sided_p(1, 1) == 1.0);
    CHECK(smallest_two_sided_p(0, 5) == 1.0);
    // The exact test attains it.
    CHECK(mann_whitney_p(std::vector<double>{1, 2, 3}, std::vector<double>{4, 5, 6}) == Catch::Approx(0.1));

    using Sizes = std::pair<std::size_t, std::size_t>;
    // At 0.05: 3 + 4 values give 2/35 = 0.057 at best; of 8, 4 and 4 give 2/70 = 0.029 (3 and 5: 0.036).
    CHECK(sizes_to_reach(3, 3, 0.05) == Sizes{4, 4});
    CHECK(sizes_to_reach(3, 4, 0.05) == Sizes{4, 4});
    CHECK(sizes_to_reach(1, 1, 0.05) == Sizes{4, 4});
    // Ten on one side: one value more on the other (2 and 10: 2/66 = 0.030; 1 and 10: 2/11).
    CHECK(sizes_to_reach(1, 10, 0.05) == Sizes{2, 10});
    CHECK(sizes_to_reach(5, 5, 0.05) == Sizes{5, 5});
    // At 0.01: 4 + 5 give 2/126 = 0.016, 5 and 5 2/252 = 0.008.
    CHECK(sizes_to_reach(4, 4, 0.01) == Sizes{5, 5});
}

TEST_CASE("Hodges-Lehmann: the median of the pairwise differences and its confidence interval", "[compare]") {
    // B ÷ A on log latencies. A = {10, 11, 12}, B = {20, 22, 24}; the nine ratios b/a in order:
    // 20/12 = 1.667, 20/11 = 1.818, 22/12 = 1.833, 2, 2, 2, 24/11 = 2.182, 22/10 = 2.2, 24/10 = 2.4.
    const auto logs = [](std::vector<double> v) {
        for (double& x : v) x = std::log(x);
        return v;
    };
    const std::vector<double> a = logs({10, 11, 12}), b = logs({20, 22, 24});
    const Shift at_95 = hodges_lehmann(a, b, 0.05);
    CHECK(std::exp(at_95.estimate) == Catch::Approx(2.0));  // the fifth of nine
    // Every arrangement of 3 and 3 has probability 1/20 = 0.05 > 0.025: no 95 % interval.
    CHECK_FALSE(at_95.low);
    CHECK_FALSE(at_95.high);
    // At 90 %, P(U <= 0) = 0.05 <= 0.05: k = 1, from the smallest ratio to the largest.
    const Shift at_90 = hodges_lehmann(a, b, 0.10);
    REQUIRE(at_90.low);
    CHECK(std::exp(*at_90.low) == Catch::Approx(20.0 / 12));
    CHECK(std::exp(*at_90.high) == Catch::Approx(2.4));

    // x = {0, 1, 2, 3, 4}, y = {10, 15, 20, 25, 30}: the 25 differences y − x are 6, 7, ..., 30, the
    // k-th smallest k + 5; the median, the 13th, is 18. Of the 252 arrangements of 5 and 5, U = 0, 1,
    // 2, 3 in 1, 1, 2, 3 (the partitions of U into at most 5 parts of at most 5): P(U <= 2) = 4/252 =
    // 0.016 <= 0.025 < P(U <= 3) = 7/252 = 0.028, so k = 3 and the 95 % interval is [D(3), D(23)] =
    // [8, 28].
    const Shift five = hodges_lehmann(std::vector<double>{0, 1, 2, 3, 4}, std::vector<double>{10, 15, 20, 25, 30}, 0.05);
    CHECK(five.estimate == 18.0);
    REQUIRE(five.low);
    CHECK(*five.low == 8.0);
    CHECK(*five.high == 28.0);
    // The estimate is the shift of the second sample against the first.
    CHECK(hodges_lehmann(std::vector<double>{10, 15, 20, 25, 30}, std::vector<double>{0, 1, 2, 3, 4}, 0.05).estimate == -18.0);

    // 30 and 30 (900 pairs): the normal approximation. k = ⌊mn/2 + ½ − z σ⌋ with z = 1.959964 (the
    // 97.5 % point) and σ = √(mn(m + n + 1)/12) = √4575 = 67.639: ⌊450.5 − 132.569⌋ = 317.
    std::vector<double> x, y;
    for (int i = 0; i < 30; ++i) {
        x.push_back(i);
        y.push_back(1000.0 * (i + 1));
    }
    const double k = std::floor(450.5 - 1.959964 * std::sqrt(900.0 * 61 / 12));
    CHECK(k == 317);
    // The differences, listed and sorted: a method of their own.
    std::vector<double> d;
    for (const double b_j : y)
        for (const double a_i : x) d.push_back(b_j - a_i);
    std::sort(d.begin(), d.end());
    const Shift large = hodges_lehmann(x, y, 0.05);
    CHECK(large.estimate == (d[449] + d[450]) / 2);  // 15000 and 15971
    CHECK(large.estimate == 15485.5);
    REQUIRE(large.low);
    CHECK(*large.low == d[316]);  // D(317) = 11000 − 13
    CHECK(*large.low == 10987.0);
    CHECK(*large.high == d[583]);  // D(900 + 1 − 317) = 20000 − 16
    CHECK(*large.high == 19984.0);
    CHECK_THROWS_AS(hodges_lehmann({}, y, 0.05), std::invalid_argument);
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

TEST_CASE("compare: too few iterations to test are untestable, and fail --fail-if-slower", "[compare][cli]") {
    test::TempDir tmp;
    const auto a = tmp.file("a.db"), b = tmp.file("b.db");
    // Batch 1: 3 iterations a side (the demo's GPT-2 cells took 3), every latency doubled in B.
    // Batch 2: 5 and 5 iterations, 10 % slower.
    const std::vector<double> three_a = {10, 11, 12}, three_b = {20, 22, 24};
    const std::vector<double> five_a = around(100.0, 5), five_b = around(110.0, 5);
    for (const auto& [path, three, five] : {std::tuple{a, three_a, five_a}, std::tuple{b, three_b, five_b}}) {
        auto s = Store::open(path);
        RunInfo info;
        info.started_at = "2026-11-23T00:00:00Z";
        const auto run = s.begin_run(info);
        record(s, run, 0, tiny_at(1, 3), three);
        record(s, run, 1, tiny_at(2, 5), five);
    }
    // B ÷ A of batch 2: the median of the 25 ratios, and the 95 % interval from the 3rd to the 23rd
    // (k = 3 for 5 and 5, as worked out for the Hodges-Lehmann test above).
    std::vector<double> ratios;
    for (const double ms_b : five_b)
        for (const double ms_a : five_a) ratios.push_back(ms_b / ms_a);
    std::sort(ratios.begin(), ratios.end());

    const auto r = test::run_sweetspot("compare '" + a + "' '" + b + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, ContainsSubstring("B ÷ A (95 % CI)"));
    // Twice as slow, but 3 and 3 give p = 2/20 = 0.1 at best.
    CHECK_THAT(r.output, ContainsSubstring("  2.000  +100.0 %  0.100  untestable: needs 4 and 4 iterations"));
    // 5 and 5 wholly apart: p = 2/252 = 0.008.
    CHECK_THAT(r.output, ContainsSubstring(fixed(ratios[12], 3) + " [" + fixed(ratios[2], 3) + ", " + fixed(ratios[22], 3) + "]"));
    CHECK_THAT(r.output, ContainsSubstring("0.008  slower"));

    const auto json_out = test::run_sweetspot("compare '" + a + "' '" + b + "' --format json");
    REQUIRE(json_out.exit_code == 0);
    const auto rows = nlohmann::json::parse(json_out.output);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].at("verdict") == "untestable");
    CHECK(rows[0].at("b_over_a").get<double>() == Catch::Approx(2.0));
    CHECK(rows[0].at("b_over_a_ci_low").is_null());
    CHECK(rows[0].at("b_over_a_ci_high").is_null());
    CHECK(rows[0].at("p_value").get<double>() == Catch::Approx(0.1));
    CHECK(rows[1].at("verdict") == "slower");
    CHECK(rows[1].at("b_over_a").get<double>() == Catch::Approx(ratios[12]).epsilon(1e-12));
    CHECK(rows[1].at("b_over_a_ci_low").get<double>() == Catch::Approx(ratios[2]).epsilon(1e-12));
    CHECK(rows[1].at("b_over_a_ci_high").get<double>() == Catch::Approx(ratios[22]).epsilon(1e-12));
    CHECK(rows[1].at("change_pct").get<double>() == Catch::Approx(100.0 * (ratios[12] - 1.0)).epsilon(1e-12));

    // For CI: the doubling must not pass as "no regression".
    const auto strict = test::run_sweetspot("compare '" + a + "' '" + b + "' --fail-if-slower 20");
    CHECK(strict.exit_code == 1);
    CHECK_THAT(strict.output, ContainsSubstring("1 workload(s) have too few timed iterations for any p below 0.050"));
    CHECK_THAT(strict.output, ContainsSubstring("--allow-untestable"));
    const auto allowed = test::run_sweetspot("compare '" + a + "' '" + b + "' --fail-if-slower 20 --allow-untestable");
    CHECK(allowed.exit_code == 0);
    CHECK_THAT(allowed.output, ContainsSubstring("passing although 1 workload(s) have too few timed iterations"));
    // A significant slowdown beyond the limit fails whatever is allowed.
    CHECK(test::run_sweetspot("compare '" + a + "' '" + b + "' --fail-if-slower 5 --allow-untestable").exit_code == 1);
    // At alpha 0.2, 3 and 3 can show a difference (0.1 < 0.2): the doubling is slower, no longer untestable.
    const auto lax = test::run_sweetspot("compare '" + a + "' '" + b + "' --alpha 0.2 --fail-if-slower 150");
    CHECK(lax.exit_code == 0);
    CHECK_THAT(lax.output, ContainsSubstring("B ÷ A (80 % CI)"));
    CHECK_THAT(lax.output, ContainsSubstring("0.100  slower"));
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

TEST_CASE("compare: the GPU ops both databases timed (bench_kernels --db), matched by op, dtype and shape",
          "[compare][cli]") {
    test::TempDir tmp;
    const auto a = tmp.file("a.db"), b = tmp.file("b.db");
    const auto timed = [](const std::string& path, const std::vector<KernelTiming>& timings) {
        auto s = Store::open(path);
        RunInfo info;
        info.started_at = "2026-11-26T00:00:00Z";
        const auto run = s.begin_run(info);
        for (const KernelTiming& t : timings) insert_kernel_timing(s.db(), run, t);
    };
    const std::string shape = "rows 8192 c 768";
    timed(a, {{"layernorm", "bf16", shape, 0, 2.5e7, around(0.100, 20)},
              {"gelu_tanh", "fp16", "n 64", 0, 256, around(0.050, 20)},
              {"residual_add", "fp32", "n 64", 0, 768, around(0.010, 20)}});  // only in A
    std::vector<double> same = around(0.050, 20);
    std::reverse(same.begin(), same.end());
    timed(b, {{"layernorm", "bf16", shape, 0, 2.5e7, around(0.120, 20)},  // 20 % slower
              {"gelu_tanh", "fp16", "n 64", 0, 256, same},
              {"layernorm", "bf16", "rows 8192 c 1600", 0, 5.2e7, around(0.200, 20)}});  // another shape: only in B

    const auto r = test::run_sweetspot("compare '" + a + "' '" + b + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, ContainsSubstring("GPU ops (bench_kernels --db)"));
    CHECK_THAT(r.output, ContainsSubstring("2 ops (op, dtype, shape) in both, 1 only in A, 1 only in B"));
    CHECK_THAT(r.output, ContainsSubstring("+20.0 %"));
    CHECK_THAT(r.output, ContainsSubstring("<0.001  slower"));
    CHECK_THAT(r.output, ContainsSubstring("1.000  same"));
    CHECK_THAT(r.output, ContainsSubstring("Mann-Whitney U"));

    std::ostringstream table;
    const CompareCounts counts = print_comparison(parse_compare_side(a), parse_compare_side(b), CompareOptions{}, table);
    CHECK(counts.matched == 0);
    CHECK(counts.kernels_matched == 2);
    CHECK(counts.kernels_only_a == 1);
    CHECK(counts.kernels_only_b == 1);
    CHECK(counts.worst_slowdown_pct == Catch::Approx(20.0));

    // Neither side has cells: the other formats print the ops' table, and the ops are what
    // --fail-if-slower judges.
    const auto json = test::run_sweetspot("compare '" + a + "' '" + b + "' --format json");
    REQUIRE(json.exit_code == 0);
    const auto rows = nlohmann::json::parse(json.output);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0]["op"] == "layernorm");
    CHECK(rows[0]["shape"] == shape);
    CHECK(rows[0]["a_timed_iterations"] == 20);
    CHECK(rows[0]["b_timed_iterations"] == 20);
    CHECK(rows[0]["verdict"] == "slower");
    CHECK(rows[1]["op"] == "gelu_tanh");
    CHECK(rows[1]["verdict"] == "same");
    CHECK(test::run_sweetspot("compare '" + a + "' '" + b + "' --fail-if-slower 10").exit_code == 1);
    CHECK(test::run_sweetspot("compare '" + a + "' '" + b + "' --fail-if-slower 30").exit_code == 0);

    // merge carries the timings with their run.
    const auto merged = tmp.file("merged.db");
    REQUIRE(test::run_sweetspot("merge -o '" + merged + "' '" + a + "'").exit_code == 0);
    CHECK_THAT(test::run_sweetspot("compare '" + merged + "' '" + b + "'").output,
               ContainsSubstring("2 ops (op, dtype, shape) in both, 1 only in A, 1 only in B"));
}
