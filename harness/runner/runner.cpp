#include "harness/runner/runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "harness/measure/cell_exec.hpp"
#include "harness/system/child_process.hpp"
#include "harness/system/exit_codes.hpp"
#include "harness/system/file_lock.hpp"
#include "harness/measure/gpu_probe.hpp"
#include "harness/measure/logits_check.hpp"
#include "harness/measure/memory_estimate.hpp"
#include "harness/runner/cell_sharing.hpp"
#include "harness/runner/progress.hpp"
#include "harness/store/store.hpp"
#include "harness/system/version.hpp"
#include "harness/system/system_info.hpp"
#include "kernels/model/number_text.hpp"

namespace sweetspot {
namespace {

// The only process-wide mutable state of the runner: signal handlers can do nothing else.
std::atomic<bool> g_stop_requested{false};

extern "C" void request_stop(int) { g_stop_requested.store(true); }

// Installs the stop handlers for the duration of a sweep and restores the previous ones.
class StopSignals {
public:
    StopSignals() {
        g_stop_requested.store(false);
        struct sigaction sa {};
        sa.sa_handler = request_stop;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &old_int_);
        sigaction(SIGTERM, &sa, &old_term_);
    }
    ~StopSignals() {
        sigaction(SIGINT, &old_int_, nullptr);
        sigaction(SIGTERM, &old_term_, nullptr);
    }
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;

private:
    struct sigaction old_int_ {}, old_term_ {};
};

constexpr const char* kScratchPrefix = "sweetspot-";
constexpr const char* kScratchLock = "lock";

std::filesystem::path temp_root() {
    const char* tmp = std::getenv("TMPDIR");
    return tmp && *tmp ? tmp : "/tmp";
}

// Removes the scratch folders of sweeps that were killed before they could remove their own:
// a folder whose lock file can be locked has no living owner.
void remove_abandoned_scratch_dirs() {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(temp_root(), ec)) {
        const auto name = entry.path().filename().string();
        const auto lock_path = entry.path() / kScratchLock;
        if (!name.starts_with(kScratchPrefix) || !std::filesystem::is_regular_file(lock_path, ec)) continue;
        try {
            if (auto lock = FileLock::try_lock(lock_path.string())) std::filesystem::remove_all(entry.path(), ec);
        } catch (const std::system_error&) {
            // Another user's folder, or one that vanished meanwhile: not ours to clean.
        }
    }
}

// A private scratch folder for the cell processes' results and logs, removed at the end. It holds
// a locked file for as long as the sweep lives, so that a later sweep can tell it was abandoned.
class ScratchDir {
public:
    ScratchDir() {
        std::string tmpl = (temp_root() / (std::string(kScratchPrefix) + "XXXXXX")).string();
        if (!mkdtemp(tmpl.data())) throw std::system_error(errno, std::generic_category(), "mkdtemp " + tmpl);
        path_ = tmpl;
        const std::string lock_path = file(kScratchLock);
        std::ofstream(lock_path).close();
        lock_ = FileLock::try_lock(lock_path);
    }
    ~ScratchDir() {
        lock_.reset();
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
    std::optional<FileLock> lock_;
};

constexpr std::size_t kStderrTailBytes = 4000;

std::optional<CellOutcome> read_child_outcome(const std::string& scratch_db, const std::string& key) {
    if (!std::filesystem::exists(scratch_db)) return std::nullopt;
    try {
        auto store = Store::open_read_only(scratch_db);
        return store.load_outcome(key);
    } catch (const std::exception&) {
        return std::nullopt;  // the child died while writing: nothing it said can be trusted
    }
}

// Runs `cell` in a child process whose result and log go to the scratch files named `slot` (one
// per worker), on `gpu` (its CUDA_VISIBLE_DEVICES) where one is given.
// `kept`: the host reference logits the database keeps for the cell's workload, handed to the
// child in its scratch database.
CellOutcome run_cell_process(const CellParams& cell, const ScratchDir& scratch, const RunOptions& options,
                             const std::string& run_label, const std::string& slot, const std::optional<std::string>& gpu,
                             const std::optional<ReferenceLogits>& kept) {
    const std::string db = scratch.file(slot + ".db"), log = scratch.file(slot + ".log");
    for (const auto* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db + suffix);
    if (kept) Store::open(db).keep_reference(*kept);

    ChildSpec spec;
    const auto spawned_at = std::chrono::steady_clock::now();
    spec.argv = {self_executable(), "_cell", "--scratch", db, "--cell", cell.full_text(), "--run-label", run_label,
                 "--spawned-at",
                 std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(spawned_at.time_since_epoch()).count())};
    if (options.allow_oversubscription) spec.argv.push_back("--allow-oversubscription");
    if (!options.collect) spec.argv.insert(spec.argv.end(), {"--collector", "none"});
    spec.log_path = log;
    spec.timeout_s = cell.timeout_s;
    if (gpu) spec.extra_env.emplace_back("CUDA_VISIBLE_DEVICES", *gpu);
    const std::string started = utc_timestamp();
    const ChildResult r = run_child(spec, g_stop_requested);

