#include "harness/cli/trace_export.hpp"

#include <nlohmann/json.hpp>

#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

namespace sweetspot {
namespace {

// Process ids of the two halves of the trace, and the fixed GPU tracks beside the streams.
constexpr int kGpuPid = 1;
constexpr int kCpuPid = 2;
constexpr std::int64_t kMigrationsHtoDTid = 1000001;
constexpr std::int64_t kMigrationsDtoHTid = 1000002;
constexpr std::int64_t kGpuFaultsTid = 1000003;
constexpr std::int64_t kCpuFaultsTid = 1000004;

// Microseconds from the trace's origin, as the trace format counts time.
double us(std::int64_t ns, std::int64_t origin_ns) { return static_cast<double>(ns - origin_ns) / 1000.0; }

// Emits events as JSON array elements, comma-separated; nlohmann::json does the escaping.
class TraceWriter {
public:
    using json = nlohmann::json;
    TraceWriter(std::ostream& out, std::int64_t origin_ns) : out_(out), origin_(origin_ns) { out_ << "{\"traceEvents\":[\n"; }
    // The events' array closed, with the trace's metadata (what Perfetto shows as the trace's info).
    void finish(const json& metadata) {
        out_ << "\n],\"displayTimeUnit\":\"ms\",\"metadata\":"
             << metadata.dump(-1, ' ', false, json::error_handler_t::replace) << "}\n";
    }

