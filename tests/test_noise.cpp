// The noise criterion (cell.hpp, measurement.cpp): a cell keeps iterating while its timed
// iterations are noisier than max_noise, up to max_iterations and max_time, and is flagged noisy
// when it stops on a limit; a forward with scripted latencies stands in for a real one.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>
#include <vector>

#include "harness/cli/summary.hpp"
#include "harness/matrix/matrix.hpp"
#include "harness/measure/measurement.hpp"
#include "harness/store/sqlite.hpp"
#include "harness/store/store.hpp"
#include "test_support.hpp"

using namespace sweetspot;

namespace {

// Latencies from a script, repeated; a host-sized output whose check is left out.
class ScriptedStep final : public CellStep {
public:
    explicit ScriptedStep(std::vector<double> ms, double sleep_ms = 0) : ms_(std::move(ms)), sleep_ms_(sleep_ms) {}
    std::int64_t activation_bytes() const override { return 0; }
    StepTime run_step(const std::string&) override {
        if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(sleep_ms_));
        const double ms = ms_[calls_++ % ms_.size()];
        return {ms, {ms}};
    }
    std::vector<float> logits() override { return {1.0f}; }
    OutputCount count_nonfinite() override { return {0, 1}; }
    std::optional<LogitsCheck> check() override { return std::nullopt; }
    void add_results(CellOutcome&) const override {}

private:
    std::vector<double> ms_;
    double sleep_ms_;
    std::size_t calls_ = 0;
};

CellParams cell_with(const std::string& lines) {
    return parse_matrix("name = \"n\"\n[defaults]\nmodel = \"tiny\"\nwarmups = 0\n" + lines + "\n[[sweep]]\nname = \"s\"\n",
                        "test")
        .cells.at(0);
}

// The cell measured with `forward`, its derived measures (the noise among them) made.
CellOutcome measured(const CellParams& cell, ScriptedStep forward) {
    CellOutcome out;
    measure_steps(cell, forward, MeasureOptions{}, out);
    derive_measures(cell, out);
    return out;
}

bool flagged(const CellOutcome& out) { return out.get<"noisy">().value_or(0) != 0; }

}  // namespace

TEST_CASE("noise: the relative standard deviation of the timed iterations", "[noise]") {
    CHECK_FALSE(noise_pct({}));
    CHECK_FALSE(noise_pct({5.0}));
    CHECK(*noise_pct({10.0, 10.0, 10.0}) == 0.0);
    // mean 15, sample standard deviation sqrt(50) = 7.07: 47.1 %.
    CHECK(*noise_pct({10.0, 20.0}) == Catch::Approx(100.0 * 7.0710678 / 15.0));
}

TEST_CASE("spread: the interquartile range over the median, normalised; outliers beyond Tukey's far fences",
          "[noise]") {
    CHECK_FALSE(spread_pct({5.0}));
    // 10 and 20: quartiles 12.5 and 17.5 (interpolated), median 15: 5 / 1.349 / 15.
    CHECK(*spread_pct({20.0, 10.0}) == Catch::Approx(100.0 * 5.0 / 1.349 / 15.0));
    // One slow iteration among nine steady ones moves the standard deviation, not the spread:
    // quartiles 10 and 10.
    std::vector<double> one_slow(9, 10.0);
    one_slow.push_back(30.0);
    CHECK(*spread_pct(one_slow) == 0.0);
    CHECK(*noise_pct(one_slow) == Catch::Approx(100.0 * std::sqrt(360.0 / 9.0) / 12.0));  // 52.7 %
    // Outliers: 9, 10, 11, 12, 13, 40: quartiles 10.25 and 12.75 (positions 1.25 and 3.75), the
    // fences 10.25 - 7.5 and 12.75 + 7.5 = 20.25: 40 is beyond.
    CHECK(*outlier_count({13, 9, 40, 11, 10, 12}) == 1);
    CHECK(*outlier_count({13, 9, 20, 11, 10, 12}) == 0);
    CHECK(*outlier_count(one_slow) == 1);
    CHECK_FALSE(outlier_count({1, 2, 3, 100}));  // too few for quartiles to mean much
}

