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
#include "harness/store/history.hpp"
#include "harness/store/schema.hpp"
#include "harness/store/sql_values.hpp"
#include "harness/store/sqlite.hpp"

namespace sweetspot {

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
    // The host's memory bandwidth (GB/s), measured where a cell updates on the host's cores
    // (optimizer = "host"): STREAM's triad, and the rate of the update's own streams, its bound's
    // host update term where the cell did not measure its own state's (cells.host_state_gbps;
    // harness/system/memory_bandwidth.hpp).
    std::optional<double> host_memory_gbps, host_update_gbps;
    ManagedAbilities managed;
    std::vector<ManagedRate> managed_rates;
};

// A run started now, on this host, by this build: what every run's row says of them (the rest is
// the caller's: the GPU, the matrix, the command).
RunInfo host_run_info();

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

class Store {
public:
    // shared: any number of writers (SQLite serialises them); exclusive: this store is the only
    // writer until it is closed (a sweep), and opening fails while another exclusive one is open.
    enum class Access { shared, exclusive };
    // Creates the file and schema if missing, or upgrades an older one; refuses, without changing
    // it, a path that cannot hold a database this user reads (require_database_file: a folder, a
    // file it may not read, one that is not SQLite or is truncated), a file that is not a sweetspot
    // database, is of a version this sweetspot does not read, or lacks a table or column of its
    // version. An exclusive opening (a sweep) also refuses a damaged file (SQLite's quick_check,
    // where the file is small enough for it to be cheap), and marks the runs left `running` by a
    // killed sweep `interrupted`.
    static Store open(const std::string& path, Access access = Access::shared);
    // For reading only: the file must exist, be readable and be a sweetspot database.
    static Store open_read_only(const std::string& path);

    std::int64_t begin_run(const RunInfo& info);
    // Closes the run: `finished`, or `interrupted` with why (`runs.stop_reason`).
    void finish_run(std::int64_t run_id, const std::string& status, const std::string& reason = "");

    // Keys of cells whose status is ok (resume skips them).
    std::set<std::string> ok_keys();

    // A cell's row: its identity, its parameters (every axis with a column) and `values` (`status`,
    // `reason` and the measures, by column name), replacing an earlier row with the same key, which
    // goes to cell_history and whose cell_id it keeps (a `--cell` a user noted still names it after
    // a rerun). Returns its cell_id. Inside the caller's transaction, with the rows
    // below: a cell is recorded whole or not at all.
    std::int64_t insert_cell(std::int64_t run_id, int cell_index, const CellParams& cell, const Row& values);
    // The latencies of one phase of a cell's iterations ("warmup", "timed", "traced").
    void insert_iterations(std::int64_t cell_id, const std::string& phase, const std::vector<double>& latencies_ms);
    // Phases of the cell's wall time, numbered on from those it has.
    void insert_phases(std::int64_t cell_id, const std::vector<CellPhase>& phases);

    // Moves the cell `key` that a cell's process recorded in the database at `scratch_path` into
    // this one, in one transaction: its row by column name (the columns this database declares and
    // the scratch database has), its iterations, phases, events and kept reference, as run
    // `run_id`'s cell number `cell_index`, with `parent` (the values only the runner knows: its
    // status after the process's end, wall time, predictions) set over the cell's own, and
    // `more_phases` after its phases. An earlier row of the key goes to cell_history, its cell_id
    // to the new row. Returns the cell_id; nullopt when the scratch database has no such cell.
    std::optional<std::int64_t> import_cell(const std::string& scratch_path, const std::string& key, std::int64_t run_id,
                                            int cell_index, const Row& parent, const std::vector<CellPhase>& more_phases);
    // The kept reference logits of that key, if the database has them.
    std::optional<ReferenceLogits> load_reference(const std::string& key);
    // Keeps `reference` (nothing when its key is already kept).
    void keep_reference(const ReferenceLogits& reference);

    Database& db() { return db_; }
    const std::string& path() const { return db_.path(); }

private:
    // Moves the row of `key`, if there is one, to cell_history and deletes it, returning its cell_id.
    std::optional<std::int64_t> replace_cell(const std::string& key);

    Store(Database db, std::optional<FileLock> lock) : db_(std::move(db)), lock_(std::move(lock)) {}
    Database db_;
    std::optional<FileLock> lock_;
};

// Checks that `db` is a sweetspot results database this version can read, with every table and
// column its version has (schema.hpp), and returns its schema version. Throws std::runtime_error
// with a message for the user otherwise.
int check_results_database(Database& db);

}  // namespace sweetspot
