// `sweetspot run` end to end on a GPU: the tiny models through every GPU backend and dtype, as a
// user runs them, and trained on the device backend. Checks each cell's status and logits check, the skip rules (with `list`
// agreeing), the traced iterations' rows, the run's managed-memory probe, and that `--collector
// none` records no events.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <map>
#include <string>
#include <vector>

#include "gpu_test_support.hpp"
#include "harness/store/sqlite.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;

namespace {

// Small and quick, with one traced iteration: what every matrix of these tests starts with.
constexpr const char* kDefaults = R"([defaults]
batch = 2
seq = 16
warmups = 1
iterations = 2
trace_iterations = 1
timeout = "3m"
)";

const std::string kMatrix = std::string("name = \"gpu-e2e\"\n") + kDefaults + R"(
[[sweep]]
name = "resident"
model = ["tiny", "tiny_odd"]
backend = "device"
dtype = ["fp32", "fp16", "bf16"]

[[sweep]]
name = "streamed"
model = ["tiny", "tiny_odd"]
backend = ["explicit-copy", "uvm-prefetch"]
dtype = ["fp32", "fp16", "bf16"]
prefetch = ["jit", 1]
budget = "60%"

[[sweep]]
name = "on-demand"
model = ["tiny", "tiny_odd"]
backend = "uvm"
dtype = ["fp32", "bf16"]
budget = "70%"
evict = ["migrate", "read-mostly"]

[[sweep]]
name = "managed-activations"
model = "tiny_odd"
backend = "uvm-prefetch"
prefetch = "jit"
activations = "managed"

[[sweep]]
name = "cannot"
model = "tiny"
backend = ["device", "explicit-copy", "uvm"]
budget = "1%"
)";

struct Cell {
    std::string backend, status, reason;
    bool checked_within_tolerance = false;
    std::int64_t traced = 0, kernels = 0, phase_ranges = 0;
};

// An ok cell whose logits passed the check and whose one traced iteration was recorded: its
// kernels and its NVTX phase ranges.
void check_measured_and_traced(const Cell& c) {
    CHECK(c.status == "ok");
    CHECK(c.checked_within_tolerance);
    CHECK(c.traced == 1);
    CHECK(c.kernels > 0);
    CHECK(c.phase_ranges > 0);
}

std::map<std::int64_t, Cell> read_cells(const std::string& db_path) {
    Database db(db_path, Database::Mode::read_only);
    std::map<std::int64_t, Cell> cells;
    auto st = db.prepare(
        "SELECT c.cell_id, c.backend, c.status, coalesce(c.reason, ''),"
        " c.check_rel_err IS NOT NULL AND c.check_rel_err <= c.check_tolerance,"
        " (SELECT count(*) FROM iterations i WHERE i.cell_id = c.cell_id AND i.phase = 'traced'),"
        " (SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE k.cell_id = c.cell_id),"
        " (SELECT count(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId"
        "   WHERE n.cell_id = c.cell_id AND coalesce(n.text, s.value) IN ('acquire', 'compute', 'release'))"
        " FROM cells c");
    while (st.step())
        cells[st.int64(0)] = {st.text(1), st.text(2), st.text(3), st.int64(4) != 0, st.int64(5), st.int64(6), st.int64(7)};
    return cells;
}

// Runs `toml` (written as m.toml in `tmp`) into m.db and returns the database's path; the run
// must succeed.
std::string run_train_matrix(const test::TempDir& tmp, const std::string& toml) {
    test::write_file(tmp.file("m.toml"), toml);
    const auto db = tmp.file("m.db");
    const auto r = test::run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return db;
}

}  // namespace

