// `sweetspot report`, end to end through the binary: a host-backend run of the real binary, then
// synthetic GPU-like cells and events added through the Store → every figure exists as a valid
// PNG and SVG, figures without data are named with the reason, and the HTML page loads in
// headless Chromium with every image and no console error (tests/check_report_html.py).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "harness/measure/cell_outcome.hpp"
#include "kernels/model/model_config.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;
using sweetspot::test::run_sweetspot;
using sweetspot::test::TempDir;
using sweetspot::test::write_file;

namespace {

const char* kHostMatrix = R"(name = "report-fixture"
[defaults]
backend = "host"
model = "tiny"
warmups = 0
iterations = 3
[[sweep]]
name = "batches"
batch = [1, 2]
seq = [8, 16]
[[sweep]]
name = "fused"
variant = "attn_ln"
batch = 1
seq = 8
[[sweep]]
name = "train"
mode = "train"
batch = [1, 2]
seq = 8
[[sweep]]
name = "ragged"
batch = 2
seq = 8
lengths = "uniform:2-8"
packing = ["padded", "packed"]
)";

// Figures drawn from host cells alone, and those that need GPU cells. The host backend runs the
// baseline variant only, so performance normalized to baseline needs the GPU cells' other variant.
const std::array kHostFigures = {"throughput_vs_batch", "packing", "training_vs_batch", "training_step_phases",
                                 "cell_phases"};
const char* const kNormalized = "normalized_performance";
const std::array kGpuFigures = {"latency_vs_streams", "latency_vs_prefetch", "slowdown_vs_oversubscription",
                                "slowdown_vs_oversubscription_driver", "link_bandwidth", "um_traffic", "timeline"};
// Figures of GPU training cells: a host run's training cells have no device memory.
const std::array kGpuTrainingFigures = {"training_sweetspot", "training_memory"};

constexpr double kLinkGbps = 50.0;
constexpr int kLayers = 4;

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::uint32_t big_endian_u32(const std::string& s, std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<unsigned char>(s[at + i]);
    return v;
}

// A PNG with its signature and an IHDR of a figure-sized image.
void check_png(const std::string& path) {
    INFO(path);
    const std::string png = read_file(path);
    REQUIRE(png.size() > 2000);
    CHECK(png.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
    CHECK(png.substr(12, 4) == "IHDR");
    CHECK(big_endian_u32(png, 16) >= 400);  // width, pixels
    CHECK(big_endian_u32(png, 20) >= 200);  // height
}

// An SVG that parses as XML (Python's parser is the independent judge) with an <svg> root.
void check_svg(const std::string& path) {
    INFO(path);
    REQUIRE(std::filesystem::file_size(path) > 2000);
    const std::string cmd = "python3 -c 'import sys, xml.etree.ElementTree as E; "
                            "sys.exit(E.parse(sys.argv[1]).getroot().tag != \"{http://www.w3.org/2000/svg}svg\")' '" +
                            path + "'";
    CHECK(std::system(cmd.c_str()) == 0);
}

void check_figure(const std::string& dir, const std::string& name, const std::string& html) {
    check_png(dir + "/" + name + ".png");
    check_svg(dir + "/" + name + ".svg");
    CHECK_THAT(html, ContainsSubstring("src=\"" + name + ".png\""));
}

// The page in headless Chromium: every image loaded, no console error, no network request. The
// script says why it failed, also when Chromium is not installed.
void check_in_browser(const std::string& dir) {
    const std::string cmd =
        "python3 '" + test::source_path("tests/check_report_html.py") + "' '" + dir + "/index.html' 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string output;
    std::array<char, 4096> buf{};
    while (const auto n = std::fread(buf.data(), 1, buf.size(), p)) output.append(buf.data(), n);
    const int status = pclose(p);
    INFO(output);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
}

// Sets an environment variable for the commands run while it lives.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const std::string& value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old;
        setenv(name, value.c_str(), 1);
    }
    ~ScopedEnv() {
        if (old_) setenv(name_, old_->c_str(), 1);
        else unsetenv(name_);
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    const char* name_;
    std::optional<std::string> old_;
};

