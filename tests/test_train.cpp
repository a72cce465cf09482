// Training cells end to end on the host, and the parts of a training cell decided on the CPU: the
// targets, the check of the first step, the phase split, the model flops and the MFU they give,
// the memory estimate, and which backends train.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backends/backend_registry.hpp"
#include "backends/host_backend.hpp"
#include "harness/cli/cell_list.hpp"
#include "harness/cli/estimate_table.hpp"
#include "harness/matrix/matrix.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "harness/measure/check_step_source.hpp"
#include "harness/measure/memory_estimate.hpp"
#include "harness/measure/step_check.hpp"
#include "harness/store/sqlite.hpp"
#include "kernels/compute/gemm_workspace.hpp"
#include "kernels/compute/train_arena.hpp"
#include "kernels/compute/cpu_gradients.hpp"
#include "kernels/compute/reference_gradients.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;

namespace {

CellParams train_cell(const std::string& lines = "") {
    // `lines` go in the sweep, whose keys override the defaults.
    return parse_matrix("name = \"t\"\n[defaults]\nmodel = \"tiny\"\nbackend = \"host\"\nmode = \"train\"\nbatch = 2\n"
                        "seq = 9\n[[sweep]]\nname = \"s\"\n" +
                            lines + "\n",
                        "test")
        .cells.at(0);
}

std::vector<std::vector<float>> synthetic_units(const CellParams& c, const WeightLayout& layout) {
    std::vector<std::vector<float>> units;
    for (int u = 0; u < layout.unit_count(); ++u) {
        auto& w = units.emplace_back(static_cast<std::size_t>(layout.units[static_cast<std::size_t>(u)].numel));
        fill_synthetic_unit(c.model, layout, u, c.seed, w);
    }
    return units;
}

// A full check's first step made the way a host cell makes it: CpuBackprop's gradients, then one
// AdamW step, every element kept.
CheckedStep host_first_step(const CellParams& c, const WeightLayout& layout, const TrainSettings& settings) {
    HostBackend backend;
    const auto units = synthetic_units(c, layout);
    backend.place(layout, [&](int u, std::span<float> dst) { std::ranges::copy(units[static_cast<std::size_t>(u)], dst.begin()); },
                  UnitSchedule::training(layout.unit_count()));
    CpuTrainStep trainer(c.model, layout, c.batch_shape(), c.dropout_masks(), settings);
    CheckedStep first;
    first.check = {c.batch_shape(), true};
    first.tokens = c.token_ids();
    first.targets = c.target_ids();
    first.weights = units;
    first.sample = every_element(layout);
    const auto sampled = [&](int u, const float* values) { return first.sample.take(u, values); };
    first.loss = trainer.forward(backend, first.tokens, first.targets);
    first.grad_norm = trainer.backward(backend);
    for (int u = 0; u < layout.unit_count(); ++u) {
        first.gradients.push_back(sampled(u, static_cast<const float*>(backend.gradient(u))));
        first.updated_before.push_back(sampled(u, units[static_cast<std::size_t>(u)].data()));
    }
    trainer.update(backend);
    for (int u = 0; u < layout.unit_count(); ++u)
        first.updated_after.push_back(sampled(u, static_cast<const float*>(backend.acquire(u))));
    return first;
}

// A prefix step made the way a host cell makes it (step_check.hpp), on `backend`'s weights.
CheckedStep prefix_checked_step(const CellParams& c, const WeightLayout& layout, const TrainSettings& settings,
                                const TrainingCheckShape& shape, HostBackend& backend) {
    CheckedStep s;
    s.check = shape;
    s.tokens = checked_ids(shape, c.token_ids());
    s.targets = checked_ids(shape, c.target_ids());
    s.weights = synthetic_units(c, layout);
    run_host_prefix_step(c, layout, settings, backend, s);
    return s;
}

// The cell's synthetic weights placed for training.
void place_synthetic(HostBackend& backend, const CellParams& c, const WeightLayout& layout) {
    const auto units = synthetic_units(c, layout);
    backend.place(layout, [&](int u, std::span<float> dst) { std::ranges::copy(units[static_cast<std::size_t>(u)], dst.begin()); },
                  UnitSchedule::training(layout.unit_count()));
}

double real_of(const std::string& db_path, const std::string& sql) {
    Database db(db_path, Database::Mode::read_only);
    auto st = db.prepare(sql);
    REQUIRE(st.step());
    REQUIRE_FALSE(st.is_null(0));
    return st.real(0);
}

}  // namespace

TEST_CASE("a training cell's targets are its tokens' stream shifted by one", "[train]") {
    const CellParams c = train_cell();
    const auto tokens = c.token_ids(), targets = c.target_ids();
    REQUIRE(targets.size() == tokens.size());
    for (std::size_t i = 0; i + 1 < tokens.size(); ++i) CHECK(targets[i] == tokens[i + 1]);
    // The last target is the stream's next draw: in range, and the same on every call.
    CHECK(targets.back() >= 0);
    CHECK(targets.back() < c.model.vocab_size);
    CHECK(c.target_ids() == targets);
}

TEST_CASE("the training check passes the host's first step and fails a wrong loss, gradient or update", "[train]") {
    for (const double dropout : {0.0, 0.1}) {
        INFO("dropout " << dropout);
        const CellParams c = train_cell("dropout = " + std::to_string(dropout));
        const auto layout = WeightLayout::for_model(c.model);
        const TrainSettings settings;
        const CheckedStep first = host_first_step(c, layout, settings);
        const auto check = [&](const CheckedStep& f) { return check_training_step(c, layout, settings, f, 1e-4); };
        const auto good = check(first);
        CHECK(good.passed());
        CHECK(good.rel_err < 1e-5);
        CHECK(good.reference == "float64 loss, gradients and AdamW step");

        CheckedStep wrong_loss = first;
        wrong_loss.loss *= 1.001;
        CHECK_FALSE(check(wrong_loss).passed());

        CheckedStep wrong_norm = first;
        wrong_norm.grad_norm *= 1.001;
        CHECK_FALSE(check(wrong_norm).passed());

        // One element off by 0.1 % of the largest gradient.
        CheckedStep wrong_gradient = first;
        float largest = 0;
        for (const auto& u : first.gradients)
            for (const float g : u) largest = std::max(largest, std::abs(g));
        wrong_gradient.gradients[1][7] += 1e-3f * largest;
        CHECK_FALSE(check(wrong_gradient).passed());

        // One weight updated by 1 % too little of the learning rate.
        CheckedStep wrong_update = first;
        wrong_update.updated_after[1][7] += 0.01f * settings.lr;
        CHECK_FALSE(check(wrong_update).passed());

        CheckedStep nan_update = first;
        nan_update.updated_after[0][0] = std::numeric_limits<float>::quiet_NaN();
        CHECK_FALSE(check(nan_update).passed());
    }
    // Without clipping the step and its check both take the gradients as they are.
    const CellParams off = train_cell("max_grad_norm = 0");
    const auto layout = WeightLayout::for_model(off.model);
    const TrainSettings unclipped = train_settings(off);
    CHECK(check_training_step(off, layout, unclipped, host_first_step(off, layout, unclipped), 1e-4).passed());
}

// The float64 loops' multiply-adds for a forward of `tokens` positions in sequences of `seq`,
// counted by hand: per position and layer 12 C² in the linear layers and (position + 1) · C twice
// in the attention (QKᵀ and ·V), and V · C for the lm_head.
double hand_macs(const ModelConfig& m, int batch, int seq) {
    const double c = m.n_embd, l = m.n_layer, v = m.vocab_size;
    double attention = 0;
    for (int t = 0; t < seq; ++t) attention += 2.0 * (t + 1) * c;
    return batch * (seq * (l * 12 * c * c + v * c) + l * attention);
}