TEST_CASE("a sweep of the tiny models through every GPU backend and dtype", "[gpu][runner]") {
    test::require_gpu();
    test::TempDir tmp;
    const auto matrix = tmp.file("m.toml"), db = tmp.file("r.db");
    test::write_file(matrix, kMatrix);

    const auto list = test::run_sweetspot("list '" + matrix + "'");
    INFO(list.output);
    REQUIRE(list.exit_code == 0);
    int listed_no = 0;
    for (std::size_t at = 0; (at = list.output.find(" no: ", at)) != std::string::npos; ++at) ++listed_no;
    CHECK(listed_no == 3);

    const auto run = test::run_sweetspot("run '" + matrix + "' --db '" + db + "'");
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    const auto cells = read_cells(db);
    CHECK(cells.size() == 42);

    int ok = 0, skipped = 0;
    for (const auto& [id, c] : cells) {
        INFO("cell " << id << " " << c.backend << ": " << c.status << " " << c.reason);
        if (c.status == "skipped") {
            ++skipped;
            if (c.backend == "device") CHECK_THAT(c.reason, ContainsSubstring("smaller than the weights"));
            if (c.backend == "explicit-copy") CHECK_THAT(c.reason, ContainsSubstring("cannot hold"));
            if (c.backend == "uvm") CHECK_THAT(c.reason, ContainsSubstring("cannot hold the largest layer"));
            continue;
        }
        ++ok;
        check_measured_and_traced(c);
    }
    CHECK(ok == 39);
    CHECK(skipped == listed_no);

    // The run's probe: the GPU's managed-memory abilities, and the eleven operations' rates (the
    // five the backends use, six with the newer calls), each a positive rate over five calls
    // (H100/H200 under Linux migrate managed pages on demand).
    {
        Database rdb(db, Database::Mode::read_only);
        auto abilities = rdb.prepare("SELECT concurrent_managed_access, pageable_memory_access FROM runs");
        REQUIRE(abilities.step());
        CHECK(abilities.int64(0) == 1);
        CHECK_FALSE(abilities.is_null(1));
        auto rates = rdb.prepare("SELECT operation, bytes, calls, gbps, host_ms FROM managed_probe ORDER BY rowid");
        std::vector<std::string> operations;
        while (rates.step()) {
            INFO(rates.text(0) << ": " << rates.real(3) << " GB/s, host " << rates.real(4) << " ms");
            operations.push_back(rates.text(0));
            CHECK(rates.int64(1) == std::int64_t{512} << 20);
            CHECK(rates.int64(2) == 5);
            CHECK(rates.real(3) > 0.0);
            CHECK(rates.real(4) >= 0.0);
        }
        CHECK(operations == std::vector<std::string>{"prefetch_to_gpu", "read_mostly_prefetch_to_gpu", "evict_to_host",
                                                     "drop_read_mostly_copy", "fault_in", "batch_prefetch_to_gpu",
                                                     "batch_evict_to_host", "chunked_prefetch_to_gpu",
                                                     "batch_read_mostly_prefetch_to_gpu", "discard_on_gpu",
                                                     "discard_and_prefetch_to_gpu"});
    }

    // NVML's readings of every ok cell's memory: the context costs something, the peak holds at
    // least what the device and explicit-copy cells allocated (their device memory is all their
    // own), and the predicted peak is set against it once the run has calibrated cells.
    {
        Database rdb(db, Database::Mode::read_only);
        auto m = rdb.prepare(
            "SELECT cell_id, backend, gpu_memory_note, gpu_context_bytes, gpu_peak_bytes, gpu_memory_readings,"
            " device_weight_bytes + activation_bytes, gpu_used_before_bytes"
            " FROM cells WHERE status = 'ok' ORDER BY cell_id");
        int read = 0;
        while (m.step()) {
            INFO("cell " << m.int64(0) << " " << m.text(1) << ": " << (m.is_null(2) ? "" : m.text(2)));
            REQUIRE(m.is_null(2));
            CHECK(m.int64(3) > 0);
            CHECK(m.int64(5) >= 3);
            CHECK(m.int64(7) >= 0);
            if (m.text(1) == "device" || m.text(1) == "explicit-copy") CHECK(m.int64(4) >= m.int64(3) + m.int64(6));
            ++read;
        }
        CHECK(read == 39);
        auto accuracy = rdb.prepare("SELECT count(*) FROM memory_accuracy WHERE predicted_peak_bytes IS NOT NULL");
        REQUIRE(accuracy.step());
        CHECK(accuracy.int64(0) > 0);
    }

    // The same cells without CUPTI: traced iterations are still timed, but nothing is recorded.
    const auto quiet_db = tmp.file("quiet.db");
    const auto quiet = test::run_sweetspot("run '" + matrix + "' --db '" + quiet_db +
                                           "' --collector none --only dtype=fp16 --only backend=explicit-copy,uvm-prefetch");
    INFO(quiet.output);
    REQUIRE(quiet.exit_code == 0);
    const auto quiet_cells = read_cells(quiet_db);
    CHECK(quiet_cells.size() == 8);
    for (const auto& [id, c] : quiet_cells) {
        INFO("cell " << id << " " << c.backend);
        CHECK(c.status == "ok");
        CHECK(c.traced == 1);
        CHECK(c.kernels == 0);
        CHECK(c.phase_ranges == 0);
    }
}

