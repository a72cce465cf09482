// The memory estimator (harness/measure/memory_estimate.hpp) and `sweetspot estimate`: each term
// against hand-computed bytes for small configurations, and against what real GPU cells
// allocated on an H100 (the device_weight_bytes and activation_bytes the layer-fusion study and
// the variants benchmark stored, 2026-11-23).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <string>

#include "harness/matrix/matrix.hpp"
#include "harness/measure/memory_estimate.hpp"
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

TEST_CASE("the weights term follows each backend's placement", "[estimate]") {
    // tiny_odd (1.05 MiB of fp32 weights in 5 units); a budget of 100 % holds them all.
    const CellParams device = one_cell("model = \"tiny_odd\"\nbackend = \"device\"");
    const MemoryEstimate d = estimate_memory(device);
    CHECK(d.weights >= device.weight_bytes());           // units padded to 256 bytes
    CHECK(d.weights < device.weight_bytes() + 5 * 256);
    CHECK(d.pinned_host == 0);
    CHECK(d.managed == 0);
    CHECK(d.workspace == 32 * MiB);

    // explicit-copy at 100 %: every unit resident on the device, and the pinned copy it streams from.
    const MemoryEstimate copy = estimate_memory(one_cell("model = \"tiny_odd\"\nbackend = \"explicit-copy\""));
    CHECK(copy.weights == d.weights);
    CHECK(copy.pinned_host == d.weights);

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
    CHECK_THAT(r.output, ContainsSubstring("less the CUDA\ncontext"));
    const auto help = test::run_sweetspot("estimate --help");
    CHECK(help.exit_code == 0);
    CHECK_THAT(help.output, ContainsSubstring("usage: sweetspot estimate FILE"));
}
