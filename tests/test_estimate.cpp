// The memory estimator (harness/measure/memory_estimate.hpp) and `sweetspot estimate`: each term
// against hand-computed bytes for small configurations, and against what real GPU cells
// allocated on an H100 (the device_weight_bytes and activation_bytes the layer-fusion study and
// the variants benchmark stored, 2026-11-23).
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/residency_plan.hpp"
#include "base/number_text.hpp"
#include "harness/matrix/matrix.hpp"
#include "harness/matrix/sequence_lengths.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "harness/measure/memory_estimate.hpp"
#include "harness/measure/packed_fit.hpp"
#include "harness/store/sqlite.hpp"
#include "harness/store/store.hpp"
#include "harness/system/system_info.hpp"
#include "kernels/model/activation_layout.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;

namespace {

// The one cell of a matrix with these [defaults] lines (and warmups/iterations irrelevant here).
CellParams one_cell(const std::string& defaults) {
    const Matrix m = parse_matrix("name = \"estimate\"\n[defaults]\n" + defaults + "\n[[sweep]]\nname = \"one\"\n", "test");
    REQUIRE(m.cells.size() == 1);
    return m.cells.front();
}

constexpr std::int64_t MiB = std::int64_t{1} << 20;

// An ok cell of `backend` whose device memory in use exceeds its allocations by `beyond` bytes.
CellOutcome used_beyond(std::int64_t beyond) {
    CellOutcome o;
    o.status = CellStatus::ok;
    o.timed_ms = {1.0};
    o.set<"device_weight_bytes">(1000 * MiB);
    o.set<"activation_bytes">(100 * MiB);
    o.set<"device_used_bytes">(1100 * MiB + beyond);
    return o;
}

// The weight bytes of tiny_odd in fp32, the model of the calibration fixtures.
std::int64_t tiny_weight_bytes() { return one_cell("model = \"tiny_odd\"").weight_bytes(); }

// The host memory of a cell of tiny_odd whose process held `beyond` bytes besides the estimate's
// host terms, the reference forward of its check run or not.
void host_rss(CellOutcome& o, const CellParams& c, std::int64_t beyond, bool reference_ran) {
    o.set<"check_reference">("host fp32 forward");
    o.set<"check_reference_computed">(reference_ran);
    o.set<"pinned_host_bytes">(estimate_memory(c).pinned_host);
    o.set<"predicted_host_alloc_bytes">(estimate_memory(c).host_total(reference_ran));
    o.set<"peak_host_rss_bytes">(estimate_memory(c).host_total(reference_ran) + beyond);
}

// A results database: one run on `gpu` with two device cells (600 and 598 MiB beyond their
// allocations; on the host, 400 and 420 MiB beyond the estimate's host terms, the second having run
// its reference forward); an explicit-copy cell at 60 % whose page-locked weights (the units it
// streams) cost 1/64 of their bytes
// beyond that (390 MiB on the host); a uvm-prefetch cell whose peak holds 2 GiB beyond its
// allocations (no host reading); and a failed device cell, which must not count.
void write_calibration_db(const std::string& path, const std::string& gpu) {
    auto store = Store::open(path);
    RunInfo info;
    info.started_at = "2026-11-23T00:00:00Z";
    info.gpu_name = gpu;
    info.gpu_driver = "CUDA 13.0";
    const auto run = store.begin_run(info);
    int index = 0;
    const auto cell = [&](const std::string& axes) { return one_cell("model = \"tiny_odd\"\n" + axes); };
    const auto on_host = [&](CellOutcome o, const CellParams& c, std::int64_t beyond, bool reference_ran) {
        host_rss(o, c, beyond, reference_ran);
        return o;
    };
    const CellParams device = cell("backend = \"device\""), device3 = cell("backend = \"device\"\nbatch = 3");
    const CellParams copy = cell("backend = \"explicit-copy\"\nprefetch = 1\nbudget = \"60%\"");
    record_outcome(store, run, index++, device, on_host(used_beyond(600 * MiB), device, 400 * MiB, false));
    record_outcome(store, run, index++, device3, on_host(used_beyond(598 * MiB), device3, 420 * MiB, true));
    const CellParams softmax = cell("backend = \"device\"\nvariant = \"softmax\"");
    record_outcome(store, run, index++, softmax, on_host(used_beyond(599 * MiB), softmax, 380 * MiB, false));
    record_outcome(store, run, index++, copy,
                   on_host(used_beyond(600 * MiB + estimate_memory(copy).pinned_host / 64), copy, 390 * MiB, false));
    record_outcome(store, run, index++, cell("backend = \"uvm-prefetch\"\nprefetch = \"jit\""), used_beyond(2048 * MiB));
    CellOutcome failed = used_beyond(9000 * MiB);
    failed.status = CellStatus::failed;
    record_outcome(store, run, index++, cell("backend = \"device\"\nbatch = 2"), failed);
}

// A run on "Fixture GPU" in `store`, for cells recorded by hand.
auto fixture_run(Store& store) {
    RunInfo info;
    info.gpu_name = "Fixture GPU";
    info.gpu_driver = "CUDA 13.0";
    return store.begin_run(info);
}

}  // namespace

