#include "harness/store/store.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "harness/matrix/axes.hpp"
#include "harness/store/event_tables.hpp"
#include "harness/store/row_copy.hpp"
#include "harness/system/output_file.hpp"
#include "harness/system/system_info.hpp"
#include "harness/system/version.hpp"

namespace sweetspot {
namespace {

// A sweep checks the integrity of the database it is about to write with SQLite's quick_check
// (every page read once) where that is cheap: up to this size, a fraction of a second. Larger
// files (event tables of traced sweeps) are checked as SQLite reads them.
constexpr std::uintmax_t kQuickCheckMaxBytes = std::uintmax_t{256} << 20;

void configure_connection(Database& db) {
    db.exec("PRAGMA foreign_keys = ON");
}

// A new database: the schema is created under a temporary name and the file appears complete
// or not at all. False when another process created `path` first. The file is made with a rollback
// journal, which its commit empties into it: in WAL mode a checkpoint that fails on a full disk
// would leave the schema in a -wal file that the rename does not take along. The first opening for
// writing switches it to WAL.
bool create_database(const std::string& path, bool replace_empty_file) {
    OutputFile file(path);
    try {
        Database db(file.temp_path(), Database::Mode::read_write_create);
        Transaction tx(db);
        create_schema(db);
        auto ins = db.prepare("INSERT INTO schema_info (version, created_at, created_by) VALUES (?, ?, ?)");
        ins.bind(1, schema_version()).bind(2, utc_timestamp()).bind(3, std::string("sweetspot ") + kVersion).run();
        db.exec("PRAGMA user_version = " + std::to_string(schema_version()));
        tx.commit();
    } catch (const SqliteError& e) {
        throw SqliteError("cannot create " + path + " (" + e.what() + ")", e.code());
    }
    if (replace_empty_file) {
        file.commit();
        return true;
    }
    return file.commit_if_absent();
}

void quick_check(Database& db) {
    std::string problems;
    try {
        auto st = db.prepare("PRAGMA quick_check(5)");
        while (st.step())
            if (st.text(0) != "ok") problems += "\n  " + st.text(0);
    } catch (const SqliteError& e) {
        // A page damaged where quick_check starts stops it with an error rather than a row.
        if (!e.damaged()) throw;
        problems = std::string("\n  ") + e.what();
    }
    if (!problems.empty())
        throw SchemaError(db.path() + " is damaged (SQLite's quick_check):" + problems +
                          "\nRestore it from a copy, or recover what it holds with `sqlite3 " + db.path() +
                          " .recover | sqlite3 NEW.db`; this sweep writes nothing to it.");
}

// Runs that say `running` while nobody holds the database's sweep lock were killed before they
// could close (SIGKILL, a crash, the machine): they say so from now on.
void close_abandoned_runs(Database& db) {
    db.prepare("UPDATE runs SET status = 'interrupted', stop_reason = ?1 WHERE status = 'running'")
        .bind(1, "the sweep's process ended without closing the run (killed, crashed, or the machine stopped); "
                 "found when the next sweep opened the database")
        .run();
}

// How a reader opens `path`. A reader leaves no -wal or -shm file beside a database nobody is
// writing when it may write the file and its folder (Database::Mode::query_only), except where the
// -wal file holds transactions a killed sweep left: the last connection to close folds them into the
// database, which only a writer should do.
Database::Mode reading_mode(const std::string& path) {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    const bool writable = ::access(path.c_str(), W_OK) == 0 && ::access(dir.empty() ? "." : dir.c_str(), W_OK) == 0;
    return writable && !has_wal_frames(path) ? Database::Mode::query_only : Database::Mode::read_only;
}

}  // namespace

int check_results_database(Database& db) {
    bool ours = false;
    try {
        ours = has_table(db, "schema_info");
    } catch (const SqliteError& e) {
        // A file require_database_file let through: SQLite's own header, but a page SQLite cannot read.
        throw std::runtime_error(db.path() + (e.damaged() ? " is damaged" : " cannot be read") + " (SQLite: " + e.what() +
                                 "); restore it from a copy");
    }
    if (!ours) throw std::runtime_error(db.path() + " is an SQLite database but not a sweetspot results database");
    auto st = db.prepare("SELECT version FROM schema_info");
    if (!st.step()) throw std::runtime_error(db.path() + ": schema_info is empty");
    const auto v = st.int64(0);
    if (v < kOldestReadableSchemaVersion || v > schema_version())
        throw std::runtime_error(db.path() + " has schema version " + std::to_string(v) + "; this sweetspot reads versions " +
                                 std::to_string(kOldestReadableSchemaVersion) + " to " + std::to_string(schema_version()));
    check_schema(db, static_cast<int>(v));
    return static_cast<int>(v);
}

Store Store::open(const std::string& path, Access access) {
    namespace fs = std::filesystem;
    require_database_file(path, true);
    if (const auto dir = fs::path(path).parent_path(); !dir.empty()) fs::create_directories(dir);
    std::error_code ec;
    const bool exists = fs::exists(path, ec);
    if (!exists || fs::file_size(path, ec) == 0) create_database(path, exists);
    // Checked on a read-only connection first: a file that is not ours, of a schema version we do
    // not know, lacking a column its version has, or (for a sweep) damaged, is refused before
    // anything (the WAL switch, a view) changes it.
    {
        Database probe(path, Database::Mode::read_only);
        check_results_database(probe);
        if (access == Access::exclusive && fs::file_size(path, ec) <= kQuickCheckMaxBytes) quick_check(probe);
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
    upgrade_schema(db, check_results_database(db));
    if (lock) close_abandoned_runs(db);
    tx.commit();
    return Store(std::move(db), std::move(lock));
}

Store Store::open_read_only(const std::string& path) {
    require_database_file(path);
    Database db(path, reading_mode(path));
    if (!can_read(db)) {
        // A WAL database in a folder this process cannot write: SQLite cannot create the
        // shared-memory file a reader needs. Nobody can be writing it from here either, so it
        // is read as it stands, unless its -wal file holds transactions (a sweep killed before it
        // could fold them in), which reading it so would silently leave out. (A file damaged past
        // its header fails here too, and is named below.)
        if (has_wal_frames(path))
            throw std::runtime_error(path + " cannot be read where it is: it is a WAL database in a folder this user cannot "
                                            "write, and " + path + "-wal holds transactions not yet in it. Copy both files "
                                            "to a folder you can write and read the copy, or have the folder's owner fold "
                                            "them in: sqlite3 " + path + " 'PRAGMA wal_checkpoint(TRUNCATE)'");
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
        {"host_memory_gbps", sql(r.host_memory_gbps)},
        {"host_update_gbps", sql(r.host_update_gbps)},
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

RunInfo host_run_info() {
    const SystemInfo sys = query_system_info();
    RunInfo info;
    info.started_at = utc_timestamp();
    info.host = sys.host;
    info.os = sys.os;
    info.cpu_model = sys.cpu_model;
    info.cpu_count = sys.cpu_count;
    info.sweetspot_version = kVersion;
    info.git_revision = git_revision();
    return info;
}

void Store::finish_run(std::int64_t run_id, const std::string& status, const std::string& reason) {
    db_.prepare("UPDATE runs SET status = ?1, finished_at = ?2, stop_reason = ?3 WHERE run_id = ?4")
        .bind(1, status)
        .bind(2, utc_timestamp())
        .bind(3, reason.empty() ? std::optional<std::string>() : std::optional<std::string>(reason))
        .bind(4, run_id)
        .run();
}

std::set<std::string> Store::ok_keys() {
    std::set<std::string> keys;
    auto st = db_.prepare("SELECT cell_key FROM cells WHERE status = 'ok'");
    while (st.step()) keys.insert(st.text(0));
    return keys;
}

std::int64_t Store::insert_cell(std::int64_t run_id, int cell_index, const CellParams& c, const Row& values) {
    const std::string key = c.key();
    Row row = {{"run_id", sql(run_id)}, {"cell_key", sql(key)}, {"cell_index", sql(cell_index)}, {"sweep", sql(c.sweep)},
               {"canonical", sql(c.canonical())}};
    if (const auto id = replace_cell(key)) row.emplace_back("cell_id", sql(*id));
    for (const Axis& axis : axes())
        if (axis.has_column()) row.emplace_back(axis.column, axis_column_value(axis, axis.column_text(c)));
    row.insert(row.end(), values.begin(), values.end());
    insert_row(db_, "cells", row);
    return db_.last_insert_rowid();
}

std::optional<std::int64_t> Store::replace_cell(const std::string& key) {
    auto earlier = db_.prepare("SELECT cell_id FROM cells WHERE cell_key = ?");
    earlier.bind(1, key);
    if (!earlier.step()) return std::nullopt;
    const std::int64_t id = earlier.int64(0);
    keep_as_history(db_, key);
    db_.prepare("DELETE FROM cells WHERE cell_id = ?").bind(1, id).run();
    return id;
}

void Store::insert_iterations(std::int64_t cell_id, const std::string& phase, const std::vector<double>& latencies_ms) {
    auto st = db_.prepare("INSERT INTO iterations (cell_id, phase, iteration, latency_ms) VALUES (?, ?, ?, ?)");
    for (std::size_t i = 0; i < latencies_ms.size(); ++i)
        insert_values(st, cell_id, phase, static_cast<std::int64_t>(i), latencies_ms[i]);
}

void Store::insert_phases(std::int64_t cell_id, const std::vector<CellPhase>& phases) {
    auto next = db_.prepare("SELECT coalesce(max(position) + 1, 0) FROM cell_phases WHERE cell_id = ?");
    next.bind(1, cell_id);
    next.step();
    const std::int64_t first = next.int64(0);
    auto st = db_.prepare("INSERT INTO cell_phases (cell_id, position, phase, seconds) VALUES (?, ?, ?, ?)");
    for (std::size_t i = 0; i < phases.size(); ++i)
        insert_values(st, cell_id, first + static_cast<std::int64_t>(i), phases[i].name, phases[i].seconds);
}

std::optional<std::int64_t> Store::import_cell(const std::string& scratch_path, const std::string& key, std::int64_t run_id,
                                               int cell_index, const Row& parent,
                                               const std::vector<CellPhase>& more_phases) {
    Attached scratch(db_, read_only_uri(scratch_path), "scratch");
    Transaction tx(db_);
    auto found = db_.prepare("SELECT cell_id, check_reference_key FROM scratch.cells WHERE cell_key = ?");
    found.bind(1, key);
    if (!found.step()) return std::nullopt;
    const std::int64_t scratch_cell = found.int64(0);
    const std::optional<std::string> reference =
        found.is_null(1) ? std::nullopt : std::optional<std::string>(found.text(1));
    const std::optional<std::int64_t> earlier_id = replace_cell(key);

    // The row by column name: the cell's values where the runner has none, the runner's where it has.
    const std::vector<std::string> theirs = table_columns(db_, "scratch", "cells");
    std::string names, values;
    int next_parameter = 5;
    std::vector<const SqlValue*> bound;
    for (const std::string& column : table_columns(db_, "main", "cells")) {
        if (column == "cell_id" && !earlier_id) continue;
        const auto given = std::find_if(parent.begin(), parent.end(), [&](const auto& p) { return p.first == column; });
        std::string value;
        if (column == "cell_id") value = "?4";
        else if (column == "run_id") value = "?2";
        else if (column == "cell_index") value = "?3";
        else if (given != parent.end()) {
            value = "?" + std::to_string(next_parameter++);
            bound.push_back(&given->second);
        } else if (std::find(theirs.begin(), theirs.end(), column) != theirs.end()) {
            value = "t." + quoted(column);
        } else {
            continue;
        }
        names += (names.empty() ? "" : ", ") + quoted(column);
        values += (values.empty() ? "" : ", ") + value;
    }
    auto insert = db_.prepare("INSERT INTO main.cells (" + names + ") SELECT " + values +
                              " FROM scratch.cells t WHERE t.cell_id = ?1");
    insert.bind(1, scratch_cell).bind(2, run_id).bind(3, cell_index);
    if (earlier_id) insert.bind(4, *earlier_id);
    for (std::size_t i = 0; i < bound.size(); ++i) bind_sql(insert, static_cast<int>(i) + 5, *bound[i]);
    insert.run();
    const std::int64_t cell_id = db_.last_insert_rowid();

    db_.exec("INSERT OR IGNORE INTO main.StringIds (value) SELECT value FROM scratch.StringIds");
    std::vector<std::string> copies;
    for (const std::string& table : kCellTables) copies.push_back(copy_rows_sql(db_, "scratch", table, "cell_id"));
    copy_rows(db_, copies, scratch_cell, cell_id);
    if (reference)
        db_.prepare("INSERT OR IGNORE INTO main.reference_logits SELECT * FROM scratch.reference_logits WHERE reference_key = ?")
            .bind(1, *reference)
            .run();
    insert_phases(cell_id, more_phases);
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

}  // namespace sweetspot
