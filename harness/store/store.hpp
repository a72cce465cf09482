#pragma once
// The results database: runs, cells, per-iteration latencies (schema documented in
// results/README.md). One transaction per cell, WAL journal, so a killed sweep leaves complete
// cells or none and readers can query while a sweep writes.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harness/matrix/cell.hpp"
#include "harness/collect/events.hpp"
#include "harness/system/file_lock.hpp"
#include "harness/store/sqlite.hpp"

namespace sweetspot {

// 1: runs, cells, iterations. 2: GPU placement columns, CUPTI event tables, per-cell event totals.
// 3: cells.dropout and cells.launches_per_forward.
inline constexpr int kSchemaVersion = 10;
// The oldest version this sweetspot reads; a run that writes to one upgrades it first.
inline constexpr int kOldestReadableSchemaVersion = 2;

// What Unified Memory can do on the run's GPU: the device attributes that tell a machine whose GPU
// reads pageable host memory directly (HMM, Grace Hopper) from one that needs managed memory
// migrated. 1 or 0; unset without a GPU.
struct ManagedAbilities {
    std::optional<int> concurrent_managed_access, pageable_memory_access,
        pageable_memory_access_uses_host_page_tables, direct_managed_mem_access_from_host;
};

// One managed-memory operation of the run's probe, on a layer-sized range: the medians over
// `calls` calls of the rate (1e9 bytes per second of the GPU's time for it, or of the host's
// where the operation is not stream-ordered) and of the time the call held the calling thread.
struct ManagedRate {
    std::string operation;
    std::int64_t bytes = 0;
    int calls = 0;
    double gbps = 0, host_ms = 0;
};

struct RunInfo {
    std::string started_at;  // ISO 8601 UTC
    std::string host, os, cpu_model;
    int cpu_count = 0;
    std::string sweetspot_version, git_revision, command_line;
    std::string matrix_path, matrix_name, matrix_hash, matrix_text;
    int cells_total = 0;
    std::optional<std::string> gpu_name, gpu_driver, cuda_runtime;
    std::optional<std::int64_t> gpu_memory_bytes;
    // Pinned host<->device bandwidth measured at the start of the run (GB/s, 1e9 bytes).
    std::optional<double> h2d_gbps, d2h_gbps;
    ManagedAbilities managed;
    std::vector<ManagedRate> managed_rates;
};

// What became of a cell.
enum class CellStatus { ok, failed, timeout, skipped, invalid };
template <>
struct EnumNames<CellStatus> {
    static constexpr std::array<EnumName<CellStatus>, 5> list = {{{CellStatus::ok, "ok"},
                                                                  {CellStatus::failed, "failed"},
                                                                  {CellStatus::timeout, "timeout"},
                                                                  {CellStatus::skipped, "skipped"},
                                                                  {CellStatus::invalid, "invalid"}}};
};

struct LatencyStats {
    double median = 0, p10 = 0, p90 = 0, min = 0, max = 0, mean = 0;
    // Percentiles by linear interpolation between order statistics. Requires a non-empty sample.
    static LatencyStats of(std::vector<double> samples_ms);
};

// The noise of a cell's timed iterations: their relative standard deviation (sample standard
// deviation over the mean), in percent; nullopt for fewer than two.
std::optional<double> noise_pct(const std::vector<double>& samples_ms);

// How long one phase of a cell took, wall clock, in seconds (results/README.md, cell_phases, names
// them all).
struct CellPhase {
    std::string name;
    double seconds = 0;
};

// The host forward's logits a GPU cell's check compared with (logits_check.hpp), kept in the
// database so that the cells of the same workload after it reuse them.
struct ReferenceLogits {
    std::string key;  // reference_key: a hash of what the logits depend on
    std::string model;
    int batch = 0, seq = 0, vocab = 0;
    std::vector<float> logits;  // [batch, seq, vocab]
};

// What measuring a cell produced. The child process fills the measurements; the parent adds
// what only it can see (exit status, timeout, stderr tail, wall time).
struct CellOutcome {
    CellStatus status = CellStatus::failed;
    std::string reason;
    std::string stderr_tail;
    std::optional<int> exit_code, signal;
    std::string started_at, finished_at;
    std::optional<double> wall_s, init_s;
    std::vector<double> warmup_ms, timed_ms;
    // The timed iterations' noise (noise_pct), and whether they stopped on a limit above the
    // cell's max_noise.
    std::optional<double> noise_pct;
    bool noisy = false;
    std::vector<double> traced_ms;     // the traced iterations (collection on), stored as phase 'traced'
    std::optional<CellEvents> events;  // what the collector recorded in the traced iterations
    std::optional<double> tokens_per_s;
    std::optional<std::string> check_reference;
    std::optional<double> check_max_abs_err, check_rel_err, check_tolerance;
    // The reference the check used, where it is one the database keeps (recording the cell adds
    // it, once per key).
    std::optional<ReferenceLogits> reference;
    // Whether the check ran its reference forward (false: it reused the database's kept reference).
    std::optional<bool> check_reference_computed;
    std::optional<std::int64_t> peak_host_rss_bytes, activation_bytes;
    std::optional<std::int64_t> launches_per_forward;  // kernels and GEMMs a GPU forward enqueues
    // GPU backends: where the weights went, and the device memory in use after the first
    // iteration (CUDA context included).
    std::optional<std::int64_t> resident_bytes, streamed_bytes, device_weight_bytes, device_used_bytes;
    // GPU backends: the page-locked host memory they hold for the weights (explicit-copy's copy of
    // the streamed units; 0 for the others).
    std::optional<std::int64_t> pinned_host_bytes;
    // GPU cells: the device memory the estimator predicts the cell allocates (weights, activations,
    // scores, GEMM workspace), decided before it runs, whether it ran or not; and its predicted
    // peak, those allocations plus the fixed cost measured on this GPU and driver by the cells
    // already in the database (none before there are such cells).
    std::optional<std::int64_t> predicted_alloc_bytes, predicted_peak_bytes;
    // GPU cells: the host memory the estimator predicts the cell's process peaks at (its weights'
    // host memory, logits, the check's host reference forward where it runs, and the process's own
    // memory measured on this GPU and driver), where that has been measured.
    std::optional<std::int64_t> predicted_host_peak_bytes;
    // GPU cells: the host memory the estimator accounts for (MemoryEstimate::host_total, the check's
    // reference forward counted where it ran), without the process's own: what the calibration
    // subtracts from the measured peak.
    std::optional<std::int64_t> predicted_host_alloc_bytes;
    // GPU cells: the device memory NVML read around the cell (harness/measure/gpu_memory_watch.hpp),
    // or gpu_memory_note saying why there is none.
    std::optional<std::int64_t> gpu_used_before_bytes, gpu_context_bytes, gpu_peak_bytes, gpu_own_peak_bytes;
    std::optional<std::int64_t> gpu_other_processes, gpu_other_bytes, gpu_memory_readings;
    std::string gpu_memory_note;
    // The CUDA_VISIBLE_DEVICES the cell's process ran with (run --gpus), if the run set one.
    std::optional<std::string> gpu;
    // Where the cell's wall time went, phase by phase, in the order they ran.
    std::vector<CellPhase> phases;
};

// The measurement stored for `key` in the `cells` of `schema` (this database, "main", or one
// attached to it), if any, into this database's cell_history: its row (every column, whatever the
// schema version adds) and its iterations, as JSON. Called before a newer measurement replaces it.
void keep_as_history(Database& db, const std::string& key, const std::string& schema = "main");

// Recomputes every stored cell's key and canonical text from its canonical text, for when what
// the key covers changes (schema version 8: warmups and iterations left it).
// Cells that now share a key become one: the last recorded stays in `cells`, the others go to
// its cell_history, and each cell's history moves to its new key.
void rekey_cells(Database& db);

class Store {
public:
    // shared: any number of writers (SQLite serialises them); exclusive: this store is the only
    // writer until it is closed (a sweep), and opening fails while another exclusive one is open.
    enum class Access { shared, exclusive };
    // Creates the file and schema if missing; refuses, without changing it, a file that is not a
    // sweetspot database or is of another schema version.
    static Store open(const std::string& path, Access access = Access::shared);
    // For reading only: the file must exist and be a sweetspot database.
    static Store open_read_only(const std::string& path);