TEST_CASE("the estimate's terms match what H100 cells allocated", "[estimate]") {
    struct Measured {
        const char* axes;
        std::int64_t device_weight_bytes, activation_bytes;  // as stored (activation_bytes includes the workspace)
    };
    for (const Measured& m : {
             Measured{"model = \"gpt2_1.5b\"\ndtype = \"fp32\"\nbackend = \"device\"\nbatch = 1\nseq = 1024", 6552176640, 416358400},
             Measured{"model = \"gpt2_1.5b\"\ndtype = \"fp32\"\nbackend = \"device\"\nvariant = \"all\"\nbatch = 1\nseq = 1024",
                      6552176640, 311500800},
             Measured{"model = \"gpt2_1.5b\"\ndtype = \"bf16\"\nbackend = \"device\"\nbatch = 4\nseq = 1024", 3276088320, 799170560},
             Measured{"model = \"gpt2_1.5b\"\ndtype = \"fp16\"\nbackend = \"device\"\nvariant = \"all\"\nbatch = 1\nseq = 512",
                      3276088320, 103042048},
             Measured{"model = \"gpt3_6.7b\"\ndtype = \"fp32\"\nbackend = \"uvm-prefetch\"\nprefetch = \"jit\"\nstreams = 5\n"
                      "budget = \"21GiB\"\nbatch = 1\nseq = 1024",
                      21818392576, 558178304},
             Measured{"model = \"gpt3_6.7b\"\ndtype = \"fp16\"\nbackend = \"device\"\nvariant = \"all\"\nbatch = 4\nseq = 1024",
                      13728514048, 814374912},
             Measured{"model = \"gpt3_13b\"\ndtype = \"fp32\"\nbackend = \"device\"\nbatch = 1\nseq = 1024", 52442808320, 637870080},
             Measured{"model = \"gpt3_13b\"\ndtype = \"bf16\"\nbackend = \"device\"\nbatch = 4\nseq = 1024", 26221404160, 1242193920},
         }) {
        INFO(m.axes);
        const MemoryEstimate e = estimate_memory(one_cell(m.axes));
        CHECK(e.weights == m.device_weight_bytes);
        CHECK(e.activations + e.scores + e.workspace == m.activation_bytes);
    }
}

TEST_CASE("the training terms match what H100 training cells allocated", "[estimate][train]") {
    // GPT-2 1.5B, T = 1024, flash attention, device backend (train-gpt2.toml on an H100, 2026-11-26,
    // the logits' rows padded): device_weight_bytes and activation_bytes as the cells stored them
    // (the step's buffers and the cuBLAS workspace); their training_state_bytes were 22932618240
    // (bf16) and 19656529920 (fp32).
    struct Measured {
        const char* dtype;
        int batch;
        std::int64_t device_weight_bytes, activation_bytes;
    };
    for (const Measured& m : {Measured{"bf16", 4, 3276088320, 8271921664}, Measured{"bf16", 8, 3276088320, 16503325184},
                              Measured{"bf16", 16, 3276088320, 32966132224}, Measured{"bf16", 24, 3276088320, 49428939264},
                              Measured{"bf16", 28, 3276088320, 57660342784}, Measured{"fp32", 4, 6552176640, 16456581632},
                              Measured{"fp32", 8, 6552176640, 32872645120}}) {
        INFO(m.dtype << " batch " << m.batch);
        const MemoryEstimate e = estimate_memory(one_cell(
            "model = \"gpt2_1.5b\"\nmode = \"train\"\nbackend = \"device\"\nvariant = \"flash_attention\"\nseq = 1024\n"
            "dtype = \"" + std::string(m.dtype) + "\"\nbatch = " + std::to_string(m.batch)));
        CHECK(e.weights == m.device_weight_bytes);
        CHECK(e.activations + e.scores + e.workspace == m.activation_bytes);
        CHECK(e.training_state == (std::string(m.dtype) == "bf16" ? 22932618240 : 19656529920));
    }
}

TEST_CASE("the ragged training terms match what H100 training cells allocated, padded and packed",
          "[estimate][train][ragged]") {
    // llama_1b bf16, flash attention, lengths lognormal:330,0.85 at the default seed (the
    // llama-device-train sweep of packing.toml on an H100, 2026-11-27): activation_bytes as the
    // cells stored them (the step's buffers and the cuBLAS workspace); every cell's
    // device_weight_bytes was 2996965376 and training_state_bytes 20978757632.
    struct Measured {
        int batch;
        const char* packing;
        std::int64_t activation_bytes;
    };
    for (const Measured& m : {Measured{8, "padded", 5680367616}, Measured{8, "packed", 3416932608},
                              Measured{16, "padded", 13508374528}, Measured{16, "packed", 6935757312},
                              Measured{32, "packed", 15758678016}}) {
        INFO(m.packing << " batch " << m.batch);
        const MemoryEstimate e = estimate_memory(one_cell(
            "model = \"llama_1b\"\nmode = \"train\"\nbackend = \"device\"\nvariant = \"flash_attention\"\n"
            "dtype = \"bf16\"\nseq = 2048\nlengths = \"lognormal:330,0.85\"\npacking = \"" + std::string(m.packing) +
            "\"\nbatch = " + std::to_string(m.batch)));
        CHECK(e.weights == 2996965376);
        CHECK(e.training_state == 20978757632);
        CHECK(e.activations + e.scores + e.workspace == m.activation_bytes);
    }
}

TEST_CASE("the weights term follows each backend's placement", "[estimate]") {
    // tiny_odd (1.05 MiB of fp32 weights in 5 units); a budget of 100 % holds them all.
    const CellParams device = one_cell("model = \"tiny_odd\"\nbackend = \"device\"");
    const MemoryEstimate d = estimate_memory(device);
    CHECK(d.weights >= device.weight_bytes());           // units padded to 256 bytes
    CHECK(d.weights < device.weight_bytes() + 5 * 256);
    CHECK(d.pinned_host == 0);
    CHECK(d.managed == 0);
    CHECK(d.workspace == 32 * MiB);
    // split_tf32 adds its 256 MiB scratch of operand halves, in inference and training alike.
    CHECK(estimate_memory(one_cell("model = \"tiny_odd\"\nbackend = \"device\"\nsplit_tf32 = true")).workspace ==
          (32 + 256) * MiB);
    CHECK(estimate_memory(one_cell("model = \"tiny_odd\"\nbackend = \"device\"\nsplit_tf32 = true\nmode = \"train\""))
              .workspace == (32 + 256) * MiB);

    // explicit-copy at 100 %: every unit resident on the device, nothing pinned; under a budget the
    // streamed units are pinned, each on its own huge pages (it is registered on its own).
    const MemoryEstimate copy = estimate_memory(one_cell("model = \"tiny_odd\"\nbackend = \"explicit-copy\""));
    CHECK(copy.weights == d.weights);
    CHECK(copy.pinned_host == 0);
    const CellParams copy60 = one_cell("model = \"tiny_odd\"\nbackend = \"explicit-copy\"\nprefetch = 1\nbudget = \"60%\"");
    const ResidencyPlan plan60 = plan_residency(unit_bytes(WeightLayout::for_model(copy60.model), copy60.dtype),
                                                copy60.budget_bytes(), streaming_slots(1), copy60.resident);
    REQUIRE(plan60.streamed_units() > 0);
    CHECK(estimate_memory(copy60).pinned_host == plan60.streamed_units() * 2 * MiB);

    // uvm-prefetch: managed weights, each unit on its own 2 MiB blocks; at 100 % all stay on the GPU.
    const MemoryEstimate prefetch = estimate_memory(one_cell("model = \"tiny_odd\"\nbackend = \"uvm-prefetch\"\nprefetch = \"jit\""));
    CHECK(prefetch.weights == device.weight_bytes());
    CHECK(prefetch.managed == 5 * 2 * MiB);
    CHECK(prefetch.pinned_host == 0);

    // uvm under a 70 % budget: the GPU keeps at most the budget.
    const CellParams uvm_cell = one_cell("model = \"tiny_odd\"\nbackend = \"uvm\"\nbudget = \"70%\"");
    const MemoryEstimate uvm = estimate_memory(uvm_cell);
    CHECK(uvm.weights == uvm_cell.budget_bytes());
    CHECK(uvm.managed == 5 * 2 * MiB);

    // The host backend uses no device memory.
    const MemoryEstimate host = estimate_memory(one_cell("model = \"tiny_odd\"\nbackend = \"host\""));
    CHECK(host.device_total() == 0);
}

