#include "harness/collect/cupti_records.hpp"

#include <cupti_callbacks.h>
#include <cxxabi.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>

namespace sweetspot {
namespace {

std::string demangle(const char* name) {
    if (name == nullptr) return "";
    int status = 0;
    std::unique_ptr<char, decltype(&std::free)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
    return status == 0 && d ? std::string(d.get()) : std::string(name);
}

std::int64_t ns(std::uint64_t t) { return static_cast<std::int64_t>(t); }

}  // namespace

void CuptiRecordReader::add(const CUpti_Activity* record) {
    switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL:
            add_kernel(*reinterpret_cast<const CUpti_ActivityKernel10*>(record));
            break;
        case CUPTI_ACTIVITY_KIND_MEMCPY:
            add_memcpy(*reinterpret_cast<const CUpti_ActivityMemcpy6*>(record));
            break;
        case CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER:
            add_unified_memory(*reinterpret_cast<const CUpti_ActivityUnifiedMemoryCounter3*>(record));
            break;
        case CUPTI_ACTIVITY_KIND_MARKER:
            add_marker(*reinterpret_cast<const CUpti_ActivityMarker2*>(record));
            break;
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER:
            add_api_call(*reinterpret_cast<const CUpti_ActivityAPI*>(record),
                         record->kind == CUPTI_ACTIVITY_KIND_DRIVER);
            break;
        case CUPTI_ACTIVITY_KIND_OVERHEAD:
            add_overhead(*reinterpret_cast<const CUpti_ActivityOverhead3*>(record));
            break;
        default:
            break;
    }
}

void CuptiRecordReader::add_kernel(const CUpti_ActivityKernel10& k) {
    KernelRecord r;
    r.start_ns = ns(k.start);
    r.end_ns = ns(k.end);
    r.device_id = k.deviceId;
    r.context_id = k.contextId;
    r.stream_id = k.streamId;
    r.correlation_id = k.correlationId;
    r.grid_x = k.gridX;
    r.grid_y = k.gridY;
    r.grid_z = k.gridZ;
    r.block_x = k.blockX;
    r.block_y = k.blockY;
    r.block_z = k.blockZ;
    r.registers_per_thread = k.registersPerThread;
    r.static_shared_memory = k.staticSharedMemory;
    r.dynamic_shared_memory = k.dynamicSharedMemory;
    r.name = demangle(k.name);
    events_.kernels.push_back(std::move(r));
}

void CuptiRecordReader::add_memcpy(const CUpti_ActivityMemcpy6& m) {
    MemcpyRecord r;
    r.start_ns = ns(m.start);
    r.end_ns = ns(m.end);
    r.device_id = m.deviceId;
    r.context_id = m.contextId;
    r.stream_id = m.streamId;
    r.correlation_id = m.correlationId;
    r.copy_kind = m.copyKind;
    r.src_kind = m.srcKind;
    r.dst_kind = m.dstKind;
    r.bytes = static_cast<std::int64_t>(m.bytes);
    events_.memcpys.push_back(r);
}

// UM records carry no valid stream and no correlation id: they are placed on the timeline by
// their timestamps only. A CPU page-fault record's value is the faulting PC, not a count.
void CuptiRecordReader::add_unified_memory(const CUpti_ActivityUnifiedMemoryCounter3& u) {
    switch (u.counterKind) {
        case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD:
        case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH: {
            const bool htod = u.counterKind == CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD;
            MemcpyRecord r;
            r.start_ns = ns(u.start);
            r.end_ns = ns(u.end);
            r.device_id = htod ? u.dstId : u.srcId;
            r.copy_kind = htod ? kUnifiedHtoD : kUnifiedDtoH;
            r.bytes = static_cast<std::int64_t>(u.value);
            r.migration_cause = static_cast<std::int32_t>(u.flags);
            r.address = u.address;
            events_.memcpys.push_back(r);
            break;
        }
        case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT:
            events_.gpu_page_faults.push_back({ns(u.start), ns(u.end), u.srcId, u.address,
                                               static_cast<std::int64_t>(u.value), static_cast<std::int32_t>(u.flags)});
            break;
        case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT:
            events_.cpu_page_faults.push_back({ns(u.start), u.address, u.value});
            break;
        case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING:
            events_.um_other.push_back({UmOtherRecord::Kind::thrashing, ns(u.start), ns(u.end), u.address, u.value});
            break;
        case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING:
            events_.um_other.push_back({UmOtherRecord::Kind::throttling, ns(u.start), ns(u.end), u.address, u.value});
            break;
        case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP:
            events_.um_other.push_back({UmOtherRecord::Kind::remote_map, ns(u.start), ns(u.end), u.address, u.value});
            break;
        default:
            break;
    }
}

// NVTX start/end ranges arrive as two marker records with one id: the start carries the text
// and the domain, the end only the id.
void CuptiRecordReader::add_marker(const CUpti_ActivityMarker2& m) {
    if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
        if (m.domain == nullptr || std::strcmp(m.domain, "sweetspot") != 0) return;
        RangeRecord r;
        r.start_ns = ns(m.timestamp);
        r.text = m.name ? m.name : "";
        if (m.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD) r.thread_id = m.objectId.pt.threadId;
        open_ranges_[m.id] = std::move(r);
    } else if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
        auto it = open_ranges_.find(m.id);
        if (it == open_ranges_.end()) return;
        it->second.end_ns = ns(m.timestamp);
        events_.ranges.push_back(std::move(it->second));
        open_ranges_.erase(it);
    }
}

void CuptiRecordReader::add_api_call(const CUpti_ActivityAPI& a, bool driver) {
    ApiCallRecord r;
    r.start_ns = ns(a.start);
    r.end_ns = ns(a.end);
    r.thread_id = a.threadId;
    r.correlation_id = a.correlationId;
    r.return_value = static_cast<std::int32_t>(a.returnValue);
    events_.api_calls.push_back(std::move(r));
    api_functions_.push_back({driver, a.cbid});
}

// Named here rather than as the records arrive: they arrive in CUPTI's buffer callback, which
// should not call back into CUPTI.
void CuptiRecordReader::name_api_calls() {
    std::map<ApiFunction, std::string> names;
    for (std::size_t i = 0; i < api_functions_.size(); ++i) {
        const ApiFunction f = api_functions_[i];
        auto it = names.find(f);
        if (it == names.end()) {
            const char* name = nullptr;
            const auto domain = f.driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
            const bool known = cuptiGetCallbackName(domain, f.cbid, &name) == CUPTI_SUCCESS && name != nullptr;
            // A function this CUPTI cannot name is still stored, by its callback id.
            it = names.emplace(f, known ? std::string(name)
                                        : std::string(f.driver ? "driver" : "runtime") + " callback " +
                                              std::to_string(f.cbid))
                     .first;
        }
        events_.api_calls[i].name = it->second;
    }
    api_functions_.clear();
}

void CuptiRecordReader::add_overhead(const CUpti_ActivityOverhead3& o) {
    events_.overheads.push_back({static_cast<std::int32_t>(o.overheadKind), ns(o.start), ns(o.end)});
}

CellEvents CuptiRecordReader::take() {
    name_api_calls();
    open_ranges_.clear();
    return std::exchange(events_, CellEvents{});
}

}  // namespace sweetspot
