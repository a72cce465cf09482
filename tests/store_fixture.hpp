#pragma once
// The cells, runs and events the store and merge tests write, and databases as older schema
// versions left them.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "harness/cli/summary.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "harness/store/store.hpp"
#include "kernels/model/model_config.hpp"

namespace sweetspot::test {

inline CellParams tiny_cell(int batch, int seq) {
    CellParams c;
    c.model = *find_builtin_model("tiny");
    c.batch = batch;
    c.seq = seq;
    c.sweep = "unit";
    return c;
}

inline CellOutcome ok_outcome(double base_ms) {
    CellOutcome o;
    o.status = CellStatus::ok;
    o.set<"started_at">("2026-11-22T10:00:00Z");
    o.set<"finished_at">("2026-11-22T10:00:01Z");
    o.set<"wall_s">(1.0);
    o.set<"init_s">(0.1);
    o.warmup_ms = {base_ms * 3};
    o.timed_ms = {base_ms * 1.2, base_ms, base_ms * 1.1, base_ms * 0.9, base_ms * 1.05};
    o.set<"check_reference">("float64 loops");
    o.set<"check_max_abs_err">(1e-6);
    o.set<"check_rel_err">(2e-7);
    o.set<"check_tolerance">(1e-4);
    o.set<"exit_code">(0);
    return o;
}

inline std::int64_t count_rows(Store& s, const std::string& table) {
    auto st = s.db().prepare("SELECT count(*) FROM " + table);
    st.step();
    return st.int64(0);
}

inline RunInfo sample_run(const std::string& started_at = "2026-11-22T10:00:00Z") {
    RunInfo r;
    r.started_at = started_at;
    r.host = "testhost";
    r.matrix_name = "unit";
    r.cells_total = 3;
    return r;
}

// The correlation id kernel() gives a kernel that starts at `start`.
inline std::uint32_t kernel_correlation(std::int64_t start) { return static_cast<std::uint32_t>(start / 1000); }

inline KernelRecord kernel(std::int64_t start, std::int64_t end, const std::string& name, std::uint32_t stream) {
    KernelRecord k;
    k.start_ns = start;
    k.end_ns = end;
    k.device_id = 0;
    k.context_id = 1;
    k.stream_id = stream;
    k.correlation_id = kernel_correlation(start);
    k.grid_x = 96;
    k.grid_y = 2;
    k.grid_z = 1;
    k.block_x = 256;
    k.block_y = 1;
    k.block_z = 1;
    k.registers_per_thread = 64;
    k.static_shared_memory = 1024;
    k.dynamic_shared_memory = 49152;
    k.name = name;
    return k;
}

inline MemcpyRecord migration(std::int64_t start, std::int64_t end, int copy_kind, std::int64_t bytes, std::uint64_t address) {
    MemcpyRecord m;
    m.start_ns = start;
    m.end_ns = end;
    m.copy_kind = copy_kind;
    m.src_kind = copy_kind == 11 ? 4 : 2;
    m.dst_kind = copy_kind == 11 ? 2 : 4;
    m.bytes = bytes;
    m.migration_cause = copy_kind == 11 ? 2 : 4;  // page fault in, eviction out
    m.address = address;
    return m;
}

// One traced iteration of a two-layer model (ns from 1'000'000 to 2'000'000) with a record of every
// kind: kernels of two names, UM migrations both ways and a plain copy, GPU faults in each layer,
// CPU faults, UM counters, NVTX ranges, the API calls that launched the kernels and the copy, and
// collector overhead. `base_ns` shifts it all.
inline CellEvents sample_events(std::int64_t base_ns = 0) {
    CellEvents e;
    const auto t = [&](std::int64_t ns) { return base_ns + ns; };
    e.ranges = {{t(1'000'000), t(2'000'000), "traced iteration 0", 7},
                {t(1'000'000), t(1'500'000), "layer 0", 7},
                {t(1'000'000), t(1'100'000), "acquire", 7},
                {t(1'005'000), t(1'015'000), "fetch layer 0", 7},
                {t(1'100'000), t(1'500'000), "compute", 7},
                {t(1'500'000), t(2'000'000), "layer 1", 7},
                {t(1'500'000), t(1'600'000), "acquire", 7},
                {t(1'600'000), t(2'000'000), "compute", 7}};
    e.kernels = {kernel(t(1'100'000), t(1'300'000), "gemm_sm90<float>", 13),
                 kernel(t(1'300'000), t(1'400'000), "softmax_kernel", 13),
                 kernel(t(1'600'000), t(1'900'000), "gemm_sm90<float>", 13)};
    e.memcpys = {migration(t(1'010'000), t(1'090'000), 11, 2 << 20, 0x7f0000000000),
                 migration(t(1'510'000), t(1'590'000), 11, 1 << 20, 0x7f0000200000),
                 migration(t(1'950'000), t(1'990'000), 12, 1 << 19, 0x7f0000000000)};
    MemcpyRecord plain;
    plain.start_ns = t(1'050'000);
    plain.end_ns = t(1'060'000);
    plain.stream_id = 14;
    plain.correlation_id = 99;
    plain.copy_kind = 1;
    plain.src_kind = 1;
    plain.dst_kind = 2;
    plain.bytes = 4096;
    e.memcpys.push_back(plain);
    // The copy is launched in layer 0's acquire, by its fetch; its kernels in its compute, layer 1's
    // gemm in its compute (correlation ids as kernel() gives them).
    e.api_calls = {{t(1'010'000), t(1'011'000), 7, 99, "cudaMemcpyAsync_v3020", 0},
                   {t(1'120'000), t(1'121'000), 7, kernel_correlation(t(1'100'000)), "cudaLaunchKernel_v7000", 0},
                   {t(1'130'000), t(1'131'000), 7, kernel_correlation(t(1'300'000)), "cudaLaunchKernel_v7000", 0},
                   {t(1'620'000), t(1'621'000), 7, kernel_correlation(t(1'600'000)), "cudaLaunchKernel_v7000", 0}};
    // Faults while the kernels run: in layer 0's gemm and in layer 1's.
    e.gpu_page_faults = {{t(1'105'000), t(1'108'000), 0, 0x7f0000000000, 12, 1},
                         {t(1'605'000), t(1'608'000), 0, 0x7f0000200000, 5, 2},
                         {t(1'620'000), t(1'622'000), 0, 0x7f0000210000, 3, 1}};
    e.cpu_page_faults = {{t(1'960'000), 0x7f0000000000, 0x401000},
                         {t(1'970'000), 0xffff800000001000, 0xffffffff81000000}};  // top bit set: unsigned
    e.um_other = {{UmOtherRecord::Kind::thrashing, t(1'200'000), t(1'210'000), 0x7f0000000000, 1},
                  {UmOtherRecord::Kind::throttling, t(1'220'000), t(1'230'000), 0x7f0000000000, 2},
                  {UmOtherRecord::Kind::remote_map, t(1'240'000), t(1'250'000), 0x7f0000200000, 3}};
    e.overheads = {{0x10000, t(1'000'000), t(1'020'000)}, {1, t(1'700'000), t(1'705'000)}};
    e.dropped_records = 2;
    return e;
}

inline const std::vector<std::string> kEventTables = {
    "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUDA_UM_GPU_PAGE_FAULT_EVENTS",
    "CUDA_UM_CPU_PAGE_FAULT_EVENTS", "UM_COUNTER_EVENTS", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_OVERHEAD"};

// A database with a few ok cells and one failed one, for the documented queries. The first two
// cells have events (cell ids 1 and 2), the third was measured without.
inline void fill_fixture(Store& s) {
    auto gpu_run = sample_run();
    gpu_run.gpu_name = "NVIDIA H100 80GB HBM3";
    gpu_run.gpu_memory_bytes = 85'000'000'000;
    const auto run = s.begin_run(gpu_run);
    auto traced = ok_outcome(2.0);
    traced.events = sample_events();
    record_outcome(s, run, 0, tiny_cell(1, 16), traced);
    traced = ok_outcome(3.5);
    traced.events = sample_events(10'000'000);
    traced.events->kernels.pop_back();
    record_outcome(s, run, 1, tiny_cell(2, 16), traced);
    record_outcome(s, run, 2, tiny_cell(4, 32), ok_outcome(9.0));
    CellOutcome failed;
    failed.status = CellStatus::failed;
    failed.reason = "killed by signal 11 (Segmentation fault)";
    failed.set<"stderr_tail">("debug_fault = \"segfault\": failing on purpose\n");
    failed.set<"signal">(11);
    record_outcome(s, run, 3, tiny_cell(8, 32), failed);
    s.finish_run(run, "finished");
}

// A database as `version` wrote it: one run with one ok cell, `cell`, then the later versions'
// additions taken out by the schema's own list of versions (downgrade_schema). Read-only, it must
// still summarise, and stay at its version.
inline void write_old_version(const std::string& path, int version, const CellParams& cell = tiny_cell(2, 8)) {
    {
        auto s = Store::open(path);
        RunInfo info;
        info.started_at = "2026-01-01T00:00:00Z";
        record_outcome(s, s.begin_run(info), 0, cell, ok_outcome(1.0));
        downgrade_schema(s.db(), version);
    }
    auto r = Store::open_read_only(path);
    std::ostringstream out;
    print_summary(r, SummaryOptions{}, out);
    CHECK_THAT(out.str(), Catch::Matchers::ContainsSubstring("1 ok"));
    auto v = r.db().prepare("SELECT version FROM schema_info");
    REQUIRE(v.step());
    CHECK(v.int64(0) == version);  // reading changed nothing
}

}  // namespace sweetspot::test