TEST_CASE("the host terms: the weights' host memory, the logits, the check's reference forward", "[estimate]") {
    // tiny_odd, every tensor starting on a multiple of 128 values: units of 28 416 (embedding: wte
    // 300 · 78 padded to 23 424, wpe 64 · 78 = 4 992), 74 752 (each of the 3 blocks: the four layer
    // norm vectors and proj's and fc proj's biases 128 each, qkv 18 304 + 256, proj 6 144, fc
    // 24 448 + 384, fc proj 24 448) and 23 680 (head: 128 + 128 + 23 424) fp32 values, 1 105 408
    // bytes in all. Batch 2, seq 8: 16 tokens, so the CPU forward's activations are
    // 16 · 11 · 78 + 8 · 8 floats (55 168 bytes) and its logits 16 · 300 floats (19 200 bytes).
    const std::string shape = "model = \"tiny_odd\"\nbatch = 2\nseq = 8\n";
    const MemoryEstimate host = estimate_memory(one_cell(shape + "backend = \"host\""));
    CHECK(host.host_weights == 1105408);
    CHECK(host.host_buffers == 55168 + 19200);
    CHECK(host.host_reference == 0);

    // A GPU cell of a small model checks its whole output: the 16 rows fetched and the reference's
    // (2 · 19 200 bytes); the reference forward holds the largest unit in fp32 (a block, 299 008
    // bytes) and its activations.
    const MemoryEstimate device = estimate_memory(one_cell(shape + "backend = \"device\""));
    CHECK(device.host_weights == 0);
    CHECK(device.host_buffers == 2 * 19200);
    CHECK(device.host_reference == 299008 + 55168);
    CHECK(device.host_total(true) == 2 * 19200 + 299008 + 55168);
    CHECK(device.host_total(false) == 2 * 19200);

    // The weights on the host: explicit-copy's page-locked copy, every unit for uvm (placing
    // migrates them all to the host), the streamed units for uvm-prefetch, none at 100 %.
    const MemoryEstimate copy = estimate_memory(one_cell(shape + "backend = \"explicit-copy\"\nprefetch = 1\nbudget = \"60%\""));
    CHECK(copy.pinned_host > 0);
    CHECK(copy.host_weights == copy.pinned_host);
    CHECK(estimate_memory(one_cell(shape + "backend = \"uvm\"\nbudget = \"70%\"")).host_weights == 1105408);
    CHECK(estimate_memory(one_cell(shape + "backend = \"uvm-prefetch\"\nprefetch = 1")).host_weights == 0);
    const CellParams streaming = one_cell(shape + "backend = \"uvm-prefetch\"\nprefetch = 1\nbudget = \"60%\"");
    const auto units = unit_bytes(WeightLayout::for_model(streaming.model), streaming.dtype);
    const ResidencyPlan plan = plan_residency(units, streaming.budget_bytes(), streaming_slots(1), streaming.resident);
    REQUIRE(plan.streamed_bytes > 0);
    CHECK(estimate_memory(streaming).host_weights == plan.streamed_bytes);

    // A large model checks the first 16 positions of sample 0 only: GPT-3 6.7B's reference forward
    // holds its largest unit, the embedding ((50 257 + 2 048) · 4 096 fp32 values), whatever the batch.
    const MemoryEstimate large = estimate_memory(
        one_cell("model = \"gpt3_6.7b\"\nbatch = 16\nseq = 1024\nbackend = \"device\"\ndtype = \"bf16\""));
    CHECK(large.host_buffers == 2 * 16 * 50257 * 4);
    CHECK(large.host_reference == std::int64_t{50257 + 2048} * 4096 * 4 + (16 * 11 * 4096 + 16 * 16) * 4);
}

TEST_CASE("the activation terms follow the variant and the activations axis", "[estimate]") {
    const MemoryEstimate base = estimate_memory(one_cell("model = \"tiny_odd\"\nbackend = \"device\"\nbatch = 2\nseq = 64"));
    // tiny_odd has 3 heads: 2 · 3 · 64 · 64 fp32 scores.
    CHECK(base.scores == 2 * 3 * 64 * 64 * 4);
    const MemoryEstimate flash =
        estimate_memory(one_cell("model = \"tiny_odd\"\nbackend = \"device\"\nbatch = 2\nseq = 64\nvariant = \"attn_proj\""));
    CHECK(flash.scores == 0);
    CHECK(flash.activations == base.activations);
    CHECK(flash.device_total() == base.device_total() - base.scores);

    const MemoryEstimate managed = estimate_memory(
        one_cell("model = \"tiny_odd\"\nbackend = \"uvm-prefetch\"\nprefetch = \"jit\"\nbatch = 2\nseq = 64\nactivations = \"managed\""));
    CHECK(managed.managed_activations);
    CHECK(managed.managed == 5 * 2 * MiB + managed.activations + managed.scores);
}

