#include "harness/store/store.hpp"

#include "harness/system/output_file.hpp"

#include "harness/collect/event_totals.hpp"
#include "harness/system/system_info.hpp"
#include "harness/system/version.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>

namespace sweetspot {
namespace {

// The current schema (kSchemaVersion). results/README.md documents every column; tests check the two agree.
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
    activation_bytes    INTEGER,
    um_profiling        TEXT,
    um_htod_bytes       INTEGER,
    um_dtoh_bytes       INTEGER,
    gpu_page_faults     INTEGER,
    cpu_page_faults     INTEGER,
    thrashing           INTEGER,
    throttling          INTEGER,
    remote_maps         INTEGER,
    kernel_busy_ms      REAL,
    copy_ms             REAL,
    copy_compute_overlap_ms REAL,
    dropped_records     INTEGER,
    collector_overhead_ms REAL
);
CREATE INDEX cells_run ON cells(run_id);
CREATE TABLE iterations (
    cell_id     INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    phase       TEXT NOT NULL CHECK (phase IN ('warmup', 'timed', 'traced')),
    iteration   INTEGER NOT NULL,
    latency_ms  REAL NOT NULL,
    PRIMARY KEY (cell_id, phase, iteration)
);
CREATE VIEW cell_summary AS
SELECT cell_id, model, backend, variant, dtype, batch, seq, streams, prefetch, budget,
       status, latency_median_ms, latency_p10_ms, latency_p90_ms, tokens_per_s,
       check_rel_err, reason
FROM cells;
)sql"
// Event tables: the names and columns of Nsight Systems' SQLite export, plus cell_id (run_id for
// TARGET_INFO_GPU), so queries written for nsys exports carry over. "end" is an SQL keyword, hence quoted.
R"sql(
CREATE TABLE TARGET_INFO_GPU (
    run_id      INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    id          INTEGER NOT NULL,
    name        TEXT,
    totalMemory INTEGER,
    PRIMARY KEY (run_id, id)
);
CREATE TABLE StringIds (
    id    INTEGER PRIMARY KEY,
    value TEXT NOT NULL UNIQUE
);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    cell_id             INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start               INTEGER NOT NULL,
    "end"               INTEGER NOT NULL,
    deviceId            INTEGER NOT NULL,
    contextId           INTEGER NOT NULL,
    streamId            INTEGER NOT NULL,
    correlationId       INTEGER NOT NULL,
    gridX               INTEGER NOT NULL,
    gridY               INTEGER NOT NULL,
    gridZ               INTEGER NOT NULL,
    blockX              INTEGER NOT NULL,
    blockY              INTEGER NOT NULL,
    blockZ              INTEGER NOT NULL,
    registersPerThread  INTEGER NOT NULL,
    staticSharedMemory  INTEGER NOT NULL,
    dynamicSharedMemory INTEGER NOT NULL,
    shortName           INTEGER NOT NULL REFERENCES StringIds(id),
    demangledName       INTEGER NOT NULL REFERENCES StringIds(id)
);
CREATE INDEX CUPTI_ACTIVITY_KIND_KERNEL_cell ON CUPTI_ACTIVITY_KIND_KERNEL(cell_id);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    cell_id        INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start          INTEGER NOT NULL,
    "end"          INTEGER NOT NULL,
    deviceId       INTEGER NOT NULL,
    contextId      INTEGER NOT NULL,
    streamId       INTEGER NOT NULL,
    correlationId  INTEGER NOT NULL,
    copyKind       INTEGER NOT NULL REFERENCES ENUM_CUDA_MEMCPY_OPER(id),
    srcKind        INTEGER NOT NULL,
    dstKind        INTEGER NOT NULL,
    bytes          INTEGER NOT NULL,
    migrationCause INTEGER REFERENCES ENUM_CUDA_UNIF_MEM_MIGRATION(id),
    virtualAddress INTEGER
);
CREATE INDEX CUPTI_ACTIVITY_KIND_MEMCPY_cell ON CUPTI_ACTIVITY_KIND_MEMCPY(cell_id);
CREATE TABLE CUDA_UM_GPU_PAGE_FAULT_EVENTS (
    cell_id            INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start              INTEGER NOT NULL,
    "end"              INTEGER NOT NULL,
    deviceId           INTEGER NOT NULL,
    address            INTEGER NOT NULL,
    numberOfPageFaults INTEGER NOT NULL,
    faultAccessType    INTEGER NOT NULL REFERENCES ENUM_CUDA_UNIF_MEM_ACCESS_TYPE(id)
);
CREATE INDEX CUDA_UM_GPU_PAGE_FAULT_EVENTS_cell ON CUDA_UM_GPU_PAGE_FAULT_EVENTS(cell_id);
CREATE TABLE CUDA_UM_CPU_PAGE_FAULT_EVENTS (
    cell_id         INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start           INTEGER NOT NULL,
    address         INTEGER NOT NULL,
    originalFaultPc INTEGER
);
CREATE INDEX CUDA_UM_CPU_PAGE_FAULT_EVENTS_cell ON CUDA_UM_CPU_PAGE_FAULT_EVENTS(cell_id);
CREATE TABLE UM_COUNTER_EVENTS (
    cell_id INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    kind    TEXT NOT NULL CHECK (kind IN ('thrashing', 'throttling', 'remote_map')),
    start   INTEGER NOT NULL,
    "end"   INTEGER NOT NULL,
    address INTEGER NOT NULL,
    value   INTEGER NOT NULL
);
CREATE INDEX UM_COUNTER_EVENTS_cell ON UM_COUNTER_EVENTS(cell_id);
CREATE TABLE NVTX_EVENTS (
    cell_id   INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start     INTEGER NOT NULL,
    "end"     INTEGER NOT NULL,
    text      TEXT,
    textId    INTEGER REFERENCES StringIds(id),
    globalTid INTEGER NOT NULL,
    eventType INTEGER NOT NULL
);
CREATE INDEX NVTX_EVENTS_cell ON NVTX_EVENTS(cell_id);
CREATE TABLE CUPTI_ACTIVITY_KIND_OVERHEAD (
    cell_id      INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    start        INTEGER NOT NULL,
    "end"        INTEGER NOT NULL,
    overheadKind INTEGER NOT NULL
);
CREATE INDEX CUPTI_ACTIVITY_KIND_OVERHEAD_cell ON CUPTI_ACTIVITY_KIND_OVERHEAD(cell_id);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (
    id    INTEGER PRIMARY KEY,
    name  TEXT NOT NULL,
    label TEXT NOT NULL
);
INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES
    (0, 'CUDA_MEMCPY_KIND_UNKNOWN', 'Unknown'),
    (1, 'CUDA_MEMCPY_KIND_HTOD', 'Host-to-Device'),
    (2, 'CUDA_MEMCPY_KIND_DTOH', 'Device-to-Host'),
    (3, 'CUDA_MEMCPY_KIND_HTOA', 'Host-to-Array'),
    (4, 'CUDA_MEMCPY_KIND_ATOH', 'Array-to-Host'),
    (5, 'CUDA_MEMCPY_KIND_ATOA', 'Array-to-Array'),
    (6, 'CUDA_MEMCPY_KIND_ATOD', 'Array-to-Device'),
    (7, 'CUDA_MEMCPY_KIND_DTOA', 'Device-to-Array'),
    (8, 'CUDA_MEMCPY_KIND_DTOD', 'Device-to-Device'),
    (9, 'CUDA_MEMCPY_KIND_HTOH', 'Host-to-Host'),
    (10, 'CUDA_MEMCPY_KIND_PTOP', 'Peer-to-Peer'),
    (11, 'CUDA_MEMCPY_KIND_UVM_HTOD', 'Unified Host-to-Device'),
    (12, 'CUDA_MEMCPY_KIND_UVM_DTOH', 'Unified Device-to-Host'),
    (13, 'CUDA_MEMCPY_KIND_UVM_DTOD', 'Unified Device-to-Device');
