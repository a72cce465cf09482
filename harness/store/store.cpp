#include "harness/store/store.hpp"

#include "harness/collect/event_totals.hpp"
#include "harness/matrix/axes.hpp"
#include "harness/store/event_tables.hpp"
#include "harness/store/schema.hpp"
#include "harness/store/sql_values.hpp"
#include "harness/system/output_file.hpp"
#include "harness/system/system_info.hpp"
#include "harness/system/version.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <utility>

namespace sweetspot {
namespace {

void configure_connection(Database& db) {
    db.exec("PRAGMA foreign_keys = ON");
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

std::optional<double> noise_pct(const std::vector<double>& samples_ms) {
    if (samples_ms.size() < 2) return std::nullopt;
    double sum = 0;
    for (const double v : samples_ms) sum += v;
    const double n = static_cast<double>(samples_ms.size()), mean = sum / n;
    if (mean <= 0) return std::nullopt;
    double squares = 0;
    for (const double v : samples_ms) squares += (v - mean) * (v - mean);
    return 100.0 * std::sqrt(squares / (n - 1)) / mean;
}

int check_results_database(Database& db) {
    bool ours = false;
    try {
        ours = has_table(db, "schema_info");
    } catch (const SqliteError& e) {
        throw std::runtime_error(db.path() + " is not a sweetspot results database (" + e.what() + ")");
    }
    if (!ours) throw std::runtime_error(db.path() + " is an SQLite database but not a sweetspot results database");
    auto st = db.prepare("SELECT version FROM schema_info");
    if (!st.step()) throw std::runtime_error(db.path() + ": schema_info is empty");
    const auto v = st.int64(0);
    if (v < kOldestReadableSchemaVersion || v > kSchemaVersion)
        throw std::runtime_error(db.path() + " has schema version " + std::to_string(v) + "; this sweetspot reads versions " +
                                 std::to_string(kOldestReadableSchemaVersion) + " to " + std::to_string(kSchemaVersion));
    return static_cast<int>(v);
}

namespace {

// Every axis that has a `cells` column, in the column's type.
void append_parameters(Row& row, const CellParams& c) {
    for (const Axis& axis : axes())
        if (axis.column_type != Axis::Column::none) row.emplace_back(axis.column, axis_column_value(axis, axis.get(c)));
}

// The per-cell totals and the collector's verdict on UM profiling, as `cells` columns.
void append_event_totals(Row& row, const CellEvents& e) {
    const EventTotals t = totals_of(e);
    const std::string um_profiling = e.um_supported ? "supported" : e.um_note.empty() ? "not supported" : e.um_note;
    row.insert(row.end(), {
        {"um_profiling", sql(um_profiling)}, {"um_htod_bytes", sql(t.um_htod_bytes)},
        {"um_dtoh_bytes", sql(t.um_dtoh_bytes)}, {"gpu_page_faults", sql(t.gpu_page_faults)},
        {"cpu_page_faults", sql(t.cpu_page_faults)}, {"thrashing", sql(t.thrashing)},
        {"throttling", sql(t.throttling)}, {"remote_maps", sql(t.remote_maps)},
        {"kernel_busy_ms", sql(t.kernel_busy_ms)}, {"copy_ms", sql(t.copy_ms)},
        {"copy_compute_overlap_ms", sql(t.copy_compute_overlap_ms)}, {"dropped_records", sql(t.dropped_records)},
        {"collector_overhead_ms", sql(t.collector_overhead_ms)},
    });
}

// A new database: the schema is created under a temporary name and the file appears complete
// or not at all. False when another process created `path` first.
bool create_database(const std::string& path, bool replace_empty_file) {
    OutputFile file(path);
    {
        Database db(file.temp_path(), Database::Mode::read_write_create);
        db.exec("PRAGMA journal_mode = WAL");
        Transaction tx(db);
        db.exec(kSchemaSql);
        auto ins = db.prepare("INSERT INTO schema_info (version, created_at, created_by) VALUES (?, ?, ?)");
        ins.bind(1, kSchemaVersion).bind(2, utc_timestamp()).bind(3, std::string("sweetspot ") + kVersion).run();
        db.exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
        db.exec(kLaterViewsSql);
        tx.commit();
    }
    if (replace_empty_file) {
        file.commit();
        return true;
    }
    return file.commit_if_absent();
}

// The rows of the `cells` of `schema` that `condition` (on c, binding ?2) selects, into this
// database's cell_history under `key`: every column, whatever the schema version adds, and the
// iterations, as JSON.
template <class Value>
void insert_history(Database& db, const std::string& key, const std::string& schema, const std::string& condition,
                    const Value& value) {
    // json_object for the first columns, then json_insert for the rest: an SQL function takes
    // at most 127 arguments, and `cells` has more columns than that makes pairs.
    constexpr int kPairsPerCall = 60;
    std::vector<std::string> names;
    auto columns = db.prepare("SELECT name FROM pragma_table_info('cells', ?) ORDER BY cid");
    columns.bind(1, schema);
    while (columns.step()) names.push_back(columns.text(0));
    std::string row;
    for (std::size_t first = 0; first < names.size(); first += kPairsPerCall) {
        std::string pairs;
        for (std::size_t i = first; i < std::min(names.size(), first + kPairsPerCall); ++i)
            pairs += ", " + (first == 0 ? "'" + names[i] + "'" : "'$.\"" + names[i] + "\"'") + ", c.\"" + names[i] + "\"";
        row = first == 0 ? "json_object(" + pairs.substr(2) + ")" : "json_insert(" + row + pairs + ")";
    }
    db.prepare("INSERT INTO cell_history (cell_key, superseded_at, cell, iterations)"
               " SELECT ?3, ?1, " + row + ","
               " (SELECT json_group_array(json_object('phase', i.phase, 'iteration', i.iteration, 'latency_ms', i.latency_ms))"
               "  FROM " + schema + ".iterations i WHERE i.cell_id = c.cell_id)"
               " FROM " + schema + ".cells c WHERE " + condition)
        .bind(1, utc_timestamp())
        .bind(2, value)
        .bind(3, key)
        .run();
}

}  // namespace

void keep_as_history(Database& db, const std::string& key, const std::string& schema) {
    insert_history(db, key, schema, "c.cell_key = ?2", key);
}

void rekey_cells(Database& db) {
    struct Stored {
        std::int64_t cell_id;
        std::string old_key, canonical;
    };
    // By the key their parameters have now, in the order they were recorded (cell_id).
    std::map<std::string, std::vector<Stored>> by_key;
    auto cells = db.prepare("SELECT cell_id, cell_key, canonical FROM cells ORDER BY cell_id");
    while (cells.step()) {
        const CellParams c = CellParams::from_canonical(cells.text(2));
        by_key[c.key()].push_back({cells.int64(0), cells.text(1), c.canonical()});
    }
    // Everything moves to its new key through a temporary one ("rekey:" + key), so that a new
    // key cannot meet a row still under an old one midway.
    for (const auto& [key, stored] : by_key) {
        const std::string moving = "rekey:" + key;
        for (const Stored& cell : stored)
            db.prepare("UPDATE cell_history SET cell_key = ?1 WHERE cell_key = ?2").bind(1, moving).bind(2, cell.old_key).run();
        // Cells that differed only in what the key no longer covers are one cell now: the last
        // recorded stays, the earlier ones become its history, as a rerun would have made them.
        for (std::size_t i = 0; i + 1 < stored.size(); ++i) {
            insert_history(db, moving, "main", "c.cell_id = ?2", stored[i].cell_id);
            db.prepare("DELETE FROM cells WHERE cell_id = ?").bind(1, stored[i].cell_id).run();
        }
        db.prepare("UPDATE cells SET cell_key = ?1, canonical = ?2 WHERE cell_id = ?3")
            .bind(1, moving)
            .bind(2, stored.back().canonical)
            .bind(3, stored.back().cell_id)
            .run();
    }
    db.exec("UPDATE cell_history SET cell_key = substr(cell_key, 7) WHERE cell_key LIKE 'rekey:%';"
            "UPDATE cells SET cell_key = substr(cell_key, 7) WHERE cell_key LIKE 'rekey:%';");
}

Store Store::open(const std::string& path, Access access) {
    namespace fs = std::filesystem;
    if (const auto dir = fs::path(path).parent_path(); !dir.empty()) fs::create_directories(dir);
    std::error_code ec;
    const bool exists = fs::exists(path, ec);
    if (!exists || fs::file_size(path, ec) == 0) create_database(path, exists);
    // Checked on a read-only connection first: a file that is not ours, or of a schema version
    // we do not know, is refused before anything (the WAL switch, a view) changes it.
    {
        Database probe(path, Database::Mode::read_only);
        check_results_database(probe);
    }
    std::optional<FileLock> lock;
    if (access == Access::exclusive) {
        lock = FileLock::try_lock(path);
        if (!lock)
            throw std::runtime_error(path + " is being written by another sweetspot run; wait for it to finish, or give "
                                            "this run another --db");
    }
    Database db(path, Database::Mode::read_write);
    db.exec("PRAGMA journal_mode = WAL");
    configure_connection(db);
    Transaction tx(db);
    const int version = check_results_database(db);
    if (version <= 2) db.exec(kUpgradeV2Sql);
    if (version <= 3) db.exec(kUpgradeV3Sql);
    if (version <= 4) db.exec(kUpgradeV4Sql);
    if (version <= 5) db.exec(kUpgradeV5Sql);
    if (version <= 6) db.exec(kUpgradeV6Sql);
    if (version <= 7) {
        rekey_cells(db);
        db.exec(kUpgradeV7Sql);
    }
    if (version <= 8) db.exec(kUpgradeV8Sql);
    if (version <= 9) db.exec(kUpgradeV9Sql);
    db.exec(kLaterViewsSql);
    tx.commit();
    return Store(std::move(db), std::move(lock));
}

Store Store::open_read_only(const std::string& path) {
    if (!std::filesystem::exists(path)) throw std::runtime_error("no such database: " + path);
    Database db(path, Database::Mode::read_only);
    if (!can_read(db)) {
        // A WAL database in a folder this process cannot write: SQLite cannot create the
        // shared-memory file a reader needs. Nobody can be writing it from here either, so it
        // is read as it stands. (A file that is not SQLite fails here too, and is named below.)
        db = Database(path, Database::Mode::read_only_immutable);
    }
    configure_connection(db);
    check_results_database(db);
    return Store(std::move(db), std::nullopt);
}

std::int64_t Store::begin_run(const RunInfo& r) {
    Transaction tx(db_);
    insert_row(db_, "runs", {
        {"started_at", sql(r.started_at)}, {"status", sql(std::string("running"))}, {"host", sql(r.host)},
        {"os", sql(r.os)}, {"cpu_model", sql(r.cpu_model)}, {"cpu_count", sql(r.cpu_count)},
        {"gpu_name", sql(r.gpu_name)}, {"gpu_driver", sql(r.gpu_driver)}, {"cuda_runtime", sql(r.cuda_runtime)},
        {"gpu_memory_bytes", sql(r.gpu_memory_bytes)}, {"h2d_gbps", sql(r.h2d_gbps)}, {"d2h_gbps", sql(r.d2h_gbps)},
        {"sweetspot_version", sql(r.sweetspot_version)}, {"git_revision", sql(r.git_revision)},
        {"command_line", sql(r.command_line)}, {"matrix_path", sql(r.matrix_path)},
        {"matrix_name", sql(r.matrix_name)}, {"matrix_hash", sql(r.matrix_hash)},
        {"matrix_text", sql(r.matrix_text)}, {"cells_total", sql(r.cells_total)},
        {"concurrent_managed_access", sql(r.managed.concurrent_managed_access)},
        {"pageable_memory_access", sql(r.managed.pageable_memory_access)},
        {"pageable_memory_access_uses_host_page_tables", sql(r.managed.pageable_memory_access_uses_host_page_tables)},
        {"direct_managed_mem_access_from_host", sql(r.managed.direct_managed_mem_access_from_host)},
    });
    const std::int64_t run_id = db_.last_insert_rowid();
    for (const ManagedRate& m : r.managed_rates) {
        insert_row(db_, "managed_probe", {{"run_id", sql(run_id)}, {"operation", sql(m.operation)}, {"bytes", sql(m.bytes)},
                                          {"calls", sql(m.calls)}, {"gbps", sql(m.gbps)}, {"host_ms", sql(m.host_ms)}});
    }
    if (r.gpu_name)
        insert_row(db_, "TARGET_INFO_GPU", {{"run_id", sql(run_id)}, {"id", sql(0)}, {"name", sql(r.gpu_name)},
                                            {"totalMemory", sql(r.gpu_memory_bytes)}});
    tx.commit();
    return run_id;
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
    keep_as_history(db_, key);
    db_.prepare("DELETE FROM cells WHERE cell_key = ?").bind(1, key).run();

    const auto weight_bytes = c.weight_bytes();
    const auto budget_bytes = c.budget_bytes();
    std::optional<LatencyStats> lat;
    if (!o.timed_ms.empty()) lat = LatencyStats::of(o.timed_ms);
    auto stat = [&](double LatencyStats::*field) { return lat ? SqlValue{(*lat).*field} : SqlValue{}; };
    SqlValue streamed_gbps;
    if (lat && o.streamed_bytes) streamed_gbps = static_cast<double>(*o.streamed_bytes) / (lat->median * 1e6);

    Row row = {
        {"run_id", sql(run_id)}, {"cell_key", sql(key)}, {"cell_index", sql(cell_index)}, {"sweep", sql(c.sweep)},
        {"status", sql(enum_name(o.status))}, {"reason", sql(o.reason)}, {"n_params", sql(c.model.n_params())},
        {"budget_bytes", sql(budget_bytes)}, {"weight_bytes", sql(weight_bytes)},
        {"oversubscription", sql(static_cast<double>(weight_bytes) / static_cast<double>(budget_bytes))},
        {"canonical", sql(c.canonical())},
        {"started_at", sql(o.started_at)}, {"finished_at", sql(o.finished_at)}, {"wall_s", sql(o.wall_s)},
        {"init_s", sql(o.init_s)}, {"exit_code", sql(o.exit_code)}, {"signal", sql(o.signal)},
        {"stderr_tail", sql(o.stderr_tail)},
        {"latency_median_ms", stat(&LatencyStats::median)}, {"latency_p10_ms", stat(&LatencyStats::p10)},
        {"latency_p90_ms", stat(&LatencyStats::p90)}, {"latency_min_ms", stat(&LatencyStats::min)},
        {"latency_max_ms", stat(&LatencyStats::max)}, {"latency_mean_ms", stat(&LatencyStats::mean)},
        {"tokens_per_s", sql(o.tokens_per_s)},
        {"resident_bytes", sql(o.resident_bytes)}, {"streamed_bytes", sql(o.streamed_bytes)},
        {"streamed_gbps", streamed_gbps}, {"device_weight_bytes", sql(o.device_weight_bytes)},
        {"pinned_host_bytes", sql(o.pinned_host_bytes)},
        {"device_used_bytes", sql(o.device_used_bytes)}, {"predicted_alloc_bytes", sql(o.predicted_alloc_bytes)},
        {"predicted_peak_bytes", sql(o.predicted_peak_bytes)},
        {"predicted_host_peak_bytes", sql(o.predicted_host_peak_bytes)},
        {"predicted_host_alloc_bytes", sql(o.predicted_host_alloc_bytes)},
        {"gpu_used_before_bytes", sql(o.gpu_used_before_bytes)},
        {"gpu_context_bytes", sql(o.gpu_context_bytes)}, {"gpu_peak_bytes", sql(o.gpu_peak_bytes)},
        {"gpu_own_peak_bytes", sql(o.gpu_own_peak_bytes)}, {"gpu_other_processes", sql(o.gpu_other_processes)},
        {"gpu_other_bytes", sql(o.gpu_other_bytes)}, {"gpu_memory_readings", sql(o.gpu_memory_readings)},
        {"gpu_memory_note", o.gpu_memory_note.empty() ? SqlValue{} : sql(o.gpu_memory_note)},
        {"check_reference", sql(o.check_reference)}, {"check_max_abs_err", sql(o.check_max_abs_err)},
        {"check_rel_err", sql(o.check_rel_err)}, {"check_tolerance", sql(o.check_tolerance)},
        {"check_reference_key", o.reference ? sql(o.reference->key) : SqlValue{}},
        {"check_reference_computed",
         o.check_reference_computed ? sql(std::int64_t{*o.check_reference_computed ? 1 : 0}) : SqlValue{}},
        {"noise_pct", sql(o.noise_pct)}, {"noisy", sql(o.noisy ? 1 : 0)},
        {"peak_host_rss_bytes", sql(o.peak_host_rss_bytes)}, {"activation_bytes", sql(o.activation_bytes)},
        {"launches_per_forward", sql(o.launches_per_forward)}, {"gpu", sql(o.gpu)},
    };
    append_parameters(row, c);
    if (o.events) append_event_totals(row, *o.events);
    insert_row(db_, "cells", row);
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
    insert_phase("traced", o.traced_ms);
    auto ph = db_.prepare("INSERT INTO cell_phases (cell_id, position, phase, seconds) VALUES (?, ?, ?, ?)");
    for (std::size_t i = 0; i < o.phases.size(); ++i) {
        ph.reset();
        ph.bind(1, cell_id).bind(2, static_cast<std::int64_t>(i)).bind(3, o.phases[i].name).bind(4, o.phases[i].seconds).run();
    }
    if (o.events) write_events(db_, cell_id, *o.events);
    if (o.reference) keep_reference(*o.reference);
    tx.commit();
    return cell_id;
}

std::optional<ReferenceLogits> Store::load_reference(const std::string& key) {
    if (!has_table(db_, "reference_logits")) return std::nullopt;
    auto st = db_.prepare("SELECT model, batch, seq, vocab, logits FROM reference_logits WHERE reference_key = ?");
    st.bind(1, key);
    if (!st.step()) return std::nullopt;
    ReferenceLogits r{key, st.text(0), static_cast<int>(st.int64(1)), static_cast<int>(st.int64(2)),
                      static_cast<int>(st.int64(3)), st.floats(4)};
    // A row of another size than its shape says is not the reference it claims to be.
    if (r.logits.size() != static_cast<std::size_t>(r.batch) * r.seq * r.vocab) return std::nullopt;
    return r;
}

void Store::keep_reference(const ReferenceLogits& r) {
    db_.prepare("INSERT OR IGNORE INTO reference_logits (reference_key, model, batch, seq, vocab, logits)"
                " VALUES (?, ?, ?, ?, ?, ?)")
        .bind(1, r.key)
        .bind(2, r.model)
        .bind(3, r.batch)
        .bind(4, r.seq)
        .bind(5, r.vocab)
        .bind_blob(6, r.logits)
        .run();
}

std::optional<CellOutcome> Store::load_outcome(const std::string& key) {
    auto st = db_.prepare(
        "SELECT cell_id, status, reason, init_s, tokens_per_s, check_reference, check_max_abs_err, check_rel_err,"
        " check_tolerance, peak_host_rss_bytes, activation_bytes, resident_bytes, streamed_bytes,"
        " device_weight_bytes, device_used_bytes, um_profiling, dropped_records, launches_per_forward,"
        " gpu_used_before_bytes, gpu_context_bytes, gpu_peak_bytes, gpu_own_peak_bytes, gpu_other_processes,"
        " gpu_other_bytes, gpu_memory_readings, gpu_memory_note, check_reference_key, noise_pct, noisy,"
        " check_reference_computed, pinned_host_bytes"
        " FROM cells WHERE cell_key = ?");
    st.bind(1, key);
    if (!st.step()) return std::nullopt;
    auto opt_real = [&](int i) { return st.is_null(i) ? std::nullopt : std::optional<double>(st.real(i)); };
    auto opt_int = [&](int i) { return st.is_null(i) ? std::nullopt : std::optional<std::int64_t>(st.int64(i)); };
    CellOutcome o;
    const auto cell_id = st.int64(0);
    o.status = parse_enum<CellStatus>(st.text(1)).value();
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
    o.launches_per_forward = opt_int(17);
    o.gpu_used_before_bytes = opt_int(18);
    o.gpu_context_bytes = opt_int(19);
    o.gpu_peak_bytes = opt_int(20);
    o.gpu_own_peak_bytes = opt_int(21);
    o.gpu_other_processes = opt_int(22);
    o.gpu_other_bytes = opt_int(23);
    o.gpu_memory_readings = opt_int(24);
    if (!st.is_null(25)) o.gpu_memory_note = st.text(25);
    if (!st.is_null(26)) o.reference = load_reference(st.text(26));
    o.noise_pct = opt_real(27);
    o.noisy = st.int64(28) != 0;
    if (!st.is_null(29)) o.check_reference_computed = st.int64(29) != 0;
    o.pinned_host_bytes = opt_int(30);
    // um_profiling is set exactly when the cell's events were recorded.
    if (!st.is_null(15)) {
        o.events = load_events(db_, cell_id);
        o.events->um_supported = st.text(15) == "supported";
        if (!o.events->um_supported) o.events->um_note = st.text(15);
        o.events->dropped_records = opt_int(16).value_or(0);
    }

    auto it = db_.prepare("SELECT phase, latency_ms FROM iterations WHERE cell_id = ? ORDER BY phase, iteration");
    it.bind(1, cell_id);
    while (it.step()) {
        const auto phase = it.text(0);
        (phase == "warmup" ? o.warmup_ms : phase == "timed" ? o.timed_ms : o.traced_ms).push_back(it.real(1));
    }
    auto ph = db_.prepare("SELECT phase, seconds FROM cell_phases WHERE cell_id = ? ORDER BY position");
    ph.bind(1, cell_id);
    while (ph.step()) o.phases.push_back({ph.text(0), ph.real(1)});
    return o;
}

}  // namespace sweetspot