TEST_CASE("a cell its backend cannot honour has no estimate", "[estimate]") {
    CHECK_THROWS_WITH(estimate_memory(one_cell("model = \"tiny_odd\"\nbackend = \"device\"\nbudget = \"50%\"")),
                      ContainsSubstring("keeps all weights resident"));
}

TEST_CASE("sweetspot estimate prints each cell's terms, and why a cell cannot run", "[estimate][cli]") {
    test::TempDir tmp;
    const auto matrix = tmp.file("m.toml");
    test::write_file(matrix, "name = \"est\"\n[defaults]\nmodel = \"tiny_odd\"\n[[sweep]]\nname = \"s\"\n"
                             "backend = [\"device\", \"explicit-copy\"]\nbudget = [\"100%\", \"50%\"]\n");
    const auto r = test::run_sweetspot("estimate '" + matrix + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, ContainsSubstring("est (" + matrix + "): 4 cells"));
    CHECK_THAT(r.output, ContainsSubstring("32.0 MiB"));  // the workspace
    CHECK_THAT(r.output, ContainsSubstring("cannot run: the device backend keeps all weights resident"));
    CHECK_THAT(r.output, ContainsSubstring("The CUDA context and the libraries' memory come on top"));
    const auto help = test::run_sweetspot("estimate --help");
    CHECK(help.exit_code == 0);
    CHECK_THAT(help.output, ContainsSubstring("usage: sweetspot estimate FILE"));
}

TEST_CASE("the CUDA context and libraries' memory is measured from a results database", "[estimate]") {
    test::TempDir tmp;
    const auto db = tmp.file("calibration.db");
    write_calibration_db(db, "Fixture GPU");
    Store read = Store::open_read_only(db);
    const std::vector<FixedCost> costs = measured_fixed_costs(read.db());
    REQUIRE(costs.size() == 1);
    CHECK(costs[0].gpu == "Fixture GPU");
    CHECK(costs[0].driver == "CUDA 13.0");
    CHECK(costs[0].largest == 600 * MiB);
    CHECK(costs[0].smallest == 598 * MiB);
    CHECK(costs[0].cells == 3);  // the device cells: not the failed one
    // The explicit-copy cell's 1/64 of its pinned bytes beyond the device cells' largest.
    CHECK(costs[0].per_pinned_byte == Catch::Approx(1.0 / 64).epsilon(1e-3));
    // The uvm-prefetch cell's peak less the fixed cost, its activations and all its weights (the
    // driver keeps every page it migrated); for a dtype no UVM cell measured, scaled by the element
    // sizes (bf16's half of fp32's).
    const std::int64_t overhead = 1100 * MiB + 2048 * MiB - 600 * MiB - 100 * MiB - tiny_weight_bytes();
    REQUIRE(costs[0].managed_overhead.size() == 1);
    CHECK(costs[0].managed_overhead_for(DType::fp32) == overhead);
    CHECK(costs[0].managed_overhead_for(DType::bf16) == overhead / 2);
    // On the host, per backend, kernels and whether the reference ran, the largest of those cells'
    // memory beyond the host terms (the reference counted where it ran); a key without cells
    // takes the largest of its backend and reference case, else of its backend, else of any.
    CHECK(FixedCost::kernel_set(Mode::train, DType::bf16, *Variant::parse("flash_attention+mlp_epilogue")) ==
          "train bf16 mlp_epilogue+flash_attention");
    const std::string baseline = "infer fp32 baseline", softmax = "infer fp32 softmax", all = "infer fp32 all";
    REQUIRE(costs[0].host_process.size() == 4);
    CHECK(costs[0].host_process_for({BackendId::device, false, baseline}) == 400 * MiB);
    CHECK(costs[0].host_process_for({BackendId::device, false, softmax}) == 380 * MiB);
    CHECK(costs[0].host_process_for({BackendId::device, false, all}) == 400 * MiB);
    CHECK(costs[0].host_process_for({BackendId::device, true, baseline}) == 420 * MiB);
    CHECK(costs[0].host_process_for({BackendId::device, true, softmax}) == 420 * MiB);
    CHECK(costs[0].host_process_for({BackendId::explicit_copy, false, baseline}) == 390 * MiB);
    CHECK(costs[0].host_process_for({BackendId::explicit_copy, true, baseline}) == 390 * MiB);
    CHECK(costs[0].host_process_for({BackendId::uvm, false, baseline}) == 420 * MiB);
    // The predicted peaks add those: page tables for explicit-copy's pinned weights, every managed
    // weight byte and the driver's overhead for uvm-prefetch.
    const CellParams copy = one_cell("model = \"tiny_odd\"\nbackend = \"explicit-copy\"\nprefetch = 1\nbudget = \"60%\"");
    const MemoryEstimate copy_e = estimate_memory(copy);
    CHECK(predicted_peak(copy, copy_e, costs[0]) ==
          copy_e.device_total() + 600 * MiB + std::llround(static_cast<double>(copy_e.pinned_host) * costs[0].per_pinned_byte));
    const CellParams prefetch = one_cell("model = \"tiny_odd\"\nbackend = \"uvm-prefetch\"\nprefetch = 1\nbudget = \"60%\"");
    const MemoryEstimate prefetch_e = estimate_memory(prefetch);
    CHECK(prefetch_e.retained_managed == prefetch.weight_bytes() - prefetch_e.weights);
    CHECK(predicted_peak(prefetch, prefetch_e, costs[0]) ==
          prefetch_e.device_total() + prefetch_e.retained_managed + 600 * MiB + overhead);
    // What must fit leaves out the pages the driver may evict.
    CHECK(predicted_need(prefetch_e, costs[0]) == prefetch_e.device_total() + 600 * MiB);
    // The host peak: the host terms, the reference forward where it runs, and the backend's own.
    CHECK(predicted_host_peak(copy, copy_e, costs[0], false) == copy_e.host_total(false) + 390 * MiB);
    CHECK(predicted_host_peak(copy, copy_e, costs[0], true) == copy_e.host_total(true) + 390 * MiB);
    CHECK(predicted_host_peak(prefetch, prefetch_e, costs[0], true) == prefetch_e.host_total(true) + 420 * MiB);

    // Without a UVM cell the driver's memory for managed weights is not measured: no peak for UVM
    // cells (a guess of 0 would under-predict the first of them), and none for the host without
    // cells that say whether their reference ran.
    FixedCost no_uvm = costs[0];
    no_uvm.managed_overhead.clear();
    no_uvm.host_process.clear();
    CHECK_FALSE(predicted_peak(prefetch, prefetch_e, no_uvm));
    CHECK(predicted_peak(copy, copy_e, no_uvm) == predicted_need(copy_e, no_uvm));
    CHECK_FALSE(predicted_host_peak(copy, copy_e, no_uvm, true));

    const auto matrix = tmp.file("m.toml");
    test::write_file(matrix, "name = \"est\"\n[defaults]\nmodel = \"tiny_odd\"\nbackend = \"device\"\n[[sweep]]\nname = \"s\"\n");
    const auto r = test::run_sweetspot("estimate '" + matrix + "' --calibration '" + db + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, ContainsSubstring("peak = device + kept managed + 600.0 MiB for the CUDA context and the "
                                           "libraries, the largest measured on Fixture GPU (CUDA 13.0) over 3 cells "
                                           "(smallest 598.0 MiB) + 1.56"));
    CHECK_THAT(r.output, ContainsSubstring("the driver holds for managed fp32 weights"));
    const MemoryEstimate e = estimate_memory(one_cell("model = \"tiny_odd\"\nbackend = \"device\""));
    CHECK_THAT(r.output, ContainsSubstring(human_bytes(static_cast<double>(e.device_total() + 600 * MiB))));

    // A database of two GPUs cannot say which one the cells are meant for.
    {
        auto other = Store::open(db);
        RunInfo info;
        info.started_at = "2026-11-23T01:00:00Z";
        info.gpu_name = "Other GPU";
        info.gpu_driver = "CUDA 13.0";
        record_outcome(other, other.begin_run(info), 9, one_cell("model = \"tiny_odd\"\nbackend = \"device\"\nbatch = 3"),
                       used_beyond(700 * MiB));
    }
    const auto two = test::run_sweetspot("estimate '" + matrix + "' --calibration '" + db + "'");
    CHECK(two.exit_code == 2);
    CHECK_THAT(two.output, ContainsSubstring("several GPUs or drivers (Fixture GPU (CUDA 13.0), Other GPU (CUDA 13.0))"));

    const auto empty = tmp.file("empty.db");
    Store::open(empty);
    const auto none = test::run_sweetspot("estimate '" + matrix + "' --calibration '" + empty + "'");
    CHECK(none.exit_code == 2);
    CHECK_THAT(none.output, ContainsSubstring("nothing to measure the CUDA context and libraries from"));
}


