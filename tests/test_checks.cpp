// The parts of GPU cells that are decided on the CPU: the managed-memory guard's rule, the GPU
// probe's output, the logits check against the host forward, and the axes that steer backends.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <limits>
#include <map>
#include <thread>

#include "harness/measure/cell_exec.hpp"
#include "harness/measure/gpu_probe.hpp"
#include "harness/measure/logits_check.hpp"
#include "harness/measure/measurement.hpp"
#include "harness/matrix/matrix.hpp"
#include "kernels/compute/cpu_forward.hpp"
#include "kernels/compute/managed_memory.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"
#include "kernels/model/model_fields.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "host_logits.hpp"
#include "safetensors_fixture.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr std::int64_t GiB = std::int64_t{1} << 30;

std::vector<float> host_logits(const CellParams& cell, const WeightLayout& layout, DType rounded_to, int batch, int seq,
                               std::span<const std::int32_t> tokens) {
    return test::host_logits(cell, layout, rounded_to, BatchShape::rectangular(batch, seq), tokens);
}

std::vector<float> host_logits(const CellParams& cell, const WeightLayout& layout, DType rounded_to) {
    return host_logits(cell, layout, rounded_to, cell.batch, cell.seq, cell.token_ids());
}

CellParams tiny_cell(DType dtype) {
    CellParams c;
    c.model = *find_builtin_model("tiny");
    c.backend = BackendId::device;
    c.dtype = dtype;
    c.batch = 2;
    c.seq = 12;
    c.seed = 7;
    return c;
}

}  // namespace

TEST_CASE("the managed-memory guard refuses requests above free memory minus the margin", "[checks]") {
    CHECK(managed_refusal(10 * GiB, 12 * GiB, false).empty());
    CHECK(managed_refusal(11 * GiB, 12 * GiB, false).empty());  // exactly the margin left
    const auto why = managed_refusal(11 * GiB + 1, 12 * GiB, false);
    CHECK_THAT(why, ContainsSubstring("refusing to allocate 11.0 GiB of managed memory"));
    CHECK_THAT(why, ContainsSubstring("12.0 GiB free"));
    CHECK_THAT(why, ContainsSubstring("budget"));
    CHECK_THAT(why, ContainsSubstring("--allow-oversubscription"));
    CHECK(managed_refusal(100 * GiB, 12 * GiB, true).empty());
}

TEST_CASE("GPU facts survive the probe process's text format", "[checks]") {
    GpuFacts f;
    f.name = "NVIDIA H100 80GB HBM3";
    f.driver = "CUDA 13.0";
    f.runtime = "13.0";
    f.memory_bytes = 85520809984;
    f.h2d_gbps = 55.2;
    f.d2h_gbps = 54.75;
    f.managed.concurrent_managed_access = 1;
    f.managed.pageable_memory_access = 0;
    f.managed.direct_managed_mem_access_from_host = 0;
    f.managed_rates = {{"prefetch_to_gpu", 536870912, 5, 38.5, 12.25}, {"fault_in", 536870912, 5, 4.125, 0.01}};
    const GpuFacts back = parse_gpu_facts(format_gpu_facts(f));
    CHECK(back.name == f.name);
    CHECK(back.memory_bytes == f.memory_bytes);
    CHECK(back.h2d_gbps == 55.2);
    CHECK(back.d2h_gbps == 54.75);
    CHECK(back.managed.concurrent_managed_access == 1);
    CHECK(back.managed.pageable_memory_access == 0);
    CHECK_FALSE(back.managed.pageable_memory_access_uses_host_page_tables);  // not measured, not made up
    CHECK(back.managed.direct_managed_mem_access_from_host == 0);
    REQUIRE(back.managed_rates.size() == 2);
    CHECK(back.managed_rates[0].operation == "prefetch_to_gpu");
    CHECK(back.managed_rates[0].bytes == 536870912);
    CHECK(back.managed_rates[0].calls == 5);
    CHECK(back.managed_rates[0].gbps == 38.5);
    CHECK(back.managed_rates[0].host_ms == 12.25);
    CHECK(back.managed_rates[1].operation == "fault_in");
    CHECK(back.managed_rates[1].gbps == 4.125);
    CHECK_FALSE(back.note.size());

    const GpuFacts none = parse_gpu_facts("note=no GPU found\n");
    CHECK_FALSE(none.name);
    CHECK(none.note == "no GPU found");
    CHECK(none.managed_rates.empty());

    const GpuFacts bad = parse_gpu_facts("managed_rate=prefetch_to_gpu,12\n");
    CHECK(bad.managed_rates.empty());
    CHECK(bad.note == "unreadable probe output: managed_rate=prefetch_to_gpu,12");
}

