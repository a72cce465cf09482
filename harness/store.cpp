#include "harness/store.hpp"

#include "harness/system_info.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

namespace sweetspot {
namespace {

// Schema version 1. results/README.md documents every column; tests check the two agree.
constexpr const char* kSchemaSql = R"sql(
CREATE TABLE schema_info (
    version     INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    created_by  TEXT NOT NULL
);
CREATE TABLE runs (
    run_id            INTEGER PRIMARY KEY,
    started_at        TEXT NOT NULL,
    finished_at       TEXT,
    status            TEXT NOT NULL CHECK (status IN ('running', 'finished', 'interrupted')),
    host              TEXT,
    os                TEXT,
    cpu_model         TEXT,
    cpu_count         INTEGER,
    gpu_name          TEXT,
    gpu_driver        TEXT,
    cuda_runtime      TEXT,
    sweetspot_version TEXT,
    git_revision      TEXT,
    command_line      TEXT,
    matrix_path       TEXT,
    matrix_name       TEXT,
    matrix_hash       TEXT,
    matrix_text       TEXT,
    cells_total       INTEGER
);
CREATE TABLE cells (
    cell_id             INTEGER PRIMARY KEY,
    run_id              INTEGER NOT NULL REFERENCES runs(run_id),
    cell_key            TEXT NOT NULL UNIQUE,
    cell_index          INTEGER NOT NULL,
    sweep               TEXT,
    status              TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'timeout', 'skipped', 'invalid')),
    reason              TEXT,
    model               TEXT NOT NULL,
    n_layer             INTEGER NOT NULL,
    n_embd              INTEGER NOT NULL,
    n_head              INTEGER NOT NULL,
    vocab_size          INTEGER NOT NULL,
    max_positions       INTEGER NOT NULL,
    n_params            INTEGER NOT NULL,
    variant             TEXT NOT NULL,
    backend             TEXT NOT NULL,
    dtype               TEXT NOT NULL,
    batch               INTEGER NOT NULL,
    seq                 INTEGER NOT NULL,
    streams             INTEGER NOT NULL,
    prefetch            TEXT NOT NULL,
    budget              TEXT NOT NULL,
    budget_bytes        INTEGER NOT NULL,
    weight_bytes        INTEGER NOT NULL,
    oversubscription    REAL NOT NULL,
    activations         TEXT NOT NULL,
    mode                TEXT NOT NULL,
    weights             TEXT NOT NULL,
    warmups             INTEGER NOT NULL,
    iterations          INTEGER NOT NULL,
    trace_iterations    INTEGER NOT NULL,
    seed                INTEGER NOT NULL,
    timeout_s           REAL NOT NULL,
    debug_fault         TEXT NOT NULL,
    canonical           TEXT NOT NULL,
    started_at          TEXT,
    finished_at         TEXT,
    wall_s              REAL,
    init_s              REAL,
    exit_code           INTEGER,
    signal              INTEGER,
    stderr_tail         TEXT,
    latency_median_ms   REAL,
    latency_p10_ms      REAL,
    latency_p90_ms      REAL,
    latency_min_ms      REAL,
    latency_max_ms      REAL,
    latency_mean_ms     REAL,
    tokens_per_s        REAL,
    check_reference     TEXT,
    check_max_abs_err   REAL,
    check_rel_err       REAL,
    check_tolerance     REAL,
    peak_host_rss_bytes INTEGER,
    activation_bytes    INTEGER
);
CREATE INDEX cells_run ON cells(run_id);
CREATE TABLE iterations (
    cell_id     INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    phase       TEXT NOT NULL CHECK (phase IN ('warmup', 'timed')),
    iteration   INTEGER NOT NULL,
    latency_ms  REAL NOT NULL,
    PRIMARY KEY (cell_id, phase, iteration)
);
CREATE VIEW cell_summary AS
SELECT cell_id, model, backend, variant, dtype, batch, seq, streams, prefetch, budget,
       status, latency_median_ms, latency_p10_ms, latency_p90_ms, tokens_per_s,
       check_rel_err, reason
FROM cells;
)sql";

void configure_connection(Database& db) {
    db.exec("PRAGMA foreign_keys = ON");
}

bool has_table(Database& db, const char* name) {
    auto st = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
    st.bind(1, name);
    return st.step();
}

}  // namespace

LatencyStats LatencyStats::of(std::vector<double> s) {
    if (s.empty()) throw std::invalid_argument("latency statistics of an empty sample");
    std::sort(s.begin(), s.end());
    auto q = [&](double p) {
        const double pos = p * static_cast<double>(s.size() - 1);
        const auto lo = static_cast<std::size_t>(std::floor(pos));
        const auto hi = std::min(lo + 1, s.size() - 1);
        return s[lo] + (s[hi] - s[lo]) * (pos - static_cast<double>(lo));
    };
    double sum = 0;
    for (double v : s) sum += v;
    return {q(0.5), q(0.1), q(0.9), s.front(), s.back(), sum / static_cast<double>(s.size())};
}

