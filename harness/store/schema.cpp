#include "harness/store/schema.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "base/number_text.hpp"
#include "harness/matrix/axes.hpp"
#include "harness/matrix/sequence_lengths.hpp"
#include "harness/store/history.hpp"
#include "harness/store/sql_values.hpp"

namespace sweetspot {
namespace {

// Version 7 dropped the prefetch_api axis, which version 6 had added: uvm-prefetch's batched and
// chunked prefetches lost to one cudaMemPrefetchAsync per layer, so every cell prefetches that way.
void drop_prefetch_api(Database& db) {
    if (has_column(db, "cells", "prefetch_api")) db.exec("ALTER TABLE cells DROP COLUMN prefetch_api");
}

// Version 16 counts a training cell's gradients and optimizer state among what it allocated: the
// view is made again (views.sql) from its new definition.
void drop_memory_accuracy(Database& db) { db.exec("DROP VIEW IF EXISTS memory_accuracy"); }

// Version 27 stores each ragged cell's drawn lengths. A version-26 cell's are drawn again from its
// parameters as it drew them (the same on every machine: sequence_lengths.hpp), and kept only where
// they add up to the real tokens it stored: a length file gone or changed since leaves NULL.
void fill_drawn_lengths(Database& db) {
    std::vector<std::pair<std::int64_t, std::string>> drawn;
    auto st = db.prepare("SELECT cell_id, lengths, batch, seq, seed, real_tokens FROM cells"
                         " WHERE lengths != 'fixed' AND real_tokens IS NOT NULL AND drawn_lengths IS NULL");
    while (st.step()) {
        const std::optional<LengthSpec> spec = LengthSpec::parse(st.text(1));
        if (!spec) continue;
        std::vector<int> lengths;
        try {
            lengths = draw_lengths(*spec, static_cast<int>(st.int64(2)), static_cast<int>(st.int64(3)),
                                   static_cast<std::uint64_t>(st.int64(4)));
        } catch (const std::runtime_error&) {
            continue;  // its length file cannot be read here
        }
        if (std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0}) == st.int64(5))
            drawn.emplace_back(st.int64(0), lengths_text(lengths));
    }
    auto update = db.prepare("UPDATE cells SET drawn_lengths = ? WHERE cell_id = ?");
    for (const auto& [cell_id, text] : drawn) {
        update.bind(1, text).bind(2, cell_id).run();
        update.reset();
    }
}

// The columns of `runs` added after version 2 (the others are in tables.sql).
struct RunColumn {
    std::string_view name;
    SqlType type;
    int since;
};
constexpr RunColumn kLaterRunColumns[] = {
    {"concurrent_managed_access", SqlType::integer, 4},
    {"pageable_memory_access", SqlType::integer, 4},
    {"pageable_memory_access_uses_host_page_tables", SqlType::integer, 4},
    {"direct_managed_mem_access_from_host", SqlType::integer, 4},
    {"stop_reason", SqlType::text, 11},
    {"host_memory_gbps", SqlType::real, 22},
    {"host_update_gbps", SqlType::real, 29},
};

// The columns of `cells` that are neither axes nor measures: its identity and outcome.
constexpr std::string_view kCellsHead =
    "CREATE TABLE cells (\n"
    "    cell_id INTEGER PRIMARY KEY,\n"
    "    run_id INTEGER NOT NULL REFERENCES runs(run_id),\n"
    "    cell_key TEXT NOT NULL UNIQUE,\n"
    "    cell_index INTEGER NOT NULL,\n"
    "    sweep TEXT,\n"
    "    status TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'timeout', 'skipped', 'invalid')),\n"
    "    reason TEXT,\n"
    "    canonical TEXT NOT NULL";
constexpr std::string_view kCellsHeadColumns[] = {"cell_id", "cell_index", "run_id", "cell_key", "sweep",
                                                  "status",  "reason",     "canonical"};

SqlType column_sql_type(Axis::Column c) {
    return c == Axis::Column::integer ? SqlType::integer : c == Axis::Column::real ? SqlType::real : SqlType::text;
}