TEST_CASE("the logits check passes the host's own output and catches differences", "[checks]") {
    const auto cell = tiny_cell(DType::fp32);
    const auto layout = WeightLayout::for_model(cell.model);
    auto logits = host_logits(cell, layout, DType::fp32);
    const auto tokens = cell.token_ids();

    const auto same = check_against_host(cell, layout, tokens, logits);
    CHECK(same.reference == "host fp32 forward");
    CHECK(same.rel_err == 0);
    CHECK(same.passed());

    auto off_by_one = logits;
    off_by_one.back() += 1.0f;  // the last position of the last sample: the full check sees it
    const auto off = check_against_host(cell, layout, tokens, off_by_one);
    CHECK(off.max_abs_err >= 0.99);
    CHECK_FALSE(off.passed());

    // One NaN in otherwise exact output, after an exact value, so a running maximum that skips
    // NaN would report 0 and pass.
    auto one_nan = logits;
    one_nan[one_nan.size() / 2] = std::numeric_limits<float>::quiet_NaN();
    const auto nan = check_against_host(cell, layout, tokens, one_nan);
    CHECK(std::isnan(nan.max_abs_err));
    CHECK_FALSE(nan.passed());
}

TEST_CASE("the error measure makes NaN the error instead of skipping it", "[checks]") {
    ErrorMeasure exact;
    exact.add(2.0, 2.0);
    exact.add(-4.0, -4.0);
    CHECK(exact.max_abs_err() == 0);
    CHECK(exact.rel_err() == 0);

    ErrorMeasure off;
    off.add(1.5, 1.0);
    off.add(-4.0, -4.0);
    CHECK(off.max_abs_err() == 0.5);
    CHECK(off.rel_err() == 0.125);  // 0.5 / max |ref| = 0.5 / 4

    for (const double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
        ErrorMeasure before, after;
        before.add(bad, 1.0);
        before.add(1.0, 1.0);
        after.add(1.0, 1.0);
        after.add(bad, 1.0);
        CHECK_FALSE(before.rel_err() <= 1e-4);
        CHECK_FALSE(after.rel_err() <= 1e-4);
    }
}

TEST_CASE("non-finite output fails a cell whatever its check says; a check outside tolerance makes it invalid", "[checks]") {
    const std::vector<float> finite = {0.5f, -1.0f, 2.0f, 3.0f};
    LogitsCheck passing{"test reference", 1e-6, 1e-6, 1e-4, std::nullopt};
    LogitsCheck failing{"test reference", 1.0, 0.5, 1e-4, std::nullopt};

    CellOutcome ok;
    judge_output({static_cast<std::int64_t>(count_nonfinite(finite)), 4}, passing, ok);
    CHECK(ok.status == CellStatus::ok);
    CHECK(ok.get<"check_rel_err">() == 1e-6);
    CHECK(ok.get<"check_reference">() == "test reference");

    CellOutcome unchecked;
    judge_output({0, 4}, std::nullopt, unchecked);
    CHECK(unchecked.status == CellStatus::ok);
    CHECK_FALSE(unchecked.get<"check_rel_err">());

    CellOutcome invalid;
    judge_output({0, 4}, failing, invalid);
    CHECK(invalid.status == CellStatus::invalid);
    CHECK_THAT(invalid.reason, ContainsSubstring("relative error 0.5 > tolerance 0.0001"));

    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()}) {
        auto logits = finite;
        logits[2] = bad;
        for (const auto& check : {std::optional<LogitsCheck>(passing), std::optional<LogitsCheck>()}) {
            CellOutcome out;
            judge_output({static_cast<std::int64_t>(count_nonfinite(logits)), 4}, check, out);
            CHECK(out.status == CellStatus::failed);
            CHECK_THAT(out.reason, ContainsSubstring("1 non-finite values (NaN or infinity) among its 4 logits"));
        }
    }
    CHECK(count_nonfinite(finite) == 0);
}