void check_results_database(Database& db) {
    if (!has_table(db, "schema_info"))
        throw std::runtime_error(db.path() + " is not a sweetspot results database (no schema_info table)");
    auto st = db.prepare("SELECT version FROM schema_info");
    if (!st.step()) throw std::runtime_error(db.path() + ": schema_info is empty");
    const auto v = st.int64(0);
    if (v != kSchemaVersion)
        throw std::runtime_error(db.path() + " has schema version " + std::to_string(v) + "; this sweetspot reads version " +
                                 std::to_string(kSchemaVersion));
}

Store Store::open(const std::string& path) {
    if (const auto dir = std::filesystem::path(path).parent_path(); !dir.empty())
        std::filesystem::create_directories(dir);
    Database db(path, Database::Mode::read_write_create);
    db.exec("PRAGMA journal_mode = WAL");
    configure_connection(db);
    Transaction tx(db);
    if (!has_table(db, "schema_info")) {
        auto other = db.prepare("SELECT count(*) FROM sqlite_master");
        other.step();
        if (other.int64(0) != 0)
            throw std::runtime_error(path + " is an SQLite database but not a sweetspot results database");
        db.exec(kSchemaSql);
        auto ins = db.prepare("INSERT INTO schema_info (version, created_at, created_by) VALUES (?, ?, ?)");
        ins.bind(1, kSchemaVersion).bind(2, utc_timestamp()).bind(3, "sweetspot " SWEETSPOT_VERSION).run();
        db.exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
    }
    tx.commit();
    check_results_database(db);
    return Store(std::move(db));
}

Store Store::open_read_only(const std::string& path) {
    if (!std::filesystem::exists(path)) throw std::runtime_error("no such database: " + path);
    Database db(path, Database::Mode::read_only);
    configure_connection(db);
    check_results_database(db);
    return Store(std::move(db));
}

