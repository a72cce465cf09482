#include "harness/runner/runner.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <sstream>
#include <stop_token>
#include <thread>
#include <vector>

#include "base/number_text.hpp"
#include "harness/matrix/shard.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/logits_check.hpp"
#include "harness/measure/memory_estimate.hpp"
#include "harness/runner/cell_process.hpp"
#include "harness/runner/cell_sharing.hpp"
#include "harness/runner/predictions.hpp"
#include "harness/runner/progress.hpp"
#include "harness/runner/run_metadata.hpp"
#include "harness/runner/scratch_dir.hpp"
#include "harness/runner/stop_signal.hpp"
#include "harness/system/exit_codes.hpp"
#include "harness/system/system_info.hpp"

namespace sweetspot {
namespace {

// How long a cell's rows wait for a lock another connection holds on the database (each try
// waits SQLite's busy timeout) before the sweep stops: long enough for a reader's query or a
// merge, short enough that a stuck writer is reported.
constexpr int kBusyTries = 30;

void count(RunTotals& t, CellStatus status, const std::string& reason) {
    if (status == CellStatus::skipped) ++t.skipped_because[reason];
    switch (status) {
        case CellStatus::ok: ++t.ok; break;
        case CellStatus::failed: ++t.failed; break;
        case CellStatus::timeout: ++t.timeout; break;
        case CellStatus::skipped: ++t.skipped; break;
        case CellStatus::invalid: ++t.invalid; break;
    }
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

// The expected cost of all the matrix's cells, which the ETA weighs the cells left by.
double total_cost(const Matrix& matrix) {
    return std::accumulate(matrix.cells.begin(), matrix.cells.end(), 0.0,
                           [](double sum, const CellParams& cell) { return sum + shard_cost(cell); });
}

// A cell to measure: where it is in the matrix, with the timeout it runs under, how it shares the
// machine, the fixed cost its predicted peak adds (what the database knew before it ran), the
// host reference logits the database keeps for its workload, and the key of the one it computes
// and stores where the database keeps none yet.
struct Taken {
    std::size_t index;
    CellParams cell;
    Sharing sharing;
    std::optional<FixedCost> fixed;
    std::optional<ReferenceLogits> kept;
    std::string computes_reference;
};

// One sweep over a matrix's cells: workers (one per GPU) take the cells in matrix order, run each
// in its own process and store it. Everything the workers share is guarded by `mutex_`.
class Sweep {
public:
    Sweep(const Matrix& matrix, const RunOptions& options, std::ostream& out, Store& store, std::int64_t run_id,
          const GpuFacts& gpu, const std::vector<std::string>& gpus)
        : matrix_(matrix),
          options_(options),
          store_(store),
          run_id_(run_id),
          run_label_("run " + std::to_string(run_id) + " " + matrix.name),
          gpu_(gpu),
          gpus_(gpus),
          workers_(std::max<int>(1, static_cast<int>(gpus.size()))),
          done_(store.ok_keys()),
          progress_(static_cast<int>(matrix.cells.size()), total_cost(matrix), out, workers_, options.progress),
          handled_(matrix.cells.size(), false) {}

    // Runs every worker to the end of the cells, the user's stop, or a database error, and closes
    // the run with how it ended.
    RunTotals run() {
        {
            // Stopped and joined after the workers (declared first, destroyed last).
            std::jthread ticker([this](std::stop_token stop) { tick(stop); });
            std::vector<std::jthread> threads;
            for (int w = 0; w < workers_; ++w) threads.emplace_back([this, w] { work(w); });
        }
        totals_.interrupted = stop_requested().load() && error_.empty();
        totals_.run_id = run_id_;
        totals_.error = error_;
        const std::string reason = !error_.empty()       ? "the database could not be written: " + error_
                                   : totals_.interrupted ? "stopped by SIGINT or SIGTERM"
                                                         : "";
        try {
            with_busy_retries([&] { store_.finish_run(run_id_, reason.empty() ? "finished" : "interrupted", reason); });
        } catch (const SqliteError& e) {
            // The database that stopped the sweep may refuse this too: the next sweep closes the
            // run (Store::open), and the user reads why here.
            totals_.error += "; closing the run failed as well: " + std::string(e.what());
        }
        return totals_;
    }

private:
    // Moves the running cells' line on (progress.hpp) until the workers are done.
    void tick(const std::stop_token& stop) {
        const auto period = std::chrono::duration<double>(progress_.tick_period_s());
        std::unique_lock lock(mutex_);
        while (!ticked_.wait_for(lock, stop, period, [] { return false; }) && !stop.stop_requested()) progress_.tick();
    }

    // How the progress names a cell measured on `gpu`: with the GPU where several run side by side.
    std::string progress_label(const CellParams& cell, const std::optional<std::string>& gpu) const {
        return cell.label() + (gpu && workers_ > 1 ? "  on GPU " + *gpu : "");
    }

    // A worker's loop: take a cell, run its process unlocked, store it. Any error of the store
    // stops the sweep (the cells measured so far stay), never the process.
    void work(int worker) {
        const std::optional<std::string> gpu =
            gpus_.empty() ? std::nullopt : std::optional<std::string>(gpus_[static_cast<std::size_t>(worker)]);
        CellProcessSpec spec;
        spec.scratch_db = scratch_.file("cell-" + std::to_string(worker) + ".db");
        spec.log = scratch_.file("cell-" + std::to_string(worker) + ".log");
        spec.gpu = gpu;
        spec.run_label = run_label_;
        spec.on_status = [this, worker](const std::string& status) {
            const std::lock_guard guard(mutex_);
            progress_.cell_status(worker, status);
        };
        std::unique_lock lock(mutex_);
        try {
            while (std::optional<Taken> taken = take(lock)) {
                running_.started(taken->sharing, taken->computes_reference);
                progress_.cell_started(worker, progress_label(taken->cell, gpu));
                spec.kept = taken->kept;
                lock.unlock();
                CellProcessResult result = run_cell_process(taken->cell, spec, options_);
                lock.lock();
                progress_.cell_ended(worker);
                running_.finished(taken->sharing, taken->computes_reference);
                cell_ended_.notify_all();
                if (stop_requested().load()) break;
                store_measured(*taken, spec, result, gpu);
            }
        } catch (const std::exception& e) {
            if (!lock.owns_lock()) lock.lock();
            if (error_.empty()) error_ = e.what();
            stop_requested().store(true);
        }
        cell_ended_.notify_all();
    }

    // Whether every cell is handled, or the sweep is stopping.
    bool nothing_left() {
        while (first_ < handled_.size() && handled_[first_]) ++first_;
        return stop_requested().load() || first_ >= handled_.size();
    }

    // Takes the next cell to measure in matrix order, recording on the way the cells that need no
    // process (already ok, skipped); empty when there is none left or the sweep is stopping. Cells
    // wait for a running cell that computes their reference (cell_sharing.hpp), and the cells after
    // them may go first meanwhile; any other cell that may not start yet holds up the ones after it.
    std::optional<Taken> take(std::unique_lock<std::mutex>& lock) {
        for (;;) {
            if (nothing_left()) return std::nullopt;
            for (std::size_t i = first_; i < handled_.size(); ++i) {
                if (handled_[i]) continue;
                CellParams cell = matrix_.cells[i];
                // The timeout stored with the cell is the one it ran under.
                cell.timeout_s = options_.timeout_override_s.value_or(cell.timeout_s);
                if (!options_.rerun && done_.count(cell.key())) {
                    ++totals_.resumed;
                    progress_.cell_done(cell.label(), "done", std::nullopt, "already ok in the database", shard_cost(cell),
                                        std::nullopt);
                    handled_[i] = true;
                    continue;
                }
                const auto key = uses_gpu(cell) ? kept_reference_key(cell, cell.token_ids()) : std::nullopt;
                if (key && running_.computing(*key)) continue;
                const std::optional<FixedCost> fixed = uses_gpu(cell) ? fixed_cost_here(gpu_, store_.db()) : std::nullopt;
                if (std::string why = skip_reason(cell, fixed); !why.empty()) {
                    store_skipped(i, cell, std::move(why), fixed);
                    handled_[i] = true;
                    continue;
                }
                const Sharing sharing = sharing_of(cell, options_.share_link);
                if (!running_.can_start(sharing)) break;
                std::optional<ReferenceLogits> kept = key ? store_.load_reference(*key) : std::nullopt;
                handled_[i] = true;
                return Taken{i, std::move(cell), sharing, fixed, std::move(kept), key && !kept ? *key : std::string()};
            }
            // The scan may have resumed or skipped every cell left.
            if (nothing_left()) return std::nullopt;
            cell_ended_.wait(lock);
        }
    }

    // Why the cell is not run here (not in this build, no GPU, predicted not to fit), or empty.
    std::string skip_reason(const CellParams& cell, const std::optional<FixedCost>& fixed) const {
        std::string why = cell_unsupported_reason(cell);
        if (why.empty() && uses_gpu(cell) && !gpu_.name) why = "no GPU to run on: " + gpu_.note;
        if (why.empty() && fixed && gpu_.memory_bytes && !options_.force) why = predicted_oom(cell, *gpu_.memory_bytes, *fixed);
        if (why.empty() && uses_gpu(cell) && !options_.force)
            if (const auto available = host_memory_available_bytes()) why = predicted_host_oom(cell, *available);
        return why;
    }

    void store_skipped(std::size_t index, const CellParams& cell, std::string why, const std::optional<FixedCost>& fixed) {
        CellOutcome o;
        o.status = CellStatus::skipped;
        o.reason = std::move(why);
        o.set<"started_at">(utc_timestamp());
        o.set<"finished_at">(*o.get<"started_at">());
        add_predictions(cell, fixed, true, std::nullopt, o);
        with_busy_retries([&] { record_outcome(store_, run_id_, static_cast<int>(index), cell, o); });
        count(totals_, o.status, o.reason);
        progress_.cell_done(cell.label(), std::string(enum_name(o.status)), std::nullopt, o.reason, shard_cost(cell),
                            std::nullopt);
    }

    void store_measured(const Taken& taken, const CellProcessSpec& spec, CellProcessResult& result,
                        const std::optional<std::string>& gpu) {
        const CellParams& cell = taken.cell;
        add_predictions(cell, taken.fixed, !taken.kept, result.reported ? result.reported->reference_computed : std::nullopt,
                        result.outcome);
        with_busy_retries([&] { store_cell_result(store_, run_id_, static_cast<int>(taken.index), cell, spec, result); });
        const CellOutcome& o = result.outcome;
        count(totals_, o.status, o.reason);
        progress_.cell_done(progress_label(cell, gpu), std::string(enum_name(o.status)),
                            result.reported ? result.reported->median_ms : std::nullopt,
                            o.status == CellStatus::ok ? "" : o.reason, shard_cost(cell), o.get<"wall_s">().value_or(0));
    }

    // Runs `write` again while another connection holds the database's lock, up to kBusyTries
    // busy timeouts; any other error, or one more, is the caller's.
    template <class Write>
    void with_busy_retries(const Write& write) {
        for (int attempt = 1;; ++attempt) {
            try {
                write();
                return;
            } catch (const SqliteError& e) {
                if (!e.busy() || attempt >= kBusyTries) throw;
                progress_.note("another connection holds " + store_.path() + "'s lock; waiting to store the cell (" +
                               std::to_string(attempt) + " of " + std::to_string(kBusyTries) + ")");
            }
        }
    }

    const Matrix& matrix_;
    const RunOptions& options_;
    Store& store_;
    const std::int64_t run_id_;
    const std::string run_label_;
    const GpuFacts& gpu_;
    const std::vector<std::string>& gpus_;
    const int workers_;
    const std::set<std::string> done_;
    ScratchDir scratch_;
    std::mutex mutex_;
    std::condition_variable cell_ended_;
    std::condition_variable_any ticked_;  // never notified: the ticker waits on it for its period or its stop
    Progress progress_;
    RunTotals totals_;
    std::string error_;
    std::vector<bool> handled_;  // cells taken, resumed or skipped; every cell before first_ is
    std::size_t first_ = 0;
    RunningCells running_;
};

}  // namespace

bool RunTotals::nothing_measured() const { return skipped > 0 && ok + failed + timeout + invalid + resumed == 0; }

int RunTotals::exit_code() const {
    if (!error.empty()) return kExitBadInput;
    if (interrupted) return kExitInterrupted;
    return failed + timeout + invalid > 0 || nothing_measured() ? kExitFailed : kExitOk;
}

RunTotals run_matrix(const Matrix& matrix, const RunOptions& options, std::ostream& out) {
    auto store = Store::open(options.db_path, Store::Access::exclusive);
    remove_abandoned_scratch_dirs();
    const GpuFacts gpu = probe_for_sweep(matrix, out);
    // Without a GPU the cells it would bound are skipped: no time spent measuring it.
    const auto host_memory = gpu.h2d_gbps ? host_memory_for_sweep(matrix, out) : std::nullopt;
    const std::int64_t run_id = store.begin_run(run_info(matrix, options, gpu, host_memory));

    const std::vector<std::string> gpus = options.gpus ? *options.gpus : default_gpus(gpu);
    if (gpus.size() > 1)
        out << "sweetspot: " << gpus.size() << " GPUs (" << comma_list(gpus) << "), one cell on each at a time"
            << (options.share_link ? "" : "; cells that stream weights over the host link one at a time") << "\n";
    StopSignals signals;
    return Sweep(matrix, options, out, store, run_id, gpu, gpus).run();
}

}  // namespace sweetspot