TEST_CASE("a cell that launches graphs computes and traces the kernels of one that launches them one by one, on "
          "every GPU backend",
          "[gpu][runner]") {
    test::require_gpu();
    test::TempDir tmp;
    const auto matrix = tmp.file("m.toml"), db = tmp.file("r.db");
    test::write_file(matrix, std::string("name = \"gpu-graphs\"\n") + kDefaults + R"(model = "tiny_odd"

[[sweep]]
name = "resident"
backend = "device"
dtype = ["fp32", "fp16"]
launch = ["kernels", "graphs"]

[[sweep]]
name = "streamed"
backend = ["explicit-copy", "uvm-prefetch"]
dtype = ["fp32", "fp16"]
launch = ["kernels", "graphs"]
prefetch = 1
budget = "60%"
evict = "read-mostly"

[[sweep]]
name = "on-demand"
backend = "uvm"
dtype = ["fp32", "fp16"]
launch = ["kernels", "graphs"]
budget = "70%"

[[sweep]]
name = "managed-activations"
backend = "uvm-prefetch"
dtype = ["fp32", "fp16"]
launch = ["kernels", "graphs"]
prefetch = "jit"
activations = "managed"
)");
    const auto run = test::run_sweetspot("run '" + matrix + "' --db '" + db + "'");
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    const auto cells = read_cells(db);
    REQUIRE(cells.size() == 20);
    for (const auto& [id, c] : cells) {
        INFO("cell " << id << " " << c.backend << ": " << c.status << " " << c.reason);
        check_measured_and_traced(c);
    }
    // Pairs of cells that differ only in launch: the same kernels in the traced iteration, the
    // same launches counted, and the same logits' error against the reference.
    Database rdb(db, Database::Mode::read_only);
    auto pairs = rdb.prepare(
        "SELECT k.backend, k.dtype, k.cell_id, g.cell_id, k.launches_per_forward, g.launches_per_forward,"
        " k.check_rel_err, g.check_rel_err FROM cells k JOIN cells g"
        " ON g.backend = k.backend AND g.dtype = k.dtype AND g.prefetch = k.prefetch AND g.activations = k.activations"
        " AND g.launch = 'graphs' WHERE k.launch = 'kernels'");
    int compared = 0;
    while (pairs.step()) {
        INFO(pairs.text(0) << " " << pairs.text(1));
        CHECK(cells.at(pairs.int64(2)).kernels == cells.at(pairs.int64(3)).kernels);
        CHECK(pairs.int64(4) == pairs.int64(5));
        CHECK(pairs.real(6) == pairs.real(7));
        ++compared;
    }
    CHECK(compared == 10);
}

TEST_CASE("sweetspot run trains on the device backend: each cell checked, its phases split, its loss falling",
          "[gpu][runner][train][llama]") {
    // GPT-2's tiny models with and without dropout; LLaMA's (without: it has none) at the default
    // recompute setting and the one that recomputes the most.
    test::require_gpu();
    test::TempDir tmp;
    const auto db = run_train_matrix(tmp, std::string("name = \"gpu-train\"\n") + R"([defaults]
mode = "train"
backend = "device"
batch = 2
seq = 33
warmups = 1
iterations = 4
timeout = "3m"
[[sweep]]
name = "gpt2"
model = ["tiny", "tiny_odd"]
dtype = ["fp32", "fp16", "bf16"]
variant = ["baseline", "flash_attention"]
dropout = [0.0, 0.1]
[[sweep]]
name = "llama"
model = ["tiny_llama", "tiny_llama_odd"]
dtype = ["fp32", "fp16", "bf16"]
variant = ["baseline", "flash_attention"]
recompute = ["gelu", "block"]
)");
    Database results(db, Database::Mode::read_only);
    auto st = results.prepare(
        "SELECT model, dtype, variant, dropout, status, coalesce(reason, ''), check_rel_err <= check_tolerance, "
        "loss_last < loss_first, forward_ms > 0 AND backward_ms > 0 AND optimizer_ms > 0, mfu_pct IS NOT NULL OR "
        "mfu_note LIKE 'no dense peak%', predicted_alloc_bytes > 0 FROM cells");
    int cells = 0;
    while (st.step()) {
        ++cells;
        INFO(st.text(0) << " " << st.text(1) << " " << st.text(2) << " dropout " << st.real(3) << ": " << st.text(4)
                        << " " << st.text(5));
        CHECK(st.text(4) == "ok");
        CHECK(st.int64(6) == 1);
        CHECK(st.int64(7) == 1);
        CHECK(st.int64(8) == 1);
        CHECK(st.int64(9) == 1);
        CHECK(st.int64(10) == 1);
    }
    CHECK(cells == 48);
}