std::string literal(const SqlValue& v) {
    if (const auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
    if (const auto* d = std::get_if<double>(&v)) return format_number(*d);
    if (const auto* s = std::get_if<std::string>(&v)) {
        std::string quoted = "'";
        for (const char c : *s) quoted += c == '\'' ? std::string("''") : std::string(1, c);
        return quoted + "'";
    }
    return "NULL";
}

std::vector<DeclaredColumn> make_declared_columns() {
    std::vector<DeclaredColumn> columns;
    for (const Axis& a : axes()) {
        if (!a.has_column()) continue;
        // Every cell has a value for every axis; rows from before an axis get the value they had.
        const bool later = a.since > kOldestReadableSchemaVersion;
        columns.push_back({"cells", std::string(a.column), column_sql_type(a.column_type), a.since, true,
                           later ? literal(axis_column_value(a, a.value_before())) : std::string()});
    }
    for (const Measure& m : kMeasures)
        columns.push_back({"cells", std::string(m.name), m.type, m.since, !m.before.empty(), std::string(m.before)});
    for (const RunColumn& r : kLaterRunColumns) columns.push_back({"runs", std::string(r.name), r.type, r.since, false, ""});
    return columns;
}

std::string column_definition(const DeclaredColumn& c) {
    std::string def = c.name + " " + std::string(enum_name(c.type));
    if (c.not_null) def += " NOT NULL";
    if (!c.default_sql.empty()) def += " DEFAULT " + c.default_sql;
    return def;
}

void create_cells(Database& db) {
    std::string sql(kCellsHead);
    for (const DeclaredColumn& c : declared_columns())
        if (c.table == "cells") sql += ",\n    " + column_definition(c);
    db.exec(sql + "\n)");
}

void add_missing_columns(Database& db) {
    std::map<std::string, std::set<std::string>> present;
    for (const DeclaredColumn& c : declared_columns()) {
        auto [it, added] = present.try_emplace(c.table);
        if (added) it->second = column_names(db, c.table);
        if (!it->second.count(c.name)) db.exec("ALTER TABLE " + c.table + " ADD COLUMN " + column_definition(c));
    }
}

// Gives the rows from before `version`'s columns whose values differ row by row (Axis::before_sql)
// what they held, in place of the column's default.
void fill_added_columns(Database& db, int version) {
    for (const Axis& a : axes())
        if (a.has_column() && a.since > version && a.before_sql)
            db.exec("UPDATE cells SET " + std::string(a.column) + " = " + a.before_sql(""));
}

// Rewrites `table` with `rows` (each the same columns in the same order) where it holds other rows.
void rewrite_table(Database& db, const std::string& table, const std::vector<Row>& rows) {
    std::string columns;
    for (const auto& [name, value] : rows.front()) columns += (columns.empty() ? "quote(" : " || ',' || quote(") + std::string(name) + ")";
    std::vector<std::string> stored, wanted;
    auto st = db.prepare("SELECT " + columns + " FROM " + table + " ORDER BY rowid");
    while (st.step()) stored.push_back(st.text(0));
    for (const Row& row : rows) {
        std::string text;
        for (const auto& [name, value] : row) text += (text.empty() ? "" : ",") + literal(value);
        wanted.push_back(text);
    }
    if (stored == wanted) return;
    db.exec("DELETE FROM " + table);
    for (const Row& row : rows) insert_row(db, table, row);
}

// Writes the `axes` and `measures` tables as this sweetspot declares them, where they differ.
void describe_columns(Database& db) {
    std::vector<Row> axis_rows, measure_rows;
    for (const Axis& a : axes()) {
        if (!a.has_column()) continue;
        axis_rows.push_back({{"name", sql(a.name)},
                             {"column_name", sql(a.column)},
                             {"type", sql(enum_name(column_sql_type(a.column_type)))},
                             {"role", sql(enum_name(a.role))},
                             {"in_matrix", sql(a.in_matrix() ? 1 : 0)},
                             {"keyed", sql(enum_name(a.keyed))},
                             {"default_value", sql(a.default_text)},
                             {"unit", sql(enum_name(a.unit))},
                             {"since", sql(a.since)},
                             {"meaning", sql(a.meaning)}});
    }
    for (const Measure& m : kMeasures)
        measure_rows.push_back({{"name", sql(m.name)},
                                {"type", sql(enum_name(m.type))},
                                {"unit", sql(enum_name(m.unit))},
                                {"filled_by", sql(enum_name(m.filled_by))},
                                {"in_summary", sql(m.in_summary ? 1 : 0)},
                                {"in_compare", sql(m.in_compare ? 1 : 0)},
                                {"since", sql(m.since)},
                                {"meaning", sql(m.meaning)}});
    rewrite_table(db, "axes", axis_rows);
    rewrite_table(db, "measures", measure_rows);
}

void set_version(Database& db, int version) {
    db.exec("UPDATE schema_info SET version = " + std::to_string(version) +
            "; PRAGMA user_version = " + std::to_string(version));
}

}  // namespace

