#include "harness/store/merge.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "harness/store/row_copy.hpp"
#include "harness/store/sqlite.hpp"
#include "harness/store/store.hpp"

namespace sweetspot {
namespace {

namespace fs = std::filesystem;

// The tables whose rows belong to one run (besides `runs`).
const std::vector<std::string> kRunTables = {"managed_probe", "TARGET_INFO_GPU", "kernel_timings"};

// The statements that copy, for each of `tables`, the rows of `shard` whose `key_column` is the
// first parameter into the main database with `key_column` = the second; made once per shard.
std::vector<std::string> row_copies(Database& db, const std::string& shard, const std::vector<std::string>& tables,
                                    const std::string& key_column) {
    std::vector<std::string> copies;
    for (const std::string& table : tables) copies.push_back(copy_rows_sql(db, shard, table, key_column));
    return copies;
}

// The columns of main's `table` but `skip` (the id the merge gives anew), quoted, with `prefix`.
std::string column_list(Database& db, const std::string& table, const std::string& skip, const std::string& prefix = "") {
    std::string out;
    for (const std::string& n : table_columns(db, "main", table))
        if (n != skip) out += (out.empty() ? "" : ", ") + prefix + quoted(n);
    return out;
}


// Refuses what merge cannot take: a file that is not a results database of a version this
// sweetspot reads, or a cell or history row that names a run the shard's `runs` lacks (merge could
// not tell which run measured it). Returns the schema version.
int check_shard(Database& db) {
    const int version = check_results_database(db);
    auto cells = db.prepare(
        "SELECT cell_id, cell_key, run_id, count(*) OVER () FROM cells c"
        " WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = c.run_id) ORDER BY cell_id LIMIT 1");
    if (cells.step()) {
        const std::int64_t others = cells.int64(3) - 1;
        throw std::runtime_error("cell " + std::to_string(cells.int64(0)) + " (cell_key " + cells.text(1) + ") names run " +
                                 std::to_string(cells.int64(2)) + ", which is not in its runs table" +
                                 (others > 0 ? " (nor are the runs of " + std::to_string(others) + " more cells)" : "") +
                                 "; merge cannot tell which run measured it");
    }
    if (!has_table(db, "cell_history")) return version;  // before version 6
    auto history = db.prepare(
        "SELECT history_id, cell_key, json_extract(cell, '$.run_id') AS run FROM cell_history"
        " WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = run) ORDER BY history_id LIMIT 1");
    if (history.step())
        throw std::runtime_error("cell_history row " + std::to_string(history.int64(0)) + " (cell_key " + history.text(1) +
                                 ") names run " + (history.is_null(2) ? "none" : history.text(2)) +
                                 ", which is not in its runs table; merge cannot tell which run measured it");
    return version;
}

// Copies of shards that merge reads instead of the shards themselves, in a folder of their own
// under the temporary folder (TMPDIR), removed with everything in it.
class ShardCopies {
public:
    ShardCopies() {
        std::string tmpl = (fs::temp_directory_path() / "sweetspot-merge-XXXXXX").string();
        if (!mkdtemp(tmpl.data())) throw std::system_error(errno, std::generic_category(), "mkdtemp " + tmpl);
        folder_ = tmpl;
    }
    ~ShardCopies() {
        std::error_code ec;
        fs::remove_all(folder_, ec);
    }
    ShardCopies(const ShardCopies&) = delete;
    ShardCopies& operator=(const ShardCopies&) = delete;