test::CommandResult report(const std::string& db, const std::string& dir, const std::string& extra = "") {
    return run_sweetspot("report '" + db + "' -o '" + dir + "' " + extra);
}

struct Written {
    test::CommandResult result;
    std::string html;
};

// A report that must be written: the command's output and the page.
Written written_report(const std::string& db, const std::string& dir) {
    auto r = report(db, dir);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return {std::move(r), read_file(dir + "/index.html")};
}

// --- synthetic GPU cells --------------------------------------------------------------------

CellParams gpu_cell(const std::string& backend, int streams, const std::string& prefetch, double budget_percent) {
    CellParams c;
    c.model = *find_builtin_model("gpt2_small");
    c.backend = parse_enum<BackendId>(backend).value();
    c.batch = 1;
    c.seq = 1024;
    c.streams = streams;
    c.prefetch = *Prefetch::parse(prefetch);
    c.budget = Budget{Budget::Kind::percent, budget_percent};
    c.iterations = 4;
    return c;
}

// A measured outcome: latencies around `median_ms`, and the weights that cross the link.
CellOutcome measured(const CellParams& c, double median_ms) {
    CellOutcome o;
    o.status = CellStatus::ok;
    o.timed_ms = {median_ms * 0.98, median_ms, median_ms * 1.01, median_ms * 1.05};
    const std::int64_t resident = c.backend == BackendId::uvm ? 0 : c.budget_bytes();
    o.set<"resident_bytes">(resident);
    o.set<"streamed_bytes">(c.weight_bytes() - resident);
    o.set<"device_used_bytes">(c.budget_bytes() + (std::int64_t{1} << 29));
    return o;
}

// Streamed cells run near their link time, slower the more they stream on demand.
double latency_ms(const CellParams& c, double device_ms, double slowdown) {
    const double link_ms = static_cast<double>(c.weight_bytes() - c.budget_bytes()) / (kLinkGbps * 1e6);
    return std::max(device_ms, link_ms) * slowdown;
}