const std::vector<SchemaStep>& schema_steps() {
    static const std::vector<SchemaStep> steps = {
        {3, "the dropout and repeat axes; the kernel launches of a forward", nullptr, ""},
        {4, "the GPU's managed-memory abilities and the run's managed-memory probe", nullptr, "DROP TABLE managed_probe;"},
        {5, "the device memory the estimator predicts each cell allocates", nullptr, ""},
        {6, "each GPU cell's predicted peak and NVML readings, its phases and its history; the prefetch_api axis",
         nullptr,
         "DROP VIEW memory_accuracy; DROP TABLE cell_phases; DROP TABLE cell_history;"
         "ALTER TABLE cells DROP COLUMN prefetch_api;"},
        {7, "kept reference logits and the noise criterion; the prefetch_api axis dropped", drop_prefetch_api,
         "DROP TABLE reference_logits; ALTER TABLE cells ADD COLUMN prefetch_api TEXT NOT NULL DEFAULT 'single';"},
        {8, "cell keys without warmups and iterations: every cell re-keyed", rekey_cells, ""},
        {9, "the predicted peak host memory, the pinned bytes, whether the check ran its reference forward", nullptr,
         "DROP VIEW host_memory_accuracy;"},
        {10, "the launch axis", nullptr, ""},
        {11, "the axes and measures tables describing the cells' columns; why a run stopped", nullptr,
         "DROP TABLE axes; DROP TABLE measures;"},
        {14, "the reference forward of a kept check reference a cell phase of its own, no longer part of `check`",
         nullptr, ""},
        {15, "the CUDA API calls of traced iterations and the NVTX ranges projected onto the GPU", nullptr,
         "DROP VIEW nvtx_gpu_proj_sum; DROP VIEW nvtx_gpu_proj_trace; DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME;"},
        {16, "training steps: the phase split, the loss and gradient norm, model flops and MFU, the GPU's name, the "
             "training state's memory (memory_accuracy counts it)",
         drop_memory_accuracy,
         "DROP VIEW memory_accuracy;"
         "CREATE VIEW memory_accuracy AS SELECT cell_id, model, backend, variant, dtype, batch, seq, budget,"
         " predicted_peak_bytes, gpu_peak_bytes,"
         " 100.0 * (predicted_peak_bytes - gpu_peak_bytes) / gpu_peak_bytes AS peak_error_pct,"
         " predicted_alloc_bytes, device_weight_bytes + activation_bytes AS allocated_bytes,"
         " 100.0 * (predicted_alloc_bytes - (device_weight_bytes + activation_bytes))"
         " / (device_weight_bytes + activation_bytes) AS alloc_error_pct,"
         " gpu_context_bytes, gpu_own_peak_bytes, gpu_other_processes, gpu_other_bytes"
         " FROM cells WHERE status = 'ok' AND gpu_peak_bytes > 0 AND predicted_alloc_bytes IS NOT NULL;"},
        {17, "the GPU ops' timings of bench_kernels --db", nullptr, "DROP TABLE kernel_timings;"},
        {18, "the memory estimator's terms of each cell's predicted allocation", nullptr, ""},
        {19, "the recompute axis", nullptr, ""},
        {20, "the optimizer axis", nullptr, ""},
        {21, "the bytes a training step's update moves across the link each way", nullptr, ""},
        {22, "the host's memory bandwidth, where an update runs on the host's cores", nullptr, ""},
        {23, "the split_tf32 axis", nullptr, ""},
        {24, "the model family axis", nullptr, ""},
        {25, "the key and value heads and the MLP width in effect of each cell's model", nullptr, ""},
        {26, "the lengths and packing axes (ragged batches); each cell's real and padded tokens", nullptr, ""},
        {27, "each ragged cell's drawn sequence lengths", nullptr, "", fill_drawn_lengths},
        {28, "the max_grad_norm axis", nullptr, ""},
        {29, "the rate the host memory moves the host update's own streams at", nullptr, ""},
        {30, "the rate each training cell's optimizer state on the host moves at where it lies", nullptr, ""},
        {31, "the rate the host's memory moves each training cell's optimizer state and the link's copies at together",
         nullptr, ""},
        {32, "the time each training cell's host update spent in AdamW, alone and beside the steps", nullptr, ""},
        {33, "the rate each training cell's host update arrays move at where they lie", nullptr, ""},
    };
    return steps;
}