TEST_CASE("a training cell's checked step is its own where the float64 loops afford it, else a prefix of sample 0",
          "[train]") {
    const CellParams small = train_cell();  // tiny, batch 2, seq 9
    const auto own = training_check_shape(small);
    REQUIRE(own);
    CHECK((own->shape == BatchShape::rectangular(2, 9) && own->full));

    // A budget that affords 6 positions of one sequence but not 7, nor the cell's own shape.
    const double six = 3 * hand_macs(small.model, 1, 6);
    REQUIRE(3 * hand_macs(small.model, 1, 7) > six);
    const auto prefix = training_check_shape(small, six);
    REQUIRE(prefix);
    CHECK((prefix->shape == BatchShape::rectangular(1, 6) && !prefix->full));
    // Fewer than kLeastPrefixPositions never: the attention must mix positions.
    const auto least = training_check_shape(small, 1.0);
    REQUIRE(least);
    CHECK((least->shape == BatchShape::rectangular(1, 4) && !least->full));

    // GPT-2 1.5B at T = 1024: one position is 1.56e9 multiply-adds, three of them past the budget,
    // so the least prefix, 4 positions (1.9e10 for the step, below kMaxPrefixCheckMacs).
    CellParams large = train_cell("model = \"gpt2_1.5b\"\nbackend = \"device\"\ndtype = \"bf16\"\nbatch = 8\nseq = 1024");
    const auto large_shape = training_check_shape(large);
    REQUIRE(large_shape);
    CHECK((large_shape->shape == BatchShape::rectangular(1, 4) && !large_shape->full));
    large.seq = 3;  // a shorter cell: all of its positions
    CHECK(training_check_shape(large)->shape == BatchShape::rectangular(1, 3));
    // GPT-2 small on the host at T = 64 (train-gpt2.toml): 5 positions, not 6.
    const CellParams gpt2_small = train_cell("model = \"gpt2_small\"\nbatch = 1\nseq = 64");
    REQUIRE(3 * hand_macs(gpt2_small.model, 1, 5) <= kMaxFloat64Macs);
    REQUIRE(3 * hand_macs(gpt2_small.model, 1, 6) > kMaxFloat64Macs);
    CHECK(training_check_shape(gpt2_small)->shape == BatchShape::rectangular(1, 5));
    // GPT-3 6.7B: four positions would take 8e10, past kMaxPrefixCheckMacs: not checked.
    CHECK_FALSE(training_check_shape(train_cell("model = \"gpt3_6.7b\"\nbackend = \"device\"\ndtype = \"bf16\"\nseq = 1024")));
}

TEST_CASE("a prefix check samples every tensor and the embedding rows its tokens and positions touch", "[train]") {
    const ModelConfig m = train_cell().model;  // tiny: C 64, V 512
    const WeightLayout layout = WeightLayout::for_model(m);
    const std::vector<std::int32_t> tokens{5, 3, 5};
    const GradientSample sample = prefix_sample(m, layout, tokens);
    const TensorSpec& wte = layout.units[0].tensors[0];
    const TensorSpec& wpe = layout.units[0].tensors[1];
    // wte [512, 64] and wpe [128, 64]: 256 of each, 128 and 32 apart; rows 3 and 5 of wte; rows 0..2 of wpe.
    REQUIRE(sample.units[0].size() == 5);
    CHECK((sample.units[0][0].offset == wte.offset && sample.units[0][0].count == 256 && sample.units[0][0].stride == 128));
    CHECK((sample.units[0][1].offset == wpe.offset && sample.units[0][1].count == 256 && sample.units[0][1].stride == 32));
    CHECK((sample.units[0][2].offset == wte.offset + 3 * 64 && sample.units[0][2].count == 64 && sample.units[0][2].stride == 1));
    CHECK((sample.units[0][3].offset == wte.offset + 5 * 64 && sample.units[0][3].count == 64));
    CHECK((sample.units[0][4].offset == wpe.offset && sample.units[0][4].count == 3 * 64 && sample.units[0][4].stride == 1));
    CHECK(sample.values(0) == 256 + 256 + 64 + 64 + 192);
    // A block: ln1 (64 values, all), qkv_w [192, 64] (256, 48 apart), ...; the biases undecayed.
    const auto& block = sample.units[1];
    CHECK((block[0].count == 64 && block[0].stride == 1 && !block[0].decays));
    CHECK((block[2].count == 256 && block[2].stride == 192 * 64 / 256 && block[2].decays));
    std::vector<float> unit(static_cast<std::size_t>(layout.units[1].numel));
    for (std::size_t i = 0; i < unit.size(); ++i) unit[i] = static_cast<float>(i);
    const std::vector<float> taken = sample.take(1, unit.data());
    CHECK(taken[64] == static_cast<float>(block[1].offset));  // ln1_b's first element follows ln1_w's 64
}

TEST_CASE("a prefix step leaves the backend as it found it, and its check fails a wrong sampled gradient or update",
          "[train]") {
    for (const double dropout : {0.0, 0.1}) {
        INFO("dropout " << dropout);
        const CellParams c = train_cell("dropout = " + std::to_string(dropout));
        const auto layout = WeightLayout::for_model(c.model);
        const TrainSettings settings;
        const auto shape = training_check_shape(c, 3 * hand_macs(c.model, 1, 6));
        REQUIRE((shape && !shape->full));

        HostBackend backend;
        place_synthetic(backend, c, layout);
        const auto units = synthetic_units(c, layout);
        // The backend's state before: weights, gradients and moments, each unit's, as bytes: the
        // gradients are not written before the first backward, and what they hold may be NaN.
        const auto state_of = [&] {
            std::vector<std::vector<std::byte>> state;
            for (int u = 0; u < layout.unit_count(); ++u) {
                const UnitUpdate unit = backend.acquire_update(u);
                const auto n = static_cast<std::ptrdiff_t>(layout.units[static_cast<std::size_t>(u)].numel);
                for (const void* p : {static_cast<const void*>(unit.weights), unit.gradient, static_cast<const void*>(unit.m),
                                      static_cast<const void*>(unit.v)})
                    state.emplace_back(static_cast<const std::byte*>(p),
                                       static_cast<const std::byte*>(p) + n * static_cast<std::ptrdiff_t>(sizeof(float)));
                backend.release_update(u);
            }
            return state;
        };
        const auto state_before = state_of();
        const CheckedStep s = prefix_checked_step(c, layout, settings, *shape, backend);
        const auto cell_tokens = c.token_ids();
        CHECK(s.tokens == std::vector<std::int32_t>(cell_tokens.begin(), cell_tokens.begin() + 6));

        // The weights, gradients and moments are as the step found them.
        CHECK(state_of() == state_before);

        // The sampled update is the step's: weights moved, by about the learning rate (AdamW's first step).
        CHECK(std::abs(s.updated_after[1][0] - s.updated_before[1][0]) == Catch::Approx(settings.lr).epsilon(0.5));
        const auto check = [&](const CheckedStep& f) { return check_training_step(c, layout, settings, f, 1e-4); };
        const LogitsCheck good = check(s);
        INFO(good.reference << ": " << good.rel_err);
        CHECK(good.passed());
        CHECK(good.rel_err < 1e-5);
        CHECK_THAT(good.reference, ContainsSubstring("first 6 positions") && ContainsSubstring(std::to_string(s.sample.values())));
        CHECK(good.compared == "the prefix step's loss, gradient norm, sampled gradients and update");

        // The loss is the float64 reference's on the prefix alone.
        std::vector<const float*> pointers;
        for (const auto& u : units) pointers.push_back(u.data());
        CHECK(s.loss == Catch::Approx(reference_gradients(c.model, layout, pointers, s.tokens, s.targets, 1, 6,
                                                          c.dropout_masks()).loss).epsilon(1e-5));

        // A token's row of wte: one element off by 0.1 % of the largest sampled gradient.
        CheckedStep wrong_gradient = s;
        float largest = 0;
        for (const auto& u : s.gradients)
            for (const float g : u) largest = std::max(largest, std::abs(g));
        wrong_gradient.gradients[0][512 + 3] += 1e-3f * largest;
        CHECK_FALSE(check(wrong_gradient).passed());
        CheckedStep wrong_update = s;
        wrong_update.updated_after[2][7] += 0.01f * settings.lr;
        CHECK_FALSE(check(wrong_update).passed());
        CheckedStep wrong_norm = s;
        wrong_norm.grad_norm *= 1.001;
        CHECK_FALSE(check(wrong_norm).passed());
    }
}