// A model whose lm_head makes each position cost 2.3e5 multiply-adds: at 10 × 512 positions its
// cells are checked on a prefix step.
constexpr const char* kWideVocabModel = R"([[models]]
name = "wide_vocab"
layers = 1
hidden = 50
heads = 2
vocab = 4096
positions = 512
)";

TEST_CASE("sweetspot run trains with the optimizer on the host: checked, every unit across the link each way",
          "[gpu][runner][train]") {
    // tiny takes the full check; wide_vocab at 10 × 512 the prefix step (above), whose source copies
    // the host's master weights and moments to the device.
    test::require_gpu();
    test::TempDir tmp;
    const auto db = run_train_matrix(tmp, std::string("name = \"gpu-train-host-optimizer\"\n") + kWideVocabModel + R"([defaults]
mode = "train"
backend = "device"
warmups = 1
iterations = 3
timeout = "3m"
[[sweep]]
name = "full"
model = "tiny"
batch = 2
seq = 33
dtype = ["fp32", "fp16", "bf16"]
optimizer = ["device", "host"]
[[sweep]]
name = "prefix"
model = "wide_vocab"
batch = 10
seq = 512
dtype = ["fp32", "bf16"]
optimizer = "host"
)");
    Database results(db, Database::Mode::read_only);
    auto st = results.prepare(
        "SELECT model, dtype, optimizer, status, coalesce(reason, ''), check_rel_err <= check_tolerance, "
        "loss_last < loss_first, link_to_host_bytes, link_to_device_bytes, weight_bytes, pinned_host_bytes, "
        "training_state_bytes = predicted_training_state_bytes, training_state_bytes = device_weight_bytes FROM cells");
    int cells = 0;
    while (st.step()) {
        ++cells;
        INFO(st.text(0) << " " << st.text(1) << " optimizer " << st.text(2) << ": " << st.text(3) << " " << st.text(4));
        CHECK(st.text(3) == "ok");
        CHECK(st.int64(5) == 1);
        CHECK(st.int64(6) == 1);
        CHECK(st.int64(11) == 1);
        const bool host = st.text(2) == "host";
        // Every unit's gradient down and new weights up, in the dtype: the weights' bytes each way;
        // the device keeps the gradients only, packed as the weights.
        CHECK(st.int64(7) == (host ? st.int64(9) : 0));
        CHECK(st.int64(8) == (host ? st.int64(9) : 0));
        CHECK((st.int64(10) > 0) == host);
        CHECK(st.int64(12) == (host ? 1 : 0));
    }
    CHECK(cells == 8);
}