std::int64_t Store::begin_run(const RunInfo& r) {
    auto st = db_.prepare(
        "INSERT INTO runs (started_at, status, host, os, cpu_model, cpu_count, gpu_name, gpu_driver, cuda_runtime,"
        " sweetspot_version, git_revision, command_line, matrix_path, matrix_name, matrix_hash, matrix_text,"
        " cells_total) VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    st.bind(1, r.started_at).bind(2, r.host).bind(3, r.os).bind(4, r.cpu_model).bind(5, r.cpu_count);
    st.bind(6, r.gpu_name).bind(7, r.gpu_driver).bind(8, r.cuda_runtime);
    st.bind(9, r.sweetspot_version).bind(10, r.git_revision).bind(11, r.command_line);
    st.bind(12, r.matrix_path).bind(13, r.matrix_name).bind(14, r.matrix_hash).bind(15, r.matrix_text);
    st.bind(16, r.cells_total);
    st.run();
    return db_.last_insert_rowid();
}

void Store::finish_run(std::int64_t run_id, const std::string& status) {
    auto st = db_.prepare("UPDATE runs SET status = ?, finished_at = ? WHERE run_id = ?");
    st.bind(1, status).bind(2, utc_timestamp()).bind(3, run_id).run();
}

std::set<std::string> Store::ok_keys() {
    std::set<std::string> keys;
    auto st = db_.prepare("SELECT cell_key FROM cells WHERE status = 'ok'");
    while (st.step()) keys.insert(st.text(0));
    return keys;
}

std::int64_t Store::record_cell(std::int64_t run_id, int cell_index, const CellParams& c, const CellOutcome& o) {
    Transaction tx(db_);
    const std::string key = c.key();
    db_.prepare("DELETE FROM cells WHERE cell_key = ?").bind(1, key).run();

    auto st = db_.prepare(
        "INSERT INTO cells (run_id, cell_key, cell_index, sweep, status, reason, model, n_layer, n_embd, n_head,"
        " vocab_size, max_positions, n_params, variant, backend, dtype, batch, seq, streams, prefetch, budget,"
        " budget_bytes, weight_bytes, oversubscription, activations, mode, weights, warmups, iterations,"
        " trace_iterations, seed, timeout_s, debug_fault, canonical, started_at, finished_at, wall_s, init_s,"
        " exit_code, signal, stderr_tail, latency_median_ms, latency_p10_ms, latency_p90_ms, latency_min_ms,"
        " latency_max_ms, latency_mean_ms, tokens_per_s, check_reference, check_max_abs_err, check_rel_err,"
        " check_tolerance, peak_host_rss_bytes, activation_bytes)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20,"
        " ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35, ?36, ?37, ?38, ?39, ?40,"
        " ?41, ?42, ?43, ?44, ?45, ?46, ?47, ?48, ?49, ?50, ?51, ?52, ?53, ?54)");
    const auto weight_bytes = c.weight_bytes();
    const auto budget_bytes = c.budget_bytes();
    st.bind(1, run_id).bind(2, key).bind(3, cell_index).bind(4, c.sweep).bind(5, o.status).bind(6, o.reason);
    st.bind(7, c.model.name).bind(8, c.model.n_layer).bind(9, c.model.n_embd).bind(10, c.model.n_head);
    st.bind(11, c.model.vocab_size).bind(12, c.model.max_positions).bind(13, c.model.n_params());
    st.bind(14, c.variant).bind(15, c.backend).bind(16, dtype_name(c.dtype)).bind(17, c.batch).bind(18, c.seq);
    st.bind(19, c.streams).bind(20, c.prefetch.text()).bind(21, c.budget.text()).bind(22, budget_bytes);
    st.bind(23, weight_bytes).bind(24, static_cast<double>(weight_bytes) / static_cast<double>(budget_bytes));
    st.bind(25, c.activations).bind(26, c.mode).bind(27, c.weights).bind(28, c.warmups).bind(29, c.iterations);
    st.bind(30, c.trace_iterations).bind(31, static_cast<std::int64_t>(c.seed)).bind(32, c.timeout_s);
    st.bind(33, c.debug_fault).bind(34, c.canonical());
    st.bind(35, o.started_at).bind(36, o.finished_at).bind(37, o.wall_s).bind(38, o.init_s);
    st.bind(39, o.exit_code).bind(40, o.signal).bind(41, o.stderr_tail);
    if (!o.timed_ms.empty()) {
        const auto s = LatencyStats::of(o.timed_ms);
        st.bind(42, s.median).bind(43, s.p10).bind(44, s.p90).bind(45, s.min).bind(46, s.max).bind(47, s.mean);
    } else {
        for (int i = 42; i <= 47; ++i) st.bind_null(i);
    }
    st.bind(48, o.tokens_per_s).bind(49, o.check_reference).bind(50, o.check_max_abs_err);
    st.bind(51, o.check_rel_err).bind(52, o.check_tolerance).bind(53, o.peak_host_rss_bytes);
    st.bind(54, o.activation_bytes);
    st.run();
    const std::int64_t cell_id = db_.last_insert_rowid();

    auto it = db_.prepare("INSERT INTO iterations (cell_id, phase, iteration, latency_ms) VALUES (?, ?, ?, ?)");
    auto insert_phase = [&](const char* phase, const std::vector<double>& ms) {
        for (std::size_t i = 0; i < ms.size(); ++i) {
            it.reset();
            it.bind(1, cell_id).bind(2, phase).bind(3, static_cast<std::int64_t>(i)).bind(4, ms[i]).run();
        }
    };
    insert_phase("warmup", o.warmup_ms);
    insert_phase("timed", o.timed_ms);
    tx.commit();
    return cell_id;
}

std::optional<CellOutcome> Store::load_outcome(const std::string& key) {
    auto st = db_.prepare(
        "SELECT cell_id, status, reason, init_s, tokens_per_s, check_reference, check_max_abs_err, check_rel_err,"
        " check_tolerance, peak_host_rss_bytes, activation_bytes FROM cells WHERE cell_key = ?");
    st.bind(1, key);
    if (!st.step()) return std::nullopt;
    auto opt_real = [&](int i) { return st.is_null(i) ? std::nullopt : std::optional<double>(st.real(i)); };
    auto opt_int = [&](int i) { return st.is_null(i) ? std::nullopt : std::optional<std::int64_t>(st.int64(i)); };
    CellOutcome o;
    const auto cell_id = st.int64(0);
    o.status = st.text(1);
    o.reason = st.text(2);
    o.init_s = opt_real(3);
    o.tokens_per_s = opt_real(4);
    if (!st.is_null(5)) o.check_reference = st.text(5);
    o.check_max_abs_err = opt_real(6);
    o.check_rel_err = opt_real(7);
    o.check_tolerance = opt_real(8);
    o.peak_host_rss_bytes = opt_int(9);
    o.activation_bytes = opt_int(10);

    auto it = db_.prepare("SELECT phase, latency_ms FROM iterations WHERE cell_id = ? ORDER BY phase, iteration");
    it.bind(1, cell_id);
    while (it.step()) (it.text(0) == "warmup" ? o.warmup_ms : o.timed_ms).push_back(it.real(1));
    return o;
}

}  // namespace sweetspot