TEST_CASE("the logits check compares half-precision cells with the host on rounded weights", "[checks]") {
    const auto cell = tiny_cell(DType::fp16);
    const auto layout = WeightLayout::for_model(cell.model);
    const auto tokens = cell.token_ids();
    const auto on_rounded = check_against_host(cell, layout, tokens, host_logits(cell, layout, DType::fp16));
    CHECK(on_rounded.rel_err == 0);
    const auto on_exact = check_against_host(cell, layout, tokens, host_logits(cell, layout, DType::fp32));
    CHECK(on_exact.rel_err > 0);
    CHECK(on_exact.passed());  // weight rounding alone is far inside the fp16 tolerance
}

TEST_CASE("large cells are checked on a prefix of sample 0, exact by causality", "[checks]") {
    CellParams cell;
    cell.model = ModelConfig{"wide", 8, 1024, 8, 512, 1024, 1e-5f};  // ~1e8 parameters, small vocab
    cell.backend = BackendId::device;
    cell.batch = 2;
    cell.seq = 1024;  // 2 · 1e8 · 2048 flops: above the full-check limit
    const auto layout = WeightLayout::for_model(cell.model);
    const auto tokens = cell.token_ids();
    const auto vocab = static_cast<std::size_t>(cell.model.vocab_size);

    // The caller fetches only the rows the check compares (the GPU path copies no more to the
    // host), and the check reads no others.
    REQUIRE(host_reference_rows(cell) == 16);
    const auto prefix = host_logits(cell, layout, DType::fp32, 1, 16, std::span(tokens).first(16));
    REQUIRE(prefix.size() == 16 * vocab);
    const auto check = check_against_host(cell, layout, tokens, prefix);
    CHECK(check.reference == "host fp32 forward, sample 0, first 16 positions");
    CHECK(check.rel_err == 0);

    cell.batch = 1;
    cell.seq = 8;  // cheap: the whole output is compared
    CHECK(host_reference_rows(cell) == 8);
}

TEST_CASE("a kept reference's key changes with every field of the model, an inference's and a training step's",
          "[checks][llama]") {
    // LLaMA models large enough for a prefix check, whose reference the database keeps (an
    // inference's at 2 × 1024 positions; a training step's at 10 × 512, its lm_head wide): each of
    // their fields (kModelFields), changed alone, gives another key.
    const std::map<std::string, std::function<void(ModelConfig&)>> changes = {
        {"n_layer", [](ModelConfig& m) { m.n_layer += 1; }},
        {"n_embd", [](ModelConfig& m) { m.n_embd += m.n_head * 2; }},
        {"n_head", [](ModelConfig& m) { m.n_head /= 2; }},
        {"vocab_size", [](ModelConfig& m) { m.vocab_size += 1; }},
        {"max_positions", [](ModelConfig& m) { m.max_positions += 1; }},
        {"ln_eps", [](ModelConfig& m) { m.ln_eps = 1e-6f; }},
        {"n_kv_head", [](ModelConfig& m) { m.n_kv_head = 1; }},
        {"ffn_hidden", [](ModelConfig& m) { m.ffn_hidden += 32; }},
        {"rope_theta", [](ModelConfig& m) { m.rope_theta = 500000.0; }},
        {"rope_scaling",
         [](ModelConfig& m) { m.rope_scaling = {.factor = 8, .original_max_positions = 256, .enabled = true}; }},
        {"family", [](ModelConfig& m) { m = ModelConfig{m.name, m.n_layer, m.n_embd, m.n_head, m.vocab_size, m.max_positions, m.ln_eps}; }},
    };
    // One change for each field, so a field added to the table is added here.
    CHECK(changes.size() == kModelFields.size());
    for (const Mode mode : {Mode::infer, Mode::train}) {
        CellParams cell;
        cell.mode = mode;
        cell.backend = BackendId::device;
        if (mode == Mode::infer) {
            cell.model = ModelConfig{"wide_llama", 8, 1024, 8, 512, 2048, 1e-5f, ModelFamily::llama, 4, 4096, 10000.0, {}};
            cell.batch = 2;
            cell.seq = 1024;
        } else {
            cell.model = ModelConfig{"wide_llama", 1, 64, 4, 4096, 512, 1e-5f, ModelFamily::llama, 2, 96, 10000.0, {}};
            cell.batch = 10;
            cell.seq = 512;
        }
        INFO(enum_name(mode));
        const auto tokens = cell.token_ids();
        const auto key = kept_reference_key(cell, tokens);
        REQUIRE(key);
        for (const auto& [field, change] : changes) {
            INFO(field);
            CellParams other = cell;
            change(other.model);
            REQUIRE(other.model.validate().empty());
            const auto changed = kept_reference_key(other, tokens);
            REQUIRE(changed);
            CHECK(*changed != *key);
        }
    }
}