    void track_name(int pid, std::int64_t tid, const std::string& name) {
        element({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
    }
    void process_name(int pid, const std::string& name) {
        element({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", name}}}});
    }
    void span(int pid, std::int64_t tid, const std::string& name, std::int64_t start, std::int64_t end, json args) {
        element({{"ph", "X"}, {"pid", pid}, {"tid", tid}, {"name", name}, {"ts", us(start, origin_)},
                 {"dur", us(end, start)}, {"args", std::move(args)}});
    }
    void instant(int pid, std::int64_t tid, const std::string& name, std::int64_t at, json args) {
        element({{"ph", "i"}, {"s", "t"}, {"pid", pid}, {"tid", tid}, {"name", name}, {"ts", us(at, origin_)},
                 {"args", std::move(args)}});
    }

private:
    void element(const json& e) {
        // Invalid UTF-8 in a kernel name or range text is replaced, not a reason to lose the trace.
        out_ << (first_ ? "" : ",\n") << e.dump(-1, ' ', false, json::error_handler_t::replace);
        first_ = false;
    }
    std::ostream& out_;
    std::int64_t origin_;
    bool first_ = true;
};

// The window of one traced iteration: its NVTX range, which closes only after the GPU finished
// (the iteration waits for its stop event inside the range).
std::pair<std::int64_t, std::int64_t> iteration_window(Store& store, std::int64_t cell_id, int iteration) {
    auto st = store.db().prepare(
        "SELECT n.start, n.\"end\" FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId"
        " WHERE n.cell_id = ? AND s.value = ?");
    st.bind(1, cell_id).bind(2, "traced iteration " + std::to_string(iteration));
    if (!st.step())
        throw std::runtime_error("cell " + std::to_string(cell_id) + " has no recorded 'traced iteration " +
                                 std::to_string(iteration) + "' (was it run with trace_iterations > " +
                                 std::to_string(iteration) + " and --collector cupti?)");
    return {st.int64(0), st.int64(1)};
}

// The cell's parameters (its canonical text, line by line) and the iteration's timing.
nlohmann::json metadata(Store& store, std::int64_t cell_id, int iteration, const std::optional<TracedTiming>& timing) {
    nlohmann::json m = {{"cell_id", cell_id}, {"traced_iteration", iteration}};
    auto st = store.db().prepare("SELECT cell_key, canonical FROM cells WHERE cell_id = ?");
    st.bind(1, cell_id);
    if (st.step()) {
        m["cell_key"] = st.text(0);
        nlohmann::json parameters = nlohmann::json::object();
        std::istringstream lines(st.text(1));
        for (std::string line; std::getline(lines, line);)
            if (const auto eq = line.find('='); eq != std::string::npos) parameters[line.substr(0, eq)] = line.substr(eq + 1);
        m["parameters"] = parameters;
    }
    if (timing) {
        m["timed_median_ms"] = timing->timed_median_ms;
        m["traced_median_ms"] = timing->traced_median_ms;
        m["traced_over_timed"] = timing->ratio();
    }
    return m;
}

}  // namespace

TraceSummary write_trace(Store& store, std::int64_t cell_id, int iteration, std::ostream& out) {
    const auto [begin, end] = iteration_window(store, cell_id, iteration);
    TraceSummary summary;
    TraceWriter w(out, begin);
    w.process_name(kGpuPid, "GPU");
    w.process_name(kCpuPid, "CPU");
    auto in_window = [&](Statement& st) { st.bind(1, cell_id).bind(2, end).bind(3, begin); };

    std::set<std::int64_t> streams;
    auto kernels = store.db().prepare(
        "SELECT k.start, k.\"end\", k.streamId, s.value, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ"
        " FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName"
        " WHERE k.cell_id = ? AND k.start < ? AND k.\"end\" > ? ORDER BY k.start");
    in_window(kernels);
    while (kernels.step()) {
        streams.insert(kernels.int64(2));
        w.span(kGpuPid, kernels.int64(2), kernels.text(3), kernels.int64(0), kernels.int64(1),
               {{"grid", kernels.text(4) + "x" + kernels.text(5) + "x" + kernels.text(6)},
                {"block", kernels.text(7) + "x" + kernels.text(8) + "x" + kernels.text(9)}});
        ++summary.kernels;
    }

    auto copies = store.db().prepare(
        "SELECT start, \"end\", streamId, copyKind, bytes, migrationCause FROM CUPTI_ACTIVITY_KIND_MEMCPY"
        " WHERE cell_id = ? AND start < ? AND \"end\" > ? ORDER BY start");
    in_window(copies);
    while (copies.step()) {
        const auto kind = copies.int64(3);
        const std::int64_t bytes = copies.int64(4);
        if (kind == 11 || kind == 12) {
            w.span(kGpuPid, kind == 11 ? kMigrationsHtoDTid : kMigrationsDtoHTid,
                   kind == 11 ? "UM migration HtoD" : "UM migration DtoH", copies.int64(0), copies.int64(1),
                   {{"bytes", bytes}, {"migrationCause", copies.int64(5)}});
            ++summary.migrations;
        } else {
            streams.insert(copies.int64(2));
            w.span(kGpuPid, copies.int64(2), "memcpy kind " + std::to_string(kind), copies.int64(0), copies.int64(1),
                   {{"bytes", bytes}});
            ++summary.copies;
        }
    }

    auto gpu_faults = store.db().prepare(
        "SELECT start, \"end\", numberOfPageFaults, address FROM CUDA_UM_GPU_PAGE_FAULT_EVENTS"
        " WHERE cell_id = ? AND start < ? AND \"end\" >= ? ORDER BY start");
    in_window(gpu_faults);
    while (gpu_faults.step()) {
        w.span(kGpuPid, kGpuFaultsTid, "GPU page faults", gpu_faults.int64(0),
               std::max(gpu_faults.int64(1), gpu_faults.int64(0) + 1),
               {{"faults", gpu_faults.int64(2)}, {"address", gpu_faults.int64(3)}});
        ++summary.gpu_fault_groups;
    }

    auto cpu_faults = store.db().prepare(
        "SELECT start, address FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS WHERE cell_id = ? AND start <= ? AND start >= ?"
        " ORDER BY start");
    in_window(cpu_faults);
    while (cpu_faults.step()) {
        w.instant(kCpuPid, kCpuFaultsTid, "CPU page fault", cpu_faults.int64(0), {{"address", cpu_faults.int64(1)}});
        ++summary.cpu_faults;
    }

    // Ranges inside the iteration (the iteration's own included), longest first at equal start
    // so that viewers nest them as they were opened.
    auto ranges = store.db().prepare(
        "SELECT n.start, n.\"end\", s.value, n.globalTid FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId"
        " WHERE n.cell_id = ? AND n.start <= ? AND n.\"end\" >= ? ORDER BY n.start, n.\"end\" DESC");
    ranges.bind(1, cell_id).bind(2, end).bind(3, begin);
    std::set<std::int64_t> threads;
    while (ranges.step()) {
        if (ranges.int64(0) < begin) continue;  // the enclosing cell range starts before the iteration
        threads.insert(ranges.int64(3));
        w.span(kCpuPid, ranges.int64(3), ranges.text(2), ranges.int64(0), ranges.int64(1), nlohmann::json::object());
        ++summary.ranges;
    }

    for (const auto s : streams) w.track_name(kGpuPid, s, "stream " + std::to_string(s));
    w.track_name(kGpuPid, kMigrationsHtoDTid, "UM migrations host→device");
    w.track_name(kGpuPid, kMigrationsDtoHTid, "UM migrations device→host");
    w.track_name(kGpuPid, kGpuFaultsTid, "GPU page faults");
    for (const auto t : threads) w.track_name(kCpuPid, t, "NVTX (thread " + std::to_string(t) + ")");
    w.track_name(kCpuPid, kCpuFaultsTid, "CPU page faults");
    summary.streams = static_cast<int>(streams.size());
    summary.timing = traced_timing(store.db(), cell_id);
    w.finish(metadata(store, cell_id, iteration, summary.timing));
    return summary;
}

}  // namespace sweetspot