    std::int64_t begin_run(const RunInfo& info);
    void finish_run(std::int64_t run_id, const std::string& status);

    // Keys of cells whose status is ok (resume skips them).
    std::set<std::string> ok_keys();

    // Writes one cell and its iterations in one transaction, replacing an earlier row with the
    // same key. Returns the new cell_id.
    std::int64_t record_cell(std::int64_t run_id, int cell_index, const CellParams& cell, const CellOutcome& outcome);
    // The outcome stored for `key` (the child process hands its measurements to the parent this
    // way, through a scratch database); nullopt when there is no such cell.
    std::optional<CellOutcome> load_outcome(const std::string& key);
    // The kept reference logits of that key, if the database has them.
    std::optional<ReferenceLogits> load_reference(const std::string& key);
    // Keeps `reference` (nothing when its key is already kept).
    void keep_reference(const ReferenceLogits& reference);

    Database& db() { return db_; }

private:
    Store(Database db, std::optional<FileLock> lock) : db_(std::move(db)), lock_(std::move(lock)) {}
    Database db_;
    std::optional<FileLock> lock_;
};

// Checks that `db` is a sweetspot results database this version can read and returns its schema
// version. Throws std::runtime_error with a message for the user otherwise.
int check_results_database(Database& db);

}  // namespace sweetspot