TEST_CASE("sweetspot run trains on explicit-copy and uvm-prefetch with the optimizer on the host: checked, the "
          "streamed units in twice",
          "[gpu][runner][train]") {
    // tiny (units of 40 960, 50 432, 50 432 and 33 024 elements) at 60 % with one slot keeps the
    // embedding resident and streams the rest through a block-sized slot; wide_vocab at 50 % streams
    // every unit through an embedding-sized slot, and takes the prefix check.
    test::require_gpu();
    test::TempDir tmp;
    const auto db = run_train_matrix(tmp, std::string("name = \"gpu-train-streaming\"\n") + kWideVocabModel + R"([defaults]
mode = "train"
optimizer = "host"
prefetch = "jit"
warmups = 1
iterations = 3
timeout = "3m"
[[sweep]]
name = "full"
backend = ["explicit-copy", "uvm-prefetch"]
model = "tiny"
batch = 2
seq = 33
budget = "60%"
dtype = ["fp32", "bf16"]
trace_iterations = 1
[[sweep]]
name = "prefix"
backend = ["explicit-copy", "uvm-prefetch"]
model = "wide_vocab"
batch = 10
seq = 512
budget = "50%"
dtype = ["fp32", "bf16"]
)");
    Database results(db, Database::Mode::read_only);
    auto st = results.prepare(
        "SELECT model, dtype, status, coalesce(reason, ''), check_rel_err <= check_tolerance, loss_last < loss_first, "
        "link_to_host_bytes, link_to_device_bytes, weight_bytes, streamed_bytes, resident_bytes, "
        "training_state_bytes = predicted_training_state_bytes, training_state_bytes = device_weight_bytes, backend, "
        "host_state_gbps > 0, host_shared_gbps > 0, host_adamw_alone_ms > 0, host_adamw_ms > 0, host_arrays_gbps > 0 "
        "FROM cells");
    int cells = 0;
    while (st.step()) {
        ++cells;
        INFO(st.text(13) << " " << st.text(0) << " " << st.text(1) << ": " << st.text(2) << " " << st.text(3));
        CHECK(st.text(2) == "ok");
        CHECK(st.int64(4) == 1);
        CHECK(st.int64(5) == 1);
        const std::int64_t weights = st.int64(8), streamed = st.int64(9), resident = st.int64(10);
        CHECK(streamed > 0);
        CHECK((resident > 0) == (st.text(0) == "tiny"));
        // Every gradient out; the streamed units in twice, the resident units' new weights once.
        CHECK(st.int64(6) == weights);
        CHECK(st.int64(7) == 2 * streamed + resident);
        CHECK(st.int64(11) == 1);
        // explicit-copy lays its gradients out as its weights.
        if (st.text(13) == "explicit-copy") CHECK(st.int64(12) == 1);
        // The rate of the optimizer state where it lies.
        CHECK(st.int64(14) == 1);
        // And with the link's copies beside it, for the bound's host memory term: every cell has a
        // page-locked unit (explicit-copy's streamed ones, uvm-prefetch's resident ones).
        CHECK(st.int64(15) == 1);
        // AdamW's time in the checked step's update, and in the overlapped updates of the warm-up
        // and the first two timed steps (the last one's ends after the cell stops timing).
        CHECK(st.int64(16) == 1);
        CHECK(st.int64(17) == 1);
        // The rate of all the update's arrays, for the host update term.
        CHECK(st.int64(18) == 1);
    }
    CHECK(cells == 8);

    // The traced step of each tiny cell, on the thread that ran it (the host update's thread has
    // ranges of its own): each unit's range in the forward and in the backward. explicit-copy's
    // copies, projected onto the GPU through the ranges named for the unit they move: the three
    // streamed units (both blocks and the head) fetched for the forward and again for the
    // backward, each a copy, and their gradients out.
    const std::string on_the_step_thread =
        " = (SELECT t.globalTid FROM NVTX_EVENTS t JOIN StringIds ts ON ts.id = t.textId"
        "    WHERE t.cell_id = c.cell_id AND ts.value = 'traced iteration 0') ";
    auto traced = results.prepare(
        "SELECT c.backend, c.dtype, s.value, count(*) FROM cells c "
        "JOIN NVTX_EVENTS n ON n.cell_id = c.cell_id JOIN StringIds s ON s.id = n.textId "
        "WHERE c.model = 'tiny' AND s.value IN ('embedding', 'layer 0', 'layer 1', 'head') AND n.globalTid" +
        on_the_step_thread + "GROUP BY c.cell_id, s.value");
    int unit_ranges = 0;
    while (traced.step()) {
        INFO(traced.text(0) << " " << traced.text(1) << " " << traced.text(2));
        CHECK(traced.int64(3) == 2);
        ++unit_ranges;
    }
    CHECK(unit_ranges == 4 * 4);
    auto copies = results.prepare(
        "SELECT c.dtype, p.name, count(*), sum(p.num_gpu_ops) FROM cells c "
        "JOIN nvtx_gpu_proj_trace p ON p.cell_id = c.cell_id "
        "WHERE c.model = 'tiny' AND c.backend = 'explicit-copy' AND (p.name LIKE 'fetch %' OR p.name LIKE 'gradient out %')"
        " AND p.globalTid" + on_the_step_thread + "GROUP BY c.cell_id, p.name ORDER BY c.dtype, p.name");
    std::map<std::string, std::vector<std::string>> moved;
    while (copies.step())
        moved[copies.text(0)].push_back(copies.text(1) + " " + std::to_string(copies.int64(2)) + " " +
                                        std::to_string(copies.int64(3)));
    const std::vector<std::string> expected{"fetch head 2 2",        "fetch layer 0 2 2",        "fetch layer 1 2 2",
                                            "gradient out head 1 1", "gradient out layer 0 1 1", "gradient out layer 1 1 1"};
    CHECK(moved["fp32"] == expected);
    CHECK(moved["bf16"] == expected);
}

