// The measured side of a GPU cell's memory on the CPU: NVML read through a stand-in library
// (fake_nvml.cpp), the watch's arithmetic on scripted readings, and how both are stored.
#include <dlfcn.h>
#include <unistd.h>

#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "harness/cli/summary.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "harness/measure/gpu_memory_watch.hpp"
#include "harness/measure/memory_estimate.hpp"
#include "harness/measure/nvml_memory.hpp"
#include "harness/store/store.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr std::int64_t MiB = std::int64_t{1} << 20;
constexpr const char* kFakeUuid = "GPU-00112233-4455-6677-8899-aabbccddeeff";

using FakeSet = void (*)(unsigned long long, const unsigned int*, const unsigned long long*, unsigned int, int);
using FakeSetState = void (*)(int, unsigned int, unsigned int, unsigned int, unsigned long long);

// The stand-in library, loaded the way NvmlDevice loads it (the same handle), and its setters.
struct FakeNvml {
    void* handle;
    FakeSet set;
    FakeSetState set_state;
    FakeNvml() {
        setenv("SWEETSPOT_NVML_LIBRARY", FAKE_NVML_LIBRARY, 1);
        handle = dlopen(FAKE_NVML_LIBRARY, RTLD_NOW | RTLD_LOCAL);
        REQUIRE(handle != nullptr);
        set = reinterpret_cast<FakeSet>(dlsym(handle, "fake_nvml_set"));
        set_state = reinterpret_cast<FakeSetState>(dlsym(handle, "fake_nvml_set_state"));
        REQUIRE(set != nullptr);
        REQUIRE(set_state != nullptr);
    }
    ~FakeNvml() {
        dlclose(handle);
        unsetenv("SWEETSPOT_NVML_LIBRARY");
    }
};

}  // namespace

TEST_CASE("NVML's readings: the device's used memory, this process's and the others'", "[gpu_memory]") {
    FakeNvml fake;
    std::string why;
    CHECK(NvmlDevice::open("GPU-ffffffff-0000-0000-0000-000000000000", why) == nullptr);
    CHECK_THAT(why, ContainsSubstring("NVML finds no GPU GPU-ffffffff-0000-0000-0000-000000000000: Not Found"));

    const auto device = NvmlDevice::open(kFakeUuid, why);
    REQUIRE(device != nullptr);
    // Ten processes: more than NvmlDevice asks for at first, so it must ask again with the size.
    unsigned int pids[10];
    unsigned long long bytes[10];
    for (unsigned int i = 0; i < 10; ++i) {
        pids[i] = 100000 + i;
        bytes[i] = (i + 1) * MiB;
    }
    pids[4] = static_cast<unsigned int>(::getpid());
    bytes[9] = ~0ull;  // NVML_VALUE_NOT_AVAILABLE counts as 0
    fake.set(7 * 1024 * MiB, pids, bytes, 10, 0);
    const GpuMemoryReading r = device->read();
    CHECK(r.used_bytes == 7 * 1024 * MiB);
    REQUIRE(r.own_bytes);
    CHECK(*r.own_bytes == 5 * MiB);
    CHECK(r.other_processes == 9);
    CHECK(r.other_bytes == (1 + 2 + 3 + 4 + 6 + 7 + 8 + 9) * MiB);

    // Without this process in the list (a container's own pid namespace), every process is another.
    fake.set(MiB, pids, bytes, 4, 0);
    const GpuMemoryReading none = device->read();
    CHECK_FALSE(none.own_bytes);
    CHECK(none.other_processes == 4);

    fake.set(MiB, pids, bytes, 0, 1);
    CHECK_THROWS_WITH(device->read(), "nvmlDeviceGetMemoryInfo failed: Unknown Error");
}

TEST_CASE("NVML's readings: the GPU's clock, power, temperature and clock events, where it reports them",
          "[gpu_memory]") {
    FakeNvml fake;
    std::string why;
    const auto device = NvmlDevice::open(kFakeUuid, why);
    REQUIRE(device != nullptr);
    fake.set(MiB, nullptr, nullptr, 0, 0);
    fake.set_state(1, 1755, 612345, 71, 0x4);
    const GpuMemoryReading r = device->read();
    CHECK(r.sm_clock_mhz == 1755);
    CHECK(r.power_w == 612.345);
    CHECK(r.temperature_c == 71);
    CHECK(r.clock_events == 0x4u);
    // A driver that does not report them gives a reading without them, not an error.
    fake.set_state(0, 0, 0, 0, 0);
    const GpuMemoryReading bare = device->read();
    CHECK(bare.used_bytes == MiB);
    CHECK_FALSE(bare.sm_clock_mhz);
    CHECK_FALSE(bare.power_w);
    CHECK_FALSE(bare.temperature_c);
    CHECK_FALSE(bare.clock_events);
}