// One traced iteration from t0: NVTX layers with acquire / compute / release, kernels on stream
// 7, explicit copies on streams 8 and 9 (explicit-copy) or UM migrations and page faults (uvm).
CellEvents traced_iteration(bool unified_memory) {
    constexpr std::int64_t t0 = 5'000'000, layer_ns = 400'000;
    CellEvents e;
    auto range = [&](std::int64_t s, std::int64_t t, std::string text) { e.ranges.push_back({s, t, std::move(text), 3}); };
    range(t0 - 1'000'000, t0 + (kLayers + 1) * layer_ns, "cell 0000000000000000");
    range(t0, t0 + kLayers * layer_ns + 50'000, "traced iteration 0");
    for (int l = 0; l < kLayers; ++l) {
        const std::int64_t s = t0 + l * layer_ns;
        range(s, s + layer_ns - 10'000, "layer " + std::to_string(l));
        range(s, s + 60'000, "acquire");
        range(s + 60'000, s + 350'000, "compute");
        range(s + 350'000, s + 380'000, "release");
        for (int k = 0; k < 3; ++k) {
            KernelRecord kr;
            kr.start_ns = s + 70'000 + k * 90'000;
            kr.end_ns = kr.start_ns + 80'000;
            kr.stream_id = 7;
            kr.name = k == 1 ? "softmax_kernel" : "gemm_kernel";
            kr.grid_x = 64;
            kr.block_x = 256;
            e.kernels.push_back(kr);
        }
        MemcpyRecord m;
        m.start_ns = s + 5'000;
        m.end_ns = s + 55'000;
        m.bytes = 20 << 20;
        if (unified_memory) {
            m.copy_kind = 11;
            m.migration_cause = l % 2 ? 3 : 2;  // speculative prefetch, page fault
            m.address = 0x7f0000000000 + l * (std::int64_t{1} << 24);
            e.memcpys.push_back(m);
            m.copy_kind = 12;
            m.migration_cause = 4;  // eviction
            m.start_ns = s + 355'000;
            m.end_ns = s + 375'000;
            e.memcpys.push_back(m);
            e.gpu_page_faults.push_back({s + 2'000, s + 4'000, 0, 0x7f0000000000ull + l * 4096, 12 + l, 1});
            e.cpu_page_faults.push_back({s + 300'000, 0x7f0000100000ull + l * 4096, 0x401000});
        } else {
            m.copy_kind = 1;
            m.stream_id = 8 + l % 2;
            e.memcpys.push_back(m);
        }
    }
    return e;
}

// GPU-like cells beside the host run: a link probe, budgets, streams, prefetch depths, a fused
// variant, and two traced cells with events.
void add_gpu_cells(const std::string& db) {
    auto store = Store::open(db);
    RunInfo info;
    info.started_at = "2025-01-01T00:00:00Z";
    info.host = "synthetic";
    info.gpu_name = "Synthetic GPU 80GB";
    info.gpu_memory_bytes = std::int64_t{80} << 30;
    info.h2d_gbps = kLinkGbps;
    info.d2h_gbps = kLinkGbps;
    info.managed.concurrent_managed_access = 1;
    info.managed.pageable_memory_access = 0;
    info.managed_rates = {{"prefetch_to_gpu", 512 << 20, 5, 40.0, 6.0},
                          {"read_mostly_prefetch_to_gpu", 512 << 20, 5, 32.0, 14.0},
                          {"evict_to_host", 512 << 20, 5, 10.0, 50.0},
                          {"drop_read_mostly_copy", 512 << 20, 5, 500.0, 1.0},
                          {"fault_in", 512 << 20, 5, 8.0, 0.1}};
    info.matrix_name = "synthetic-gpu";
    info.matrix_text = "# cells written by tests/test_report.cpp";
    const auto run = store.begin_run(info);
    int index = 0;
    constexpr double device_ms = 8.0;
    auto record = [&](const CellParams& c, const CellOutcome& o) { record_outcome(store, run, index++, c, o); };

    const auto device = gpu_cell("device", 1, "off", 100);
    record(device, measured(device, device_ms));
    auto fused = device;
    fused.variant = *Variant::parse("attn_ln");
    record(fused, measured(fused, device_ms * 0.8));

    for (const auto& [backend, slowdown] : {std::pair{"explicit-copy", 1.03}, std::pair{"uvm-prefetch", 1.2}}) {
        for (const int streams : {1, 2, 4}) {
            const auto c = gpu_cell(backend, streams, "2", 50);
            record(c, measured(c, latency_ms(c, device_ms, slowdown + 0.02 / streams)));
        }
        for (const char* prefetch : {"jit", "1", "3"}) {
            const auto c = gpu_cell(backend, 2, prefetch, 50);
            record(c, measured(c, latency_ms(c, device_ms, slowdown + (prefetch[0] == 'j' ? 2.0 : 0.1))));
        }
        for (const double budget : {25.0, 75.0}) {
            const auto c = gpu_cell(backend, 2, "2", budget);
            record(c, measured(c, latency_ms(c, device_ms, slowdown)));
        }
    }
    for (const double budget : {50.0, 100.0}) {
        auto c = gpu_cell("uvm", 1, "off", budget);
        c.trace_iterations = 1;
        auto o = measured(c, latency_ms(c, device_ms, 9.0));
        o.traced_ms = {o.timed_ms[1] * 1.1};
        o.events = traced_iteration(true);
        record(c, o);
    }
    // Training steps on the device: one measured, with its memory's parts, and a larger batch
    // skipped as predicted not to fit.
    auto train = gpu_cell("device", 1, "off", 100);
    train.mode = Mode::train;
    auto step = measured(train, device_ms * 3);
    step.set<"device_weight_bytes">(train.weight_bytes());
    step.set<"training_state_bytes">(train.weight_bytes() * 7);
    step.set<"activation_bytes">(std::int64_t{3} << 30);
    // The estimator's terms (schema 18 on), so training_memory stacks them rather than the accounting
    // (without predicted_alloc_bytes, which would draw peak_memory, whose absence this test checks).
    step.set<"predicted_weight_bytes">(train.weight_bytes());
    step.set<"predicted_training_state_bytes">(train.weight_bytes() * 7);
    step.set<"predicted_activation_bytes">((std::int64_t{3} << 30) - (std::int64_t{32} << 20));
    step.set<"predicted_scores_bytes">(0);
    step.set<"predicted_workspace_bytes">(std::int64_t{32} << 20);
    step.set<"predicted_check_step_bytes">(0);
    step.set<"predicted_peak_bytes">(train.weight_bytes() * 8 + (std::int64_t{7} << 29));
    step.set<"gpu_peak_bytes">(train.weight_bytes() * 8 + (std::int64_t{7} << 29));
    record(train, step);
    auto too_large = train;
    too_large.batch = 64;
    CellOutcome skipped;
    skipped.status = CellStatus::skipped;
    skipped.reason = "predicted OOM: it needs 190 GiB, above the 80 GiB the GPU has";
    skipped.set<"predicted_peak_bytes">(std::int64_t{190} << 30);
    record(too_large, skipped);

    auto copy = gpu_cell("explicit-copy", 2, "2", 50);
    copy.trace_iterations = 1;
    auto o = measured(copy, latency_ms(copy, device_ms, 1.03));
    o.traced_ms = {o.timed_ms[1]};
    o.events = traced_iteration(false);
    record(copy, o);
    store.finish_run(run, "finished");
}

std::int64_t traced_explicit_copy_cell(const std::string& db) {
    Database d(db, Database::Mode::read_only);
    auto st = d.prepare("SELECT cell_id FROM cells WHERE backend = 'explicit-copy' AND trace_iterations > 0");
    REQUIRE(st.step());
    return st.int64(0);
}

}  // namespace

TEST_CASE("report of a host run, then of the same database with GPU cells", "[report]") {
    TempDir tmp;
    write_file(tmp.file("fixture.toml"), kHostMatrix);
    const auto db = tmp.file("fixture.db");
    const auto run = run_sweetspot("run '" + tmp.file("fixture.toml") + "' --db '" + db + "'");
    INFO(run.output);
    REQUIRE(run.exit_code == 0);

    {
        INFO("host cells alone: the CPU figures, and every GPU figure named with the reason");
        const auto dir = tmp.file("host-report");
        const auto [r, html] = written_report(db, dir);
        INFO(r.output);
        for (const auto* name : kHostFigures) check_figure(dir, name, html);
        for (const auto* name : kGpuFigures) {
            CHECK_THAT(r.output, ContainsSubstring(std::string(name) + ": not drawn: this database holds only host-backend"));
            CHECK_FALSE(std::filesystem::exists(dir + "/" + name + ".png"));
        }
        for (const auto* name : kGpuTrainingFigures) {
            CHECK_THAT(r.output, ContainsSubstring(std::string(name) + ": not drawn: the database has no measured training "
                                                   "cell"));
            CHECK_FALSE(std::filesystem::exists(dir + "/" + name + ".png"));
        }
        // One bar at 1.0 answers nothing: left out, with the reason on stdout and on the page.
        CHECK_THAT(r.output, ContainsSubstring(std::string(kNormalized) + ": not drawn: only the baseline variant was measured"));
        CHECK_THAT(html, ContainsSubstring("only the baseline variant was measured"));
        CHECK_FALSE(std::filesystem::exists(dir + "/" + kNormalized + ".png"));
        CHECK_THAT(html, ContainsSubstring("Figures not drawn"));
        CHECK_THAT(html, ContainsSubstring("the host backend runs the baseline variant only"));  // the skipped cell
        CHECK_THAT(html, !ContainsSubstring("id=\"time-split\""));  // nothing was traced
        check_in_browser(dir);
    }

    {
        INFO("with GPU cells: every figure, the timeline of the UM cell or of the cell asked for");
        add_gpu_cells(db);
        const auto dir = tmp.file("gpu-report");
        const auto [r, html] = written_report(db, dir);
        INFO(r.output);
        for (const auto* name : kHostFigures) check_figure(dir, name, html);
        check_figure(dir, kNormalized, html);
        for (const auto* name : kGpuFigures) check_figure(dir, name, html);
        for (const auto* name : kGpuTrainingFigures) check_figure(dir, name, html);
        CHECK_THAT(r.output, ContainsSubstring("peak_memory: not drawn"));
        CHECK_THAT(html, ContainsSubstring("Synthetic GPU 80GB"));   // run metadata
        CHECK_THAT(html, ContainsSubstring("50.0"));                 // the link probe
        CHECK_THAT(html, ContainsSubstring("UM migration"));         // the timeline's caption counts them
        CHECK_THAT(html, ContainsSubstring("backend</th>"));         // the cell table
        // Where the time goes: per layer 20 MiB cross the link in 50 us, 419.4 GB/s while busy.
        CHECK_THAT(html, ContainsSubstring("id=\"time-split\""));
        CHECK_THAT(html, ContainsSubstring(">419.4</td>"));
        check_in_browser(dir);

        const auto cell = traced_explicit_copy_cell(db);
        const auto asked = report(db, tmp.file("asked"), "--timeline-cell " + std::to_string(cell));
        INFO(asked.output);
        CHECK(asked.exit_code == 0);
        CHECK_THAT(read_file(tmp.file("asked") + "/index.html"),
                   ContainsSubstring("The first traced iteration of cell " + std::to_string(cell) + " "));
        // The same cell's transfers: one 20 MiB copy per layer, each begun inside that layer's
        // 60 us acquire, 400 us apart.
        const auto script = "python3 '" + test::source_path("scripts/bench/timeline_stats.py") + "' '" + db + "'";
        const auto listed = test::run_command(script + " --cell " + std::to_string(cell) + " --transfers --markdown");
        INFO(listed.output);
        CHECK(listed.exit_code == 0);
        const char* starts[kLayers] = {"0.005", "0.405", "0.805", "1.205"};
        for (int l = 0; l < kLayers; ++l) {
            CHECK_THAT(listed.output, ContainsSubstring("| " + std::string(starts[l]) +
                                                        " | 21.0 | 0.050 | 419.4 | 0.060 | acquire (layer " +
                                                        std::to_string(l) + ") |"));
        }
        const auto untraced = test::run_command(script + " --cell 1 --transfers");
        CHECK(untraced.exit_code == 1);
        CHECK_THAT(untraced.output, ContainsSubstring("cell 1 has no traced iteration"));
        const auto missing = report(db, tmp.file("missing"), "--timeline-cell 999");
        CHECK(missing.exit_code == 2);
        CHECK_THAT(missing.output, ContainsSubstring("cell 999 has no 'traced iteration 0' range"));
    }
}

TEST_CASE("report refuses bad input with exit code 2 and says what is missing", "[report]") {
    TempDir tmp;
    const auto out = tmp.file("out");

    const auto missing = report(tmp.file("nope.db"), out);
    CHECK(missing.exit_code == 2);
    CHECK_THAT(missing.output, ContainsSubstring("no such database"));

    write_file(tmp.file("text.db"), "not an SQLite file, just text\n");
    const auto text = report(tmp.file("text.db"), out);
    CHECK(text.exit_code == 2);
    CHECK_THAT(text.output, ContainsSubstring(tmp.file("text.db") + " is not an SQLite database"));
    std::filesystem::create_directories(tmp.file("folder.db"));
    const auto folder = report(tmp.file("folder.db"), out);
    CHECK(folder.exit_code == 2);
    CHECK_THAT(folder.output, ContainsSubstring(tmp.file("folder.db") + " is a folder, not a database file"));

    {
        Database other(tmp.file("other.db"), Database::Mode::read_write_create);
        other.exec("CREATE TABLE t (x INTEGER)");
    }
    const auto other = report(tmp.file("other.db"), out);
    CHECK(other.exit_code == 2);
    CHECK_THAT(other.output, ContainsSubstring("not a sweetspot results database"));
    CHECK_FALSE(std::filesystem::exists(out));

    const auto no_output = run_sweetspot("report '" + tmp.file("other.db") + "'");
    CHECK(no_output.exit_code == 2);
}

TEST_CASE("a report that cannot be written leaves the output folder as it was", "[report]") {
    TempDir tmp;
    const auto db = tmp.file("r.db");
    write_file(tmp.file("m.toml"), "[defaults]\nmodel = \"tiny\"\nseq = 8\niterations = 2\n");
    REQUIRE(run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "'").exit_code == 0);
    const auto out = tmp.file("out");
    std::filesystem::create_directories(out + "/cell_phases.png");  // in the way of a figure
    write_file(out + "/index.html", "the previous report");

    const auto r = report(db, out);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, ContainsSubstring("cell_phases.png: it is a folder"));
    std::ifstream index(out + "/index.html");
    std::string text((std::istreambuf_iterator<char>(index)), std::istreambuf_iterator<char>());
    CHECK(text == "the previous report");
    int entries = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(out)) ++entries;
    CHECK(entries == 2);
    for (const auto& e : std::filesystem::directory_iterator(tmp.file(""))) {
        INFO(e.path());
        CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
    }
}

TEST_CASE("report says how to install python3, matplotlib and pandas when they are missing", "[report]") {
    TempDir tmp;
    Store::open(tmp.file("empty.db"));
    const auto db = tmp.file("empty.db");

    {
        ScopedEnv python("SWEETSPOT_PYTHON", "/nonexistent/python3");
        const auto r = report(db, tmp.file("a"));
        CHECK(r.exit_code == 1);
        CHECK_THAT(r.output, ContainsSubstring("python3 was not found"));
        CHECK_THAT(r.output, ContainsSubstring("scripts/install-deps.sh"));
    }
    {
        // A python3 without matplotlib and pandas: -S leaves out site (no dist-packages), -I the
        // user's site-packages and PYTHONPATH.
        write_file(tmp.file("python3"), "#!/bin/sh\nexec python3 -I -S \"$@\"\n");
        std::filesystem::permissions(tmp.file("python3"), std::filesystem::perms::owner_all);
        ScopedEnv python("SWEETSPOT_PYTHON", tmp.file("python3"));
        const auto r = report(db, tmp.file("b"));
        CHECK(r.exit_code == 1);
        CHECK_THAT(r.output, ContainsSubstring("cannot find matplotlib and pandas"));
        CHECK_THAT(r.output, ContainsSubstring("python3-matplotlib python3-pandas"));
    }
}

TEST_CASE("report of a database without cells draws nothing and says so", "[report]") {
    TempDir tmp;
    Store::open(tmp.file("empty.db"));
    const auto [r, html] = written_report(tmp.file("empty.db"), tmp.file("report"));
    CHECK_THAT(r.output, ContainsSubstring("0 of 16 figures drawn"));
    CHECK_THAT(html, ContainsSubstring("Figures not drawn"));
}

TEST_CASE("report without -o writes beside the database, in DB's name with -report", "[report]") {
    TempDir tmp;
    Store::open(tmp.file("empty.db"));
    const auto r = run_sweetspot("report '" + tmp.file("empty.db") + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(std::filesystem::exists(tmp.file("empty-report/index.html")));
}
