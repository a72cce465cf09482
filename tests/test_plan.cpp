// `sweetspot plan` (harness/cli/plan.hpp): per workload, the fastest measured setting that fits.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/cli/plan.hpp"
#include "harness/matrix/matrix.hpp"
#include "harness/measure/memory_estimate.hpp"
#include "harness/store/sqlite.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using namespace sweetspot::test;
using json = nlohmann::ordered_json;

namespace {

std::vector<CellParams> cells_of(const std::string& sweeps) {
    return parse_matrix("name = \"plan\"\n[defaults]\nmodel = \"tiny\"\nseq = 16\n" + sweeps, "test").cells;
}

// The index of the cell of `cells` with these batch, seq and backend.
std::size_t index_of(const std::vector<CellParams>& cells, int batch, int seq, BackendId backend) {
    const auto it = std::find_if(cells.begin(), cells.end(), [&](const CellParams& c) {
        return c.batch == batch && c.seq == seq && c.backend == backend;
    });
    REQUIRE(it != cells.end());
    return static_cast<std::size_t>(it - cells.begin());
}

// A calibration of a GPU whose context and libraries take 500 MiB.
FixedCost fixed_cost() {
    FixedCost f;
    f.gpu = "test GPU";
    f.driver = "1";
    f.largest = f.smallest = 500 * (std::int64_t{1} << 20);
    f.cells = 1;
    return f;
}

}  // namespace

TEST_CASE("plan picks the fastest measured setting that fits, names what fits unmeasured and what is faster beyond",
          "[plan]") {
    // One workload (tiny, fp32, seq 16) on the device backend at batches 1, 2, 4, 8 and its
    // flash_attention variant at batch 4; a second workload at seq 32.
    const auto cells = cells_of(R"([[sweep]]
backend = "device"
batch = [1, 2, 4, 8]
[[sweep]]
backend = "device"
variant = "flash_attention"
batch = 4
[[sweep]]
backend = "device"
seq = 32
batch = 1
)");
    REQUIRE(cells.size() == 6);
    const FixedCost fixed = fixed_cost();
    const auto need = [&](std::size_t i) { return predicted_need(estimate_memory(cells[i]), fixed); };
    const std::size_t b1 = index_of(cells, 1, 16, BackendId::device), b2 = index_of(cells, 2, 16, BackendId::device),
                      b8 = index_of(cells, 8, 16, BackendId::device), s32 = index_of(cells, 1, 32, BackendId::device);
    const std::size_t b4 = 2, flash4 = 4;  // the matrix's order: the first sweep's batches, then the variant's
    REQUIRE(cells[b4].batch == 4);
    REQUIRE(cells[flash4].variant == Variant{Fusion::flash_attention});
    // Larger batches need more; the limit lets batch 4 (both variants) in and keeps batch 8 out.
    REQUIRE(need(b4) < need(b8));
    REQUIRE(need(flash4) <= need(b4));
    const PlanLimits limits{.device_bytes = need(b4), .host_bytes = {}};

    std::map<std::string, MeasuredCell> measured;
    measured[cells[b1].key()] = {.tokens_per_s = 100, .gpu_peak_bytes = 1};
    measured[cells[b4].key()] = {.tokens_per_s = 300, .gpu_peak_bytes = 2};
    measured[cells[flash4].key()] = {.tokens_per_s = 250, .gpu_peak_bytes = 3};
    measured[cells[b8].key()] = {.tokens_per_s = 400, .gpu_peak_bytes = 4};
    // b2 and the seq-32 cell are not measured.

    const auto plans = plan_workloads(cells, fixed, measured, limits);
    REQUIRE(plans.size() == 2);
    const WorkloadPlan& seq16 = plans[0];
    REQUIRE(seq16.cells.size() == 5);
    REQUIRE(seq16.best);
    CHECK(seq16.cells[*seq16.best].cell == b4);
    CHECK(seq16.cells[*seq16.best].need == need(b4));
    REQUIRE(seq16.beyond);
    CHECK(seq16.cells[*seq16.beyond].cell == b8);
    REQUIRE(seq16.unmeasured.size() == 1);
    CHECK(seq16.cells[seq16.unmeasured.front()].cell == b2);
    CHECK_FALSE(seq16.smallest);

    const WorkloadPlan& seq32 = plans[1];
    REQUIRE(seq32.cells.size() == 1);
    CHECK(seq32.cells.front().cell == s32);
    CHECK_FALSE(seq32.best);
    REQUIRE(need(s32) <= limits.device_bytes);  // seq 32 at batch 1 needs less than seq 16 at 4
    CHECK(seq32.unmeasured.size() == 1);

    SECTION("a faster setting that fits leaves nothing beyond") {
        measured[cells[b4].key()].tokens_per_s = 500;
        const auto again = plan_workloads(cells, fixed, measured, limits);
        CHECK_FALSE(again[0].beyond);
    }
    SECTION("when nothing fits, the cell of least need is named") {
        const auto none = plan_workloads(cells, fixed, measured, {.device_bytes = need(b1) - 1, .host_bytes = {}});
        CHECK_FALSE(none[0].best);
        REQUIRE(none[0].smallest);
        CHECK(none[0].cells[*none[0].smallest].cell == b1);
        CHECK(none[0].unmeasured.empty());
    }
    SECTION("a cell that uses a GPU needs a calibration") {
        CHECK_THROWS_AS(plan_workloads(cells, std::nullopt, measured, limits), std::invalid_argument);
    }
}