TEST_CASE("a GPU training cell's prefix check keeps its float64 reference for the other cells of its workload", "[train]") {
    // The key: GPT-2 1.5B's cells of one dtype share it whatever their batch, variant or tf32.
    const std::string large = "model = \"gpt2_1.5b\"\nbackend = \"device\"\nseq = 1024\n";
    const auto key = [&](const std::string& lines) {
        const CellParams c = train_cell(large + lines);
        return kept_training_key(c, c.token_ids());
    };
    const auto bf16 = key("dtype = \"bf16\"\nbatch = 1");
    REQUIRE(bf16);
    CHECK(key("dtype = \"bf16\"\nbatch = 8\nvariant = \"flash_attention\"") == bf16);
    CHECK(key("dtype = \"fp32\"\nbatch = 1") != bf16);
    CHECK(key("dtype = \"fp32\"\nbatch = 1\ntf32 = true") == key("dtype = \"fp32\"\nbatch = 4"));
    CHECK(key("dtype = \"bf16\"\nbatch = 1\nseed = 7") != bf16);
    CHECK(key("dtype = \"bf16\"\nbatch = 1\ndropout = 0.1") != bf16);
    const CellParams c = train_cell(large + "dtype = \"bf16\"");
    CHECK(kept_reference_key(c, c.token_ids()) == bf16);
    // None for a full check, a host cell, checkpoint weights.
    CHECK_FALSE(kept_training_key(train_cell("backend = \"device\""), train_cell().token_ids()));
    const CellParams host = train_cell("model = \"gpt2_small\"\nbatch = 1\nseq = 64");
    CHECK_FALSE(kept_training_key(host, host.token_ids()));
    CellParams checkpoint = c;
    checkpoint.weights = "model.safetensors";
    CHECK_FALSE(kept_training_key(checkpoint, checkpoint.token_ids()));

    // The check: the first cell computes the reference and returns it as the database keeps it;
    // a later one compares with it without the weights, to the same error.
    const CellParams tiny = train_cell("backend = \"device\"");
    const auto layout = WeightLayout::for_model(tiny.model);
    const TrainSettings settings;
    const auto shape = training_check_shape(tiny, 3 * hand_macs(tiny.model, 1, 6));
    REQUIRE((shape && !shape->full));
    HostBackend backend;
    place_synthetic(backend, tiny, layout);
    const CheckedStep s = prefix_checked_step(tiny, layout, settings, *shape, backend);
    const LogitsCheck first = check_training_step(tiny, layout, settings, s, 1e-4);
    REQUIRE(first.kept);
    CHECK(first.reference_computed);
    CHECK(first.passed());
    CHECK((first.kept->batch == 1 && first.kept->seq == 1 && first.kept->vocab == 2 + s.sample.values()));
    CHECK(first.kept->logits[0] == Catch::Approx(s.loss).epsilon(1e-5));
    CHECK(first.kept->logits[1] == Catch::Approx(s.grad_norm).epsilon(1e-4));

    CheckedStep later = s;
    later.weights.clear();
    const LogitsCheck reused = check_training_step(tiny, layout, settings, later, 1e-4, first.kept);
    CHECK_FALSE(reused.reference_computed);
    CHECK(reused.kept->key == first.kept->key);
    CHECK(reused.rel_err == first.rel_err);
    float largest = 0;
    for (const auto& u : s.gradients)
        for (const float g : u) largest = std::max(largest, std::abs(g));
    later.gradients[1][0] += 1e-3f * largest;
    CHECK_FALSE(check_training_step(tiny, layout, settings, later, 1e-4, first.kept).passed());

    // A kept reference of another workload is not this one's: the reference is computed.
    ReferenceLogits other = *first.kept;
    other.key = "another workload";
    CHECK(check_training_step(tiny, layout, settings, s, 1e-4, other).reference_computed);
}

TEST_CASE("a host training cell too large for the full check is checked on a prefix step, its own steps untouched",
          "[train]") {
    // 10 × 512 positions of a model whose lm_head makes each cost 1.4e5 multiply-adds: the full
    // step's float64 loops would take 2.2e9, past the budget; 16 positions of one sequence do not.
    const CellParams c = parse_matrix("name = \"t\"\n[[models]]\nname = \"wide_vocab\"\nlayers = 1\nhidden = 32\n"
                                      "heads = 2\nvocab = 4096\npositions = 512\n"
                                      "[defaults]\nmodel = \"wide_vocab\"\nbackend = \"host\"\nmode = \"train\"\n"
                                      "batch = 10\nseq = 512\nwarmups = 0\niterations = 1\n[[sweep]]\nname = \"s\"\n",
                                      "test")
                             .cells.at(0);
    REQUIRE(3 * hand_macs(c.model, 10, 512) > kMaxFloat64Macs);
    const auto shape = training_check_shape(c);
    REQUIRE((shape && shape->shape == BatchShape::rectangular(1, 16) && !shape->full));

    const CellOutcome out = measure_cell(c, MeasureOptions{});
    INFO(out.reason);
    CHECK(out.status == CellStatus::ok);
    CHECK_THAT(out.get<"check_reference">().value_or(""), ContainsSubstring("prefix step: sample 0, first 16 positions"));
    CHECK(out.get<"check_rel_err">().value_or(1.0) < 1e-5);
    // The cell's first step starts from the weights as made: its loss is a fresh step's.
    const auto layout = WeightLayout::for_model(c.model);
    HostBackend backend;
    place_synthetic(backend, c, layout);
    CpuTrainStep fresh(c.model, layout, c.batch_shape(), c.dropout_masks(), TrainSettings{});
    CHECK(out.get<"loss_first">().value_or(0.0) == Catch::Approx(fresh.forward(backend, c.token_ids(), c.target_ids())).epsilon(1e-9));
}

TEST_CASE("a GPU training cell's estimate counts its prefix step where it is larger than its own step", "[train][estimate]") {
    // GPT-2 1.5B bf16 at T = 1024: the prefix step's scratch unit (lm_head and ln_f, 16 bytes a
    // parameter), its 4-position buffers and workspace, against the cell's own step.
    for (const int seq : {1024, 8}) {
        INFO("seq " << seq);
        const CellParams c = train_cell("model = \"gpt2_1.5b\"\nbackend = \"device\"\ndtype = \"bf16\"\nbatch = 1\n"
                                        "variant = \"flash_attention\"\nseq = " + std::to_string(seq));
        const MemoryEstimate e = estimate_memory(c);
        const WeightLayout layout = WeightLayout::for_model(c.model);
        std::int64_t largest = 0;
        for (const UnitLayout& u : layout.units) largest = std::max(largest, u.numel);
        const std::int64_t prefix = TrainArena(c.model, DType::bf16, BatchShape::rectangular(1, 4),
                                               Variant{Fusion::flash_attention}, Recompute::gelu)
                                        .total +
                                    kGemmWorkspaceBytes + largest * (2 + 2 + 3 * 4);
        CHECK(e.check_step == prefix);
        CHECK((seq == 8) == (prefix > e.activations + e.workspace));
        CHECK(e.device_total() == e.weights + e.training_state + std::max(e.activations + e.workspace, prefix));
        // The host, where the reference runs: every weight in fp32, and its float64 gradient of one unit.
        CHECK(e.host_buffers == 0);
        CHECK(e.host_reference == layout.total_numel * 4 + largest * 8);
    }
}

TEST_CASE("a training step's model flops, and the MFU they give on a GPU whose peak is known", "[train]") {
    const CellParams c = train_cell();
    const double C = c.model.n_embd, L = c.model.n_layer, V = c.model.vocab_size, T = c.seq;
    // Every parameter that multiplies: the blocks' 12C² + 13C each, ln_f and the lm_head.
    const double multiplying = L * (12 * C * C + 13 * C) + 2 * C + V * C;
    const double tokens = c.batch * T;
    const double want = 3 * (2 * multiplying + 2 * L * C * T) * tokens;
    CHECK(step_flops(c.model, c.batch, c.seq, true) == Catch::Approx(want).epsilon(1e-12));
    CHECK(step_flops(c.model, c.batch, c.seq, false) == Catch::Approx(want / 3).epsilon(1e-12));

    const auto measured_on = [&](const std::string& gpu) {
        CellOutcome out;
        out.timed_ms = {2.0, 4.0, 3.0};
        out.timed_phase_ms = {std::vector<double>{1.0, 2.0, 1.5}, {0.5, 1.5, 1.0}, {0.5, 0.5, 0.5}};
        out.set<"gpu_model">(gpu);
        derive_measures(c, out);
        return out;
    };
    const CellOutcome out = measured_on("NVIDIA H100 80GB HBM3");
    CHECK(*out.get<"forward_ms">() == 1.5);
    CHECK(*out.get<"backward_ms">() == 1.0);
    CHECK(*out.get<"optimizer_ms">() == 0.5);
    CHECK(*out.get<"model_flops">() == Catch::Approx(want));
    const double tflops = want / 3e-3 / 1e12;  // the median step, 3 ms
    CHECK(*out.get<"achieved_tflops">() == Catch::Approx(tflops));
    // fp32 without TF32 on an H100 SXM: the CUDA cores' 66.9 TFLOP/s.
    CHECK(*out.get<"mfu_pct">() == Catch::Approx(100 * tflops / 66.9));
    CHECK_FALSE(out.get<"mfu_note">());

    const CellOutcome unknown = measured_on("Some Future GPU");
    CHECK_FALSE(unknown.get<"mfu_pct">());
    CHECK_THAT(*unknown.get<"mfu_note">(), ContainsSubstring("no dense peak is known for 'Some Future GPU'"));
}

