// Training cells end to end on the host, and the parts of a training cell decided on the CPU: the
// targets, the check of the first step, the phase split, the model flops and the MFU they give,
// the memory estimate, and which backends train.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "backends/backend_registry.hpp"
#include "backends/host_backend.hpp"
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
    CpuTrainStep trainer(c.model, layout, c.batch, c.seq, c.dropout_masks(), settings);
    CheckedStep first;
    first.shape = {c.batch, c.seq, true};
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
    s.shape = shape;
    s.tokens = checked_ids(c, shape, c.token_ids());
    s.targets = checked_ids(c, shape, c.target_ids());
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
    CHECK((own->batch == 2 && own->seq == 9 && own->full));

    // A budget that affords 6 positions of one sequence but not 7, nor the cell's own shape.
    const double six = 3 * hand_macs(small.model, 1, 6);
    REQUIRE(3 * hand_macs(small.model, 1, 7) > six);
    const auto prefix = training_check_shape(small, six);
    REQUIRE(prefix);
    CHECK((prefix->batch == 1 && prefix->seq == 6 && !prefix->full));
    // Fewer than kLeastPrefixPositions never: the attention must mix positions.
    const auto least = training_check_shape(small, 1.0);
    REQUIRE(least);
    CHECK((least->batch == 1 && least->seq == 4 && !least->full));

    // GPT-2 1.5B at T = 1024: one position is 1.56e9 multiply-adds, three of them past the budget,
    // so the least prefix, 4 positions (1.9e10 for the step, below kMaxPrefixCheckMacs).
    CellParams large = train_cell("model = \"gpt2_1.5b\"\nbackend = \"device\"\ndtype = \"bf16\"\nbatch = 8\nseq = 1024");
    const auto large_shape = training_check_shape(large);
    REQUIRE(large_shape);
    CHECK((large_shape->batch == 1 && large_shape->seq == 4 && !large_shape->full));
    large.seq = 3;  // a shorter cell: all of its positions
    CHECK(training_check_shape(large)->seq == 3);
    // GPT-2 small on the host at T = 64 (train-gpt2.toml): 5 positions, not 6.
    const CellParams gpt2_small = train_cell("model = \"gpt2_small\"\nbatch = 1\nseq = 64");
    REQUIRE(3 * hand_macs(gpt2_small.model, 1, 5) <= kMaxFloat64Macs);
    REQUIRE(3 * hand_macs(gpt2_small.model, 1, 6) > kMaxFloat64Macs);
    CHECK(training_check_shape(gpt2_small)->seq == 5);
    // GPT-3 6.7B: four positions would take 8e10, past kMaxPrefixCheckMacs: not checked.
    CHECK_FALSE(training_check_shape(train_cell("model = \"gpt3_6.7b\"\nbackend = \"device\"\ndtype = \"bf16\"\nseq = 1024")));
}

TEST_CASE("a prefix check samples every tensor and the embedding rows its tokens and positions touch", "[train]") {
    const ModelConfig m = train_cell().model;  // tiny: C 64, V 512
    const WeightLayout layout = WeightLayout::for_model(m);
    const std::vector<std::int32_t> tokens{5, 3, 5};
    const GradientSample sample = prefix_sample(layout, m.n_embd, tokens);
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
    REQUIRE((shape && shape->seq == 16 && !shape->full));

    const CellOutcome out = measure_cell(c, MeasureOptions{});
    INFO(out.reason);
    CHECK(out.status == CellStatus::ok);
    CHECK_THAT(out.get<"check_reference">().value_or(""), ContainsSubstring("prefix step: sample 0, first 16 positions"));
    CHECK(out.get<"check_rel_err">().value_or(1.0) < 1e-5);
    // The cell's first step starts from the weights as made: its loss is a fresh step's.
    const auto layout = WeightLayout::for_model(c.model);
    HostBackend backend;
    place_synthetic(backend, c, layout);
    CpuTrainStep fresh(c.model, layout, c.batch, c.seq, c.dropout_masks(), TrainSettings{});
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
        const std::int64_t prefix = TrainArena(c.model, DType::bf16, 1, 4, true).total + kGemmWorkspaceBytes + largest * (2 + 2 + 3 * 4);
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
    CHECK(c.model.step_flops(c.batch, c.seq, true) == Catch::Approx(want).epsilon(1e-12));
    CHECK(c.model.step_flops(c.batch, c.seq, false) == Catch::Approx(want / 3).epsilon(1e-12));

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