// A LLaMA model whose lm_head makes each position cost 2.6e5 multiply-adds: at 10 × 512 positions
// its cells are checked on a prefix step, against a reference the database keeps under a key of
// every model field.
constexpr const char* kWideLlamaModel = R"([[models]]
name = "wide_llama"
family = "llama"
layers = 1
hidden = 64
heads = 4
kv_heads = 2
ffn = 96
vocab = 4096
positions = 512
)";

TEST_CASE("sweetspot run checks device training cells too large for the full check on a prefix step",
          "[gpu][runner][train][llama]") {
    // 10 × 512 positions of a model whose lm_head makes each cost 2.3e5 multiply-adds (GPT-2's
    // wide_vocab; wide_llama's 2.6e5): the full step's float64 loops would take 4e9, past their
    // budget, so each cell is checked on a prefix step of 16 positions made beside its weights
    // before its own steps, against a reference the database keeps for the other cells of the
    // model and dtype.
    test::require_gpu();
    test::TempDir tmp;
    const auto db = run_train_matrix(tmp, std::string("name = \"gpu-train-prefix\"\n") + kWideVocabModel +
                                              kWideLlamaModel + R"([defaults]
mode = "train"
backend = "device"
batch = 10
seq = 512
warmups = 1
iterations = 2
timeout = "3m"
[[sweep]]
name = "gpt2"
model = "wide_vocab"
dtype = ["fp32", "fp16", "bf16"]
variant = ["baseline", "flash_attention"]
[[sweep]]
name = "llama"
model = "wide_llama"
dtype = ["fp32", "bf16"]
variant = ["baseline", "flash_attention"]
)");
    Database results(db, Database::Mode::read_only);
    auto st = results.prepare(
        "SELECT model || ' ' || dtype, variant, status, coalesce(reason, ''), check_reference, check_rel_err, "
        "check_tolerance, loss_last < loss_first, "
        "predicted_alloc_bytes = device_weight_bytes + training_state_bytes + activation_bytes, "
        "(SELECT count(*) FROM cell_phases p WHERE p.cell_id = c.cell_id AND p.phase = 'check_step') FROM cells c");
    int cells = 0;
    while (st.step()) {
        ++cells;
        INFO(st.text(0) << " " << st.text(1) << ": " << st.text(2) << " " << st.text(3) << "; " << st.text(4)
                        << " rel_err " << st.real(5) << " tolerance " << st.real(6));
        CHECK(st.text(2) == "ok");
        CHECK_THAT(st.text(4), ContainsSubstring("prefix step: sample 0, first 16 positions"));
        CHECK(st.real(5) <= st.real(6));
        CHECK(st.int64(7) == 1);
        CHECK(st.int64(8) == 1);
        CHECK(st.int64(9) == 1);
    }
    CHECK(cells == 10);
    // The two variants of a model and dtype share its prefix reference: the first computes it, the
    // database keeps it, the second reads it.
    auto kept = results.prepare(
        "SELECT count(DISTINCT check_reference_key), sum(check_reference_computed), "
        "(SELECT count(*) FROM reference_logits), "
        "(SELECT count(*) FROM cell_phases p JOIN cells c USING (cell_id) WHERE p.phase = 'reference') FROM cells");
    REQUIRE(kept.step());
    CHECK(kept.int64(0) == 5);
    CHECK(kept.int64(1) == 5);
    CHECK(kept.int64(2) == 5);
    CHECK(kept.int64(3) == 5);
}

