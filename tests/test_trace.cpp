// `sweetspot trace`: a cell's recorded events → a Chrome/Perfetto JSON trace that parses, keeps
// every event of the iteration, and nests the NVTX ranges.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/measure/cell_outcome.hpp"
#include "harness/cli/summary.hpp"
#include "harness/cli/trace_export.hpp"
#include "kernels/model/model_config.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using sweetspot::test::TempDir;

namespace {

// One traced iteration from 1'000'000 ns to 2'000'000 ns: two layers with kernels on two streams,
// a plain copy, UM migrations both ways, GPU and CPU faults; plus events outside the iteration
// that the trace must leave out. Kernels run 1'100'000 + i × 200'000 ns for 150'000 ns (stream 14
// for even i, 13 for odd); GPU fault groups begin before any kernel, twice during kernel 0 (the
// second overlapping the first), and between kernels 0 and 1. Kernel i has correlation id 100 + i
// and is launched 40'000 ns before it starts (kernels 0-2 by thread 7, kernel 3 by thread 9;
// kernel 0's runtime call holds the driver call under it); the plain copy has correlation id 50,
// launched by a runtime call with a driver call under it; a synchronize (correlation id 300)
// launches nothing.
CellEvents fixture_events() {
    CellEvents e;
    auto range = [&](std::int64_t s, std::int64_t t, const char* text) { e.ranges.push_back({s, t, text, 7}); };
    range(500'000, 2'100'000, "cell 0123456789abcdef");
    range(1'000'000, 2'000'000, "traced iteration 0");
    range(1'010'000, 1'400'000, "layer 0");
    range(1'010'000, 1'050'000, "acquire");
    range(1'050'000, 1'390'000, "compute");
    range(1'400'000, 1'900'000, "layer 1");
    range(2'100'000, 2'200'000, "traced iteration 1");
    for (int i = 0; i < 4; ++i) {
        KernelRecord k;
        k.start_ns = 1'100'000 + i * 200'000;
        k.end_ns = k.start_ns + 150'000;
        k.stream_id = i % 2 ? 13 : 14;
        k.name = i % 2 ? "gemm \"sm90\"" : "softmax_kernel<float>";
        k.correlation_id = 100 + i;
        const auto launch = k.start_ns - 40'000;
        e.api_calls.push_back({launch, launch + 5'000, i == 3 ? 9u : 7u, k.correlation_id, "cudaLaunchKernel_v7000", 0});
        if (i == 0) e.api_calls.push_back({launch + 1'000, launch + 4'000, 7, k.correlation_id, "cuLaunchKernel", 0});
        k.grid_x = 96;
        k.block_x = 256;
        e.kernels.push_back(k);
    }
    KernelRecord outside;
    outside.start_ns = 2'150'000;
    outside.end_ns = 2'160'000;
    outside.name = "later";
    outside.correlation_id = 200;
    e.kernels.push_back(outside);
    e.api_calls.push_back({2'110'000, 2'115'000, 7, 200, "cudaLaunchKernel_v7000", 0});
    MemcpyRecord copy;
    copy.start_ns = 1'020'000;
    copy.end_ns = 1'090'000;
    copy.stream_id = 15;
    copy.copy_kind = 1;
    copy.bytes = 1 << 20;
    copy.correlation_id = 50;
    e.memcpys.push_back(copy);
    e.api_calls.push_back({1'015'000, 1'018'000, 7, 50, "cudaMemcpyAsync_v3020", 0});
    e.api_calls.push_back({1'016'000, 1'017'000, 7, 50, "cuMemcpyHtoDAsync_v2", 0});
    e.api_calls.push_back({1'950'000, 1'990'000, 7, 300, "cudaStreamSynchronize_v3020", 4});
    MemcpyRecord htod = copy;
    htod.correlation_id = 0;
    htod.copy_kind = 11;
    htod.stream_id = 0;
    htod.migration_cause = 2;  // CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_COHERENCE
    e.memcpys.push_back(htod);
    MemcpyRecord dtoh = htod;
    dtoh.copy_kind = 12;
    dtoh.start_ns = 1'500'000;
    dtoh.end_ns = 1'520'000;
    dtoh.migration_cause = 4;  // CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_EVICTION
    e.memcpys.push_back(dtoh);
    e.gpu_page_faults.push_back({1'030'000, 1'031'000, 0, 0x7f00, 12, 1});
    e.gpu_page_faults.push_back({1'120'000, 1'180'000, 0, 0x8000, 3, 2});  // 2: write
    e.gpu_page_faults.push_back({1'125'000, 1'200'000, 0, 0x9000, 5, 1});
    e.gpu_page_faults.push_back({1'260'000, 1'270'000, 0, 0xa000, 1, 1});
    e.cpu_page_faults.push_back({1'600'000, 0x7f00, 0x401000});
    return e;
}

std::int64_t stored_cell(Store& store) {
    const auto run = store.begin_run(RunInfo{});
    CellParams cell;
    cell.model = *find_builtin_model("tiny");
    cell.backend = BackendId::uvm;
    cell.trace_iterations = 2;
    CellOutcome o;
    o.status = CellStatus::ok;
    o.timed_ms = {1.0, 1.4, 1.2};  // median 1.2
    o.traced_ms = {3.3, 2.7};      // median 3.0: 2.5 x the timed
    o.events = fixture_events();
    return record_outcome(store, run, 0, cell, o);
}

}  // namespace

TEST_CASE("a traced iteration becomes a trace that parses and nests", "[trace]") {
    TempDir tmp;
    auto store = Store::open(tmp.file("r.db"));
    const auto cell_id = stored_cell(store);
    const auto path = tmp.file("trace.json");
    TraceSummary t;
    {
        std::ofstream out(path);
        t = write_trace(store, cell_id, 0, out);
    }
    CHECK(t.kernels == 4);  // the one after the iteration is left out
    CHECK(t.copies == 1);
    CHECK(t.streams == 3);
    CHECK(t.migrations == 2);
    CHECK(t.gpu_fault_groups == 4);
    CHECK(t.fault_flows == 2);  // the two during kernel 0
    CHECK(t.launches_recorded);
    CHECK(t.api_calls == 8);     // the launch of "later" is after the iteration
    CHECK(t.launch_flows == 5);  // the four kernels and the copy, one each
    CHECK(t.cpu_faults == 1);
    CHECK(t.ranges == 5);  // the iteration and what it contains, not the cell or the next iteration
    REQUIRE(t.timing);
    CHECK(traced_timing_text(*t.timing) == "the traced iterations took 3.0 ms (median of 2) against 1.2 ms timed: 2.50 x");
    std::ostringstream header;
    SummaryOptions one;
    one.cell_id = cell_id;
    print_summary(store, one, header);
    CHECK_THAT(header.str(), Catch::Matchers::ContainsSubstring(
                                 "The events below are of the traced iterations, not the timed ones: the traced "
                                 "iterations took 3.0 ms (median of 2) against 1.2 ms timed: 2.50 x"));

    // Python's json module is the independent parser; the check also verifies that on every
    // track spans are nested or disjoint, and that times are relative to the iteration start.
    const std::string check = R"(python3 - ')" + path + R"py(' <<'PY'
import json, sys, collections
events = json.load(open(sys.argv[1]))["traceEvents"]
spans = collections.defaultdict(list)
for e in events:
    if e["ph"] == "X":
        spans[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
for track, items in spans.items():
    items.sort(key=lambda s: (s[0], -s[1]))
    stack = []
    for s, t, name in items:
        while stack and stack[-1] <= s:
            stack.pop()
        assert not stack or t <= stack[-1] + 1e-6, (track, name, s, t, stack)
        stack.append(t)
names = {e["name"] for e in events}
assert "traced iteration 0" in names and "layer 1" in names and "later" not in names, names
first = min(e["ts"] for e in events if e["ph"] == "X")
assert first == 0.0, first
assert any(e.get("args", {}).get("name") == "UM migrations host→device" for e in events)
meta = json.load(open(sys.argv[1]))["metadata"]
assert meta["traced_over_timed"] == 2.5 and meta["timed_median_ms"] == 1.2 and meta["traced_median_ms"] == 3.0, meta
assert meta["parameters"]["backend"] == "uvm" and meta["parameters"]["model"] == "tiny", meta
assert meta["traced_iteration"] == 0, meta

# Each event's category by what it shows.
cats = {"softmax_kernel<float>": "kernel", 'gemm "sm90"': "kernel", "memcpy Host-to-Device": "memcpy",
        "UM migration HtoD": "um.migration", "UM migration DtoH": "um.migration", "GPU page faults": "um.gpu_fault",
        "CPU page fault": "um.cpu_fault", "traced iteration 0": "nvtx", "layer 0": "nvtx", "acquire": "nvtx",
        "cudaLaunchKernel_v7000": "cuda_api", "cuLaunchKernel": "cuda_api", "cudaMemcpyAsync_v3020": "cuda_api",
        "cuMemcpyHtoDAsync_v2": "cuda_api", "cudaStreamSynchronize_v3020": "cuda_api"}
seen = set()
for e in events:
    if e["ph"] in ("X", "i"):
        assert e["cat"] == cats.get(e["name"], e["cat"]), e
        seen.add(e["name"])
assert seen >= set(cats), set(cats) - seen

# Enum fields by their labels in the ENUM_* tables, not numbers.
def args_of(name):
    return [e["args"] for e in events if e.get("name") == name and e["ph"] == "X"]
assert args_of("UM migration HtoD")[0]["migrationCause"] == "Page fault", args_of("UM migration HtoD")
assert args_of("UM migration DtoH")[0]["migrationCause"] == "Eviction", args_of("UM migration DtoH")
assert args_of("memcpy Host-to-Device")[0]["copyKind"] == "Host-to-Device"
assert sorted(a["faultAccessType"] for a in args_of("GPU page faults")) == ["Read", "Read", "Read", "Write"]

# Overlapping fault groups on two lanes.
threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
lanes = sorted(n for n in threads.values() if n.startswith("GPU page faults"))
assert lanes == ["GPU page faults", "GPU page faults (lane 2)"], lanes

# Flows: each start ("s") has one finish ("f", bound to the enclosing slice) with the same id,
# cat and name, not earlier; the start lies in kernel 0 (stream 14, 100..250 us), the finish at
# the start of the fault group it leads to (120 and 125 us).
starts = {e["id"]: e for e in events if e["ph"] == "s" and e["cat"] == "um.gpu_fault"}
finishes = {e["id"]: e for e in events if e["ph"] == "f" and e["cat"] == "um.gpu_fault"}
assert len(starts) == 2 and starts.keys() == finishes.keys(), (starts, finishes)
faults = {(e["pid"], e["tid"], e["ts"]) for e in events if e.get("name") == "GPU page faults" and e["ph"] == "X"}
for i, s in starts.items():
    f = finishes[i]
    assert s["ts"] <= f["ts"] and f["bp"] == "e" and (s["cat"], s["name"]) == (f["cat"], f["name"]), (s, f)
    assert threads[(s["pid"], s["tid"])] == "stream 14" and 100.0 <= s["ts"] < 250.0, s
    assert (f["pid"], f["tid"], f["ts"]) in faults, f
assert sorted(f["ts"] for f in finishes.values()) == [120.0, 125.0], finishes

# The API calls on a track per calling thread, by name, with their correlation id and return value.
api = collections.defaultdict(list)
for e in events:
    if e["ph"] == "X" and threads[(e["pid"], e["tid"])].startswith("CUDA API"):
        assert e["cat"] == "cuda_api", e
        api[threads[(e["pid"], e["tid"])]].append((e["ts"], e["dur"], e["name"], e["args"]["correlationId"],
                                                   e["args"]["returnValue"]))
assert sorted(api["CUDA API (thread 7)"]) == [
    (15.0, 3.0, "cudaMemcpyAsync_v3020", 50, 0), (16.0, 1.0, "cuMemcpyHtoDAsync_v2", 50, 0),
    (60.0, 5.0, "cudaLaunchKernel_v7000", 100, 0), (61.0, 3.0, "cuLaunchKernel", 100, 0),
    (260.0, 5.0, "cudaLaunchKernel_v7000", 101, 0), (460.0, 5.0, "cudaLaunchKernel_v7000", 102, 0),
    (950.0, 40.0, "cudaStreamSynchronize_v3020", 300, 4)], api
assert api["CUDA API (thread 9)"] == [(660.0, 5.0, "cudaLaunchKernel_v7000", 103, 0)], api
assert len(api) == 2, api.keys()

# Launch arrows: one pair per launched kernel or copy, by correlation id: the start on the thread's
# API track inside its outermost call (the runtime one), the finish at the kernel's or copy's start
# on its stream's track (the kernels and the copy as the fixture places them). None for the
# synchronize, and none twice for a runtime call and the driver call under it.
launch_s = {e["id"]: e for e in events if e["ph"] == "s" and e["cat"] == "cuda_api"}
launch_f = {e["id"]: e for e in events if e["ph"] == "f" and e["cat"] == "cuda_api"}
assert launch_s.keys() == launch_f.keys() and not launch_s.keys() & starts.keys(), (launch_s, launch_f)
expected = {50: ("CUDA API (thread 7)", 15.0, 18.0, "stream 15", 20.0),
            100: ("CUDA API (thread 7)", 60.0, 65.0, "stream 14", 100.0),
            101: ("CUDA API (thread 7)", 260.0, 265.0, "stream 13", 300.0),
            102: ("CUDA API (thread 7)", 460.0, 465.0, "stream 14", 500.0),
            103: ("CUDA API (thread 9)", 660.0, 665.0, "stream 13", 700.0)}
gpu = {(threads[(e["pid"], e["tid"])], e["ts"]): e["args"]["correlationId"] for e in events
       if e["ph"] == "X" and e["cat"] in ("kernel", "memcpy")}
seen = []
for i, s in launch_s.items():
    f = launch_f[i]
    assert (s["name"], f["name"]) == ("launched", "launched") and f["bp"] == "e", (s, f)
    correlation = gpu[(threads[(f["pid"], f["tid"])], f["ts"])]
    track, begin, end, stream, at = expected[correlation]
    assert threads[(s["pid"], s["tid"])] == track and begin <= s["ts"] < end, (correlation, s)
    inner = [c for c in api[track] if c[0] <= s["ts"] < c[0] + c[1]]
    assert min(inner, key=lambda c: c[0])[3] == correlation, (correlation, inner)
    assert threads[(f["pid"], f["tid"])] == stream and f["ts"] == at, (correlation, f)
    seen.append(correlation)
assert sorted(seen) == sorted(expected), seen
assert meta["launches_recorded"] is True and "launches" not in meta, meta
print("ok")
PY)py";
    CHECK(std::system(check.c_str()) == 0);

    std::ofstream sink(tmp.file("none.json"));
    CHECK_THROWS_WITH(write_trace(store, cell_id, 5, sink), Catch::Matchers::ContainsSubstring("traced iteration 5"));
}

TEST_CASE("a cell recorded before the API calls were traces as before, saying launches were not recorded", "[trace]") {
    TempDir tmp;
    auto store = Store::open(tmp.file("r.db"));
    const auto run = store.begin_run(RunInfo{});
    CellParams cell;
    cell.model = *find_builtin_model("tiny");
    cell.backend = BackendId::uvm;
    cell.trace_iterations = 1;
    CellOutcome o;
    o.status = CellStatus::ok;
    o.events = fixture_events();
    o.events->api_calls.clear();
    const auto cell_id = record_outcome(store, run, 0, cell, o);
    auto check = [&] {
        std::ostringstream out;
        const auto t = write_trace(store, cell_id, 0, out);
        CHECK(t.kernels == 4);
        CHECK(t.copies == 1);
        CHECK(t.fault_flows == 2);
        CHECK_FALSE(t.launches_recorded);
        CHECK(t.api_calls == 0);
        CHECK(t.launch_flows == 0);
        const auto trace = nlohmann::json::parse(out.str());
        for (const auto& e : trace["traceEvents"]) CHECK(e.value("cat", "") != "cuda_api");
        CHECK(trace["metadata"]["launches_recorded"] == false);
        CHECK_THAT(trace["metadata"]["launches"].get<std::string>(),
                   Catch::Matchers::ContainsSubstring("not recorded") &&
                       Catch::Matchers::ContainsSubstring("schema version 15"));
    };
    SECTION("its events hold no API calls") { check(); }
    SECTION("its database predates their table") {
        // As schema version 14 had it (the down-migration of step 15).
        store.db().exec("DROP VIEW nvtx_gpu_proj_sum; DROP VIEW nvtx_gpu_proj_trace; DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME;");
        check();
    }
}

TEST_CASE("trace without -o writes beside the database, named by cell and iteration", "[trace][cli]") {
    TempDir tmp;
    std::int64_t cell_id = 0;
    {
        auto store = Store::open(tmp.file("r.db"));
        cell_id = stored_cell(store);
    }
    const auto r = test::run_sweetspot("trace '" + tmp.file("r.db") + "' --cell " + std::to_string(cell_id));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const std::string expected = tmp.file("r-cell" + std::to_string(cell_id) + "-iteration0.trace.json");
    CHECK(std::filesystem::exists(expected));
    CHECK_THAT(r.output, Catch::Matchers::ContainsSubstring(expected));
    CHECK_THAT(r.output, Catch::Matchers::ContainsSubstring("8 CUDA API calls; 5 launch arrows, 2 fault arrows"));

    // The cell named by its key, as `list` shows it, is the same cell; a name that is neither is refused.
    std::string key;
    {
        auto store = Store::open_read_only(tmp.file("r.db"));
        auto st = store.db().prepare("SELECT cell_key FROM cells WHERE cell_id = ?");
        st.bind(1, cell_id);
        REQUIRE(st.step());
        key = st.text(0);
    }
    std::filesystem::remove(expected);
    const auto by_key = test::run_sweetspot("trace '" + tmp.file("r.db") + "' --cell " + key);
    INFO(by_key.output);
    CHECK(by_key.exit_code == 0);
    CHECK(std::filesystem::exists(expected));
    const auto summary = test::run_sweetspot("summary '" + tmp.file("r.db") + "' --cell " + key);
    CHECK(summary.exit_code == 0);
    const auto bad = test::run_sweetspot("trace '" + tmp.file("r.db") + "' --cell nonsense");
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.output, Catch::Matchers::ContainsSubstring("--cell expects a cell_id or the key of a cell"));
}
