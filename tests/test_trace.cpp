// `sweetspot trace`: a cell's recorded events → a Chrome/Perfetto JSON trace that parses, keeps
// every event of the iteration, and nests the NVTX ranges.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

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
// second overlapping the first), and between kernels 0 and 1.
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
        k.grid_x = 96;
        k.block_x = 256;
        e.kernels.push_back(k);
    }
    KernelRecord outside;
    outside.start_ns = 2'150'000;
    outside.end_ns = 2'160'000;
    outside.name = "later";
    e.kernels.push_back(outside);
    MemcpyRecord copy;
    copy.start_ns = 1'020'000;
    copy.end_ns = 1'090'000;
    copy.stream_id = 15;
    copy.copy_kind = 1;
    copy.bytes = 1 << 20;
    e.memcpys.push_back(copy);
    MemcpyRecord htod = copy;
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
        "CPU page fault": "um.cpu_fault", "traced iteration 0": "nvtx", "layer 0": "nvtx", "acquire": "nvtx"}
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
starts = {e["id"]: e for e in events if e["ph"] == "s"}
finishes = {e["id"]: e for e in events if e["ph"] == "f"}
assert len(starts) == 2 and starts.keys() == finishes.keys(), (starts, finishes)
faults = {(e["pid"], e["tid"], e["ts"]) for e in events if e.get("name") == "GPU page faults" and e["ph"] == "X"}
for i, s in starts.items():
    f = finishes[i]
    assert s["ts"] <= f["ts"] and f["bp"] == "e" and (s["cat"], s["name"]) == (f["cat"], f["name"]), (s, f)
    assert threads[(s["pid"], s["tid"])] == "stream 14" and 100.0 <= s["ts"] < 250.0, s
    assert (f["pid"], f["tid"], f["ts"]) in faults, f
assert sorted(f["ts"] for f in finishes.values()) == [120.0, 125.0], finishes
print("ok")
PY)py";
    CHECK(std::system(check.c_str()) == 0);

    std::ofstream sink(tmp.file("none.json"));
    CHECK_THROWS_WITH(write_trace(store, cell_id, 5, sink), Catch::Matchers::ContainsSubstring("traced iteration 5"));
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