TEST_CASE("the watch: the SM clock while busy, the most power and heat, what throttled the clocks", "[gpu_memory]") {
    // Readings in turn: idle at 345 MHz (not a clock of the work), then busy at 1980, 1755 and
    // 1830 MHz, the second held by the power cap (0x4) and, while idle, a bit that is no throttling
    // (applications clocks, 0x2).
    struct State {
        int mhz;
        double watts;
        int celsius;
        std::uint64_t events;
    };
    const std::vector<State> states = {{345, 70.0, 40, 0x1 | 0x2}, {1980, 650.5, 60, 0}, {1755, 699.9, 68, 0x4}, {1830, 640.0, 66, 0}};
    std::atomic<std::size_t> next{0};
    const auto reader = [&] {
        const State& s = states[std::min(next.load(), states.size() - 1)];
        GpuMemoryReading r;
        r.used_bytes = MiB;
        r.sm_clock_mhz = s.mhz;
        r.power_w = s.watts;
        r.temperature_c = s.celsius;
        r.clock_events = s.events;
        return r;
    };
    // A period no test waits out: only the readings taken here count.
    GpuMemoryWatch watch(reader, std::chrono::hours(1));
    watch.context_created();  // reads state 0 (idle), then the thread reads it again at once
    for (std::size_t i = 1; i < states.size(); ++i) {
        next = i;
        watch.measurement();
    }
    const GpuMemoryMeasurement m = watch.measurement();  // state 3 once more
    REQUIRE(m.sm_clock_busy_mhz);
    // Busy clocks read: 1980, 1755, 1830, 1830: the median of four is the upper middle, 1830.
    CHECK(*m.sm_clock_busy_mhz == 1830);
    CHECK(m.power_max_w == 699.9);
    CHECK(m.temperature_max_c == 68);
    CHECK(m.throttling_events == 0x4u);
    CHECK(throttling_names(*m.throttling_events) == "sw_power_cap");
    CHECK(throttling_names(0x4 | 0x40 | 0x1 | 0x2) == "sw_power_cap, hw_thermal_slowdown");
}