TEST_CASE("a prefix check's host reference is kept under a key of what it depends on, and reused", "[checks]") {
    CellParams cell;
    cell.model = ModelConfig{"wide", 8, 1024, 8, 512, 1024, 1e-5f};
    cell.backend = BackendId::device;
    cell.batch = 2;
    cell.seq = 1024;
    const auto layout = WeightLayout::for_model(cell.model);
    const auto tokens = cell.token_ids();
    const auto key = kept_reference_key(cell, tokens);
    REQUIRE(key);
    // The same workload under another backend, batch or variant has the same reference.
    CellParams other_backend = cell;
    other_backend.backend = BackendId::uvm_prefetch;
    CHECK(kept_reference_key(other_backend, tokens) == key);
    // What the reference depends on changes the key: the weights' seed and dtype, the dropout, the tokens.
    CellParams reseeded = cell;
    reseeded.seed = cell.seed + 1;
    CHECK(kept_reference_key(reseeded, tokens) != key);
    CellParams half = cell;
    half.dtype = DType::fp16;
    CHECK(kept_reference_key(half, tokens) != key);
    CellParams dropped = cell;
    dropped.dropout = 0.1;
    CHECK(kept_reference_key(dropped, tokens) != key);
    auto other_tokens = tokens;
    other_tokens[3] = (other_tokens[3] + 1) % cell.model.vocab_size;
    CHECK(kept_reference_key(cell, other_tokens) != key);
    // A full check (a small model) and a checkpoint's weights are not kept.
    CHECK_FALSE(kept_reference_key(tiny_cell(DType::fp32), tiny_cell(DType::fp32).token_ids()));
    CellParams from_file = cell;
    from_file.weights = "model.safetensors";
    CHECK_FALSE(kept_reference_key(from_file, tokens));

    const auto vocab = static_cast<std::size_t>(cell.model.vocab_size);
    std::vector<float> logits(tokens.size() * vocab, 1e6f);
    const auto prefix = host_logits(cell, layout, DType::fp32, 1, 16, std::span(tokens).first(16));
    std::copy(prefix.begin(), prefix.end(), logits.begin());
    // Computed: the check carries its reference to keep, the host forward's logits.
    const auto computed = check_against_host(cell, layout, tokens, logits);
    REQUIRE(computed.kept);
    CHECK(computed.kept->key == *key);
    CHECK(computed.kept->batch == 1);
    CHECK(computed.kept->seq == 16);
    CHECK(computed.kept->vocab == cell.model.vocab_size);
    CHECK(computed.kept->logits == prefix);
    CHECK(computed.rel_err == 0);
    // It ran the host forward (the cell's `reference` phase), which takes time.
    CHECK(computed.reference_computed);
    CHECK(computed.reference_seconds > 0);

    // Given a kept reference of its key, the check compares with it instead of recomputing: one
    // shifted by 1 shows as an error of 1.
    ReferenceLogits shifted = *computed.kept;
    for (float& v : shifted.logits) v += 1.0f;
    const auto reused = check_against_host(cell, layout, tokens, logits, shifted);
    CHECK(reused.max_abs_err == Catch::Approx(1.0).epsilon(1e-3));
    CHECK(reused.kept->key == *key);
    CHECK_FALSE(reused.reference_computed);
    CHECK(reused.reference_seconds == 0);
    // One of another key is ignored.
    shifted.key = "another workload";
    CHECK(check_against_host(cell, layout, tokens, logits, shifted).rel_err == 0);
}

namespace {

// A step whose check takes at least `check_ms` and returns `check`.
class CheckingStep final : public CellStep {
public:
    CheckingStep(std::optional<LogitsCheck> check, double check_ms) : check_(std::move(check)), check_ms_(check_ms) {}
    std::int64_t activation_bytes() const override { return 0; }
    StepTime run_step(const std::string&) override { return {1.0, {1.0}}; }
    std::vector<float> logits() override { return {1.0f}; }
    OutputCount count_nonfinite() override { return {0, 1}; }
    std::optional<LogitsCheck> check() override {
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(check_ms_));
        return check_;
    }
    void add_results(CellOutcome&) const override {}

private:
    std::optional<LogitsCheck> check_;
    double check_ms_;
};

