#include "harness/collect/cupti_collector.hpp"

#include <cupti.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>

#include "harness/collect/cupti_records.hpp"
#include "kernels/compute/cuda_check.hpp"

namespace sweetspot {
namespace {

void cupti_check(CUptiResult status, const char* call) {
    if (status == CUPTI_SUCCESS) return;
    const char* text = nullptr;
    cuptiGetResultString(status, &text);
    throw CudaError(std::string("CUPTI error ") + (text ? text : std::to_string(status)) + " from " + call);
}
#define CUPTI_CHECK(call) cupti_check((call), #call)

// CUPTI's buffer callbacks are C functions without a user pointer, so the records of the one
// collector a process may have go here. Guarded because CUPTI calls back on its own thread.
struct CuptiSink {
    std::mutex mutex;
    CuptiRecordReader reader;
    std::int64_t dropped = 0;
};
CuptiSink* g_cupti_sink = nullptr;

constexpr std::size_t kBufferBytes = 8u << 20;
constexpr std::size_t kBufferAlign = 8;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(::operator new(kBufferBytes, std::align_val_t{kBufferAlign}, std::nothrow));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid) {
    if (g_cupti_sink != nullptr) {
        std::lock_guard lock(g_cupti_sink->mutex);
        CUpti_Activity* record = nullptr;
        while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) g_cupti_sink->reader.add(record);
        // Records CUPTI could not fit anywhere are lost: count them, every buffer.
        size_t dropped = 0;
        if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS)
            g_cupti_sink->dropped += static_cast<std::int64_t>(dropped);
    }
    ::operator delete(buffer, std::align_val_t{kBufferAlign});
}

// Every Unified Memory counter kind the cell's events record (transfers each way, CPU and GPU page
// faults, thrashing, throttling, remote maps), configured together before the kind is enabled.
CUptiResult configure_um_counters() {
    const CUpti_ActivityUnifiedMemoryCounterKind kinds[] = {
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP,
    };
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUpti_ActivityUnifiedMemoryCounterConfig config[std::size(kinds)] = {};
    for (std::size_t i = 0; i < std::size(kinds); ++i) {
        config[i].scope = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE;
        config[i].kind = kinds[i];
        config[i].deviceId = static_cast<uint32_t>(device);
        config[i].enable = 1;
    }
    return cuptiActivityConfigureUnifiedMemoryCounter(config, static_cast<uint32_t>(std::size(kinds)));
}

bool um_not_supported(CUptiResult r) {
    return r == CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED || r == CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE ||
           r == CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_NON_P2P_DEVICES ||
           r == CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_WITH_MPS;
}

// The runtime and driver API calls are collected for their correlation ids: a kernel or copy
// launched through either (cuBLAS may call the driver directly) is found by the call that made it.
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MARKER,            CUPTI_ACTIVITY_KIND_OVERHEAD,
                                         CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER};

}  // namespace

void prepare_nvtx_injection() {
    if (const char* set = std::getenv("NVTX_INJECTION64_PATH"); set && *set) return;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&cuptiActivityEnable), &info) != 0 && info.dli_fname != nullptr)
        setenv("NVTX_INJECTION64_PATH", info.dli_fname, 1);
}

CuptiCollector::CuptiCollector() {
    if (g_cupti_sink != nullptr) throw std::logic_error("only one CUPTI collector may be active in a process");
    g_cupti_sink = new CuptiSink();
    try {
        CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
        const CUptiResult um = configure_um_counters();
        if (um == CUPTI_SUCCESS) {
            um_configured_ = true;
        } else if (um_not_supported(um)) {
            const char* text = nullptr;
            cuptiGetResultString(um, &text);
            um_note_ = std::string("Unified Memory profiling not supported here: ") + (text ? text : "");
        } else {
            cupti_check(um, "cuptiActivityConfigureUnifiedMemoryCounter");
        }
    } catch (...) {
        disable();
        throw;
    }
}

void CuptiCollector::start() {
    if (um_configured_) {
        CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER));
        um_enabled_ = true;
    }
    for (const auto kind : kKinds) CUPTI_CHECK(cuptiActivityEnable(kind));
}

CuptiCollector::~CuptiCollector() { disable(); }

void CuptiCollector::disable() noexcept {
    if (!active_) return;
    active_ = false;
    for (const auto kind : kKinds) (void)cuptiActivityDisable(kind);
    if (um_enabled_) (void)cuptiActivityDisable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
    (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    delete g_cupti_sink;
    g_cupti_sink = nullptr;
}

CellEvents CuptiCollector::finish() {
    // Records of work still running would be missing or incomplete: wait first, then force
    // out every buffer, including ones CUPTI has not filled.
    CUDA_CHECK(cudaDeviceSynchronize());
    CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    CellEvents events;
    {
        std::lock_guard lock(g_cupti_sink->mutex);
        events = g_cupti_sink->reader.take();
        events.dropped_records = g_cupti_sink->dropped;
    }
    events.um_supported = um_enabled_;
    events.um_note = um_note_;
    disable();
    return events;
}

}  // namespace sweetspot