    const auto exited = std::chrono::steady_clock::now();
    const auto reported = read_child_outcome(db, cell.key());
    CellOutcome o = reported.value_or(CellOutcome{});
    // What the child's phases do not cover: writing its result and exiting (the driver's cleanup
    // of its context included); then the parent reading the result back.
    double covered = 0;
    for (const CellPhase& p : o.phases) covered += p.seconds;
    if (!o.phases.empty())
        o.phases.push_back({"write_and_exit", std::chrono::duration<double>(exited - spawned_at).count() - covered});
    o.phases.push_back({"collect", std::chrono::duration<double>(std::chrono::steady_clock::now() - exited).count()});
    const bool clean_exit = r.exit_code == 0 && !r.signal && !r.timed_out;
    if (r.timed_out) {
        o.status = CellStatus::timeout;
        o.reason = "no result within the cell's timeout of " + fixed(cell.timeout_s, 0) + " s; the cell process was killed";
    } else if (!clean_exit) {
        o.status = CellStatus::failed;
        o.reason = reported && !reported->reason.empty() ? r.describe() + ": " + reported->reason : r.describe();
    } else if (!reported) {
        o.status = CellStatus::failed;
        o.reason = "the cell process exited without writing a result";
    }
    o.started_at = started;
    o.finished_at = utc_timestamp();
    o.wall_s = r.wall_s;
    o.exit_code = r.exit_code;
    o.signal = r.signal;
    o.stderr_tail = file_tail(log, kStderrTailBytes);
    if (!o.peak_host_rss_bytes) o.peak_host_rss_bytes = r.peak_rss_bytes;
    o.gpu = gpu;
    return o;
}

void count(RunTotals& t, CellStatus status) {
    switch (status) {
        case CellStatus::ok: ++t.ok; break;
        case CellStatus::failed: ++t.failed; break;
        case CellStatus::timeout: ++t.timeout; break;
        case CellStatus::skipped: ++t.skipped; break;
        case CellStatus::invalid: ++t.invalid; break;
    }
}

// The fixed cost (CUDA context, libraries) measured on this run's GPU and driver by the cells
// already in the database; none before there are such cells, and then nothing is predicted.
std::optional<FixedCost> fixed_cost_here(const GpuFacts& gpu, Store& store) {
    for (const FixedCost& fixed : measured_fixed_costs(store.db()))
        if (fixed.gpu == gpu.name.value_or("") && fixed.driver == gpu.driver.value_or("")) return fixed;
    return std::nullopt;
}

// What the estimator says of a GPU cell, stored with it whether it ran or not: its allocations,
// and its device and host peaks where the fixed costs of this GPU and driver have been measured.
// `reference_runs`: the cell's check computes its host reference (the database keeps none for it).
// The host memory the estimator accounts for is stored as the cell ran (its reference forward
// counted where it did run), for later calibrations.
void add_predictions(const CellParams& cell, const std::optional<FixedCost>& fixed, bool reference_runs, CellOutcome& o) {
    if (!uses_gpu(cell) || !cell_impossible_reason(cell).empty()) return;
    const MemoryEstimate e = estimate_memory(cell);
    o.predicted_alloc_bytes = e.device_total();
    o.predicted_host_alloc_bytes = e.host_total(o.check_reference_computed.value_or(reference_runs));
    if (!fixed) return;
    o.predicted_peak_bytes = predicted_peak(cell, e, *fixed);
    o.predicted_host_peak_bytes = predicted_host_peak(cell, e, *fixed, reference_runs);
}

// The GPUs a sweep spreads its cells over when --gpus is not given: every GPU the probe saw, named
// as CUDA_VISIBLE_DEVICES names them in this process (its entries, or 0 .. n-1 without it); none,
// so one worker that leaves CUDA_VISIBLE_DEVICES alone, with fewer than two.
std::vector<std::string> default_gpus(const GpuFacts& gpu) {
    const int count = gpu.device_count.value_or(0);
    if (count < 2) return {};
    std::vector<std::string> ids;
    if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible && *visible) {
        std::istringstream in(visible);
        for (std::string id; std::getline(in, id, ',') && static_cast<int>(ids.size()) < count;) ids.push_back(id);
        return ids;
    }
    for (int i = 0; i < count; ++i) ids.push_back(std::to_string(i));
    return ids;
}

}  // namespace