// The seconds of each phase measure_steps recorded, by name.
std::map<std::string, double> phases_of(const std::optional<LogitsCheck>& check, double check_ms) {
    CheckingStep forward(check, check_ms);
    CellOutcome out;
    measure_steps(tiny_cell(DType::fp32), forward, MeasureOptions{}, out);
    std::map<std::string, double> seconds;
    for (const CellPhase& p : out.phases) seconds[p.name] = p.seconds;
    return seconds;
}

}  // namespace

TEST_CASE("a kept reference forward is a phase of its own, taken out of the check", "[checks]") {
    // The first cell of a workload ran the kept reference: 0.05 s of its 80 ms check are `reference`.
    LogitsCheck ran{"host fp32 forward", 0, 0, 1e-4, ReferenceLogits{"key", "tiny", 1, 1, 1, {0.0f}}};
    ran.reference_seconds = 0.05;
    const auto first = phases_of(ran, 80);
    REQUIRE(first.count("reference"));
    CHECK(first.at("reference") == 0.05);
    CHECK(first.at("check") >= 0.03 - 1e-9);  // at least 80 ms in all, less the 50 of the reference

    // A later cell reused it: no `reference`, its whole check is `check`.
    LogitsCheck reused = ran;
    reused.reference_computed = false;
    reused.reference_seconds = 0;
    const auto later = phases_of(reused, 80);
    CHECK_FALSE(later.count("reference"));
    CHECK(later.at("check") >= 0.08 - 1e-9);

    // A reference not kept (float64 loops, a full check) is recomputed by every cell: part of `check`.
    LogitsCheck every{"float64 loops", 0, 0, 1e-4, std::nullopt};
    const auto host = phases_of(every, 10);
    CHECK_FALSE(host.count("reference"));
    CHECK(host.at("check") >= 0.01 - 1e-9);
}

TEST_CASE("resident, evict and tf32 axes: parsed, keyed only when not default", "[checks][matrix]") {
    // uvm-prefetch: a backend that uses both resident and evict (backend_registry.cpp).
    const std::string defaults = "[defaults]\nmodel = \"tiny\"\nbackend = \"uvm-prefetch\"\n";
    const auto base = parse_matrix(defaults, "m.toml").cells.at(0);
    const auto explicit_defaults =
        parse_matrix(defaults + "resident = \"interleaved\"\nevict = \"migrate\"\ntf32 = false\n", "m.toml").cells.at(0);
    CHECK(explicit_defaults.key() == base.key());

    const auto m = parse_matrix(
        defaults + "[[sweep]]\nresident = [\"first\", \"last\"]\nevict = \"read-mostly\"\ntf32 = true\n", "m.toml");
    REQUIRE(m.cells.size() == 2);
    CHECK(m.cells[0].resident == ResidentPolicy::first);
    CHECK(m.cells[1].resident == ResidentPolicy::last);
    CHECK(m.cells[0].evict == UvmEvict::read_mostly);
    CHECK(m.cells[0].tf32);
    CHECK(m.cells[0].key() != base.key());
    CHECK(CellParams::from_canonical(m.cells[1].canonical()).key() == m.cells[1].key());

    CHECK_THROWS_WITH(parse_matrix("[defaults]\ntf32 = \"yes\"\n", "m.toml"),
                      "m.toml:2:8: error: 'tf32' must be true or false, got string \"yes\"");
    CHECK_THROWS_WITH(parse_matrix("[defaults]\nresident = \"middle\"\n", "m.toml"),
                      "m.toml:2:12: error: unknown resident 'middle'; expected one of: interleaved, first, last");
}