TEST_CASE("the host backend holds a training step's state; the streaming backends refuse to train", "[train]") {
    const CellParams c = train_cell();
    const auto layout = WeightLayout::for_model(c.model);
    const auto fill = [](int, std::span<float> dst) { std::ranges::fill(dst, 0.5f); };

    HostBackend inference;
    inference.place(layout, fill, UnitSchedule::inference(layout.unit_count()));
    CHECK_THROWS_WITH(inference.gradient(0), ContainsSubstring("not placed for training"));

    HostBackend training;
    training.place(layout, fill, UnitSchedule::training(layout.unit_count()));
    const UnitUpdate update = training.acquire_update(1);
    CHECK(update.weights == training.acquire(1));
    CHECK(update.gradient == training.gradient(1));
    CHECK(update.master == nullptr);  // fp32 weights are their own master
    const auto numel = static_cast<std::size_t>(layout.units[1].numel);
    CHECK(std::all_of(update.m, update.m + numel, [](float v) { return v == 0.0f; }));
    CHECK(std::all_of(update.v, update.v + numel, [](float v) { return v == 0.0f; }));

    for (const BackendTraits& b : backend_registry()) {
        INFO(enum_name(b.id));
        if (b.training) continue;
        CHECK_THROWS_WITH(check_schedule(b.id, UnitSchedule::training(3)), ContainsSubstring("cannot update weights"));
        CHECK_NOTHROW(check_schedule(b.id, UnitSchedule::inference(3)));
        CellParams streaming = c;
        streaming.backend = b.id;
        CHECK_THAT(cell_impossible_reason(streaming), ContainsSubstring("does not train"));
    }
}

TEST_CASE("a host training cell's estimate holds its gradients, moments and kept activations", "[train][estimate]") {
    const CellParams c = train_cell();
    const MemoryEstimate e = estimate_memory(c);
    const std::int64_t weights = c.weight_bytes();
    CHECK(e.host_weights == weights);
    CHECK(e.host_training_state == 3 * weights);
    const std::int64_t bt = c.batch * c.seq, C = c.model.n_embd, T = c.seq;
    // Per layer 16 values a token kept (x_in, ln1, att, x_mid, ln2: C; qkv 3C; fc_pre, fc 4C);
    // x, y, xf, dxf, dx; the scores; the logits; the backward's scratch (10C a token, 2 T × T).
    const std::int64_t floats = c.model.n_layer * bt * 16 * C + 5 * bt * C + T * T + bt * c.model.vocab_size +
                                bt * 10 * C + 2 * T * T;
    // The full check's copies: weights, gradients, the updated weights before and after, and the
    // full copy of one of them while it is sampled, all in fp32.
    std::int64_t fp32 = 0;
    for (const UnitLayout& u : WeightLayout::for_model(c.model).units) fp32 += u.numel * 4;
    CHECK(e.host_buffers == floats * 4 + 5 * fp32);
    CHECK(e.device_total() == 0);
}

TEST_CASE("a GPU training cell's estimate holds its gradients, master weights, moments and the step's buffers",
          "[train][estimate]") {
    for (const std::string dtype : {"fp32", "bf16"}) {
        INFO(dtype);
        const CellParams c = train_cell("backend = \"device\"\ndtype = \"" + dtype + "\"\nvariant = \"flash_attention\"");
        const MemoryEstimate e = estimate_memory(c);
        const auto layout = WeightLayout::for_model(c.model);
        // The device backend packs each unit on 256 bytes, as for the weights.
        std::int64_t fp32 = 0;
        for (const UnitLayout& u : layout.units) fp32 += (u.numel * 4 + 255) / 256 * 256;
        // Gradients as the weights; two fp32 moments; fp32 master weights below fp32.
        CHECK(e.training_state == e.weights + (dtype == "fp32" ? 2 : 3) * fp32);
        // At least the kept activations: 10 values a token per layer (ln1, qkv, att, ln2, fc_pre) and the logits.
        const std::int64_t bt = c.batch * c.seq, bytes = dtype == "fp32" ? 4 : 2;
        CHECK(e.activations >= (c.model.n_layer * 10 * c.model.n_embd + c.model.vocab_size) * bt * bytes);
        CHECK(e.device_total() == e.weights + e.training_state + e.activations + e.workspace);
        // A cell that does not fit says what its training state takes.
        FixedCost fixed;
        fixed.gpu = "Fixture GPU";
        CHECK_THAT(predicted_oom(c, e.device_total() / 2, fixed), ContainsSubstring("training state "));
        // The checked first step's copies on the host: weights, gradients, the updated weights (the
        // master below fp32) before and after, and one full copy while it is sampled.
        CHECK(e.host_buffers == 5 * [&] {
            std::int64_t unpadded = 0;
            for (const UnitLayout& u : layout.units) unpadded += u.numel * 4;
            return unpadded;
        }());
    }
}

TEST_CASE("with its optimizer on the host a GPU training cell's device holds the gradients, its host the master, "
          "moments and staging", "[train][estimate]") {
    // GPT-2's units as WeightLayout lays them out, each tensor on a multiple of 128 elements: the
    // embedding (wte, wpe), a block (six vectors of C, the QKV, projection and two MLP matrices
    // and the QKV and first MLP biases), the head (ln_f, lm_head).
    const auto padded = [](std::int64_t n) { return (n + 127) / 128 * 128; };
    struct Want {
        std::string model, dtype;
        std::int64_t params, staging;
    };
    // The staging: two slots of a gradient and new weights, each the largest unit (the embedding)
    // in the dtype rounded up to 2 MiB. gpt2_small bf16: 39 383 808 elements · 2 = 78 767 616
    // bytes, 38 huge pages (79 691 776), four of them 318 767 104.
    const Want wants[] = {{"gpt2_small", "bf16", 163037184, 318767104},
                          {"gpt2_small", "fp32", 163037184, 637534208},
                          {"gpt2_1.5b", "bf16", 1638044160, 662700032},
                          {"gpt2_1.5b", "fp32", 1638044160, 1317011456}};
    for (const Want& want : wants) {
        INFO(want.model << " " << want.dtype);
        const CellParams device = train_cell("model = \"" + want.model + "\"\nbackend = \"device\"\ndtype = \"" +
                                             want.dtype + "\"\nbatch = 1\nseq = 64");
        CellParams host = device;
        host.optimizer = StateHome::host;
        const std::int64_t C = host.model.n_embd, V = host.model.vocab_size, P = host.model.max_positions;
        const std::int64_t embedding = padded(V * C) + padded(P * C);
        const std::int64_t block = 6 * padded(C) + padded(3 * C * C) + padded(3 * C) + padded(C * C) +
                                   2 * padded(4 * C * C) + padded(4 * C);
        const std::int64_t head = 2 * padded(C) + padded(V * C);
        const std::int64_t params = embedding + host.model.n_layer * block + head;
        REQUIRE(params == want.params);
        const std::int64_t size = want.dtype == "fp32" ? 4 : 2, huge = std::int64_t{2} << 20;
        REQUIRE(4 * ((std::max(embedding, head) * size + huge - 1) / huge * huge) == want.staging);

        const MemoryEstimate d = estimate_memory(device), h = estimate_memory(host);
        // On the device: the weights and the gradients in the dtype, nothing of AdamW's.
        CHECK(h.weights == params * size);
        CHECK(h.training_state == params * size);
        CHECK(d.training_state == params * size + (size == 4 ? 2 : 3) * params * 4);
        CHECK(h.activations == d.activations);
        CHECK(d.device_total() - h.device_total() == d.training_state - h.training_state);
        // On the host: the fp32 master weights (in fp32 too: the update starts from the host's
        // copy), m and v; the page-locked staging.
        CHECK(h.host_training_state == 3 * params * 4);
        CHECK(h.pinned_staging == want.staging);
        CHECK(h.pinned_total() == want.staging);
        CHECK(h.host_total(false) - d.host_total(false) == 3 * params * 4 + want.staging);
        CHECK(d.host_training_state == 0);
        CHECK(d.pinned_staging == 0);

        // A host without room for it skips the cell, as a page-locked inference cell.
        const std::int64_t need = 3 * params * 4 + want.staging;
        CHECK(predicted_host_oom(host, need).empty());
        const std::string why = predicted_host_oom(host, need - 1);
        CHECK_THAT(why, ContainsSubstring("predicted host OOM"));
        CHECK_THAT(why, ContainsSubstring("training state " + human_bytes(static_cast<double>(3 * params * 4))));
        CHECK(predicted_host_oom(device, 0).empty());
    }
}

