#include "harness/runner/cell_process.hpp"

#include <chrono>
#include <filesystem>

#include "base/number_text.hpp"
#include "harness/runner/stop_signal.hpp"
#include "harness/system/child_process.hpp"
#include "harness/system/system_info.hpp"

namespace sweetspot {
namespace {

constexpr std::size_t kStderrTailBytes = 4000;

std::optional<ReportedCell> read_reported(const std::string& scratch_db, const std::string& key) {
    if (!std::filesystem::exists(scratch_db)) return std::nullopt;
    try {
        auto store = Store::open_read_only(scratch_db);
        auto st = store.db().prepare(
            "SELECT status, coalesce(reason, ''), latency_median_ms, check_reference_computed,"
            " peak_host_rss_bytes IS NOT NULL,"
            " (SELECT coalesce(sum(seconds), 0) FROM cell_phases p WHERE p.cell_id = c.cell_id)"
            " FROM cells c WHERE cell_key = ?");
        st.bind(1, key);
        if (!st.step()) return std::nullopt;
        ReportedCell r;
        r.status = parse_enum<CellStatus>(st.text(0)).value_or(CellStatus::failed);
        r.reason = st.text(1);
        if (!st.is_null(2)) r.median_ms = st.real(2);
        if (!st.is_null(3)) r.reference_computed = st.int64(3) != 0;
        r.measured_peak_rss = st.int64(4) != 0;
        r.phases_s = st.real(5);
        return r;
    } catch (const std::exception&) {
        return std::nullopt;  // the child died while writing: nothing it said can be trusted
    }
}

}  // namespace

CellProcessResult run_cell_process(const CellParams& cell, const CellProcessSpec& spec, const RunOptions& options) {
    for (const auto* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(spec.scratch_db + suffix);
    if (spec.kept) Store::open(spec.scratch_db).keep_reference(*spec.kept);

    ChildSpec child;
    const auto spawned_at = std::chrono::steady_clock::now();
    child.argv = {self_executable(), "_cell", "--scratch", spec.scratch_db, "--cell", cell.full_text(), "--run-label",
                  spec.run_label, "--spawned-at",
                  std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(spawned_at.time_since_epoch()).count())};
    if (options.allow_oversubscription) child.argv.push_back("--allow-oversubscription");
    if (!options.collect) child.argv.insert(child.argv.end(), {"--collector", "none"});
    child.argv.insert(child.argv.end(), {"--status-fd", std::to_string(kChildStatusFd)});
    // The last thing the cell said it was doing, which is where it was when it died.
    std::string last_status;
    child.on_status = [&](const std::string& status) {
        last_status = status;
        if (spec.on_status) spec.on_status(status);
    };
    child.log_path = spec.log;
    child.timeout_s = cell.timeout_s;
    if (spec.gpu) child.extra_env.emplace_back("CUDA_VISIBLE_DEVICES", *spec.gpu);
    const std::string started = utc_timestamp();
    const ChildResult r = run_child(child, stop_requested());

    const auto exited = std::chrono::steady_clock::now();
    CellProcessResult result;
    result.reported = read_reported(spec.scratch_db, cell.key());
    CellOutcome& o = result.outcome;
    const std::optional<ReportedCell>& reported = result.reported;
    // What the child's phases do not cover: writing its result and exiting (the driver's cleanup
    // of its context included); then the runner reading the result back.
    if (reported && reported->phases_s > 0)
        o.phases.push_back(
            {"write_and_exit", std::chrono::duration<double>(exited - spawned_at).count() - reported->phases_s});
    o.phases.push_back({"collect", std::chrono::duration<double>(std::chrono::steady_clock::now() - exited).count()});
    const bool clean_exit = r.exit_code == 0 && !r.signal && !r.timed_out;
    if (reported) {
        o.status = reported->status;
        o.reason = reported->reason;
    }
    if (r.timed_out) {
        o.status = CellStatus::timeout;
        o.reason = "no result within the cell's timeout of " + fixed(cell.timeout_s, 0) + " s" +
                   (last_status.empty() ? "" : " (it was at " + last_status + ")") + "; the cell process was killed";
    } else if (!clean_exit) {
        o.status = CellStatus::failed;
        // A reason the cell wrote says why it failed; otherwise, where it was when it died.
        o.reason = reported && !reported->reason.empty() ? r.describe() + ": " + reported->reason
                   : last_status.empty()                  ? r.describe()
                                                          : r.describe() + " during " + last_status;
    } else if (!reported) {
        o.status = CellStatus::failed;
        o.reason = "the cell process exited without writing a result";
    }
    o.set<"started_at">(started);
    o.set<"finished_at">(utc_timestamp());
    o.set<"wall_s">(r.wall_s);
    o.set<"exit_code">(r.exit_code.has_value() ? std::optional<std::int64_t>(*r.exit_code) : std::nullopt);
    o.set<"signal">(r.signal.has_value() ? std::optional<std::int64_t>(*r.signal) : std::nullopt);
    o.set<"stderr_tail">(file_tail(spec.log, kStderrTailBytes));
    if (!reported || !reported->measured_peak_rss) o.set<"peak_host_rss_bytes">(static_cast<std::int64_t>(r.peak_rss_bytes));
    if (spec.gpu) o.set<"gpu">(*spec.gpu);
    return result;
}

std::int64_t store_cell_result(Store& store, std::int64_t run_id, int cell_index, const CellParams& cell,
                               const CellProcessSpec& spec, const CellProcessResult& result) {
    const CellOutcome& o = result.outcome;
    if (result.reported) {
        Row parent = {{"status", sql(enum_name(o.status))}, {"reason", sql(o.reason)}};
        const Row measures = o.measure_row();
        parent.insert(parent.end(), measures.begin(), measures.end());
        if (const auto id = store.import_cell(spec.scratch_db, cell.key(), run_id, cell_index, parent, o.phases)) return *id;
    }
    return record_outcome(store, run_id, cell_index, cell, o);
}

}  // namespace sweetspot