    // Copies the shard's database file and its -wal file, where it has one, and returns the copy's
    // path. The copy is consistent because nothing writes the shard meanwhile: SQLite cannot write
    // a database in a folder where it cannot create files, and a sweetspot that writes to one of an
    // older schema version upgrades it first.
    std::string add(const std::string& shard) {
        const fs::path copy = folder_ / (std::to_string(copies_++) + "-" + fs::path(shard).filename().string());
        fs::copy_file(shard, copy);
        if (fs::exists(shard + "-wal")) fs::copy_file(shard + "-wal", copy.string() + "-wal");
        // The copies are opened for writing, however read-only the shard's files are.
        for (const fs::path& file : {copy, fs::path(copy.string() + "-wal")})
            if (fs::exists(file)) fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
        return copy.string();
    }

private:
    fs::path folder_;
    int copies_ = 0;
};

// Checks the shard at `path` and returns the URI that attaches it: the shard itself, or an upgraded
// copy in `copies` where it is of an older schema version or is a WAL database whose -wal file
// SQLite cannot read where it is (read as it stands, immutable, it would lose what the -wal file
// holds). Throws for a shard that merge cannot take.
std::string ready_shard(const std::string& path, std::optional<ShardCopies>& copies) {
    require_database_file(path);
    const auto upgraded_copy = [&] {
        if (!copies) copies.emplace();
        const std::string copy = copies->add(path);
        {
            Database db(copy, Database::Mode::read_only);
            check_shard(db);
        }
        Store::open(copy);
        return read_only_uri(copy, false);
    };
    Database db(path, Database::Mode::read_only);
    const bool in_place = can_read(db);
    if (!in_place && has_wal_frames(path)) return upgraded_copy();
    if (!in_place) db = Database(path, Database::Mode::read_only_immutable);
    if (check_shard(db) < schema_version()) return upgraded_copy();
    return read_only_uri(path, !in_place);
}

// Merges the shard attached as `shard` into the main database, inside the caller's transaction.
class ShardMerge {
public:
    ShardMerge(Database& db, std::string shard)
        : db_(db),
          shard_(std::move(shard)),
          run_copies_(row_copies(db, shard_, kRunTables, "run_id")),
          cell_copies_(row_copies(db, shard_, kCellTables, "cell_id")),
          cell_copy_(cell_copy_sql(db, shard_)),
          // A measurement is its key, start, end and run: the same in the main database, as its
          // cell or in its history, means merged before. ?1 picks the row of the shard, ?2 is its
          // run's id in the main database.
          cell_merged_before_(db.prepare(merged_before_sql("SELECT cell_key, started_at, finished_at FROM " + shard_ +
                                                           ".cells WHERE cell_id = ?1"))),
          history_merged_before_(db.prepare(merged_before_sql(
              "SELECT cell_key, json_extract(cell, '$.started_at'), json_extract(cell, '$.finished_at') FROM " + shard_ +
              ".cell_history WHERE history_id = ?1"))) {}

    MergeCounts run() {
        db_.exec("INSERT OR IGNORE INTO main.StringIds (value) SELECT value FROM " + shard_ + ".StringIds");
        // Reference logits are the same under the same key whichever shard computed them.
        db_.exec("INSERT OR IGNORE INTO main.reference_logits (reference_key, model, batch, seq, vocab, logits)"
                 " SELECT reference_key, model, batch, seq, vocab, logits FROM " + shard_ + ".reference_logits");
        auto cells = db_.prepare("SELECT cell_id, cell_key, run_id, finished_at FROM " + shard_ + ".cells ORDER BY cell_id");
        while (cells.step()) merge_cell(cells.int64(0), cells.text(1), main_run(cells.int64(2)), cells.text(3));
        auto history = db_.prepare("SELECT history_id, json_extract(cell, '$.run_id') FROM " + shard_ +
                                   ".cell_history ORDER BY history_id");
        while (history.step()) merge_history_row(history.int64(0), main_run(history.int64(1)));
        // A run of bench_kernels has timings but no cells: it comes over with them.
        auto timed = db_.prepare("SELECT DISTINCT run_id FROM " + shard_ + ".kernel_timings ORDER BY run_id");
        while (timed.step()) main_run(timed.int64(0));
        return counts_;
    }

private:
    // Copies the shard's cell ?2 into the main database as a cell of run ?1, returning its new id.
    static std::string cell_copy_sql(Database& db, const std::string& shard) {
        std::string values;
        for (const std::string& n : table_columns(db, "main", "cells"))
            if (n != "cell_id") values += (values.empty() ? "" : ", ") + (n == "run_id" ? "?1" : "t." + quoted(n));
        return "INSERT INTO main.cells (" + column_list(db, "cells", "cell_id") + ") SELECT " + values + " FROM " + shard +
               ".cells t WHERE t.cell_id = ?2 RETURNING cell_id";
    }

    static std::string merged_before_sql(const std::string& measurement) {
        return "WITH m (cell_key, started_at, finished_at) AS (" + measurement +
               ") SELECT EXISTS (SELECT 1 FROM main.cells c, m WHERE c.cell_key = m.cell_key"
               "  AND c.started_at IS m.started_at AND c.finished_at IS m.finished_at AND c.run_id = ?2)"
               " OR EXISTS (SELECT 1 FROM main.cell_history h, m WHERE h.cell_key = m.cell_key"
               "  AND json_extract(h.cell, '$.started_at') IS m.started_at"
               "  AND json_extract(h.cell, '$.finished_at') IS m.finished_at AND json_extract(h.cell, '$.run_id') = ?2)";
    }

    static bool merged_before(Statement& st, std::int64_t shard_row, std::int64_t run) {
        st.reset();
        st.bind(1, shard_row).bind(2, run);
        return st.step() && st.int64(0) != 0;
    }