TEST_CASE("explicit-copy training: gradients mirror the weights (device slots, page-locked streamed ones), the "
          "optimizer on the host, staging for the resident units only", "[train][estimate]") {
    // Units as WeightLayout lays them out (each tensor on a multiple of 128 elements): the embedding,
    // n_layer equal blocks, the head; in bf16, 2 bytes an element. The budgets are chosen so that the
    // plan (prefetch off: one slot; interleaved) is plain: the embedding and the head are larger
    // than a block, so a budget of embedding + head + (k + 1) blocks keeps both and k blocks
    // resident and streams the others through one block-sized slot (any other slot size streams
    // an embedding or head more); a budget of the embedding alone streams every unit through an
    // embedding-sized slot.
    const auto padded = [](std::int64_t n) { return (n + 127) / 128 * 128; };
    const std::int64_t huge = std::int64_t{2} << 20;
    const auto pinned = [&](std::int64_t bytes) { return (bytes + huge - 1) / huge * huge; };
    for (const std::string model : {"gpt2_small", "gpt3_6.7b"}) {
        const CellParams base = train_cell("model = \"" + model + "\"\nbackend = \"explicit-copy\"\ndtype = \"bf16\"\n"
                                           "optimizer = \"host\"\nbatch = 1\nseq = 64");
        const std::int64_t C = base.model.n_embd, V = base.model.vocab_size, P = base.model.max_positions,
                           L = base.model.n_layer;
        const std::int64_t E = 2 * (padded(V * C) + padded(P * C));
        const std::int64_t B = 2 * (6 * padded(C) + padded(3 * C * C) + padded(3 * C) + padded(C * C) +
                                    2 * padded(4 * C * C) + padded(4 * C));
        const std::int64_t H = 2 * (2 * padded(C) + padded(V * C));
        const std::int64_t fp32 = 2 * (E + L * B + H);  // master, m and v: each unit in fp32, 256-aligned already
        REQUIRE(E > H);
        REQUIRE(H > B);
        struct Case {
            std::int64_t budget;
            int resident_blocks;  // -1: every unit streamed
        };
        for (const Case c : {Case{E + H + B, 0}, Case{E + H + 7 * B, 6}, Case{E, -1}}) {
            INFO(model << ", budget " << c.budget << " bytes, resident blocks " << c.resident_blocks);
            CellParams cell = base;
            cell.budget = *Budget::parse(std::to_string(c.budget));
            const bool all_streamed = c.resident_blocks < 0;
            const std::int64_t streamed_blocks = all_streamed ? L : L - c.resident_blocks;
            const std::int64_t device = all_streamed ? E : E + H + c.resident_blocks * B + B;
            const std::int64_t pinned_weights =
                all_streamed ? pinned(E) + L * pinned(B) + pinned(H) : streamed_blocks * pinned(B);
            // The resident units' staging: two slots of a gradient and new weights, each the
            // largest resident unit (the embedding) on huge pages; none when nothing is resident.
            const std::int64_t staging = all_streamed ? 0 : 4 * pinned(E);

            const MemoryEstimate e = estimate_memory(cell);
            CHECK(e.weights == device);
            CHECK(e.training_state == device);  // the resident units' gradients and the gradient slot
            CHECK(e.pinned_host == pinned_weights);
            CHECK(e.pinned_staging == pinned_weights + staging);  // the streamed gradients and the staging
            CHECK(e.host_training_state == 3 * fp32);
            CHECK(e.pinned_total() == 2 * pinned_weights + staging);
            CHECK(e.host_total(false) - e.host_buffers == 2 * pinned_weights + staging + 3 * fp32);

            // The host without room for all of it skips the cell.
            const std::int64_t need = 2 * pinned_weights + staging + 3 * fp32;
            CHECK(predicted_host_oom(cell, need).empty());
            const std::string why = predicted_host_oom(cell, need - 1);
            CHECK_THAT(why, ContainsSubstring("predicted host OOM"));
            CHECK_THAT(why, ContainsSubstring("page-locked " + human_bytes(static_cast<double>(2 * pinned_weights + staging))));
            CHECK(cell_impossible_reason(cell).empty());
        }
    }
}

TEST_CASE("explicit-copy and uvm-prefetch train with their optimizer on the host only; the device's default is "
          "refused with the reason",
          "[train][axes]") {
    for (const BackendId id : {BackendId::explicit_copy, BackendId::uvm_prefetch}) {
        const std::string backend(enum_name(id));
        INFO(backend);
        const CellParams host =
            train_cell("backend = \"" + backend + "\"\ndtype = \"bf16\"\noptimizer = \"host\"\nprefetch = 1");
        CHECK(host.optimizer == StateHome::host);
        CHECK(cell_impossible_reason(host).empty());
        const CellParams plain = train_cell("backend = \"" + backend + "\"\ndtype = \"bf16\"\nprefetch = 1");
        CHECK(cell_impossible_reason(plain) ==
              "the " + backend + " backend cannot keep the optimizer's state in device memory (optimizer = \"device\", "
              "the default); it trains with optimizer = \"host\", and device is honoured by: device");
        // The axes a training cell on it takes are kept, not reset to their defaults.
        const CellParams block =
            train_cell("backend = \"" + backend + "\"\noptimizer = \"host\"\nprefetch = 1\nrecompute = \"block\"");
        CHECK(block.recompute == Recompute::block);
        const TrainingState& state = *backend_traits(id).training;
        CHECK(state.optimizer_homes == std::vector<StateHome>{StateHome::host});
    }
    // The host backend keeps its state on the host whatever the cell's (default) optimizer says.
    CHECK(cell_impossible_reason(train_cell()).empty());
    // uvm, which moves the weights by faults alone, does not train.
    CHECK_THAT(cell_impossible_reason(train_cell("backend = \"uvm\"")), ContainsSubstring("the uvm backend does not train"));
}

namespace {

// list and estimate show `axis` where a cell sets it (`set` beside `plain`), not otherwise.
void check_shown_where_set(const std::string& axis, const CellParams& plain, const CellParams& set) {
    for (const auto& cells : {std::vector<CellParams>{plain, set}, std::vector<CellParams>{plain}}) {
        std::ostringstream list, estimate;
        print_cell_list(cells, std::nullopt, TableFormat::text, list);
        print_memory_estimates(cells, std::nullopt, TableFormat::text, estimate);
        const bool shown = cells.size() == 2;
        CHECK((list.str().find(axis) != std::string::npos) == shown);
        CHECK((estimate.str().find(axis) != std::string::npos) == shown);
    }
}

}  // namespace

TEST_CASE("recompute: keyed only where not gelu, a setting of device training cells, refused elsewhere", "[train][axes]") {
    const CellParams plain = train_cell("backend = \"device\"\ndtype = \"bf16\"");
    const CellParams gelu = train_cell("backend = \"device\"\ndtype = \"bf16\"\nrecompute = \"gelu\"");
    const CellParams block = train_cell("backend = \"device\"\ndtype = \"bf16\"\nrecompute = \"block\"");
    // The default is what every training cell did before the axis: their keys stay.
    CHECK(plain.recompute == Recompute::gelu);
    CHECK(plain.canonical().find("recompute") == std::string::npos);
    CHECK(gelu.key() == plain.key());
    CHECK(block.key() != plain.key());
    CHECK_THAT(block.canonical(), ContainsSubstring("recompute=block\n"));
    CHECK(CellParams::from_canonical(block.canonical()).recompute == Recompute::block);
    CHECK_THROWS_WITH(train_cell("backend = \"device\"\nrecompute = \"all\""),
                      ContainsSubstring("one of: none, gelu, attention, mlp, block"));

    // The host's step keeps every activation: the matrix gives its cells the default, says so,
    // and refuses a sweep of host cells only that sets it.
    const Matrix both = parse_matrix("name = \"t\"\n[defaults]\nmodel = \"tiny\"\nmode = \"train\"\n[[sweep]]\nname = \"s\"\n"
                                     "backend = [\"host\", \"device\"]\nrecompute = \"mlp\"\n",
                                     "test");
    REQUIRE(both.cells.size() == 2);
    CHECK(both.cells[0].recompute == Recompute::gelu);
    CHECK(both.cells[1].recompute == Recompute::mlp);
    CHECK_THAT(both.notes.at(0), ContainsSubstring("recompute has no effect on backend host"));
    CHECK_THROWS_WITH(train_cell("recompute = \"mlp\""), ContainsSubstring("has no effect on the backend"));

    // Cells that reach a runner otherwise (a canonical text) are skipped with the reason.
    CHECK(cell_impossible_reason(block).empty());
    CellParams infer = block;
    infer.mode = Mode::infer;
    CHECK(cell_impossible_reason(infer) ==
          "recompute = \"block\" is a setting of training steps (mode = \"train\"): an inference forward keeps no "
          "activations for a backward");
    CellParams host = train_cell();
    host.recompute = Recompute::none;
    CHECK(cell_impossible_reason(host) ==
          "the host backend's training step keeps every activation; recompute = \"none\" needs a GPU backend");

    check_shown_where_set("recompute", plain, block);
}