TEST_CASE("a training cell checked on a prefix step larger than its own step calibrates against the prefix step",
          "[estimate][train]") {
    test::TempDir tmp;
    const auto db = tmp.file("calibration.db");
    {
        auto store = Store::open(db);
        const auto run = fixture_run(store);
        const auto train_cell = [](int batch) {
            return one_cell("model = \"tiny_odd\"\nbackend = \"device\"\nmode = \"train\"\nbatch = " +
                            std::to_string(batch));
        };
        // Its own step allocated 100 MiB, the prefix step before it 300 MiB: the peak held the
        // weights, the training state, the prefix step's 300 MiB and 600 MiB of CUDA context.
        CellOutcome prefix_larger = used_beyond(0);
        prefix_larger.set<"training_state_bytes">(2000 * MiB);
        prefix_larger.set<"predicted_check_step_bytes">(300 * MiB);
        prefix_larger.set<"gpu_peak_bytes">((1000 + 2000 + 300 + 600) * MiB);
        record_outcome(store, run, 0, train_cell(2), prefix_larger);
        // One whose own step is the larger: 100 MiB against a 50 MiB prefix step, 590 MiB beyond.
        CellOutcome own_larger = used_beyond(0);
        own_larger.set<"training_state_bytes">(2000 * MiB);
        own_larger.set<"predicted_check_step_bytes">(50 * MiB);
        own_larger.set<"gpu_peak_bytes">((1000 + 2000 + 100 + 590) * MiB);
        record_outcome(store, run, 1, train_cell(3), own_larger);
    }
    Store read = Store::open_read_only(db);
    const std::vector<FixedCost> costs = measured_fixed_costs(read.db());
    REQUIRE(costs.size() == 1);
    CHECK(costs[0].largest == 600 * MiB);
    CHECK(costs[0].smallest == 590 * MiB);
}

TEST_CASE("a uvm-prefetch training cell's estimate: the streamed gradients' slots and the managed pages the driver "
          "keeps",
          "[estimate][train]") {
    const CellParams c = one_cell("model = \"tiny_odd\"\nbackend = \"uvm-prefetch\"\nprefetch = 1\nbudget = \"75%\"\n"
                                  "mode = \"train\"\noptimizer = \"host\"");
    const MemoryEstimate e = estimate_memory(c);
    // Everything the budget does not keep resident may stay on the device once migrated there.
    CHECK(e.weights < c.weight_bytes());
    CHECK(e.retained_managed == c.weight_bytes() - e.weights);
    // The gradients follow the residency plan, as explicit-copy's at the same budget.
    const CellParams copy = one_cell("model = \"tiny_odd\"\nbackend = \"explicit-copy\"\nprefetch = 1\nbudget = \"75%\"\n"
                                     "mode = \"train\"\noptimizer = \"host\"");
    CHECK(e.training_state == estimate_memory(copy).training_state);
    CHECK(e.training_state > 0);
    CHECK(e.pinned_staging == estimate_memory(copy).pinned_staging);
}