TEST_CASE("plan keeps cells that cannot run out of the choice and honours a host memory limit", "[plan]") {
    // The host backend runs baseline only: the flash_attention cell cannot run.
    const auto cells = cells_of(R"([[sweep]]
backend = "host"
batch = [1, 4]
[[sweep]]
backend = "host"
variant = "flash_attention"
batch = 1
)");
    REQUIRE(cells.size() == 3);
    std::map<std::string, MeasuredCell> measured;
    for (const CellParams& c : cells) measured[c.key()] = {.tokens_per_s = 10.0 * c.batch, .gpu_peak_bytes = {}};
    // No GPU cell: no calibration needed, and the host cells need no device memory.
    auto plans = plan_workloads(cells, std::nullopt, measured, {.device_bytes = 0, .host_bytes = {}});
    REQUIRE(plans.size() == 1);
    REQUIRE(plans[0].best);
    CHECK(cells[plans[0].cells[*plans[0].best].cell].batch == 4);
    CHECK_FALSE(plans[0].cells[2].cannot_run.empty());
    CHECK_FALSE(plans[0].cells[2].fits);

    // A host limit between the two batches' host memory leaves batch 1.
    const auto host = [&](std::size_t i) { return estimate_memory(cells[i]).host_total(true); };
    REQUIRE(host(0) < host(1));
    plans = plan_workloads(cells, std::nullopt, measured, {.device_bytes = 0, .host_bytes = host(0)});
    REQUIRE(plans[0].best);
    CHECK(cells[plans[0].cells[*plans[0].best].cell].batch == 1);
}

TEST_CASE("sweetspot plan ranks a sweep's measured cells and says which fitting cells it has not measured",
          "[plan][cli]") {
    TempDir tmp;
    write_file(tmp.file("m.toml"), R"(name = "plan-cli"
[defaults]
model = "tiny"
backend = "host"
seq = 8
iterations = 2
warmups = 0
[[sweep]]
batch = [1, 2, 3]
)");
    const std::string db = tmp.file("m.db");
    const auto run = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "' --only batch=1,2");
    INFO(run.output);
    REQUIRE(run.exit_code == 0);

    const auto plan = run_sweetspot("plan '" + tmp.file("m.toml") + "' --memory 1GiB --db '" + db + "' --format json");
    INFO(plan.output);
    REQUIRE(plan.exit_code == 0);
    const auto rows = json::parse(plan.output);
    REQUIRE(rows.size() == 1);
    // The faster of the two measured cells, as the database has them.
    Database results(db, Database::Mode::read_only);
    auto st = results.prepare("SELECT batch FROM cells WHERE status = 'ok' ORDER BY tokens_per_s DESC LIMIT 1");
    REQUIRE(st.step());
    CHECK(rows[0]["best_cell_index"] == st.int64(0) - 1);  // cells #0, #1, #2 are batches 1, 2, 3
    CHECK(rows[0]["unmeasured_cells"] == "#2");
    CHECK(rows[0]["settings"] == 3);
    CHECK(rows[0]["fitting"] == 3);

    const auto bad = run_sweetspot("plan '" + tmp.file("m.toml") + "' --memory lots --db '" + db + "'");
    CHECK(bad.exit_code == 2);
    CHECK(bad.output.find("--memory expects an amount of memory") != std::string::npos);
    const auto missing = run_sweetspot("plan '" + tmp.file("m.toml") + "' --memory 1GiB --db '" + tmp.file("none.db") + "'");
    CHECK(missing.exit_code == 2);
    CHECK(missing.output.find("no such database") != std::string::npos);
}
