#include "harness/cli/trace_export.hpp"

#include <nlohmann/json.hpp>

#include "harness/store/event_tables.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace sweetspot {
namespace {

// Process ids of the two halves of the trace, and the fixed GPU tracks beside the streams. Records
// that may overlap in time (page-fault groups do) are spread over lanes, tracks of consecutive ids
// from these, so that every track holds nested or disjoint slices only, as the format requires.
constexpr int kGpuPid = 1;
constexpr int kCpuPid = 2;
constexpr std::int64_t kMigrationsHtoDTid = 1000000;
constexpr std::int64_t kMigrationsDtoHTid = 2000000;
constexpr std::int64_t kGpuFaultsTid = 3000000;
constexpr std::int64_t kCpuFaultsTid = 4000000;
constexpr std::int64_t kCudaApiTid = 5000000;  // one track per calling thread, from here on

// copyKind of Unified Memory migrations (ENUM_CUDA_MEMCPY_OPER), as Nsight Systems exports them.
constexpr std::int64_t kUmHtoD = 11;
constexpr std::int64_t kUmDtoH = 12;

// Each event's category ("cat"), by the kind of record it shows: what the viewers filter and
// colour by, and the category column of Perfetto's slice table.
namespace category {
constexpr const char* kernel = "kernel";
constexpr const char* memcpy = "memcpy";
constexpr const char* migration = "um.migration";
constexpr const char* gpu_fault = "um.gpu_fault";
constexpr const char* cpu_fault = "um.cpu_fault";
constexpr const char* nvtx = "nvtx";
constexpr const char* cuda_api = "cuda_api";
}  // namespace category

// Microseconds from the trace's origin, as the trace format counts time.
double us(std::int64_t ns, std::int64_t origin_ns) { return static_cast<double>(ns - origin_ns) / 1000.0; }

// One end of a flow arrow: the moment on a track that binds it to the slice there.
struct FlowEnd {
    int pid = 0;
    std::int64_t tid = 0, at = 0;
};

// An arrow from one slice to another, of a kind (cat, name) the viewers can filter by.
struct Flow {
    const char* cat;
    const char* name;
    FlowEnd from, to;
};

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
    void span(int pid, std::int64_t tid, const char* cat, const std::string& name, std::int64_t start, std::int64_t end,
              json args) {
        element({{"ph", "X"}, {"cat", cat}, {"pid", pid}, {"tid", tid}, {"name", name}, {"ts", us(start, origin_)},
                 {"dur", us(end, start)}, {"args", std::move(args)}});
    }
    void instant(int pid, std::int64_t tid, const char* cat, const std::string& name, std::int64_t at, json args) {
        element({{"ph", "i"}, {"s", "t"}, {"cat", cat}, {"pid", pid}, {"tid", tid}, {"name", name},
                 {"ts", us(at, origin_)}, {"args", std::move(args)}});
    }
    // A flow arrow (trace format v1): "s" binds to the slice open on its track at its moment, "f"
    // with binding point "e" to the slice enclosing its moment on its own. Both halves share id,
    // cat and name.
    void flow(const Flow& f, std::int64_t id) {
        element({{"ph", "s"}, {"cat", f.cat}, {"name", f.name}, {"id", id}, {"pid", f.from.pid}, {"tid", f.from.tid},
                 {"ts", us(f.from.at, origin_)}});
        element({{"ph", "f"}, {"bp", "e"}, {"cat", f.cat}, {"name", f.name}, {"id", id}, {"pid", f.to.pid},
                 {"tid", f.to.tid}, {"ts", us(f.to.at, origin_)}});
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

// Spreads one track's records over lanes: each goes to the first lane free at its start. Records
// must come in order of start.
class Lanes {
public:
    std::int64_t place(std::int64_t start, std::int64_t end) {
        for (std::size_t i = 0; i < ends_.size(); ++i)
            if (ends_[i] <= start) {
                ends_[i] = end;
                return static_cast<std::int64_t>(i);
            }
        ends_.push_back(end);
        return static_cast<std::int64_t>(ends_.size()) - 1;
    }
    // At least one, so that an empty track is still named.
    std::int64_t count() const { return std::max<std::int64_t>(1, static_cast<std::int64_t>(ends_.size())); }

private:
    std::vector<std::int64_t> ends_;
};

std::string lane_name(const std::string& track, std::int64_t lane) {
    return lane == 0 ? track : track + " (lane " + std::to_string(lane + 1) + ")";
}

struct KernelSpan {
    std::int64_t start = 0, end = 0, stream = 0;
};

// The kernel running at a moment, when exactly one was: a GPU page-fault group is raised by the
// accesses of the kernel running when it begins. Asked in increasing time, over kernels in order
// of start.
class RunningKernel {
public:
    explicit RunningKernel(const std::vector<KernelSpan>& kernels) : kernels_(kernels) {}
    const KernelSpan* at(std::int64_t t) {
        for (; next_ < kernels_.size() && kernels_[next_].start <= t; ++next_) running_.emplace(kernels_[next_].end, next_);
        while (!running_.empty() && running_.begin()->first <= t) running_.erase(running_.begin());
        return running_.size() == 1 ? &kernels_[running_.begin()->second] : nullptr;
    }

private:
    const std::vector<KernelSpan>& kernels_;
    std::size_t next_ = 0;
    std::multimap<std::int64_t, std::size_t> running_;  // by end
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

// The cell's parameters (its canonical text, line by line), whether its launches were recorded,
// and the iteration's timing.
nlohmann::json metadata(Store& store, std::int64_t cell_id, int iteration, const TraceSummary& summary) {
    nlohmann::json m = {{"cell_id", cell_id}, {"traced_iteration", iteration},
                        {"launches_recorded", summary.launches_recorded}};
    if (!summary.launches_recorded)
        m["launches"] = "not recorded: the cell's events hold no CUDA API calls (sweetspot records them since schema "
                        "version 15), so no arrow leads from a launch to its kernel or copy";
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
    if (const auto& timing = summary.timing) {
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
    std::vector<KernelSpan> kernel_spans;
    // The kernels and copies by the correlation id of the API call that launched them (0: none,
    // as for UM migrations).
    std::multimap<std::int64_t, FlowEnd> launched;
    auto remember_launch = [&](std::int64_t correlation_id, std::int64_t stream, std::int64_t start) {
        if (correlation_id != 0) launched.emplace(correlation_id, FlowEnd{kGpuPid, stream, start});
    };
    auto kernels = store.db().prepare(
        "SELECT k.start, k.\"end\", k.streamId, s.value, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ,"
        " k.correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName"
        " WHERE k.cell_id = ? AND k.start < ? AND k.\"end\" > ? ORDER BY k.start");
    in_window(kernels);
    while (kernels.step()) {
        const KernelSpan k{kernels.int64(0), kernels.int64(1), kernels.int64(2)};
        streams.insert(k.stream);
        kernel_spans.push_back(k);
        w.span(kGpuPid, k.stream, category::kernel, kernels.text(3), k.start, k.end,
               {{"grid", kernels.text(4) + "x" + kernels.text(5) + "x" + kernels.text(6)},
                {"block", kernels.text(7) + "x" + kernels.text(8) + "x" + kernels.text(9)},
                {"correlationId", kernels.int64(10)}});
        remember_launch(kernels.int64(10), k.stream, k.start);
        ++summary.kernels;
    }

    // Enum columns by their labels in the ENUM_* tables (as Nsight Systems shows them), or by
    // number where the table lacks the value.
    auto copies = store.db().prepare(
        "SELECT m.start, m.\"end\", m.streamId, m.copyKind, m.bytes, COALESCE(k.label, 'kind ' || m.copyKind),"
        " COALESCE(c.label, 'cause ' || m.migrationCause), m.virtualAddress, m.correlationId"
        " FROM CUPTI_ACTIVITY_KIND_MEMCPY m LEFT JOIN ENUM_CUDA_MEMCPY_OPER k ON k.id = m.copyKind"
        " LEFT JOIN ENUM_CUDA_UNIF_MEM_MIGRATION c ON c.id = m.migrationCause"
        " WHERE m.cell_id = ? AND m.start < ? AND m.\"end\" > ? ORDER BY m.start");
    in_window(copies);
    Lanes htod_lanes, dtoh_lanes;
    while (copies.step()) {
        const auto kind = copies.int64(3);
        const auto start = copies.int64(0), end = copies.int64(1);
        const std::int64_t bytes = copies.int64(4);
        if (kind == kUmHtoD || kind == kUmDtoH) {
            nlohmann::json args = {{"bytes", bytes}};
            if (!copies.is_null(6)) args["migrationCause"] = copies.text(6);
            if (!copies.is_null(7)) args["address"] = copies.int64(7);
            const bool htod = kind == kUmHtoD;
            const auto lane = (htod ? htod_lanes : dtoh_lanes).place(start, end);
            w.span(kGpuPid, (htod ? kMigrationsHtoDTid : kMigrationsDtoHTid) + lane, category::migration,
                   htod ? "UM migration HtoD" : "UM migration DtoH", start, end, std::move(args));
            ++summary.migrations;
        } else {
            streams.insert(copies.int64(2));
            w.span(kGpuPid, copies.int64(2), category::memcpy, "memcpy " + copies.text(5), start, end,
                   {{"bytes", bytes}, {"copyKind", copies.text(5)}, {"correlationId", copies.int64(8)}});
            remember_launch(copies.int64(8), copies.int64(2), start);
            ++summary.copies;
        }
    }

    // Each fault group with an arrow from the kernel that raised it. The arrows are written after
    // every slice: viewers keep file order among events of equal time, and an arrow's ends bind to
    // the slices that have begun on their tracks by then.
    std::vector<Flow> flows;
    RunningKernel running(kernel_spans);
    Lanes fault_lanes;
    auto gpu_faults = store.db().prepare(
        "SELECT f.start, f.\"end\", f.numberOfPageFaults, f.address, COALESCE(a.label, 'type ' || f.faultAccessType)"
        " FROM CUDA_UM_GPU_PAGE_FAULT_EVENTS f LEFT JOIN ENUM_CUDA_UNIF_MEM_ACCESS_TYPE a ON a.id = f.faultAccessType"
        " WHERE f.cell_id = ? AND f.start < ? AND f.\"end\" >= ? ORDER BY f.start");
    in_window(gpu_faults);
    while (gpu_faults.step()) {
        const auto start = gpu_faults.int64(0);
        const auto end = std::max(gpu_faults.int64(1), start + 1);
        const auto tid = kGpuFaultsTid + fault_lanes.place(start, end);
        w.span(kGpuPid, tid, category::gpu_fault, "GPU page faults", start, end,
               {{"faults", gpu_faults.int64(2)}, {"address", gpu_faults.int64(3)}, {"faultAccessType", gpu_faults.text(4)}});
        if (const KernelSpan* k = running.at(start)) {
            flows.push_back({category::gpu_fault, "raised page faults", {kGpuPid, k->stream, start}, {kGpuPid, tid, start}});
            ++summary.fault_flows;
        }
        ++summary.gpu_fault_groups;
    }

    auto cpu_faults = store.db().prepare(
        "SELECT start, address FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS WHERE cell_id = ? AND start <= ? AND start >= ?"
        " ORDER BY start");
    in_window(cpu_faults);
    while (cpu_faults.step()) {
        w.instant(kCpuPid, kCpuFaultsTid, category::cpu_fault, "CPU page fault", cpu_faults.int64(0),
                  {{"address", cpu_faults.int64(1)}});
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
        w.span(kCpuPid, ranges.int64(3), category::nvtx, ranges.text(2), ranges.int64(0), ranges.int64(1),
               nlohmann::json::object());
        ++summary.ranges;
    }

    // The CUDA API calls, longest first at equal start so that a driver call nests in the runtime
    // call that made it. The two share a correlation id; the arrows to the GPU work it launched
    // leave from the outermost, the first of them here.
    std::map<std::int64_t, std::int64_t> api_tracks;  // calling thread → track
    summary.launches_recorded = has_api_calls(store.db(), cell_id);
    if (summary.launches_recorded) {
        auto calls = store.db().prepare(
            "SELECT r.start, r.\"end\", r.globalTid, r.correlationId, s.value, r.returnValue"
            " FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId"
            " WHERE r.cell_id = ? AND r.start < ? AND r.\"end\" > ? ORDER BY r.start, r.\"end\" DESC");
        in_window(calls);
        std::set<std::int64_t> drawn;
        while (calls.step()) {
            const auto start = calls.int64(0), correlation_id = calls.int64(3);
            const auto track =
                api_tracks.emplace(calls.int64(2), kCudaApiTid + static_cast<std::int64_t>(api_tracks.size())).first->second;
            w.span(kCpuPid, track, category::cuda_api, calls.text(4), start, calls.int64(1),
                   {{"correlationId", correlation_id}, {"returnValue", calls.int64(5)}});
            ++summary.api_calls;
            if (!drawn.insert(correlation_id).second) continue;
            const auto [first, last] = launched.equal_range(correlation_id);
            for (auto op = first; op != last; ++op) {
                flows.push_back({category::cuda_api, "launched", {kCpuPid, track, start}, op->second});
                ++summary.launch_flows;
            }
        }
    }

    std::int64_t flow_id = 0;
    for (const auto& f : flows) w.flow(f, ++flow_id);

    for (const auto s : streams) w.track_name(kGpuPid, s, "stream " + std::to_string(s));
    for (std::int64_t l = 0; l < htod_lanes.count(); ++l)
        w.track_name(kGpuPid, kMigrationsHtoDTid + l, lane_name("UM migrations host→device", l));
    for (std::int64_t l = 0; l < dtoh_lanes.count(); ++l)
        w.track_name(kGpuPid, kMigrationsDtoHTid + l, lane_name("UM migrations device→host", l));
    for (std::int64_t l = 0; l < fault_lanes.count(); ++l)
        w.track_name(kGpuPid, kGpuFaultsTid + l, lane_name("GPU page faults", l));
    for (const auto t : threads) w.track_name(kCpuPid, t, "NVTX (thread " + std::to_string(t) + ")");
    for (const auto& [thread, track] : api_tracks)
        w.track_name(kCpuPid, track, "CUDA API (thread " + std::to_string(thread) + ")");
    w.track_name(kCpuPid, kCpuFaultsTid, "CPU page faults");
    summary.streams = static_cast<int>(streams.size());
    summary.timing = traced_timing(store.db(), cell_id);
    w.finish(metadata(store, cell_id, iteration, summary));
    return summary;
}

}  // namespace sweetspot
