// CUPTI records → event rows, fed with synthetic records: the mapping the collector relies on,
// tested without a GPU.
#include <catch2/catch_test_macros.hpp>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>

#include "harness/collect/cupti_records.hpp"

using namespace sweetspot;

namespace {

CUpti_ActivityUnifiedMemoryCounter3 um(CUpti_ActivityUnifiedMemoryCounterKind kind, std::uint64_t value) {
    CUpti_ActivityUnifiedMemoryCounter3 u{};
    u.kind = CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER;
    u.counterKind = kind;
    u.value = value;
    u.start = 1000;
    u.end = 2000;
    u.address = 0x7f0000200000;
    u.srcId = 0;
    u.dstId = 1;
    u.flags = 3;
    return u;
}

CUpti_ActivityMarker2 marker(std::uint32_t id, bool start, const char* name, const char* domain, std::uint64_t t) {
    CUpti_ActivityMarker2 m{};
    m.kind = CUPTI_ACTIVITY_KIND_MARKER;
    m.flags = start ? CUPTI_ACTIVITY_FLAG_MARKER_START : CUPTI_ACTIVITY_FLAG_MARKER_END;
    m.id = id;
    m.timestamp = t;
    m.name = name;
    m.domain = domain;
    m.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
    m.objectId.pt.threadId = 77;
    return m;
}

void add(CuptiRecordReader& r, const auto& record) { r.add(reinterpret_cast<const CUpti_Activity*>(&record)); }

}  // namespace

TEST_CASE("kernel and copy records keep their fields; kernel names are demangled", "[cupti]") {
    CuptiRecordReader reader;
    CUpti_ActivityKernel10 k{};
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = 100;
    k.end = 250;
    k.deviceId = 0;
    k.streamId = 13;
    k.correlationId = 42;
    k.gridX = 96;
    k.blockX = 256;
    k.registersPerThread = 40;
    k.name = "_Z14softmax_kernelIfEvPT_ii";
    add(reader, k);
    CUpti_ActivityMemcpy6 m{};
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
    m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    m.bytes = 123456789;
    m.start = 300;
    m.end = 900;
    m.streamId = 14;
    add(reader, m);

    const CellEvents e = reader.take();
    REQUIRE(e.kernels.size() == 1);
    CHECK(e.kernels[0].name == "void softmax_kernel<float>(float*, int, int)");
    CHECK(e.kernels[0].start_ns == 100);
    CHECK(e.kernels[0].end_ns == 250);
    CHECK(e.kernels[0].stream_id == 13);
    CHECK(e.kernels[0].correlation_id == 42);
    CHECK(e.kernels[0].grid_x == 96);
    CHECK(e.kernels[0].block_x == 256);
    CHECK(e.kernels[0].registers_per_thread == 40);
    REQUIRE(e.memcpys.size() == 1);
    CHECK(e.memcpys[0].copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD);
    CHECK(e.memcpys[0].bytes == 123456789);
    CHECK(e.memcpys[0].stream_id == 14);
    CHECK(e.memcpys[0].migration_cause == -1);
}

TEST_CASE("UM counters become migrations, fault groups, per-fault CPU rows and other counts", "[cupti]") {
    CuptiRecordReader reader;
    add(reader, um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD, 2 << 20));
    add(reader, um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH, 4096));
    add(reader, um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT, 17));
    add(reader, um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT, 0x401234));
    add(reader, um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT, 0x401240));
    add(reader, um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING, 1));
    add(reader, um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING, 1));
    add(reader, um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP, 1));

    const CellEvents e = reader.take();
    REQUIRE(e.memcpys.size() == 2);
    CHECK(e.memcpys[0].copy_kind == kUnifiedHtoD);
    CHECK(e.memcpys[0].bytes == (2 << 20));
    CHECK(e.memcpys[0].device_id == 1);  // host to device: the destination is the GPU
    CHECK(e.memcpys[0].migration_cause == 3);
    CHECK(e.memcpys[0].stream_id == 0);  // UM records have no valid stream
    CHECK(e.memcpys[0].address == 0x7f0000200000);
    CHECK(e.memcpys[1].copy_kind == kUnifiedDtoH);
    CHECK(e.memcpys[1].device_id == 0);
    REQUIRE(e.gpu_page_faults.size() == 1);
    CHECK(e.gpu_page_faults[0].faults == 17);
    CHECK(e.gpu_page_faults[0].access_type == 3);
    REQUIRE(e.cpu_page_faults.size() == 2);  // one row per fault: the value is a PC, not a count
    CHECK(e.cpu_page_faults[0].fault_pc == 0x401234);
    REQUIRE(e.um_other.size() == 3);
    CHECK(e.um_other[0].kind == UmOtherRecord::Kind::thrashing);
    CHECK(e.um_other[2].kind == UmOtherRecord::Kind::remote_map);
}

TEST_CASE("NVTX start and end markers pair up by id, in the sweetspot domain only", "[cupti]") {
    CuptiRecordReader reader;
    add(reader, marker(1, true, "iteration 0", "sweetspot", 10));
    add(reader, marker(2, true, "layer 3", "sweetspot", 20));
    add(reader, marker(3, true, "someone else's", "other", 25));
    add(reader, marker(2, false, nullptr, nullptr, 30));
    add(reader, marker(3, false, nullptr, nullptr, 35));
    add(reader, marker(9, false, nullptr, nullptr, 36));  // an end without a start
    add(reader, marker(1, false, nullptr, nullptr, 40));
    add(reader, marker(4, true, "never ends", "sweetspot", 50));
    CUpti_ActivityOverhead3 o{};
    o.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
    o.overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH;
    o.start = 60;
    o.end = 70;
    add(reader, o);

    const CellEvents e = reader.take();
    REQUIRE(e.ranges.size() == 2);
    CHECK(e.ranges[0].text == "layer 3");
    CHECK(e.ranges[0].start_ns == 20);
    CHECK(e.ranges[0].end_ns == 30);
    CHECK(e.ranges[0].thread_id == 77);
    CHECK(e.ranges[1].text == "iteration 0");
    CHECK(e.ranges[1].end_ns == 40);
    REQUIRE(e.overheads.size() == 1);
    CHECK(e.overheads[0].end_ns == 70);
    CHECK(reader.take().ranges.empty());  // taking empties the reader
}

TEST_CASE("runtime and driver API records keep their thread, correlation id and function name", "[cupti]") {
    CuptiRecordReader reader;
    CUpti_ActivityAPI runtime{};
    runtime.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    runtime.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
    runtime.start = 100;
    runtime.end = 140;
    runtime.threadId = 77;
    runtime.correlationId = 42;
    runtime.returnValue = 0;
    add(reader, runtime);
    CUpti_ActivityAPI driver = runtime;
    driver.kind = CUPTI_ACTIVITY_KIND_DRIVER;
    driver.cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
    driver.correlationId = 43;
    driver.returnValue = 1;  // CUDA_ERROR_INVALID_VALUE
    add(reader, driver);

    const CellEvents e = reader.take();
    REQUIRE(e.api_calls.size() == 2);
    CHECK(e.api_calls[0].name == "cudaLaunchKernel_v7000");
    CHECK(e.api_calls[0].start_ns == 100);
    CHECK(e.api_calls[0].end_ns == 140);
    CHECK(e.api_calls[0].thread_id == 77);  // as the NVTX markers' threadId, which the projection matches
    CHECK(e.api_calls[0].correlation_id == 42);
    CHECK(e.api_calls[1].name == "cuLaunchKernel");
    CHECK(e.api_calls[1].correlation_id == 43);
    CHECK(e.api_calls[1].return_value == 1);
}