    // The main database's run for the shard's run `shard_run`: the one with the same start, host,
    // command and matrix (merged before), or a copy made now.
    std::int64_t main_run(std::int64_t shard_run) {
        if (const auto it = runs_.find(shard_run); it != runs_.end()) return it->second;
        auto same = db_.prepare(
            "SELECT m.run_id FROM main.runs m JOIN " + shard_ + ".runs s ON s.run_id = ?"
            " WHERE m.started_at IS s.started_at AND m.host IS s.host AND m.command_line IS s.command_line"
            " AND m.matrix_hash IS s.matrix_hash");
        same.bind(1, shard_run);
        if (same.step()) return runs_[shard_run] = same.int64(0);
        auto insert = db_.prepare("INSERT INTO main.runs (" + column_list(db_, "runs", "run_id") + ") SELECT " +
                                  column_list(db_, "runs", "run_id", "t.") + " FROM " + shard_ +
                                  ".runs t WHERE t.run_id = ? RETURNING run_id");
        insert.bind(1, shard_run);
        // check_shard refused shards whose cells or history name a run they lack.
        if (!insert.step()) throw std::logic_error("merge: run " + std::to_string(shard_run) + " of a shard is missing");
        const std::int64_t run = insert.int64(0);
        copy_rows(db_, run_copies_, shard_run, run);
        ++counts_.runs_added;
        return runs_[shard_run] = run;
    }

    void merge_cell(std::int64_t shard_cell, const std::string& key, std::int64_t run, const std::string& finished) {
        if (merged_before(cell_merged_before_, shard_cell, run)) {
            ++counts_.cells_already_there;
            return;
        }
        auto here = db_.prepare("SELECT finished_at FROM main.cells WHERE cell_key = ?");
        here.bind(1, key);
        if (here.step()) {
            ++counts_.conflicts;
            if (here.text(0) >= finished) {  // the main database's is newer: the shard's is history
                keep_shard_cell_as_history(key, run);
                return;
            }
            keep_as_history(db_, key, "main");
            db_.prepare("DELETE FROM main.cells WHERE cell_key = ?").bind(1, key).run();
        }
        auto insert = db_.prepare(cell_copy_);
        insert.bind(1, run).bind(2, shard_cell);
        if (!insert.step()) throw std::logic_error("merge: cell " + std::to_string(shard_cell) + " of a shard vanished");
        copy_rows(db_, cell_copies_, shard_cell, insert.int64(0));
        ++counts_.cells_added;
    }

    void keep_shard_cell_as_history(const std::string& key, std::int64_t run) {
        auto last = db_.prepare("SELECT coalesce(max(history_id), 0) FROM main.cell_history");
        last.step();
        const std::int64_t before = last.int64(0);
        keep_as_history(db_, key, shard_);
        // The row as the shard has it names the shard's run; the main database's rows name its own.
        db_.prepare("UPDATE main.cell_history SET cell = json_set(cell, '$.run_id', ?1) WHERE history_id > ?2")
            .bind(1, run)
            .bind(2, before)
            .run();
    }

    void merge_history_row(std::int64_t shard_row, std::int64_t run) {
        if (merged_before(history_merged_before_, shard_row, run)) return;
        db_.prepare("INSERT INTO main.cell_history (cell_key, superseded_at, cell, iterations)"
                    " SELECT cell_key, superseded_at, json_set(cell, '$.run_id', ?2), iterations FROM " + shard_ +
                    ".cell_history WHERE history_id = ?1")
            .bind(1, shard_row)
            .bind(2, run)
            .run();
        ++counts_.history_added;
    }

    Database& db_;
    const std::string shard_;
    const std::vector<std::string> run_copies_, cell_copies_;
    const std::string cell_copy_;
    Statement cell_merged_before_, history_merged_before_;
    std::map<std::int64_t, std::int64_t> runs_;  // the shard's run ids to the main database's
    MergeCounts counts_;
};

}  // namespace

std::vector<MergeCounts> merge_databases(const std::string& out_path, const std::vector<std::string>& shard_paths) {
    // Every shard is checked before OUT is opened, so that a shard merge refuses leaves OUT as it
    // was, or not there at all.
    std::optional<ShardCopies> copies;
    std::vector<std::string> shards;
    for (const std::string& path : shard_paths) {
        try {
            shards.push_back(ready_shard(path, copies));
        } catch (const std::runtime_error& e) {
            throw std::runtime_error("cannot merge " + path + ": " + e.what());
        }
    }
    Store out = Store::open(out_path, Store::Access::exclusive);
    Database& db = out.db();
    // SQLite attaches no database inside a transaction, and only so many to one connection: more
    // shards than that are merged that many at a time, each group in one transaction.
    const auto at_once = static_cast<std::size_t>(db.attach_limit());
    std::vector<MergeCounts> counts;
    for (std::size_t first = 0; first < shards.size(); first += at_once) {
        const std::vector<std::string> group(shards.begin() + static_cast<std::ptrdiff_t>(first),
                                            shards.begin() + static_cast<std::ptrdiff_t>(std::min(shards.size(), first + at_once)));
        std::deque<Attached> attached;
        for (std::size_t i = 0; i < group.size(); ++i) attached.emplace_back(db, group[i], "shard" + std::to_string(i));
        Transaction tx(db);
        for (std::size_t i = 0; i < group.size(); ++i) counts.push_back(ShardMerge(db, "shard" + std::to_string(i)).run());
        tx.commit();
    }
    return counts;
}

}  // namespace sweetspot