TEST_CASE("sweetspot run measures ragged batches on the GPU: checked over their shape, tokens counted, estimate exact",
          "[gpu][runner][ragged]") {
    test::require_gpu();
    test::TempDir tmp;
    const auto db = run_train_matrix(tmp, std::string("name = \"gpu-ragged\"\n") + kDefaults + R"(
[[sweep]]
name = "flash"
batch = 5
seq = 40
lengths = "uniform:3-40"
seed = 11
model = ["tiny", "tiny_llama"]
backend = ["device", "uvm-prefetch"]
dtype = ["fp32", "bf16"]
variant = "flash_attention"
packing = ["padded", "packed"]
[[sweep]]
name = "materialised"
batch = 5
seq = 40
lengths = "uniform:3-40"
model = "tiny_llama"
backend = "device"
variant = "softmax"
)");
    Database results(db, Database::Mode::read_only);
    auto st = results.prepare(
        "SELECT model, backend, dtype, packing, variant, status, coalesce(reason, ''), check_reference, check_rel_err, "
        "check_tolerance, real_tokens, padded_tokens, predicted_alloc_bytes = device_weight_bytes + activation_bytes "
        "FROM cells ORDER BY cell_id");
    int ok = 0, skipped = 0;
    std::map<std::string, std::int64_t> real_tokens;
    while (st.step()) {
        INFO(st.text(0) << " " << st.text(1) << " " << st.text(2) << " " << st.text(3) << " " << st.text(4) << ": "
                        << st.text(5) << " " << st.text(6));
        if (st.text(4) == "softmax") {
            CHECK(st.text(5) == "skipped");
            CHECK_THAT(st.text(6), ContainsSubstring("runs with the flash_attention fusion only"));
            ++skipped;
            continue;
        }
        REQUIRE(st.text(5) == "ok");
        ++ok;
        CHECK(st.text(7) == "host fp32 forward");
        CHECK(st.real(8) <= st.real(9));
        // One draw of lengths per seed: both packings hold the same real tokens, and only the
        // padded one any padding.
        const auto [at, fresh] = real_tokens.emplace(st.text(0), st.int64(10));
        CHECK(at->second == st.int64(10));
        CHECK((st.text(3) == "packed") == (st.int64(11) == 0));
        if (st.text(1) == "device") CHECK(st.int64(12) == 1);
    }
    CHECK(ok == 16);
    CHECK(skipped == 1);
}

TEST_CASE("sweetspot run trains ragged batches on the GPU: checked against each sequence alone, the same loss "
          "padded and packed, estimate exact",
          "[gpu][runner][train][ragged]") {
    test::require_gpu();
    test::TempDir tmp;
    const auto db = run_train_matrix(tmp, std::string("name = \"gpu-ragged-train\"\n") + R"([defaults]
mode = "train"
backend = "device"
batch = 5
seq = 40
lengths = "uniform:3-40"
seed = 11
warmups = 1
iterations = 4
timeout = "3m"
[[sweep]]
name = "flash"
model = ["tiny", "tiny_llama"]
dtype = ["fp32", "bf16"]
variant = "flash_attention"
packing = ["padded", "packed"]
recompute = ["gelu", "block"]
[[sweep]]
name = "materialised"
model = "tiny_llama"
variant = "baseline"
)");
    Database results(db, Database::Mode::read_only);
    auto st = results.prepare(
        "SELECT model || ' ' || dtype || ' ' || recompute, packing, variant, status, coalesce(reason, ''), "
        "check_reference, check_rel_err <= check_tolerance, loss_last < loss_first, loss_first, real_tokens, "
        "padded_tokens, predicted_alloc_bytes = device_weight_bytes + training_state_bytes + activation_bytes "
        "FROM cells ORDER BY cell_id");
    int ok = 0, skipped = 0;
    // The padded and the packed cell of a model, dtype and recompute setting hold the same
    // sequences (one draw per seed) and the same weights: the same first loss.
    std::map<std::string, double> first_loss;
    while (st.step()) {
        INFO(st.text(0) << " " << st.text(1) << " " << st.text(2) << ": " << st.text(3) << " " << st.text(4) << "; "
                        << st.text(5));
        if (st.text(2) == "baseline") {
            CHECK(st.text(3) == "skipped");
            CHECK_THAT(st.text(4), ContainsSubstring("the GPU training step runs with the flash_attention fusion only"));
            ++skipped;
            continue;
        }
        REQUIRE(st.text(3) == "ok");
        ++ok;
        CHECK_THAT(st.text(5), ContainsSubstring("float64"));
        CHECK(st.int64(6) == 1);
        CHECK(st.int64(7) == 1);
        const auto [at, fresh] = first_loss.emplace(st.text(0), st.real(8));
        CHECK(std::abs(st.real(8) - at->second) <= (st.text(0).find("bf16") != std::string::npos ? 5e-2 : 1e-4) * at->second);
        CHECK((st.text(1) == "packed") == (st.int64(10) == 0));
        CHECK(st.int64(9) > 0);
        CHECK(st.int64(11) == 1);
    }
    CHECK(ok == 16);
    CHECK(skipped == 1);
}