TEST_CASE("a UVM training cell's managed overhead leaves out its training state", "[estimate][train]") {
    test::TempDir tmp;
    const auto db = tmp.file("calibration.db");
    {
        auto store = Store::open(db);
        const auto run = fixture_run(store);
        // A device cell: 600 MiB of CUDA context and libraries.
        record_outcome(store, run, 0, one_cell("model = \"tiny_odd\"\nbackend = \"device\""), used_beyond(600 * MiB));
        // A uvm-prefetch training cell whose peak held the context, its 100 MiB of activations, its
        // 500 MiB of gradients in device memory, every weight byte (the driver keeps the pages it
        // migrated) and 50 MiB more.
        const CellParams uvm = one_cell("model = \"tiny_odd\"\nbackend = \"uvm-prefetch\"\nprefetch = 1\nmode = \"train\"\n"
                                        "optimizer = \"host\"");
        CellOutcome trained = used_beyond(0);
        trained.set<"training_state_bytes">(500 * MiB);
        trained.set<"gpu_peak_bytes">((600 + 100 + 500 + 50) * MiB + tiny_weight_bytes());
        record_outcome(store, run, 1, uvm, trained);
    }
    Store read = Store::open_read_only(db);
    const std::vector<FixedCost> costs = measured_fixed_costs(read.db());
    REQUIRE(costs.size() == 1);
    CHECK(costs[0].largest == 600 * MiB);
    CHECK(costs[0].managed_overhead_for(DType::fp32) == 50 * MiB);
}

TEST_CASE("fit: the largest batch and seq under a capacity, and the smallest budget a backend runs at", "[estimate]") {
    const FixedCost fixed{"Fixture GPU", "CUDA 13.0", 600 * MiB, 598 * MiB, 2, 0.0, {}, {}};
    const CellParams cell = one_cell("model = \"tiny_odd\"\nbackend = \"device\"\nseq = 16");
    const auto peak = [&](int batch, int seq) {
        CellParams c = cell;
        c.batch = batch;
        c.seq = seq;
        return estimate_memory(c).device_total() + fixed.largest;
    };
    // A capacity of exactly the peak at batch 5: batch 5 fits, 6 does not.
    const Fit at5 = fit(cell, peak(5, 16), fixed);
    CHECK(at5.batch == 5);
    CHECK(peak(6, 16) > peak(5, 16));
    CHECK_FALSE(at5.smallest_budget);  // device keeps every weight resident
    // The seq at batch 1 under the same capacity: the largest whose peak is within it.
    REQUIRE(at5.seq);
    CHECK(peak(1, *at5.seq) <= peak(5, 16));
    if (*at5.seq < cell.model.max_positions) CHECK(peak(1, *at5.seq + 1) > peak(5, 16));
    // Below batch 1's peak no batch fits at seq 16, though a shorter seq still does; below the
    // peak of one token nothing fits.
    const Fit shorter = fit(cell, peak(1, 16) - 1, fixed);
    CHECK_FALSE(shorter.batch);
    REQUIRE(shorter.seq);
    CHECK(*shorter.seq < 16);
    const Fit none = fit(cell, peak(1, 1) - 1, fixed);
    CHECK_FALSE(none.batch);
    CHECK_FALSE(none.seq);

    // The smallest budget is the backend's own rule: three streaming slots of the largest streamed
    // unit for explicit-copy at look-ahead 2, the largest unit for uvm.
    const CellParams copy = one_cell("model = \"tiny_odd\"\nbackend = \"explicit-copy\"\nprefetch = 2\nbudget = \"50%\"");
    const auto units = unit_bytes(WeightLayout::for_model(copy.model), copy.dtype);
    CHECK(fit(copy, std::int64_t{80} << 30, fixed).smallest_budget == minimum_streaming_budget(units, streaming_slots(2)));
    const CellParams uvm = one_cell("model = \"tiny_odd\"\nbackend = \"uvm\"\nbudget = \"70%\"");
    CHECK(fit(uvm, std::int64_t{80} << 30, fixed).smallest_budget == *std::max_element(units.begin(), units.end()));
}

TEST_CASE("fit of a packed cell: the most real tokens one packed batch holds under a capacity", "[estimate][ragged]") {
    const FixedCost fixed{"Fixture GPU", "CUDA 13.0", 600 * MiB, 598 * MiB, 2, 0.0, {}, {}};
    const CellParams cell = one_cell("model = \"tiny_llama\"\nbackend = \"device\"\ndtype = \"bf16\"\n"
                                     "variant = \"attn_proj\"\nbatch = 4\nseq = 32\nlengths = \"lognormal:9,0.8\"\n"
                                     "packing = \"packed\"\nseed = 5");
    REQUIRE(fits_in_tokens(cell));
    CHECK_FALSE(fits_in_tokens(one_cell("lengths = \"uniform:1-8\"\nseq = 8")));
    CHECK_FALSE(fits_in_tokens(one_cell("packing = \"packed\"")));

    // The packed batch of `tokens`, made here by hand: the cell's draw in order (a longer draw
    // begins with the cell's own batch), as many sequences as hold the tokens, the last cut short.
    const std::vector<int> drawn = draw_lengths(cell.lengths, 4096, cell.seq, cell.seed);
    const BatchShape own = cell.batch_shape();
    REQUIRE(std::equal(own.lengths().begin(), own.lengths().end(), drawn.begin()));
    const auto batch_of = [&](std::int64_t tokens) {
        std::vector<int> lengths;
        for (std::size_t i = 0; tokens > 0; tokens -= lengths.back(), ++i)
            lengths.push_back(static_cast<int>(std::min<std::int64_t>(drawn[i], tokens)));
        return BatchShape::ragged(lengths, Packing::packed);
    };
    CHECK(packed_batch(cell, own.real_tokens()) == own);
    CHECK(packed_batch(cell, 1000) == batch_of(1000));
    // Its need from the estimator's terms: the weights and the workspace, which no batch changes,
    // the activation layout of the packed batch (no scores under flash attention), the CUDA context.
    const MemoryEstimate rest = estimate_memory(cell);
    const auto need = [&](std::int64_t tokens) {
        return rest.weights + rest.workspace + activation_layout(cell.model, cell.dtype, batch_of(tokens), false).total_bytes +
               fixed.largest;
    };
    for (const std::int64_t capacity : {need(1000), need(1000) + 300, need(2345)}) {
        INFO("capacity " << capacity);
        const std::optional<std::int64_t> tokens = largest_packed_tokens(cell, capacity, fixed);
        REQUIRE(tokens);
        CHECK(need(*tokens) <= capacity);
        CHECK(need(*tokens + 1) > capacity);
        CHECK(predicted_need(estimate_memory(cell, packed_batch(cell, *tokens)), fixed) == need(*tokens));
    }
    CHECK(largest_packed_tokens(cell, need(1000), fixed) >= 1000);
    CHECK_FALSE(largest_packed_tokens(cell, need(1) - 1, fixed));
    // A cell the GPU cannot run packed (no flash attention) has no answer.
    CellParams softmax = cell;
    softmax.variant = *Variant::parse("softmax");
    CHECK_FALSE(largest_packed_tokens(softmax, need(1000), fixed));
}