TEST_CASE("warnings name what makes a cell's numbers less trustworthy, with their figures", "[noise]") {
    const CellParams cell = cell_with("iterations = 10\nmax_noise = 2");
    CellOutcome o;
    o.timed_ms = {10, 10, 10, 10, 10, 10, 10, 10, 11, 30};  // quartiles 10 and 10: spread 0, one outlier
    o.set<"cpu_load_1m">(5.0);
    o.set<"cpu_cores">(2);
    o.set<"gpu_clock_events">("sw_power_cap");
    derive_measures(cell, o);
    CHECK(o.get<"warnings">() ==
          "2 outliers among 10 timed iterations; GPU throttled: sw_power_cap; loaded host: load 5.0 on 2 cores");
    // Noisy: 10 to 19 ms, quartiles 12.25 and 16.75, median 14.5: 4.5 / 1.349 / 14.5 = 23.0 %.
    CellOutcome noisy;
    for (int ms = 10; ms < 20; ++ms) noisy.timed_ms.push_back(ms);
    noisy.set<"cpu_load_1m">(1.0);
    noisy.set<"cpu_cores">(2);
    noisy.set<"gpu_clock_events">("");
    derive_measures(cell, noisy);
    CHECK(noisy.get<"warnings">() == "noisy: spread 23.0 % above max_noise 2 %");
    CellOutcome quiet;
    quiet.timed_ms = {10, 10, 10};
    derive_measures(cell, quiet);
    CHECK_FALSE(quiet.get<"warnings">());
}

TEST_CASE("a noisy cell iterates up to its limit and is flagged; a quiet one stops at iterations", "[noise]") {
    // Alternating 10 and 20 ms: about 50 % noise, never under 2 %.
    const CellOutcome noisy = measured(cell_with("iterations = 3\nmax_iterations = 12"), ScriptedStep({10, 20}));
    CHECK(noisy.timed_ms.size() == 12);
    CHECK(flagged(noisy));
    REQUIRE(noisy.get<"noise_pct">());
    CHECK(*noisy.get<"noise_pct">() > 30);

    // Within 0.1 %: done after the minimum.
    const CellOutcome quiet = measured(cell_with("iterations = 3\nmax_iterations = 12"), ScriptedStep({10, 10.01, 9.99}));
    CHECK(quiet.timed_ms.size() == 3);
    CHECK_FALSE(flagged(quiet));

    // Noisy at first (12, 8), then steady at 10 ms: it stops as soon as the spread (interquartile
    // range / 1.349 / median) is under 5 %. Three samples 8, 10, 12: quartiles 9 and 11, 14.8 %;
    // four (8, 10, 10, 12): 9.5 and 10.5, 7.4 %; five (8, 10, 10, 10, 12): 10 and 10, 0 %. The
    // two first iterations no longer weigh as they did in the standard deviation (14.1 % of five).
    std::vector<double> settling = {12, 8};
    for (int i = 0; i < 148; ++i) settling.push_back(10);
    const CellOutcome settled =
        measured(cell_with("iterations = 2\nmax_iterations = 150\nmax_noise = 5"), ScriptedStep(settling));
    CHECK(settled.timed_ms.size() == 5);
    CHECK(*settled.get<"spread_pct">() == 0.0);
    CHECK(*settled.get<"noise_pct">() == Catch::Approx(100.0 * std::sqrt(8.0 / 4.0) / 10.0));
    CHECK_FALSE(flagged(settled));

    // The default takes exactly `iterations` and only flags the noise.
    const CellOutcome fixed_count = measured(cell_with("iterations = 4"), ScriptedStep({10, 20}));
    CHECK(fixed_count.timed_ms.size() == 4);
    CHECK(flagged(fixed_count));
    // max_noise 0: no criterion, never noisy.
    const CellOutcome off = measured(cell_with("iterations = 4\nmax_iterations = 20\nmax_noise = 0"), ScriptedStep({10, 20}));
    CHECK(off.timed_ms.size() == 4);
    CHECK_FALSE(flagged(off));
    // max_time stops the noisy cell before max_iterations: 5 ms a forward, 30 ms at most.
    const CellOutcome timed =
        measured(cell_with("iterations = 2\nmax_iterations = 1000\nmax_time = 0.03"), ScriptedStep({10, 20}, 5.0));
    CHECK(timed.timed_ms.size() >= 2);
    CHECK(timed.timed_ms.size() < 100);
    CHECK(flagged(timed));
}