CREATE TABLE ENUM_CUDA_UNIF_MEM_MIGRATION (
    id    INTEGER PRIMARY KEY,
    name  TEXT NOT NULL,
    label TEXT NOT NULL
);
INSERT INTO ENUM_CUDA_UNIF_MEM_MIGRATION VALUES
    (0, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_UNKNOWN', 'Unknown'),
    (1, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_USER', 'User prefetch'),
    (2, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_COHERENCE', 'Page fault'),
    (3, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_PREFETCH', 'Speculative prefetch'),
    (4, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_EVICTION', 'Eviction'),
    (5, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_ACCESS_COUNTERS', 'Access counters');
CREATE TABLE ENUM_CUDA_UNIF_MEM_ACCESS_TYPE (
    id    INTEGER PRIMARY KEY,
    name  TEXT NOT NULL,
    label TEXT NOT NULL
);
INSERT INTO ENUM_CUDA_UNIF_MEM_ACCESS_TYPE VALUES
    (0, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_UNKNOWN', 'Unknown'),
    (1, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_READ', 'Read'),
    (2, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_WRITE', 'Write'),
    (3, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_ATOMIC', 'Atomic'),
    (4, 'CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_PREFETCH', 'Prefetch');
)sql"
// Per-cell views named after the `nsys stats` reports they imitate; `sweetspot summary --cell`
// prints them, and results/README.md documents them.
R"sql(
CREATE VIEW cuda_gpu_kern_sum AS
SELECT k.cell_id,
       100.0 * sum(k."end" - k.start) / sum(sum(k."end" - k.start)) OVER (PARTITION BY k.cell_id) AS time_percent,
       sum(k."end" - k.start) AS total_ns,
       count(*) AS instances,
       avg(k."end" - k.start) AS avg_ns,
       min(k."end" - k.start) AS min_ns,
       max(k."end" - k.start) AS max_ns,
       s.value AS name
FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
GROUP BY k.cell_id, k.shortName;
CREATE VIEW nvtx_sum AS
SELECT n.cell_id,
       100.0 * sum(n."end" - n.start) / sum(sum(n."end" - n.start)) OVER (PARTITION BY n.cell_id) AS time_percent,
       sum(n."end" - n.start) AS total_ns,
       count(*) AS instances,
       avg(n."end" - n.start) AS avg_ns,
       min(n."end" - n.start) AS min_ns,
       max(n."end" - n.start) AS max_ns,
       coalesce(n.text, s.value) AS range
FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
GROUP BY n.cell_id, coalesce(n.text, s.value);
CREATE VIEW um_total_sum AS
SELECT c.cell_id,
       (SELECT coalesce(sum(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
         WHERE m.cell_id = c.cell_id AND m.copyKind = 11) AS htod_bytes,
       (SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
         WHERE m.cell_id = c.cell_id AND m.copyKind = 11) AS htod_migrations,
       (SELECT coalesce(sum(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
         WHERE m.cell_id = c.cell_id AND m.copyKind = 12) AS dtoh_bytes,
       (SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
         WHERE m.cell_id = c.cell_id AND m.copyKind = 12) AS dtoh_migrations,
       (SELECT count(*) FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS f WHERE f.cell_id = c.cell_id) AS cpu_page_faults,
       (SELECT coalesce(sum(numberOfPageFaults), 0) FROM CUDA_UM_GPU_PAGE_FAULT_EVENTS f
         WHERE f.cell_id = c.cell_id) AS gpu_page_faults
FROM cells c WHERE c.um_profiling IS NOT NULL;
)sql";

// Views added after version 2 was released, without a version change (no new data): a version-2
// file from before them gets them when it is next opened for writing.
constexpr const char* kLaterViewsSql = R"sql(
CREATE VIEW IF NOT EXISTS um_sum AS
SELECT m.cell_id, e.label AS operation, sum(m.bytes) AS total_bytes, count(*) AS count,
       avg(m.bytes) AS avg_bytes, min(m.bytes) AS min_bytes, max(m.bytes) AS max_bytes,
       sum(m."end" - m.start) AS total_ns
FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = m.copyKind
WHERE m.copyKind IN (11, 12)
GROUP BY m.cell_id, m.copyKind;
)sql";

void configure_connection(Database& db) {
    db.exec("PRAGMA foreign_keys = ON");
}

bool can_read(Database& db) {
    try {
        db.prepare("SELECT count(*) FROM sqlite_master").step();
        return true;
    } catch (const SqliteError&) {
        return false;
    }
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

// "INSERT INTO table (a, b) VALUES (?, ?)": one placeholder per column, bound in column order.
std::string insert_sql(const std::string& table, const std::vector<const char*>& columns) {
    std::string names, marks;
    for (const char* c : columns) {
        names += (names.empty() ? "" : ", ") + std::string(c);
        marks += marks.empty() ? "?" : ", ?";
    }
    return "INSERT INTO " + table + " (" + names + ") VALUES (" + marks + ")";
}

void insert_row(Database& db, const std::string& table, const std::vector<std::pair<const char*, SqlValue>>& values) {
    std::vector<const char*> names;
    for (const auto& [name, value] : values) names.push_back(name);
    auto st = db.prepare(insert_sql(table, names));
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

using Row = std::vector<std::pair<const char*, SqlValue>>;

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

// NVTX_EVENTS.eventType of a push/pop range (nsys's ENUM_NSYS_EVENT_TYPE).
constexpr std::int64_t kNvtxPushPopRange = 59;

const char* um_counter_kind_text(UmOtherRecord::Kind k) {
    switch (k) {
        case UmOtherRecord::Kind::thrashing: return "thrashing";
        case UmOtherRecord::Kind::throttling: return "throttling";
        case UmOtherRecord::Kind::remote_map: return "remote_map";
    }
    return "thrashing";
}

UmOtherRecord::Kind um_counter_kind(const std::string& text) {
    if (text == "throttling") return UmOtherRecord::Kind::throttling;
    if (text == "remote_map") return UmOtherRecord::Kind::remote_map;
    return UmOtherRecord::Kind::thrashing;
}

// Integers of any width go to SQLite as int64; unsigned 64-bit addresses keep their bit pattern.
template <class T>
void bind_value(Statement& st, int i, const T& v) {
    if constexpr (std::is_integral_v<T>) st.bind(i, static_cast<std::int64_t>(v));
    else st.bind(i, v);
}

template <class... Values>
void insert_values(Statement& st, const Values&... values) {
    st.reset();
    int i = 0;
    (bind_value(st, ++i, values), ...);
    st.run();
}

// NULL for what a record does not have: plain copies have no migration cause or UM address.
std::optional<std::int64_t> unless(std::int64_t v, std::int64_t none) {
    return v == none ? std::nullopt : std::optional<std::int64_t>(v);
}

// Writes one cell's event records. Each table has one prepared statement, reused for every row,
// so a large trace costs one parse per table, not per record.
class EventWriter {
public:
    EventWriter(Database& db, std::int64_t cell_id)
        : db_(db), cell_id_(cell_id),
          find_string_(db.prepare("SELECT id FROM StringIds WHERE value = ?")),
          add_string_(db.prepare(insert_sql("StringIds", {"value"}))),
          kernel_(db.prepare(insert_sql(
              "CUPTI_ACTIVITY_KIND_KERNEL",
              {"cell_id", "start", "\"end\"", "deviceId", "contextId", "streamId", "correlationId", "gridX", "gridY",
               "gridZ", "blockX", "blockY", "blockZ", "registersPerThread", "staticSharedMemory", "dynamicSharedMemory",
               "shortName", "demangledName"}))),
          memcpy_(db.prepare(insert_sql(
              "CUPTI_ACTIVITY_KIND_MEMCPY",
              {"cell_id", "start", "\"end\"", "deviceId", "contextId", "streamId", "correlationId", "copyKind",
               "srcKind", "dstKind", "bytes", "migrationCause", "virtualAddress"}))),
          gpu_fault_(db.prepare(insert_sql(
              "CUDA_UM_GPU_PAGE_FAULT_EVENTS",
              {"cell_id", "start", "\"end\"", "deviceId", "address", "numberOfPageFaults", "faultAccessType"}))),
          cpu_fault_(db.prepare(
              insert_sql("CUDA_UM_CPU_PAGE_FAULT_EVENTS", {"cell_id", "start", "address", "originalFaultPc"}))),
          um_counter_(db.prepare(
              insert_sql("UM_COUNTER_EVENTS", {"cell_id", "kind", "start", "\"end\"", "address", "value"}))),
          nvtx_(db.prepare(  // text stays NULL: nsys keeps registered strings in StringIds
              insert_sql("NVTX_EVENTS", {"cell_id", "start", "\"end\"", "textId", "globalTid", "eventType"}))),
          overhead_(db.prepare(
              insert_sql("CUPTI_ACTIVITY_KIND_OVERHEAD", {"cell_id", "start", "\"end\"", "overheadKind"}))) {}

    void write(const CellEvents& e) {
        for (const auto& k : e.kernels) {
            const auto name = string_id(k.name);
            insert_values(kernel_, cell_id_, k.start_ns, k.end_ns, k.device_id, k.context_id, k.stream_id,
                          k.correlation_id, k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z,
                          k.registers_per_thread, k.static_shared_memory, k.dynamic_shared_memory, name, name);
        }
        for (const auto& m : e.memcpys)
            insert_values(memcpy_, cell_id_, m.start_ns, m.end_ns, m.device_id, m.context_id, m.stream_id,
                          m.correlation_id, m.copy_kind, m.src_kind, m.dst_kind, m.bytes,
                          unless(m.migration_cause, -1), unless(static_cast<std::int64_t>(m.address), 0));
        for (const auto& f : e.gpu_page_faults)
            insert_values(gpu_fault_, cell_id_, f.start_ns, f.end_ns, f.device_id, f.address, f.faults, f.access_type);
        for (const auto& f : e.cpu_page_faults) insert_values(cpu_fault_, cell_id_, f.start_ns, f.address, f.fault_pc);
        for (const auto& u : e.um_other)
            insert_values(um_counter_, cell_id_, std::string_view(um_counter_kind_text(u.kind)), u.start_ns, u.end_ns,
                          u.address, u.value);
        for (const auto& r : e.ranges)
            insert_values(nvtx_, cell_id_, r.start_ns, r.end_ns, string_id(r.text), r.thread_id, kNvtxPushPopRange);
        for (const auto& o : e.overheads) insert_values(overhead_, cell_id_, o.start_ns, o.end_ns, o.kind);
    }

private:
    // Kernel names and range texts are stored once (as nsys does) and shared by all cells.
    std::int64_t string_id(const std::string& value) {
        if (const auto it = ids_.find(value); it != ids_.end()) return it->second;
        find_string_.reset();
        find_string_.bind(1, value);
        std::int64_t id = 0;
        if (find_string_.step()) {
            id = find_string_.int64(0);
        } else {
            insert_values(add_string_, value);
            id = db_.last_insert_rowid();
        }
        ids_.emplace(value, id);
        return id;
    }

    Database& db_;
    std::int64_t cell_id_;
    std::unordered_map<std::string, std::int64_t> ids_;
    Statement find_string_, add_string_, kernel_, memcpy_, gpu_fault_, cpu_fault_, um_counter_, nvtx_, overhead_;
};

// Runs `sql` (one `?` for the cell id) and hands every row to `read_row`, in insertion order.
template <class ReadRow>
void for_each_event(Database& db, const std::string& sql, std::int64_t cell_id, ReadRow read_row) {
    auto st = db.prepare(sql + " WHERE x.cell_id = ? ORDER BY x.rowid");
    st.bind(1, cell_id);
    while (st.step()) read_row(st);
}

std::int32_t i32(const Statement& st, int col) { return static_cast<std::int32_t>(st.int64(col)); }
std::uint32_t u32(const Statement& st, int col) { return static_cast<std::uint32_t>(st.int64(col)); }
std::uint64_t u64(const Statement& st, int col) { return static_cast<std::uint64_t>(st.int64(col)); }

// The records record_cell wrote for `cell_id`, in the order they were handed over.
CellEvents load_events(Database& db, std::int64_t cell_id) {
    CellEvents e;
    for_each_event(db,
                   "SELECT x.start, x.\"end\", x.deviceId, x.contextId, x.streamId, x.correlationId, x.gridX, x.gridY,"
                   " x.gridZ, x.blockX, x.blockY, x.blockZ, x.registersPerThread, x.staticSharedMemory,"
                   " x.dynamicSharedMemory, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL x"
                   " JOIN StringIds s ON s.id = x.demangledName",
                   cell_id, [&](const Statement& st) {
                       e.kernels.push_back({st.int64(0), st.int64(1), u32(st, 2), u32(st, 3), u32(st, 4), u32(st, 5),
                                            i32(st, 6), i32(st, 7), i32(st, 8), i32(st, 9), i32(st, 10), i32(st, 11),
                                            i32(st, 12), i32(st, 13), i32(st, 14), st.text(15)});
                   });
    for_each_event(db,
                   "SELECT x.start, x.\"end\", x.deviceId, x.contextId, x.streamId, x.correlationId, x.copyKind,"
                   " x.srcKind, x.dstKind, x.bytes, coalesce(x.migrationCause, -1), coalesce(x.virtualAddress, 0)"
                   " FROM CUPTI_ACTIVITY_KIND_MEMCPY x",
                   cell_id, [&](const Statement& st) {
                       e.memcpys.push_back({st.int64(0), st.int64(1), u32(st, 2), u32(st, 3), u32(st, 4), u32(st, 5),
                                            i32(st, 6), i32(st, 7), i32(st, 8), st.int64(9), i32(st, 10), u64(st, 11)});
                   });
    for_each_event(db,
                   "SELECT x.start, x.\"end\", x.deviceId, x.address, x.numberOfPageFaults, x.faultAccessType"
                   " FROM CUDA_UM_GPU_PAGE_FAULT_EVENTS x",
                   cell_id, [&](const Statement& st) {
                       e.gpu_page_faults.push_back(
                           {st.int64(0), st.int64(1), u32(st, 2), u64(st, 3), st.int64(4), i32(st, 5)});
                   });
    for_each_event(db, "SELECT x.start, x.address, x.originalFaultPc FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS x", cell_id,
                   [&](const Statement& st) { e.cpu_page_faults.push_back({st.int64(0), u64(st, 1), u64(st, 2)}); });
    for_each_event(db, "SELECT x.kind, x.start, x.\"end\", x.address, x.value FROM UM_COUNTER_EVENTS x", cell_id,
                   [&](const Statement& st) {
                       e.um_other.push_back(
                           {um_counter_kind(st.text(0)), st.int64(1), st.int64(2), u64(st, 3), u64(st, 4)});
                   });
    for_each_event(db,
                   "SELECT x.start, x.\"end\", coalesce(x.text, s.value), x.globalTid FROM NVTX_EVENTS x"
                   " LEFT JOIN StringIds s ON s.id = x.textId",
                   cell_id, [&](const Statement& st) {
                       e.ranges.push_back({st.int64(0), st.int64(1), st.text(2), u32(st, 3)});
                   });
    for_each_event(db, "SELECT x.overheadKind, x.start, x.\"end\" FROM CUPTI_ACTIVITY_KIND_OVERHEAD x", cell_id,
                   [&](const Statement& st) { e.overheads.push_back({i32(st, 0), st.int64(1), st.int64(2)}); });
    return e;
}

}  // namespace

namespace {

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

}  // namespace

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
    check_results_database(db);
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
    });
    const std::int64_t run_id = db_.last_insert_rowid();
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
    };
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
    if (o.events) EventWriter(db_, cell_id).write(*o.events);
    tx.commit();
    return cell_id;
}

std::optional<CellOutcome> Store::load_outcome(const std::string& key) {
    auto st = db_.prepare(
        "SELECT cell_id, status, reason, init_s, tokens_per_s, check_reference, check_max_abs_err, check_rel_err,"
        " check_tolerance, peak_host_rss_bytes, activation_bytes, resident_bytes, streamed_bytes,"
        " device_weight_bytes, device_used_bytes, um_profiling, dropped_records FROM cells WHERE cell_key = ?");
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
    return o;
}

}  // namespace sweetspot
