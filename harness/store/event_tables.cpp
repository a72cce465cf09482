#include "harness/store/event_tables.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "harness/store/sql_values.hpp"

namespace sweetspot {
namespace {

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
          api_call_(db.prepare(insert_sql(
              "CUPTI_ACTIVITY_KIND_RUNTIME",
              {"cell_id", "start", "\"end\"", "globalTid", "correlationId", "nameId", "returnValue"}))),
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
        for (const auto& a : e.api_calls)
            insert_values(api_call_, cell_id_, a.start_ns, a.end_ns, a.thread_id, a.correlation_id, string_id(a.name),
                          a.return_value);
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
    Statement find_string_, add_string_, kernel_, memcpy_, gpu_fault_, cpu_fault_, um_counter_, nvtx_, api_call_,
        overhead_;
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

}  // namespace

void write_events(Database& db, std::int64_t cell_id, const CellEvents& events) {
    EventWriter(db, cell_id).write(events);
}

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
    for_each_event(db,
                   "SELECT x.start, x.\"end\", x.globalTid, x.correlationId, s.value, x.returnValue"
                   " FROM CUPTI_ACTIVITY_KIND_RUNTIME x JOIN StringIds s ON s.id = x.nameId",
                   cell_id, [&](const Statement& st) {
                       e.api_calls.push_back({st.int64(0), st.int64(1), u32(st, 2), u32(st, 3), st.text(4), i32(st, 5)});
                   });
    for_each_event(db, "SELECT x.overheadKind, x.start, x.\"end\" FROM CUPTI_ACTIVITY_KIND_OVERHEAD x", cell_id,
                   [&](const Statement& st) { e.overheads.push_back({i32(st, 0), st.int64(1), st.int64(2)}); });
    return e;
}

bool has_api_calls(Database& db, std::int64_t cell_id) {
    if (!has_table(db, "CUPTI_ACTIVITY_KIND_RUNTIME")) return false;
    auto calls = db.prepare("SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE cell_id = ? LIMIT 1");
    calls.bind(1, cell_id);
    return calls.step();
}

}  // namespace sweetspot