TEST_CASE("a noisy cell is stored as ok and flagged, and summary shows it", "[noise][store]") {
    test::TempDir tmp;
    auto store = Store::open(tmp.file("n.db"));
    RunInfo info;
    info.started_at = "2026-11-23T00:00:00Z";
    const auto run = store.begin_run(info);
    const CellParams cell = cell_with("iterations = 3\nmax_iterations = 6");
    CellOutcome out = measured(cell, ScriptedStep({10, 20}));
    out.status = CellStatus::ok;
    record_outcome(store, run, 0, cell, out);
    auto st = store.db().prepare("SELECT status, noisy, noise_pct, max_iterations, max_noise_pct,"
                                 " (SELECT count(*) FROM iterations WHERE phase = 'timed') FROM cells");
    REQUIRE(st.step());
    CHECK(st.text(0) == "ok");
    CHECK(st.int64(1) == 1);
    CHECK(st.real(2) == Catch::Approx(*out.get<"noise_pct">()));
    CHECK(st.int64(3) == 6);
    CHECK(st.real(4) == 2.0);
    CHECK(st.int64(5) == 6);
    std::ostringstream summary;
    print_summary(store, SummaryOptions{}, summary);
    using Catch::Matchers::ContainsSubstring;
    CHECK_THAT(summary.str(), ContainsSubstring(" noisy"));
    CHECK_THAT(summary.str(), ContainsSubstring("1 ok (1 noisy: their spread was above max_noise when they stopped)"));
    // The table says how many timed iterations the cell took, beside the iterations it asked for.
    std::ostringstream csv;
    SummaryOptions as_csv;
    as_csv.format = TableFormat::csv;
    print_summary(store, as_csv, csv);
    CHECK_THAT(csv.str(), ContainsSubstring(",ok,6,"));
}

TEST_CASE("run hands the noise criterion and the timeout to the cell process", "[noise][runner]") {
    test::TempDir tmp;
    const auto matrix = tmp.file("m.toml"), db = tmp.file("r.db");
    // A threshold no timing meets: each cell takes max_iterations and is flagged.
    test::write_file(matrix, "name = \"n\"\n[defaults]\nmodel = \"tiny\"\nwarmups = 0\niterations = 2\n"
                             "max_noise = 0.000001\nmax_iterations = 7\n[[sweep]]\nname = \"s\"\n");
    const auto r = test::run_sweetspot("run '" + matrix + "' --db '" + db + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    Database d(db, Database::Mode::read_only);
    auto st = d.prepare("SELECT noisy, max_iterations, (SELECT count(*) FROM iterations WHERE phase = 'timed') FROM cells");
    REQUIRE(st.step());
    CHECK(st.int64(0) == 1);
    CHECK(st.int64(1) == 7);
    CHECK(st.int64(2) == 7);
    // The text a cell process gets holds what its key leaves out, and reads back whole.
    const CellParams cell = cell_with("max_noise = 0.5\nmax_iterations = 9\nmax_time = \"3s\"\ntimeout = \"90s\"");
    const CellParams back = CellParams::from_canonical(cell.full_text());
    CHECK(back.key() == cell.key());
    CHECK(back.max_noise_pct == 0.5);
    CHECK(back.max_iterations == 9);
    CHECK(back.max_time_s == 3.0);
    CHECK(back.timeout_s == 90.0);
}