TEST_CASE("optimizer: keyed only where not device, a setting of training cells where the registry keeps it", "[train][axes]") {
    const CellParams plain = train_cell("backend = \"device\"\ndtype = \"bf16\"");
    const CellParams device = train_cell("backend = \"device\"\ndtype = \"bf16\"\noptimizer = \"device\"");
    const CellParams host = train_cell("backend = \"device\"\ndtype = \"bf16\"\noptimizer = \"host\"");
    // The default is what every training cell did before the axis: their keys stay.
    CHECK(plain.optimizer == StateHome::device);
    CHECK(plain.canonical().find("optimizer") == std::string::npos);
    CHECK(device.key() == plain.key());
    CHECK(host.key() != plain.key());
    CHECK_THAT(host.canonical(), ContainsSubstring("optimizer=host\n"));
    CHECK(CellParams::from_canonical(host.canonical()).optimizer == StateHome::host);
    CHECK(backend_config(host).optimizer == StateHome::host);
    CHECK_THROWS_WITH(train_cell("backend = \"device\"\noptimizer = \"cpu\""), ContainsSubstring("one of: device, host"));

    // The host backend's state is in host memory whatever the axis says: the matrix gives its
    // cells the default, says so, and refuses a sweep of host cells only that sets it.
    const Matrix both = parse_matrix("name = \"t\"\n[defaults]\nmodel = \"tiny\"\nmode = \"train\"\n[[sweep]]\nname = \"s\"\n"
                                     "backend = [\"host\", \"device\"]\noptimizer = \"host\"\n",
                                     "test");
    REQUIRE(both.cells.size() == 2);
    CHECK(both.cells[0].optimizer == StateHome::device);
    CHECK(both.cells[1].optimizer == StateHome::host);
    CHECK_THAT(both.notes.at(0), ContainsSubstring("optimizer has no effect on backend host"));
    CHECK_THROWS_WITH(train_cell("optimizer = \"host\""), ContainsSubstring("has no effect on the backend"));

    // Cells that reach a runner otherwise (a canonical text) are skipped with the reason: an
    // inference cell, and a backend whose TrainingState cannot keep the optimizer on the host.
    CHECK(cell_impossible_reason(host).empty());
    CellParams infer = host;
    infer.mode = Mode::infer;
    CHECK(cell_impossible_reason(infer) ==
          "optimizer = \"host\" is a setting of training steps (mode = \"train\"): an inference forward has no optimizer");
    CHECK(backend_traits(BackendId::device).training->keeps_optimizer_on(StateHome::host));
    CHECK(backend_traits(BackendId::device).training->keeps_optimizer_on(StateHome::device));
    CHECK(backend_traits(BackendId::host).training->keeps_optimizer_on(StateHome::host));
    for (const BackendTraits& b : backend_registry()) {
        if (!b.training || !b.computes_in(DType::fp32)) continue;
        INFO(enum_name(b.id));
        CellParams c = train_cell();
        c.backend = b.id;
        c.optimizer = StateHome::host;
        CHECK(cell_impossible_reason(c).empty() == b.training->keeps_optimizer_on(StateHome::host));
    }

    check_shown_where_set("optimizer", plain, host);
}

TEST_CASE("max_grad_norm: keyed only where not 1, 0 for no clipping, a setting of training cells", "[train][axes]") {
    const CellParams plain = train_cell();
    const CellParams one = train_cell("max_grad_norm = 1.0");
    const CellParams off = train_cell("max_grad_norm = 0");
    // The default is what every training cell did before the axis: their keys stay.
    CHECK(plain.max_grad_norm == 1.0);
    CHECK(plain.canonical().find("max_grad_norm") == std::string::npos);
    CHECK(one.key() == plain.key());
    CHECK(off.key() != plain.key());
    CHECK_THAT(off.canonical(), ContainsSubstring("max_grad_norm=0\n"));
    CHECK(CellParams::from_canonical(off.canonical()).max_grad_norm == 0.0);
    CHECK(CellParams::from_canonical(train_cell("max_grad_norm = 0.5").canonical()).max_grad_norm == 0.5);
    CHECK_THROWS_WITH(train_cell("max_grad_norm = -1"), ContainsSubstring("a gradient norm > 0 to clip to, or 0"));
    CHECK_THROWS_WITH(train_cell("max_grad_norm = \"none\""), ContainsSubstring("a gradient norm > 0 to clip to, or 0"));

    // The step's settings follow the cell; AdamW's others stay the defaults.
    CHECK(train_settings(off).max_grad_norm == 0.0f);
    CHECK(train_settings(plain).max_grad_norm == 1.0f);
    CHECK(train_settings(off).lr == TrainSettings{}.lr);

    CHECK(cell_impossible_reason(off).empty());
    CellParams infer = off;
    infer.mode = Mode::infer;
    CHECK(cell_impossible_reason(infer) == "max_grad_norm = 0 is a setting of training steps (mode = \"train\"): an "
                                           "inference forward has no gradients to clip");
    infer.max_grad_norm = 1;
    CHECK(cell_impossible_reason(infer).empty());

    check_shown_where_set("max_grad_norm", plain, off);
}

TEST_CASE("a GPU training cell's estimate shrinks along the recompute ladder by what each setting stops keeping",
          "[train][estimate]") {
    // Model tiny (L = 2, C = 64), batch 2 × seq 9: a [B·T, C] bf16 buffer takes 18 · 64 · 2 = 2304
    // bytes (9 · 256, the arena's alignment), and flash attention's logsumexp per layer B · H · T
    // fp32 = 288 bytes, aligned to 512. Each step up the ladder stops keeping, per layer, the GELU's
    // output (4C); the attention's output (C) and logsumexp; ln_2's output and the pre-activation
    // (C + 4C); ln_1's output, qkv and x_mid (C + 3C + C); and keeps one buffer of each in the
    // scratch instead: L − 1 = 1 layer's worth saved each time.
    const std::int64_t row = 2304, lse = 512, layers_saved = 1;
    for (const std::string variant : {"baseline", "flash_attention"}) {
        INFO(variant);
        const std::int64_t att_saved = row + (variant == "flash_attention" ? lse : 0);
        const std::pair<std::string, std::int64_t> ladder[] = {
            {"none", 0}, {"gelu", 4 * row}, {"attention", att_saved}, {"mlp", 5 * row}, {"block", 5 * row}};
        std::int64_t previous = 0, previous_total = 0;
        for (const auto& [recompute, saved] : ladder) {
            INFO(recompute);
            const CellParams c = train_cell("backend = \"device\"\ndtype = \"bf16\"\nvariant = \"" + variant +
                                            "\"\nrecompute = \"" + recompute + "\"");
            const MemoryEstimate e = estimate_memory(c);
            if (recompute != "none") {
                CHECK(previous - e.activations == layers_saved * saved);
                CHECK(previous_total - e.device_total() == layers_saved * saved);
            }
            previous = e.activations;
            previous_total = e.device_total();
        }
    }
}

TEST_CASE("inplace_ln: a fusion of device training cells, refused for inference and on the host", "[train][axes]") {
    const CellParams plain = train_cell("backend = \"device\"\ndtype = \"bf16\"\nvariant = \"flash_attention\"");
    const CellParams inplace =
        train_cell("backend = \"device\"\ndtype = \"bf16\"\nvariant = \"inplace_ln+flash_attention\"");
    CHECK(inplace.variant == Variant{Fusion::flash_attention, Fusion::inplace_ln});
    CHECK(inplace.variant.text() == "flash_attention+inplace_ln");
    CHECK(inplace.key() != plain.key());
    CHECK(cell_impossible_reason(inplace).empty());
    CellParams infer = inplace;
    infer.mode = Mode::infer;
    CHECK(cell_impossible_reason(infer) ==
          "the inplace_ln fusion of variant 'flash_attention+inplace_ln' changes what a training step (mode = \"train\") "
          "keeps for its backward: an inference forward keeps no activations for a backward");
    CHECK(cell_impossible_reason(train_cell("variant = \"inplace_ln\"")) ==
          "the host backend runs the baseline variant only (fusions are GPU kernels)");
}