TEST_CASE("estimate --fit answers a packed cell in tokens too, and says so", "[estimate][cli][ragged]") {
    test::TempDir tmp;
    const auto matrix = tmp.file("m.toml");
    test::write_file(matrix, "name = \"est\"\n[defaults]\nmodel = \"tiny_llama\"\nbackend = \"device\"\n"
                             "variant = \"attn_proj\"\nseq = 32\nbatch = 4\nlengths = \"uniform:2-32\"\n"
                             "[[sweep]]\nname = \"s\"\npacking = [\"padded\", \"packed\"]\n");
    const auto db = tmp.file("calibration.db");
    write_calibration_db(db, "Fixture GPU");
    // What `estimate --fit 1GiB` prints with these options.
    const auto fit_1gib = [&](const std::string& options) {
        const auto r = test::run_sweetspot("estimate '" + matrix + "' --calibration '" + db + "' --fit 1GiB " + options);
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        return r.output;
    };
    const std::string text = fit_1gib("");
    CHECK_THAT(text, ContainsSubstring("largest packed tokens"));
    CHECK_THAT(text, ContainsSubstring("the most real tokens\none packed batch may hold"));
    CHECK_THAT(text, ContainsSubstring("the largest seq is the largest clip of its lengths"));
    const auto rows = nlohmann::json::parse(fit_1gib("--format json"));
    REQUIRE(rows.size() == 2);
    CHECK(rows[0]["packing"] == "padded");
    CHECK(rows[0]["largest_packed_tokens"].is_null());
    CHECK(rows[0]["largest_packed_tokens_peak_bytes"].is_null());
    CHECK(rows[1]["packing"] == "packed");
    const CellParams packed = one_cell("model = \"tiny_llama\"\nbackend = \"device\"\nvariant = \"attn_proj\"\nseq = 32\n"
                                       "batch = 4\nlengths = \"uniform:2-32\"\npacking = \"packed\"");
    Store read = Store::open_read_only(db);
    const FixedCost fixed = measured_fixed_costs(read.db()).front();
    const std::optional<std::int64_t> tokens = largest_packed_tokens(packed, std::int64_t{1} << 30, fixed);
    REQUIRE(tokens);
    CHECK(rows[1]["largest_packed_tokens"] == *tokens);
    CHECK(rows[1]["largest_packed_tokens_peak_bytes"] ==
          predicted_need(estimate_memory(packed, packed_batch(packed, *tokens)), fixed));
    // Without a packed cell people see no such column.
    const std::string fixed_lengths = fit_1gib("--set lengths=fixed");
    CHECK_THAT(fixed_lengths, !ContainsSubstring("largest packed tokens"));
    CHECK_THAT(fixed_lengths, !ContainsSubstring("largest clip"));
}

TEST_CASE("estimate --fit needs a measured fixed cost and an amount of memory", "[estimate][cli]") {
    test::TempDir tmp;
    const auto matrix = tmp.file("m.toml");
    test::write_file(matrix, "name = \"est\"\n[defaults]\nmodel = \"tiny_odd\"\nbackend = \"device\"\n[[sweep]]\nname = \"s\"\n");
    const auto no_calibration = test::run_sweetspot("estimate '" + matrix + "' --fit 80GiB");
    CHECK(no_calibration.exit_code == 2);
    CHECK_THAT(no_calibration.output, ContainsSubstring("--fit needs --calibration DB"));
    const auto db = tmp.file("calibration.db");
    write_calibration_db(db, "Fixture GPU");
    const auto bad = test::run_sweetspot("estimate '" + matrix + "' --calibration '" + db + "' --fit 50%");
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.output, ContainsSubstring("--fit expects an amount of memory"));
    const auto r = test::run_sweetspot("estimate '" + matrix + "' --calibration '" + db + "' --fit 1GiB");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, ContainsSubstring("largest batch"));
    CHECK_THAT(r.output, ContainsSubstring("Fitting 1.00 GiB, of which 600.0 MiB are the CUDA context"));
}

TEST_CASE("list shows each GPU cell's predicted device memory, and its peak with --calibration", "[estimate][cli]") {
    test::TempDir tmp;
    const auto matrix = tmp.file("m.toml");
    test::write_file(matrix, "name = \"est\"\n[defaults]\nmodel = \"tiny_odd\"\n[[sweep]]\nname = \"s\"\n"
                             "backend = [\"device\", \"host\"]\n");
    const CellParams device = one_cell("model = \"tiny_odd\"\nbackend = \"device\"");
    const std::int64_t allocated = estimate_memory(device).device_total();
    const auto plain = test::run_sweetspot("list '" + matrix + "'");
    INFO(plain.output);
    REQUIRE(plain.exit_code == 0);
    CHECK_THAT(plain.output, ContainsSubstring("predicted device"));
    CHECK_THAT(plain.output, ContainsSubstring(human_bytes(static_cast<double>(allocated))));

    const auto db = tmp.file("calibration.db");
    write_calibration_db(db, "Fixture GPU");
    const auto peak = test::run_sweetspot("list '" + matrix + "' --calibration '" + db + "'");
    INFO(peak.output);
    REQUIRE(peak.exit_code == 0);
    CHECK_THAT(peak.output, ContainsSubstring("predicted peak"));
    CHECK_THAT(peak.output, ContainsSubstring(human_bytes(static_cast<double>(allocated + 600 * MiB))));
}