int schema_version() {
    static const int version = [] {
        int v = schema_steps().back().version;
        for (const DeclaredColumn& c : declared_columns()) v = std::max(v, c.since);
        return v;
    }();
    return version;
}

const std::vector<DeclaredColumn>& declared_columns() {
    static const std::vector<DeclaredColumn> columns = make_declared_columns();
    return columns;
}

void create_schema(Database& db) {
    db.exec(kTablesSql);
    create_cells(db);
    add_missing_columns(db);
    db.exec(kViewsSql);
    describe_columns(db);
}

void check_schema(Database& db, int version) {
    const std::string damaged = " is missing, though every database of schema version " + std::to_string(version) +
                                " has it: the file was changed outside sweetspot or is damaged";
    for (const std::string table : {"runs", "cells", "iterations"})
        if (!has_table(db, table)) throw SchemaError(db.path() + ": table " + table + damaged + "; restore it from a copy");
    std::map<std::string, std::set<std::string>> present = {{"runs", column_names(db, "runs")},
                                                            {"cells", column_names(db, "cells")}};
    for (const std::string_view column : kCellsHeadColumns)
        if (!present["cells"].count(std::string(column)))
            throw SchemaError(db.path() + ": column cells." + std::string(column) + damaged + "; restore it from a copy");
    for (const DeclaredColumn& c : declared_columns())
        if (c.since <= version && !present[c.table].count(c.name))
            throw SchemaError(db.path() + ": column " + c.table + "." + c.name + damaged +
                              ". Restore it from a copy, or add the column back with `sqlite3 " + db.path() + " \"ALTER TABLE " +
                              c.table + " ADD COLUMN " + column_definition(c) + (c.not_null && c.default_sql.empty() ? " DEFAULT ..." : "") +
                              "\"` (" + (c.default_sql.empty() ? "every row then holds what you give" : "every row then holds " + c.default_sql) +
                              ", which may not be what it held)");
}

void upgrade_schema(Database& db, int version) {
    db.exec(kTablesSql);
    for (const SchemaStep& step : schema_steps())
        if (step.version > version && step.upgrade) step.upgrade(db);
    add_missing_columns(db);
    fill_added_columns(db, version);
    for (const SchemaStep& step : schema_steps())
        if (step.version > version && step.fill) step.fill(db);
    db.exec(kViewsSql);
    describe_columns(db);
    if (version != schema_version()) set_version(db, schema_version());
}

void downgrade_schema(Database& db, int version) {
    for (int v = schema_version(); v > version; --v) {
        for (const SchemaStep& step : schema_steps())
            if (step.version == v && !step.downgrade_sql.empty()) db.exec(std::string(step.downgrade_sql));
        for (const DeclaredColumn& c : declared_columns())
            if (c.since == v) db.exec("ALTER TABLE " + c.table + " DROP COLUMN " + c.name);
    }
    set_version(db, version);
}

}  // namespace sweetspot