TEST_CASE("split_tf32: parsed, keyed only when set, and refused where it cannot apply", "[checks][matrix]") {
    const std::string defaults = "[defaults]\nmodel = \"tiny\"\nbackend = \"device\"\n";
    const auto base = parse_matrix(defaults, "m.toml").cells.at(0);
    CHECK(parse_matrix(defaults + "split_tf32 = false\n", "m.toml").cells.at(0).key() == base.key());
    CHECK(base.fp32_gemm() == Fp32Gemm::exact);

    const auto split = parse_matrix(defaults + "split_tf32 = true\n", "m.toml").cells.at(0);
    CHECK(split.split_tf32);
    CHECK(split.fp32_gemm() == Fp32Gemm::split_tf32);
    CHECK(split.key() != base.key());
    CHECK(CellParams::from_canonical(split.canonical()).key() == split.key());
    CHECK(cell_impossible_reason(split).empty());

    CellParams both = split;
    both.tf32 = true;
    CHECK(cell_impossible_reason(both) == "tf32 and split_tf32 are two forms of fp32 GEMMs; a cell takes one");
    CellParams half = split;
    half.dtype = DType::bf16;
    CHECK(cell_impossible_reason(half) ==
          "split_tf32 is a form of fp32 GEMMs; dtype bf16 computes on its own tensor cores");
    CellParams host = split;
    host.backend = BackendId::host;
    CHECK(cell_impossible_reason(host) ==
          "split_tf32 is a form of the GPU's fp32 GEMMs; the host backend computes on the CPU");

    CHECK_THROWS_WITH(parse_matrix("[defaults]\nsplit_tf32 = 1\n", "m.toml"),
                      "m.toml:2:14: error: 'split_tf32' must be true or false, got integer 1");
}

TEST_CASE("LLaMA's GPU cells run the fusions its forward takes and are skipped with the family's reason otherwise",
          "[checks][matrix]") {
    const std::string defaults = "[defaults]\nmodel = \"tiny_llama\"\nbackend = \"device\"\n";
    for (const char* variant : {"baseline", "softmax", "flash_attention", "attn_proj", "softmax+proj_epilogue"}) {
        INFO(variant);
        const auto cell =
            parse_matrix(defaults + "variant = \"" + std::string(variant) + "\"\n", "m.toml").cells.at(0);
        CHECK(cell_impossible_reason(cell).empty());
    }
    const auto all = parse_matrix(defaults + "variant = \"all\"\n", "m.toml").cells.at(0);
    CHECK(cell_impossible_reason(all) ==
          "model 'tiny_llama' (LLaMA) runs on the GPU within the fusions softmax+flash_attention+proj_epilogue; "
          "variant 'all' has residual_ln+softmax+mlp_epilogue+flash_attention+proj_epilogue");
}

TEST_CASE("a host cell whose fp32 output is far from float64 is invalid, and logits exits 1", "[checks][cli]") {
    // Embeddings of about 1e4 that differ only in their last few bits: the fp32 LayerNorm's mean
    // carries an error as large as the deviations it subtracts, while float64 does not, so the
    // output is finite and wrong, which only the tolerance can catch.
    const ModelConfig model = *find_builtin_model("tiny");
    const auto layout = WeightLayout::for_model(model);
    std::vector<std::vector<float>> units;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        auto& w = units.emplace_back(static_cast<std::size_t>(layout.units[u].numel));
        fill_synthetic_unit(model, layout, static_cast<int>(u), 3, w);
    }
    const TensorSpec& wte = layout.units[0].tensors[gpt2::embed_tensor::wte];
    for (std::int64_t i = 0; i < wte.numel; ++i)
        units[0][static_cast<std::size_t>(wte.offset + i)] = 1.0e4f + 0.0009765625f * static_cast<float>((i * 7) % 13);
    test::TempDir dir;
    test::write_file(dir.file("model.safetensors"), test::safetensors_file(test::gpt2_tensors(layout, units)));
    test::write_file(dir.file("config.json"), test::gpt2_config_json(model));

    const auto logits = test::run_sweetspot("logits --weights " + dir.file("model.safetensors") + " --model tiny --seq 8 -o " +
                                            dir.file("out.npy"));
    INFO(logits.output);
    CHECK(logits.exit_code == 1);
    CHECK_THAT(logits.output, ContainsSubstring("invalid: logits differ from the float64 loops"));

    test::write_file(dir.file("m.toml"), "[defaults]\nmodel = \"tiny\"\nseq = 8\niterations = 1\nweights = \"" +
                                             dir.file("model.safetensors") + "\"\n");
    const auto run = test::run_sweetspot("run " + dir.file("m.toml") + " --db " + dir.file("r.db"));
    INFO(run.output);
    CHECK(run.exit_code == 1);
    const auto summary = test::run_sweetspot("summary " + dir.file("r.db"));
    CHECK_THAT(summary.output, ContainsSubstring("invalid"));
}