TEST_CASE("without the NVML library there is no reading, and the reason says so", "[gpu_memory]") {
    setenv("SWEETSPOT_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    std::string why;
    CHECK(NvmlDevice::open(kFakeUuid, why) == nullptr);
    CHECK_THAT(why, ContainsSubstring("NVML not available (/nonexistent/libnvidia-ml.so.1 does not load"));
    unsetenv("SWEETSPOT_NVML_LIBRARY");
    CHECK(NvmlDevice::library_name() == "libnvidia-ml.so.1");
}

TEST_CASE("a GPU's UUID in NVML's form", "[gpu_memory]") {
    const unsigned char bytes[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                     0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
    CHECK(gpu_uuid_string(bytes) == kFakeUuid);
}

TEST_CASE("the watch: the context's cost, the peak over the readings, other processes", "[gpu_memory]") {
    // The reading the reader returns, as the test sets it; read from the watch's thread too.
    std::atomic<std::int64_t> used{1024 * MiB}, own{0};
    std::atomic<int> others{1};
    std::atomic<int> reads{0};
    std::atomic<bool> fail{false};
    const auto reader = [&] {
        ++reads;
        if (fail) throw std::runtime_error("the driver went away");
        GpuMemoryReading r;
        r.used_bytes = used;
        if (own > 0) r.own_bytes = own.load();
        r.other_processes = others;
        r.other_bytes = others * 300 * MiB;
        return r;
    };
    GpuMemoryWatch watch(reader, std::chrono::milliseconds(1));
    CHECK(reads == 1);  // before the context, at construction

    used = 1524 * MiB;  // the context
    own = 500 * MiB;
    watch.context_created();
    used = 5120 * MiB;  // the cell's allocations
    own = 4096 * MiB;
    others = 2;  // another process appears
    GpuMemoryMeasurement m = watch.measurement();
    used = 2048 * MiB;  // freed again before the end
    others = 0;
    // The thread keeps reading every millisecond: wait until it has read the lower value.
    const int seen = reads;
    while (reads < seen + 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    m = watch.measurement();
    CHECK(m.before_bytes == 1024 * MiB);
    CHECK(m.context_bytes == 500 * MiB);
    CHECK(m.peak_bytes == 4096 * MiB);
    REQUIRE(m.own_peak_bytes);
    CHECK(*m.own_peak_bytes == 4096 * MiB);
    CHECK(m.other_processes == 2);
    CHECK(m.other_peak_bytes == 600 * MiB);
    CHECK(m.readings >= 5);
    CHECK(m.error.empty());

    fail = true;
    m = watch.measurement();
    CHECK(m.error == "the driver went away");
    CHECK(m.peak_bytes == 4096 * MiB);  // what was read before stays

    // A reading that fails right after the context: no thread, the reason kept.
    fail = false;
    GpuMemoryWatch early(reader, std::chrono::milliseconds(1));
    fail = true;
    early.context_created();
    const GpuMemoryMeasurement e = early.measurement();
    CHECK(e.error == "the driver went away");
    CHECK(e.readings == 1);
}

TEST_CASE("a GPU cell's measured memory is stored, and set against the prediction", "[gpu_memory][store]") {
    test::TempDir tmp;
    auto s = Store::open(tmp.file("m.db"));
    RunInfo info;
    info.started_at = "2026-11-23T00:00:00Z";
    info.gpu_name = "Fixture GPU";
    info.gpu_driver = "CUDA 13.0";
    const auto run = s.begin_run(info);
    CellParams cell;
    cell.model = *find_builtin_model("tiny_odd");
    cell.backend = BackendId::device;
    CellOutcome o;
    o.status = CellStatus::ok;
    o.timed_ms = {1.0};
    o.set<"device_weight_bytes">(1000 * MiB);
    o.set<"activation_bytes">(100 * MiB);
    o.set<"device_used_bytes">(2000 * MiB);
    o.set<"predicted_alloc_bytes">(1100 * MiB);
    o.set<"predicted_peak_bytes">(1600 * MiB);
    o.set<"gpu_used_before_bytes">(400 * MiB);
    o.set<"gpu_context_bytes">(450 * MiB);
    o.set<"gpu_peak_bytes">(1616 * MiB);
    o.set<"gpu_own_peak_bytes">(1550 * MiB);
    o.set<"gpu_other_processes">(1);
    o.set<"gpu_other_bytes">(400 * MiB);
    o.set<"gpu_memory_readings">(12);
    const auto id = record_outcome(s, run, 0, cell, o);

    auto back = s.db().prepare(
        "SELECT gpu_used_before_bytes, gpu_context_bytes, gpu_peak_bytes, gpu_own_peak_bytes, gpu_other_processes,"
        " gpu_other_bytes, gpu_memory_readings, gpu_memory_note IS NULL FROM cells WHERE cell_key = ?");
    back.bind(1, cell.key());
    REQUIRE(back.step());
    CHECK(back.int64(0) == 400 * MiB);
    CHECK(back.int64(1) == 450 * MiB);
    CHECK(back.int64(2) == 1616 * MiB);
    CHECK(back.int64(3) == 1550 * MiB);
    CHECK(back.int64(4) == 1);
    CHECK(back.int64(5) == 400 * MiB);
    CHECK(back.int64(6) == 12);
    CHECK(back.int64(7) == 1);

    auto st = s.db().prepare("SELECT cell_id, peak_error_pct, allocated_bytes, alloc_error_pct FROM memory_accuracy");
    REQUIRE(st.step());
    CHECK(st.int64(0) == id);
    CHECK(st.real(1) == Catch::Approx(100.0 * (1600.0 - 1616.0) / 1616.0));
    CHECK(st.int64(2) == 1100 * MiB);
    CHECK(st.real(3) == Catch::Approx(0.0));
    CHECK_FALSE(st.step());

    // The fixed cost comes from the measured peak where there is one: 1616 − 1100 MiB, not the
    // used memory's 2000 − 1100.
    const std::vector<FixedCost> costs = measured_fixed_costs(s.db());
    REQUIRE(costs.size() == 1);
    CHECK(costs[0].largest == 516 * MiB);

    std::ostringstream summary;
    print_summary(s, SummaryOptions{}, summary);
    CHECK_THAT(summary.str(), ContainsSubstring("GPU memory: predicted peak against NVML's measured peak"));
    CHECK_THAT(summary.str(), ContainsSubstring("-0.99 %"));

    // The host side where the cell has both: 500 predicted against 400 MiB measured, 25 % over.
    o.set<"predicted_host_peak_bytes">(500 * MiB);
    o.set<"peak_host_rss_bytes">(400 * MiB);
    cell.batch = 3;
    record_outcome(s, run, 2, cell, o);
    std::ostringstream with_host;
    print_summary(s, SummaryOptions{}, with_host);
    CHECK_THAT(with_host.str(), ContainsSubstring("host: predicted"));
    CHECK_THAT(with_host.str(), ContainsSubstring("25.00 %"));

    // A cell without NVML keeps the reason, and no numbers.
    CellOutcome without = o;
    const std::optional<std::int64_t> none;
    without.set<"gpu_used_before_bytes">(none);
    without.set<"gpu_context_bytes">(none);
    without.set<"gpu_peak_bytes">(none);
    without.set<"gpu_own_peak_bytes">(none);
    without.set<"gpu_other_processes">(none);
    without.set<"gpu_other_bytes">(none);
    without.set<"gpu_memory_readings">(none);
    without.set<"gpu_memory_note">("NVML not available (libnvidia-ml.so.1 does not load)");
    cell.batch = 2;
    record_outcome(s, run, 1, cell, without);
    auto note = s.db().prepare("SELECT gpu_memory_note, gpu_peak_bytes IS NULL FROM cells WHERE cell_key = ?");
    note.bind(1, cell.key());
    REQUIRE(note.step());
    CHECK(note.text(0) == "NVML not available (libnvidia-ml.so.1 does not load)");
    CHECK(note.int64(1) == 1);
}