int RunTotals::exit_code() const { return failed + timeout + invalid > 0 ? kExitFailed : kExitOk; }

RunTotals run_matrix(const Matrix& matrix, const RunOptions& options, std::ostream& progress_out) {
    auto store = Store::open(options.db_path, Store::Access::exclusive);
    const auto done = store.ok_keys();
    remove_abandoned_scratch_dirs();

    const auto sys = query_system_info();
    const bool any_gpu_cell = std::any_of(matrix.cells.begin(), matrix.cells.end(), uses_gpu);
    GpuFacts gpu;
    if (any_gpu_cell) {
        progress_out << "sweetspot: probing the GPU and the host link (pinned 1 GiB copies)\n";
        gpu = probe_gpu_in_child(true);
        if (gpu.h2d_gbps)
            progress_out << "sweetspot: " << gpu.name.value_or("GPU") << ", pinned host->device " << fixed(*gpu.h2d_gbps, 1)
                         << " GB/s, device->host " << fixed(gpu.d2h_gbps.value_or(0), 1) << " GB/s\n";
        else
            progress_out << "sweetspot: no GPU measurement (" << gpu.note << "); GPU cells will be skipped\n";
        if (!gpu.managed_rates.empty()) {
            progress_out << "sweetspot: managed memory (" << human_bytes(gpu.managed_rates.front().bytes) << " range):";
            for (const ManagedRate& m : gpu.managed_rates)
                progress_out << " " << m.operation << " " << fixed(m.gbps, 1) << " GB/s (host " << fixed(m.host_ms, 2)
                             << " ms)";
            progress_out << "\n";
        }
        if (gpu.h2d_gbps && !gpu.note.empty()) progress_out << "sweetspot: " << gpu.note << "\n";
    }
    RunInfo info;
    info.started_at = utc_timestamp();
    info.host = sys.host;
    info.os = sys.os;
    info.cpu_model = sys.cpu_model;
    info.cpu_count = sys.cpu_count;
    info.gpu_name = gpu.name;
    info.gpu_driver = gpu.driver;
    info.cuda_runtime = gpu.runtime;
    info.gpu_memory_bytes = gpu.memory_bytes;
    info.h2d_gbps = gpu.h2d_gbps;
    info.d2h_gbps = gpu.d2h_gbps;
    info.managed = gpu.managed;
    info.managed_rates = gpu.managed_rates;
    info.sweetspot_version = kVersion;
    info.git_revision = git_revision();
    info.command_line = options.command_line;
    info.matrix_path = matrix.path;
    info.matrix_name = matrix.name;
    info.matrix_hash = matrix.hash();
    info.matrix_text = matrix.text;
    info.cells_total = static_cast<int>(matrix.cells.size());
    const auto run_id = store.begin_run(info);
    const std::string run_label = "run " + std::to_string(run_id) + " " + matrix.name;

    // One worker per GPU, each taking the next cell in matrix order once it may run beside the
    // cells already running (cell_sharing.hpp); without GPUs to spread over, one worker.
    const std::vector<std::string> gpus = options.gpus ? *options.gpus : default_gpus(gpu);
    const int workers = std::max<int>(1, static_cast<int>(gpus.size()));
    if (gpus.size() > 1)
        progress_out << "sweetspot: " << gpus.size() << " GPUs (" << comma_list(gpus) << "), one cell on each at a time"
                     << (options.share_link ? "" : "; cells that stream weights over the host link one at a time") << "\n";

    StopSignals signals;
    ScratchDir scratch;
    Progress progress(static_cast<int>(matrix.cells.size()), progress_out, workers);
    RunTotals totals;
    std::mutex mutex;  // guards everything below it, the store and the progress output
    std::condition_variable cell_ended;
    // Cells taken, resumed or skipped; every cell before `first` is.
    std::vector<bool> handled(matrix.cells.size(), false);
    std::size_t first = 0;
    RunningCells running;

    // A cell to measure: where it is in the matrix, with the timeout it runs under, how it shares
    // the machine, the fixed cost its predicted peak adds (what the database knew before it ran),
    // the host reference logits the database keeps for its workload, and the key of the one it
    // computes and stores where the database keeps none yet.
    struct Taken {
        std::size_t index;
        CellParams cell;
        Sharing sharing;
        std::optional<FixedCost> fixed;
        std::optional<ReferenceLogits> kept;
        std::string computes_reference;
    };
    // Whether every cell is handled, or the sweep is stopping.
    const auto nothing_left = [&] {
        while (first < handled.size() && handled[first]) ++first;
        return g_stop_requested.load() || first >= handled.size();
    };
    // Takes the next cell to measure in matrix order, recording on the way the cells that need no
    // process (already ok, skipped); empty when there is none left or the sweep is stopping. Cells
    // wait for a running cell that computes their reference (cell_sharing.hpp), and the cells
    // after them may go first meanwhile; any other cell that may not start yet holds up the ones
    // after it.
    const auto take = [&](std::unique_lock<std::mutex>& lock) -> std::optional<Taken> {
        for (;;) {
            if (nothing_left()) return std::nullopt;
            for (std::size_t i = first; i < handled.size(); ++i) {
                if (handled[i]) continue;
                CellParams cell = matrix.cells[i];
                // The timeout stored with the cell is the one it ran under.
                cell.timeout_s = options.timeout_override_s.value_or(cell.timeout_s);
                if (!options.rerun && done.count(cell.key())) {
                    ++totals.resumed;
                    progress.cell_done(cell.label(), "done", std::nullopt, "already ok in the database", false, 0);
                    handled[i] = true;
                    continue;
                }
                const auto key = uses_gpu(cell) ? kept_reference_key(cell, cell.token_ids()) : std::nullopt;
                if (key && running.computing(*key)) continue;
                std::string why = cell_unsupported_reason(cell);
                if (why.empty() && uses_gpu(cell) && !gpu.name) why = "no GPU visible to sweetspot (" + gpu.note + ")";
                const std::optional<FixedCost> fixed = uses_gpu(cell) ? fixed_cost_here(gpu, store) : std::nullopt;
                if (why.empty() && fixed && gpu.memory_bytes && !options.force)
                    why = predicted_oom(cell, *gpu.memory_bytes, *fixed);
                if (why.empty() && uses_gpu(cell) && !options.force)
                    if (const auto available = host_memory_available_bytes()) why = predicted_host_oom(cell, *available);
                if (!why.empty()) {
                    CellOutcome o;
                    o.status = CellStatus::skipped;
                    o.reason = why;
                    o.started_at = o.finished_at = utc_timestamp();
                    add_predictions(cell, fixed, true, o);
                    store.record_cell(run_id, static_cast<int>(i), cell, o);
                    count(totals, o.status);
                    progress.cell_done(cell.label(), std::string(enum_name(o.status)), std::nullopt, o.reason, false, 0);
                    handled[i] = true;
                    continue;
                }
                const Sharing sharing = sharing_of(cell, options.share_link);
                if (!running.can_start(sharing)) break;
                std::optional<ReferenceLogits> kept = key ? store.load_reference(*key) : std::nullopt;
                handled[i] = true;
                return Taken{i, std::move(cell), sharing, fixed, std::move(kept), key && !kept ? *key : std::string()};
            }
            // The scan may have resumed or skipped every cell left.
            if (nothing_left()) return std::nullopt;
            cell_ended.wait(lock);
        }
    };

    const auto work = [&](int worker) {
        const std::optional<std::string> on_gpu =
            gpus.empty() ? std::nullopt : std::optional<std::string>(gpus[static_cast<std::size_t>(worker)]);
        const std::string slot = "cell-" + std::to_string(worker);
        std::unique_lock lock(mutex);
        while (std::optional<Taken> taken = take(lock)) {
            const CellParams& cell = taken->cell;
            running.started(taken->sharing, taken->computes_reference);
            lock.unlock();
            CellOutcome o = run_cell_process(cell, scratch, options, run_label, slot, on_gpu, taken->kept);
            lock.lock();
            running.finished(taken->sharing, taken->computes_reference);
            cell_ended.notify_all();
            if (g_stop_requested.load()) {
                totals.interrupted = true;
                break;
            }
            add_predictions(cell, taken->fixed, !taken->kept, o);
            store.record_cell(run_id, static_cast<int>(taken->index), cell, o);
            count(totals, o.status);
            std::optional<double> median;
            if (!o.timed_ms.empty()) median = LatencyStats::of(o.timed_ms).median;
            progress.cell_done(cell.label() + (on_gpu && workers > 1 ? "  on GPU " + *on_gpu : ""),
                               std::string(enum_name(o.status)), median, o.status == CellStatus::ok ? "" : o.reason, true,
                               o.wall_s.value_or(0));
        }
        if (g_stop_requested.load()) totals.interrupted = true;
        cell_ended.notify_all();
    };
    {
        std::vector<std::jthread> threads;
        for (int w = 0; w < workers; ++w) threads.emplace_back(work, w);
    }
    store.finish_run(run_id, totals.interrupted ? "interrupted" : "finished");
    totals.run_id = run_id;
    return totals;
}

}  // namespace sweetspot