TEST_CASE("a GPU training cell's estimate with inplace_ln drops the residual stream the backward no longer reads",
          "[train][estimate]") {
    // Model tiny (L = 2, C = 64), batch 2 × seq 9, bf16: a [B·T, C] buffer takes 2304 bytes (9 ·
    // 256), an fp32 rstd [B·T] 72, aligned to 256. Against the same cell without inplace_ln
    // (recompute.hpp's table):
    // - none, gelu, attention: not x_mid (L buffers) nor the residual stream (L + 1), but one
    //   buffer of each in the scratch; and 2L + 1 rstd (ln_1, ln_2, ln_f) and the flag (256):
    //   (2L + 1 − 2) · 2304 − (2L + 2) · 256 = 3 · 2304 − 6 · 256 = 5376 bytes saved;
    // - mlp: ln2 kept (L) instead of x_mid (L) and recomputed (1), x_mid and the stream in the
    //   scratch (1 + 1) instead of L + 1: (L + 1 + 1 − 1 − 1) · 2304 − 6 · 256 = 3072;
    // - block: the blocks' inputs kept as before (L), the last block's output in the scratch (1);
    //   ln_1's and ln_2's rstd in the scratch (2 · 256), ln_f's and the flag: 1024 bytes more.
    const std::pair<std::string, std::int64_t> saved[] = {
        {"none", 5376}, {"gelu", 5376}, {"attention", 5376}, {"mlp", 3072}, {"block", -1024}};
    for (const std::string variant : {"baseline", "flash_attention"}) {
        for (const auto& [recompute, bytes] : saved) {
            INFO(variant << ", recompute " << recompute);
            const std::string base = "backend = \"device\"\ndtype = \"bf16\"\nrecompute = \"" + recompute + "\"\n";
            const MemoryEstimate without = estimate_memory(train_cell(base + "variant = \"" + variant + "\""));
            const MemoryEstimate with = estimate_memory(
                train_cell(base + "variant = \"" + (variant == "baseline" ? "" : variant + "+") + "inplace_ln\""));
            CHECK(without.activations - with.activations == bytes);
            CHECK(without.device_total() - with.device_total() == bytes);
        }
    }
}

TEST_CASE("a GPU training cell's estimate under inplace_gelu: the GELU's bits for its input, by hand", "[train][estimate]") {
    // Model tiny (L = 2, C = 64), batch 2 × seq 9, bf16: a [B·T, C] buffer is 2304 bytes (9 · 256),
    // the pre-activation and the GELU's output [B·T, 4C] 4 · 2304 each, the GELU's branch bits
    // B·T·4C / 8 = 576 bytes, aligned to 768. Against the same cell without inplace_gelu: at none
    // each layer keeps the bits instead of the pre-activation; at gelu and attention each layer
    // keeps the bits and the GELU's output (it kept the pre-activation, 4C, either way) and the
    // scratch loses its one recomputed output; at mlp and block the scratch holds the output and
    // the bits instead of the pre-activation and the output. The same beside inplace_ln, which
    // changes other activations. At every setting the backward's derivative table for bf16's
    // 65536 values on each branch, in fp32, comes on top: 2 · 65536 · 4 bytes.
    const std::int64_t fc = 4 * 2304, bits = 768, layers = 2, table = 2 * 65536 * 4;
    const std::pair<std::string, std::int64_t> change[] = {{"none", layers * (bits - fc) + table},
                                                          {"gelu", layers * bits - fc + table},
                                                          {"attention", layers * bits - fc + table},
                                                          {"mlp", bits - fc + table},
                                                          {"block", bits - fc + table}};
    for (const std::string variant :
         {"baseline", "flash_attention", "mlp_epilogue+flash_attention+proj_epilogue", "flash_attention+inplace_ln"}) {
        for (const auto& [recompute, bytes] : change) {
            INFO(variant << ", recompute " << recompute);
            const std::string with = variant == "baseline" ? "inplace_gelu" : variant + "+inplace_gelu";
            const auto estimate = [&](const std::string& v) {
                return estimate_memory(train_cell("backend = \"device\"\ndtype = \"bf16\"\nvariant = \"" + v +
                                                  "\"\nrecompute = \"" + recompute + "\""));
            };
            const MemoryEstimate e = estimate(with), e0 = estimate(variant);
            CHECK(e.activations - e0.activations == bytes);
            CHECK(e.device_total() - e0.device_total() == bytes);
        }
    }
}

TEST_CASE("inplace_gelu: a fusion of device training cells, refused for inference and on the host", "[train][axes]") {
    const CellParams device = train_cell("backend = \"device\"\ndtype = \"bf16\"\nvariant = \"inplace_gelu\"");
    CHECK(device.variant == Variant{}.with(Fusion::inplace_gelu));
    CHECK(cell_impossible_reason(device).empty());
    CellParams infer = device;
    infer.mode = Mode::infer;
    CHECK(cell_impossible_reason(infer) ==
          "the inplace_gelu fusion of variant 'inplace_gelu' changes what a training step (mode = \"train\") keeps "
          "for its backward: an inference forward keeps no activations for a backward");
    CellParams host = device;
    host.backend = BackendId::host;
    host.dtype = DType::fp32;
    CHECK(cell_impossible_reason(host) == "the host backend runs the baseline variant only (fusions are GPU kernels)");
    // Without cuBLASLt's GELU epilogue mlp_epilogue needs no GELU buffer of a width that is a
    // multiple of 8: 4 × 45 = 180 is not.
    CellParams odd = train_cell("backend = \"device\"\ndtype = \"bf16\"\nvariant = \"mlp_epilogue\"");
    odd.model.n_embd = 45;
    odd.model.n_head = 3;
    CHECK_THAT(cell_impossible_reason(odd), ContainsSubstring("must be a multiple of 8"));
    odd.variant = Variant{Fusion::mlp_epilogue, Fusion::inplace_gelu};
    CHECK(cell_impossible_reason(odd).empty());
}

