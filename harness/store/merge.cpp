#include "harness/store/merge.hpp"

#include <filesystem>
#include <stdexcept>
#include <vector>

#include "harness/store/sqlite.hpp"
#include "harness/store/store.hpp"
#include "harness/system/system_info.hpp"

namespace sweetspot {
namespace {

// The columns of `table`, in order, without `skip` (the ids the merge gives anew).
std::vector<std::string> columns_of(Database& db, const std::string& table, const std::string& skip) {
    std::vector<std::string> names;
    auto st = db.prepare("SELECT name FROM pragma_table_info(?) ORDER BY cid");
    st.bind(1, table);
    while (st.step())
        if (st.text(0) != skip) names.push_back(st.text(0));
    return names;
}

std::string quoted_list(const std::vector<std::string>& names, const std::string& prefix = "") {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + prefix + "\"" + n + "\"";
    return out;
}

// A column's value in the copied row: the new id for the one that names the run or the cell, a
// main-database string id for a shard string id, the shard's value otherwise.
std::string copied_value(const std::string& column, const std::string& replaced, const std::string& with) {
    if (column == replaced) return with;
    if (column == "shortName" || column == "demangledName" || column == "textId")
        return "(SELECT m.id FROM main.StringIds m JOIN shard.StringIds x ON x.value = m.value WHERE x.id = t.\"" + column + "\")";
    return "t.\"" + column + "\"";
}

// The tables whose rows belong to one run, and to one cell (besides `runs` and `cells`).
const std::vector<std::string> kRunTables = {"managed_probe", "TARGET_INFO_GPU"};
const std::vector<std::string> kCellTables = {
    "iterations", "cell_phases", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUDA_UM_GPU_PAGE_FAULT_EVENTS",
    "CUDA_UM_CPU_PAGE_FAULT_EVENTS", "UM_COUNTER_EVENTS", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_OVERHEAD"};

// The statements that copy, for each of `tables`, the shard's rows whose `key_column` is the
// first parameter into the main database with `key_column` = the second; made once per merge.
std::vector<std::string> row_copies(Database& db, const std::vector<std::string>& tables, const std::string& key_column) {
    std::vector<std::string> copies;
    for (const std::string& table : tables) {
        const std::vector<std::string> names = columns_of(db, table, "");
        std::string values;
        for (const std::string& n : names) values += (values.empty() ? "" : ", ") + copied_value(n, key_column, "?2");
        copies.push_back("INSERT INTO main.\"" + table + "\" (" + quoted_list(names) + ") SELECT " + values + " FROM shard.\"" +
                         table + "\" t WHERE t.\"" + key_column + "\" = ?1");
    }
    return copies;
}

void copy_rows(Database& db, const std::vector<std::string>& copies, std::int64_t from, std::int64_t to) {
    for (const std::string& sql : copies) db.prepare(sql).bind(1, from).bind(2, to).run();
}

// The main database's run for the shard's run `shard_run`: the one with the same start, host,
// command and matrix (merged before), or a copy made now (`added` says which).
std::int64_t main_run_for(Database& db, std::int64_t shard_run, const std::vector<std::string>& run_copies, bool& added) {
    auto same = db.prepare(
        "SELECT m.run_id FROM main.runs m JOIN shard.runs s ON s.run_id = ?"
        " WHERE m.started_at IS s.started_at AND m.host IS s.host AND m.command_line IS s.command_line"
        " AND m.matrix_hash IS s.matrix_hash");
    same.bind(1, shard_run);
    if (same.step()) {
        added = false;
        return same.int64(0);
    }
    const std::vector<std::string> names = columns_of(db, "runs", "run_id");
    db.prepare("INSERT INTO main.runs (" + quoted_list(names) + ") SELECT " + quoted_list(names, "t.") +
               " FROM shard.runs t WHERE t.run_id = ?")
        .bind(1, shard_run)
        .run();
    const std::int64_t run = db.last_insert_rowid();
    copy_rows(db, run_copies, shard_run, run);
    added = true;
    return run;
}

MergeCounts merge_database(Store& out, const std::string& shard_path) {
    {
        Store shard = Store::open_read_only(shard_path);
        const int version = check_results_database(shard.db());
        if (version != kSchemaVersion)
            throw std::runtime_error(shard_path + " has schema version " + std::to_string(version) + "; merge takes version " +
                                     std::to_string(kSchemaVersion) + " (a run of this sweetspot on it upgrades it)");
    }
    Database& db = out.db();
    // A read-only URI, so that merging never writes to a shard: the path absolute, and the
    // characters a URI gives a meaning to escaped.
    std::string uri = "file:";
    for (const char c : std::filesystem::absolute(shard_path).string())
        uri += c == '%' ? std::string("%25") : c == '?' ? std::string("%3f") : c == '#' ? std::string("%23") : std::string(1, c);
    auto attach = db.prepare("ATTACH DATABASE ? AS shard");
    attach.bind(1, uri + "?mode=ro");
    attach.run();
    MergeCounts counts;
    try {
        Transaction tx(db);
        db.exec("INSERT OR IGNORE INTO main.StringIds (value) SELECT value FROM shard.StringIds");
        // Reference logits are the same under the same key whichever shard computed them.
        db.exec("INSERT OR IGNORE INTO main.reference_logits (reference_key, model, batch, seq, vocab, logits)"
                " SELECT reference_key, model, batch, seq, vocab, logits FROM shard.reference_logits");
        const std::vector<std::string> run_copies = row_copies(db, kRunTables, "run_id");
        const std::vector<std::string> cell_copies = row_copies(db, kCellTables, "cell_id");
        const std::vector<std::string> cell_columns = columns_of(db, "cells", "cell_id");
        std::string cell_values;
        for (const std::string& n : cell_columns) cell_values += (cell_values.empty() ? "" : ", ") + copied_value(n, "run_id", "?");

        auto shard_cells = db.prepare("SELECT cell_id, cell_key, run_id, started_at, finished_at FROM shard.cells ORDER BY cell_id");
        while (shard_cells.step()) {
            const std::int64_t shard_cell = shard_cells.int64(0);
            const std::string key = shard_cells.text(1);
            const std::string started = shard_cells.text(3), finished = shard_cells.text(4);
            bool run_added = false;
            const std::int64_t run = main_run_for(db, shard_cells.int64(2), run_copies, run_added);
            counts.runs_added += run_added ? 1 : 0;

            auto here = db.prepare(
                "SELECT c.finished_at, c.started_at IS ? AND c.finished_at IS ? AND c.run_id = ? FROM main.cells c WHERE c.cell_key = ?");
            here.bind(1, started).bind(2, finished).bind(3, run).bind(4, key);
            if (here.step()) {
                if (here.int64(1) != 0) {  // this very measurement, merged before
                    ++counts.cells_already_there;
                    continue;
                }
                ++counts.conflicts;
                if (here.text(0) >= finished) {  // the main database's is newer: the shard's is history
                    keep_as_history(db, key, "shard");
                    continue;
                }
                keep_as_history(db, key, "main");
                db.prepare("DELETE FROM main.cells WHERE cell_key = ?").bind(1, key).run();
            }
            db.prepare("INSERT INTO main.cells (" + quoted_list(cell_columns) + ") SELECT " + cell_values +
                       " FROM shard.cells t WHERE t.cell_id = ?")
                .bind(1, run)
                .bind(2, shard_cell)
                .run();
            const std::int64_t cell = db.last_insert_rowid();
            copy_rows(db, cell_copies, shard_cell, cell);
            ++counts.cells_added;
        }
        tx.commit();
    } catch (...) {
        db.exec("DETACH DATABASE shard");
        throw;
    }
    db.exec("DETACH DATABASE shard");
    return counts;
}

}  // namespace

std::vector<MergeCounts> merge_databases(const std::string& out_path, const std::vector<std::string>& shard_paths) {
    Store out = Store::open(out_path, Store::Access::exclusive);
    std::vector<MergeCounts> counts;
    for (const std::string& shard : shard_paths) counts.push_back(merge_database(out, shard));
    return counts;
}

}  // namespace sweetspot
