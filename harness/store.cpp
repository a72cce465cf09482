#include "harness/store.hpp"

#include "harness/system_info.hpp"
#include "harness/version.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>

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
    cells_total       INTEGER,
    h2d_gbps          REAL,
    d2h_gbps          REAL,
    gpu_memory_bytes  INTEGER
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
    resident            TEXT NOT NULL,
    evict               TEXT NOT NULL,
    tf32                INTEGER NOT NULL,
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
    resident_bytes      INTEGER,
    streamed_bytes      INTEGER,
    streamed_gbps       REAL,
    device_weight_bytes INTEGER,
    device_used_bytes   INTEGER,
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

namespace {

// One column's value for an INSERT; std::monostate is NULL.
using SqlValue = std::variant<std::monostate, std::int64_t, double, std::string>;

SqlValue sql(std::int64_t v) { return v; }
SqlValue sql(int v) { return std::int64_t{v}; }
SqlValue sql(double v) { return v; }
SqlValue sql(std::string v) { return v; }
SqlValue sql(std::string_view v) { return std::string(v); }
template <class T>
SqlValue sql(const std::optional<T>& v) {
    return v ? sql(*v) : SqlValue{};
}

void insert_row(Database& db, const std::string& table, const std::vector<std::pair<const char*, SqlValue>>& values) {
    std::string names, marks;
    for (const auto& [name, value] : values) {
        names += (names.empty() ? "" : ", ") + std::string(name);
        marks += marks.empty() ? "?" : ", ?";
    }
    auto st = db.prepare("INSERT INTO " + table + " (" + names + ") VALUES (" + marks + ")");
    int i = 1;
    for (const auto& [name, value] : values) {
        std::visit(
            [&](const auto& v) {
                if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::monostate>) st.bind_null(i);
                else st.bind(i, v);
            },
            value);
        ++i;
    }
    st.run();
}

}  // namespace

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
        ins.bind(1, kSchemaVersion).bind(2, utc_timestamp()).bind(3, std::string("sweetspot ") + kVersion).run();
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
    insert_row(db_, "runs", {
        {"started_at", sql(r.started_at)}, {"status", sql(std::string("running"))}, {"host", sql(r.host)},
        {"os", sql(r.os)}, {"cpu_model", sql(r.cpu_model)}, {"cpu_count", sql(r.cpu_count)},
        {"gpu_name", sql(r.gpu_name)}, {"gpu_driver", sql(r.gpu_driver)}, {"cuda_runtime", sql(r.cuda_runtime)},
        {"gpu_memory_bytes", sql(r.gpu_memory_bytes)}, {"h2d_gbps", sql(r.h2d_gbps)}, {"d2h_gbps", sql(r.d2h_gbps)},
        {"sweetspot_version", sql(r.sweetspot_version)}, {"git_revision", sql(r.git_revision)},
        {"command_line", sql(r.command_line)}, {"matrix_path", sql(r.matrix_path)},
        {"matrix_name", sql(r.matrix_name)}, {"matrix_hash", sql(r.matrix_hash)},
        {"matrix_text", sql(r.matrix_text)}, {"cells_total", sql(r.cells_total)},
    });
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

    const auto weight_bytes = c.weight_bytes();
    const auto budget_bytes = c.budget_bytes();
    std::optional<LatencyStats> lat;
    if (!o.timed_ms.empty()) lat = LatencyStats::of(o.timed_ms);
    auto stat = [&](double LatencyStats::*field) { return lat ? SqlValue{(*lat).*field} : SqlValue{}; };
    SqlValue streamed_gbps;
    if (lat && o.streamed_bytes) streamed_gbps = static_cast<double>(*o.streamed_bytes) / (lat->median * 1e6);

    insert_row(db_, "cells", {
        {"run_id", sql(run_id)}, {"cell_key", sql(key)}, {"cell_index", sql(cell_index)}, {"sweep", sql(c.sweep)},
        {"status", sql(o.status)}, {"reason", sql(o.reason)},
        {"model", sql(c.model.name)}, {"n_layer", sql(c.model.n_layer)}, {"n_embd", sql(c.model.n_embd)},
        {"n_head", sql(c.model.n_head)}, {"vocab_size", sql(c.model.vocab_size)},
        {"max_positions", sql(c.model.max_positions)}, {"n_params", sql(c.model.n_params())},
        {"variant", sql(c.variant)}, {"backend", sql(c.backend)}, {"dtype", sql(dtype_name(c.dtype))},
        {"batch", sql(c.batch)}, {"seq", sql(c.seq)}, {"streams", sql(c.streams)},
        {"prefetch", sql(c.prefetch.text())}, {"budget", sql(c.budget.text())}, {"budget_bytes", sql(budget_bytes)},
        {"weight_bytes", sql(weight_bytes)},
        {"oversubscription", sql(static_cast<double>(weight_bytes) / static_cast<double>(budget_bytes))},
        {"resident", sql(c.resident)}, {"evict", sql(c.evict)}, {"tf32", sql(c.tf32 ? 1 : 0)},
        {"activations", sql(c.activations)}, {"mode", sql(c.mode)}, {"weights", sql(c.weights)},
        {"warmups", sql(c.warmups)}, {"iterations", sql(c.iterations)},
        {"trace_iterations", sql(c.trace_iterations)}, {"seed", sql(static_cast<std::int64_t>(c.seed))},
        {"timeout_s", sql(c.timeout_s)}, {"debug_fault", sql(c.debug_fault)}, {"canonical", sql(c.canonical())},
        {"started_at", sql(o.started_at)}, {"finished_at", sql(o.finished_at)}, {"wall_s", sql(o.wall_s)},
        {"init_s", sql(o.init_s)}, {"exit_code", sql(o.exit_code)}, {"signal", sql(o.signal)},
        {"stderr_tail", sql(o.stderr_tail)},
        {"latency_median_ms", stat(&LatencyStats::median)}, {"latency_p10_ms", stat(&LatencyStats::p10)},
        {"latency_p90_ms", stat(&LatencyStats::p90)}, {"latency_min_ms", stat(&LatencyStats::min)},
        {"latency_max_ms", stat(&LatencyStats::max)}, {"latency_mean_ms", stat(&LatencyStats::mean)},
        {"tokens_per_s", sql(o.tokens_per_s)},
        {"resident_bytes", sql(o.resident_bytes)}, {"streamed_bytes", sql(o.streamed_bytes)},
        {"streamed_gbps", streamed_gbps}, {"device_weight_bytes", sql(o.device_weight_bytes)},
        {"device_used_bytes", sql(o.device_used_bytes)},
        {"check_reference", sql(o.check_reference)}, {"check_max_abs_err", sql(o.check_max_abs_err)},
        {"check_rel_err", sql(o.check_rel_err)}, {"check_tolerance", sql(o.check_tolerance)},
        {"peak_host_rss_bytes", sql(o.peak_host_rss_bytes)}, {"activation_bytes", sql(o.activation_bytes)},
    });
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
        " check_tolerance, peak_host_rss_bytes, activation_bytes, resident_bytes, streamed_bytes,"
        " device_weight_bytes, device_used_bytes FROM cells WHERE cell_key = ?");
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
    o.resident_bytes = opt_int(11);
    o.streamed_bytes = opt_int(12);
    o.device_weight_bytes = opt_int(13);
    o.device_used_bytes = opt_int(14);

    auto it = db_.prepare("SELECT phase, latency_ms FROM iterations WHERE cell_id = ? ORDER BY phase, iteration");
    it.bind(1, cell_id);
    while (it.step()) (it.text(0) == "warmup" ? o.warmup_ms : o.timed_ms).push_back(it.real(1));
    return o;
}

}  // namespace sweetspot