TEST_CASE("sweetspot run trains on the host: checked, phases split, the loss falling", "[train][cli]") {
    test::TempDir dir;
    const std::string matrix = dir.file("train.toml"), db = dir.file("train.db");
    test::write_file(matrix, "name = \"train\"\n[defaults]\nmodel = \"tiny\"\nbackend = \"host\"\nmode = \"train\"\n"
                             "batch = 2\nseq = 9\nwarmups = 1\niterations = 4\n[[sweep]]\nname = \"s\"\n"
                             "dropout = [0.0, 0.1]\n");
    const auto r = test::run_sweetspot("run '" + matrix + "' --db '" + db + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    for (const std::string dropout : {"0.0", "0.1"}) {
        INFO("dropout " << dropout);
        const std::string cell = " FROM cells WHERE dropout = " + dropout;
        CHECK(real_of(db, "SELECT status = 'ok'" + cell) == 1);
        CHECK(real_of(db, "SELECT check_rel_err" + cell) < 1e-4);
        // The first step's loss is the float64 reference's on the cell's weights, tokens and targets.
        const CellParams c = train_cell("dropout = " + dropout);
        const auto layout = WeightLayout::for_model(c.model);
        const auto units = synthetic_units(c, layout);
        std::vector<const float*> pointers;
        for (const auto& u : units) pointers.push_back(u.data());
        const double want = reference_gradients(c.model, layout, pointers, c.token_ids(), c.target_ids(), c.batch, c.seq,
                                                c.dropout_masks())
                                .loss;
        CHECK(real_of(db, "SELECT loss_first" + cell) == Catch::Approx(want).epsilon(1e-5));
        // Six steps on one batch: the checked one, a warm-up, four timed.
        CHECK(real_of(db, "SELECT loss_last < loss_first" + cell) == 1);
        CHECK(real_of(db, "SELECT grad_norm_first > 0" + cell) == 1);
        for (const std::string phase : {"forward_ms", "backward_ms", "optimizer_ms"})
            CHECK(real_of(db, "SELECT " + phase + " > 0 AND " + phase + " <= latency_max_ms" + cell) == 1);
        CHECK(real_of(db, "SELECT count(*) FROM cell_phases p JOIN cells c USING (cell_id) WHERE p.phase = "
                          "'checked_step' AND c.dropout = " + dropout) == 1);
        CHECK(real_of(db, "SELECT mfu_pct IS NULL AND mfu_note LIKE 'no GPU%'" + cell) == 1);
    }
}

TEST_CASE("LLaMA trains on the host, checked against the float64 reference; list and run agree on its GPU cell",
          "[train][cli][llama]") {
    test::TempDir dir;
    const std::string matrix = dir.file("train.toml"), db = dir.file("train.db");
    test::write_file(matrix, "name = \"train\"\n[defaults]\nmodel = \"tiny_llama\"\nmode = \"train\"\n"
                             "batch = 2\nseq = 9\nwarmups = 1\niterations = 4\n[[sweep]]\nname = \"s\"\n"
                             "backend = \"host\"\n[[sweep]]\nname = \"gpu\"\nbackend = \"device\"\n"
                             "variant = \"flash_attention\"\n");
    const auto list = test::run_sweetspot("list '" + matrix + "' --format json");
    INFO(list.output);
    REQUIRE(list.exit_code == 0);
    const auto rows = nlohmann::json::parse(list.output);
    REQUIRE(rows.size() == 2);

    const auto r = test::run_sweetspot("run '" + matrix + "' --db '" + db + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(real_of(db, "SELECT status = 'ok' FROM cells WHERE backend = 'host'") == 1);
    CHECK(rows[0].at("runnable_here") == true);
    // The GPU cell: trained where list says it can run (a GPU is visible), else skipped for the
    // reason list gave (the backend's absence: the family trains on the GPU, checked below).
    Database results(db, Database::Mode::read_only);
    auto gpu = results.prepare("SELECT status, coalesce(reason, '') FROM cells WHERE backend = 'device'");
    REQUIRE(gpu.step());
    if (rows[1].at("runnable_here") == true) {
        CHECK(gpu.text(0) == "ok");
    } else {
        // list and run word the GPU's absence each their way, around the same cause.
        const auto listed = rows[1].at("reason").get<std::string>();
        CHECK(gpu.text(0) == "skipped");
        CHECK_THAT(gpu.text(1), ContainsSubstring(listed.substr(listed.find(": ") + 2)));
    }
    const std::string cell = " FROM cells WHERE backend = 'host'";
    // The full check: the first step's loss, gradients and update against the float64 reference.
    CHECK(real_of(db, "SELECT check_rel_err" + cell) < 1e-4);
    CHECK(real_of(db, "SELECT check_reference = 'float64 loss, gradients and AdamW step'" + cell) == 1);
    const CellParams c = train_cell("model = \"tiny_llama\"");
    const auto layout = WeightLayout::for_model(c.model);
    const auto units = synthetic_units(c, layout);
    std::vector<const float*> pointers;
    for (const auto& u : units) pointers.push_back(u.data());
    const double want =
        reference_gradients(c.model, layout, pointers, c.token_ids(), c.target_ids(), c.batch, c.seq).loss;
    CHECK(real_of(db, "SELECT loss_first" + cell) == Catch::Approx(want).epsilon(1e-5));
    CHECK(real_of(db, "SELECT loss_last < loss_first" + cell) == 1);
    // Its activation bytes are the step's buffers.
    CHECK(real_of(db, "SELECT activation_bytes" + cell) ==
          static_cast<double>(CpuBackprop::buffer_bytes_for(c.model, c.batch_shape())));
}

TEST_CASE("a LLaMA host training cell's estimate holds its step's buffers, and a large one checks a prefix of its "
          "token rows", "[train][estimate][llama]") {
    const CellParams c = train_cell("model = \"tiny_llama\"");
    CHECK(cell_impossible_reason(c).empty());
    const MemoryEstimate e = estimate_memory(c);
    CHECK(e.host_weights == c.weight_bytes());
    CHECK(e.host_training_state == 3 * c.weight_bytes());
    // The step's buffers (what CpuBackprop allocates: test_cpu_backward.cpp counts them by hand)
    // and the full check's five fp32 copies of the weights.
    std::int64_t fp32 = 0;
    for (const UnitLayout& u : WeightLayout::for_model(c.model).units) fp32 += u.numel * 4;
    CHECK(e.host_buffers == CpuBackprop::buffer_bytes_for(c.model, c.batch_shape()) + 5 * fp32);
    CHECK(e.device_total() == 0);

    // A prefix check's sample of the embedding: the prefix's tokens' rows of the token table, and
    // no position table.
    const WeightLayout layout = WeightLayout::for_model(c.model);
    const GradientSample sample = prefix_sample(c.model, layout, std::vector<std::int32_t>{5, 3, 5});
    const TensorSpec& table = layout.units[0].tensors[0];
    REQUIRE(sample.units[0].size() == 3);
    CHECK((sample.units[0][1].offset == table.offset + 3 * 64 && sample.units[0][1].count == 64 && sample.units[0][1].decays));
    CHECK((sample.units[0][2].offset == table.offset + 5 * 64 && sample.units[0][2].count == 64));

    // Its GPU training cells take the variants within flash_attention, baseline included; the
    // others are refused with the fusions the family trains with, inference cells of them not.
    for (const char* variant : {"baseline", "flash_attention"}) {
        INFO(variant);
        CHECK(cell_impossible_reason(train_cell("model = \"tiny_llama\"\nbackend = \"device\"\nvariant = \"" +
                                                std::string(variant) + "\"")).empty());
    }
    for (const char* variant : {"softmax", "attn_proj", "proj_epilogue", "tempo"}) {
        INFO(variant);
        const std::string lines = "model = \"tiny_llama\"\nbackend = \"device\"\nvariant = \"" + std::string(variant) + "\"";
        CHECK_THAT(cell_impossible_reason(train_cell(lines)),
                   ContainsSubstring("(LLaMA) trains on the GPU within the fusions flash_attention; variant"));
        if (std::string(variant) != "tempo") CHECK(cell_impossible_reason(train_cell(lines + "\nmode = \"infer\"")).empty());
    }
}

TEST_CASE("a LLaMA GPU training cell's estimate holds its step's arena, which keeps the family's widths",
          "[train][estimate][llama]") {
    // tiny_llama in bf16 at batch 2 × seq 64: C = 64, 4 heads and 2 kv heads of 16 (a packed qkv
    // row of (4 + 2 · 2) · 16 = 128 values), F = 176. A [B·T, width] buffer is 128 · width · 2
    // bytes, a multiple of the arena's 256-byte alignment, as is flash's logsumexp [B, H, T] fp32.
    const CellParams c = train_cell("model = \"tiny_llama\"\nbackend = \"device\"\ndtype = \"bf16\"\nseq = 64\n"
                                    "variant = \"flash_attention\"");
    REQUIRE(cell_impossible_reason(c).empty());
    CHECK(estimate_memory(c).activations ==
          TrainArena(c.model, DType::bf16, BatchShape::rectangular(2, 64), c.variant, c.recompute).total);

    const std::int64_t rows = 128, e = 2, col = rows * e, C = 64, qkv = 128, F = 176, lse = 2 * 4 * 64 * 4;
    const TrainArena a(c.model, DType::bf16, BatchShape::rectangular(2, 64), c.variant, Recompute::none);
    // The backward's scratch: gate's and up's gradients (2F), the packed qkv's; RMSNorm's partial
    // weight gradients (a row of C fp32 per row, up to 512) and no bias's.
    CHECK(a.dqkv - a.dfc == 2 * F * col);
    CHECK(a.dy - a.dqkv == qkv * col);
    CHECK(a.bias_scratch - a.norm_scratch == rows * C * 4);
    CHECK(a.losses == a.bias_scratch);
    // The rows' positions (int32) and the rotation's frequencies (head_dim / 2 fp32) last.
    CHECK(a.frequencies - a.positions == rows * 4);
    CHECK(a.total - a.frequencies == 256);

    // Per layer (what a second layer adds): ln1, att, x_mid, ln2 (C each), qkv, gate and up (2F),
    // SwiGLU's output (F) and the block's output (C) at none, less what each setting recomputes
    // (recompute.hpp's LLaMA table), the logsumexp where the attention's output is kept, and the
    // norm's 1024 double partials of the unit.
    ModelConfig one = c.model, two = c.model;
    one.n_layer = 1;
    two.n_layer = 2;
    struct Kept {
        Recompute recompute;
        std::int64_t columns;
    };
    const Kept kept[] = {{Recompute::none, 5 * C + qkv + 3 * F},
                         {Recompute::gelu, 5 * C + qkv + 2 * F},
                         {Recompute::attention, 4 * C + qkv + 2 * F},
                         {Recompute::mlp, 3 * C + qkv},
                         {Recompute::block, C}};
    for (const auto& [recompute, columns] : kept) {
        INFO("recompute " << enum_name(recompute));
        const std::int64_t added =
            TrainArena(two, DType::bf16, BatchShape::rectangular(2, 64), c.variant, recompute).total -
            TrainArena(one, DType::bf16, BatchShape::rectangular(2, 64), c.variant, recompute).total;
        CHECK(added == columns * col + (recompute < Recompute::attention ? lse : 0) + 1024 * 8);
    }
    // GPT-2 rotates nothing.
    const TrainArena gpt2(find_builtin_model("tiny").value(), DType::bf16, BatchShape::rectangular(2, 64), c.variant,
                          Recompute::none);
    CHECK(gpt2.positions == 0);
    CHECK(gpt2.frequencies == 0);
}