TEST_CASE("run stores each GPU cell's predicted allocations, whether it ran or not", "[estimate][runner]") {
    test::TempDir tmp;
    const auto matrix = tmp.file("m.toml"), db = tmp.file("r.db");
    test::write_file(matrix, "name = \"est\"\n[defaults]\nmodel = \"tiny_odd\"\nwarmups = 0\niterations = 1\n"
                             "[[sweep]]\nname = \"s\"\nbackend = [\"device\", \"host\"]\n");
    const auto r = test::run_sweetspot("run '" + matrix + "' --db '" + db + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    Database d(db, Database::Mode::read_only);
    auto st = d.prepare(
        "SELECT backend, predicted_alloc_bytes, predicted_host_alloc_bytes, predicted_weight_bytes,"
        " predicted_training_state_bytes, predicted_activation_bytes, predicted_scores_bytes, predicted_workspace_bytes,"
        " predicted_check_step_bytes FROM cells ORDER BY cell_index");
    REQUIRE(st.step());
    CHECK(st.text(0) == "device");  // skipped on a machine without a GPU, measured on one
    const MemoryEstimate device = estimate_memory(one_cell("model = \"tiny_odd\"\nbackend = \"device\""));
    CHECK(st.int64(1) == device.device_total());
    CHECK(st.int64(2) == device.host_total(true));  // a small model's check always runs its reference
    // The terms, each as the estimate has it, adding up to the allocation (no training, no check step).
    CHECK(st.int64(3) == device.weights);
    CHECK(st.int64(4) == 0);
    CHECK(st.int64(5) == device.activations);
    CHECK(st.int64(6) == device.scores);
    CHECK(st.int64(7) == device.workspace);
    CHECK(st.int64(8) == 0);
    CHECK(st.int64(3) + st.int64(5) + st.int64(6) + st.int64(7) == st.int64(1));
    REQUIRE(st.step());
    CHECK(st.text(0) == "host");
    for (int column = 1; column <= 8; ++column) CHECK(st.is_null(column));
}

TEST_CASE("a cell whose predicted need exceeds the GPU is a predicted OOM, with the numbers", "[estimate]") {
    const FixedCost fixed{"Fixture GPU", "CUDA 13.0", 600 * MiB, 598 * MiB, 2, 0.0, {}, {}};
    const CellParams cell = one_cell("model = \"tiny_odd\"\nbackend = \"device\"\nbatch = 2\nseq = 64");
    const MemoryEstimate e = estimate_memory(cell);
    const std::int64_t need = e.device_total() + fixed.largest;
    CHECK(predicted_oom(cell, need, fixed).empty());  // exactly at the capacity still fits
    const std::string why = predicted_oom(cell, need - 1, fixed);
    CHECK_THAT(why, ContainsSubstring("predicted OOM: it needs " + human_bytes(static_cast<double>(need))));
    CHECK_THAT(why, ContainsSubstring("workspace 32.0 MiB"));
    CHECK_THAT(why, ContainsSubstring("the CUDA context and libraries 600.0 MiB as measured on Fixture GPU"));
    CHECK_THAT(why, ContainsSubstring("--force runs it anyway"));
}

TEST_CASE("a cell whose page-locked or managed memory exceeds what the host has available is a predicted host OOM",
          "[estimate]") {
    // explicit-copy pins the units it streams on the host; uvm's weights are managed and start there.
    const CellParams copy = one_cell("model = \"tiny_odd\"\nbackend = \"explicit-copy\"\nbudget = \"50%\"");
    const std::int64_t pinned = estimate_memory(copy).pinned_host;
    REQUIRE(pinned > 0);
    CHECK(predicted_host_oom(copy, pinned).empty());  // exactly what is available still fits
    const std::string why = predicted_host_oom(copy, pinned - 1);
    CHECK_THAT(why, ContainsSubstring("predicted host OOM: it needs " + human_bytes(static_cast<double>(pinned)) +
                                      " of host memory (page-locked " + human_bytes(static_cast<double>(pinned)) +
                                      ", managed 0 B)"));
    CHECK_THAT(why, ContainsSubstring("--force runs it anyway"));

    const CellParams uvm = one_cell("model = \"tiny_odd\"\nbackend = \"uvm\"\nbudget = \"70%\"");
    CHECK(predicted_host_oom(uvm, 10 * MiB).empty());  // 5 units on 2 MiB blocks each
    CHECK_THAT(predicted_host_oom(uvm, 10 * MiB - 1), ContainsSubstring("managed 10.0 MiB"));
    // The device backend holds nothing on the host.
    CHECK(predicted_host_oom(one_cell("model = \"tiny_odd\"\nbackend = \"device\""), 0).empty());
}

TEST_CASE("the host's available memory is read from the kernel", "[estimate]") {
    const auto available = host_memory_available_bytes();
    REQUIRE(available);  // Linux says, in /proc/meminfo
    CHECK(*available > 0);
}

TEST_CASE("list and estimate print their tables alone for other tools, sizes in bytes", "[estimate][cli]") {
    test::TempDir tmp;
    const auto matrix = tmp.file("m.toml");
    test::write_file(matrix, "name = \"est\"\n[defaults]\nmodel = \"tiny_odd\"\nbackend = \"device\"\n[[sweep]]\nname = \"s\"\n");
    const CellParams cell = one_cell("model = \"tiny_odd\"\nbackend = \"device\"");
    const MemoryEstimate e = estimate_memory(cell);
    const auto csv = test::run_sweetspot("estimate '" + matrix + "' --format csv");
    INFO(csv.output);
    REQUIRE(csv.exit_code == 0);
    CHECK(csv.output.rfind("cell_index,model,", 0) == 0);  // the table alone, from its header
    CHECK_THAT(csv.output, ContainsSubstring("," + std::to_string(e.device_total()) + ","));
    const auto json = test::run_sweetspot("list '" + matrix + "' --format json");
    INFO(json.output);
    REQUIRE(json.exit_code == 0);
    CHECK_THAT(json.output, ContainsSubstring("\"weight_bytes\": " + std::to_string(cell.weight_bytes())));
    CHECK_THAT(json.output, ContainsSubstring("\"cell_key\": \"" + cell.key() + "\""));
    const auto db = tmp.file("calibration.db");
    write_calibration_db(db, "Fixture GPU");
    const auto fits = test::run_sweetspot("estimate '" + matrix + "' --calibration '" + db + "' --fit 1GiB --format markdown");
    INFO(fits.output);
    REQUIRE(fits.exit_code == 0);
    CHECK(fits.output.rfind("| # |", 0) == 0);
    CHECK(test::run_sweetspot("list '" + matrix + "' --format yaml").exit_code == 2);
}
