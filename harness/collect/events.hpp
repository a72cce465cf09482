#pragma once
// What the CUPTI collector hands over from a cell's traced iterations, in plain form (no CUPTI
// types), so that storing, summarising and exporting events is tested without a GPU. Times are
// nanoseconds on CUPTI's clock (the same clock for every record of a process).
#include <cstdint>
#include <string>
#include <vector>

namespace sweetspot {

// CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL.
struct KernelRecord {
    std::int64_t start_ns = 0, end_ns = 0;
    std::uint32_t device_id = 0, context_id = 0, stream_id = 0, correlation_id = 0;
    std::int32_t grid_x = 0, grid_y = 0, grid_z = 0, block_x = 0, block_y = 0, block_z = 0;
    std::int32_t registers_per_thread = 0, static_shared_memory = 0, dynamic_shared_memory = 0;
    std::string name;  // demangled when CUPTI could, else as reported
};

// CUPTI_ACTIVITY_KIND_MEMCPY, and Unified Memory migrations (from the UM counters) in the form
// Nsight Systems exports them: copy_kind 11 (UM host to device) or 12 (UM device to host),
// stream_id and correlation_id 0 (UM records have none), migration_cause set.
struct MemcpyRecord {
    std::int64_t start_ns = 0, end_ns = 0;
    std::uint32_t device_id = 0, context_id = 0, stream_id = 0, correlation_id = 0;
    std::int32_t copy_kind = 0;                 // CUpti_ActivityMemcpyKind, or 11/12 for UM
    std::int32_t src_kind = 0, dst_kind = 0;    // CUpti_ActivityMemoryKind
    std::int64_t bytes = 0;
    std::int32_t migration_cause = -1;          // CUpti_ActivityUnifiedMemoryMigrationCause; -1 for plain copies
    std::uint64_t address = 0;                  // UM: start of the migrated range
};

// GPU page-fault groups (CUDA_UM_GPU_PAGE_FAULT_EVENTS).
struct GpuPageFaultRecord {
    std::int64_t start_ns = 0, end_ns = 0;
    std::uint32_t device_id = 0;
    std::uint64_t address = 0;
    std::int64_t faults = 0;            // the record's value: number of faults in the group
    std::int32_t access_type = 0;       // CUpti_ActivityUnifiedMemoryAccessType
};

// CPU page faults (CUDA_UM_CPU_PAGE_FAULT_EVENTS): one record is one fault; its value is the
// faulting instruction's address, not a count.
struct CpuPageFaultRecord {
    std::int64_t start_ns = 0;
    std::uint64_t address = 0;
    std::uint64_t fault_pc = 0;
};

// Thrashing, throttling and remote-map counter records, counted into the cell's totals.
struct UmOtherRecord {
    enum class Kind { thrashing, throttling, remote_map } kind = Kind::thrashing;
    std::int64_t start_ns = 0, end_ns = 0;
    std::uint64_t address = 0;
    std::uint64_t value = 0;
};

// An NVTX push/pop or start/end range of the `sweetspot` domain (CUPTI_ACTIVITY_KIND_MARKER).
struct RangeRecord {
    std::int64_t start_ns = 0, end_ns = 0;
    std::string text;              // e.g. "cell", "iteration 2", "layer 7", "acquire", "compute"
    std::uint32_t thread_id = 0;
};

// A CUDA runtime or driver API call (CUPTI_ACTIVITY_KIND_RUNTIME, _DRIVER). Its correlation id is
// the one of the kernels and copies it launched: the call's host time and thread place that GPU
// work inside the NVTX ranges open at the call, which projects those ranges onto the GPU.
struct ApiCallRecord {
    std::int64_t start_ns = 0, end_ns = 0;
    std::uint32_t thread_id = 0, correlation_id = 0;
    std::string name;              // e.g. "cudaLaunchKernel_v7000", "cuLaunchKernel"
    std::int32_t return_value = 0; // cudaError_t or CUresult
};

// CUPTI_ACTIVITY_KIND_OVERHEAD.
struct OverheadRecord {
    std::int32_t kind = 0;         // CUpti_ActivityOverheadKind
    std::int64_t start_ns = 0, end_ns = 0;
};

struct CellEvents {
    std::vector<KernelRecord> kernels;
    std::vector<MemcpyRecord> memcpys;
    std::vector<GpuPageFaultRecord> gpu_page_faults;
    std::vector<CpuPageFaultRecord> cpu_page_faults;
    std::vector<UmOtherRecord> um_other;
    std::vector<RangeRecord> ranges;
    std::vector<ApiCallRecord> api_calls;
    std::vector<OverheadRecord> overheads;
    std::int64_t dropped_records = 0;
    bool um_supported = true;      // false: the platform refused UM profiling
    std::string um_note;           // why, when not supported
};

}  // namespace sweetspot
