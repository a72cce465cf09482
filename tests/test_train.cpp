// Training cells end to end on the host, and the parts of a training cell decided on the CPU: the
// targets, the check of the first step, the phase split, the model flops and the MFU they give,
// the memory estimate, and which backends train.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backends/backend_registry.hpp"
#include "backends/host_backend.hpp"
#include "harness/matrix/matrix.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "harness/measure/memory_estimate.hpp"
#include "harness/measure/step_check.hpp"
#include "harness/store/sqlite.hpp"
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

// A first step made the way a host cell makes it: CpuBackprop's gradients, then one AdamW step.
FirstStep host_first_step(const CellParams& c, const WeightLayout& layout, const TrainSettings& settings) {
    HostBackend backend;
    const auto units = synthetic_units(c, layout);
    backend.place(layout, [&](int u, std::span<float> dst) { std::ranges::copy(units[static_cast<std::size_t>(u)], dst.begin()); },
                  UnitSchedule::training(layout.unit_count()));
    CpuTrainStep trainer(c.model, layout, c.batch, c.seq, c.dropout_masks(), settings);
    FirstStep first;
    first.weights_before = units;
    const auto tokens = c.token_ids(), targets = c.target_ids();
    first.loss = trainer.forward(backend, tokens, targets);
    trainer.backward(backend);
    for (int u = 0; u < layout.unit_count(); ++u) {
        const auto* g = static_cast<const float*>(backend.gradient(u));
        first.gradients.emplace_back(g, g + layout.units[static_cast<std::size_t>(u)].numel);
    }
    trainer.update(backend);
    for (int u = 0; u < layout.unit_count(); ++u) {
        const auto* w = static_cast<const float*>(backend.acquire(u));
        first.weights_after.emplace_back(w, w + layout.units[static_cast<std::size_t>(u)].numel);
    }
    return first;
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
        const FirstStep first = host_first_step(c, layout, settings);
        const auto check = [&](const FirstStep& f) {
            return check_training_step(c, layout, c.token_ids(), c.target_ids(), settings, f, 1e-4);
        };
        const auto good = check(first);
        REQUIRE(good);
        CHECK(good->passed());
        CHECK(good->rel_err < 1e-5);

        FirstStep wrong_loss = first;
        wrong_loss.loss *= 1.001;
        CHECK_FALSE(check(wrong_loss)->passed());

        // One element off by 0.1 % of the largest gradient.
        FirstStep wrong_gradient = first;
        float largest = 0;
        for (const auto& u : first.gradients)
            for (const float g : u) largest = std::max(largest, std::abs(g));
        wrong_gradient.gradients[1][7] += 1e-3f * largest;
        CHECK_FALSE(check(wrong_gradient)->passed());

        // One weight updated by 1 % too little of the learning rate.
        FirstStep wrong_update = first;
        wrong_update.weights_after[1][7] += 0.01f * settings.lr;
        CHECK_FALSE(check(wrong_update)->passed());

        FirstStep nan_update = first;
        nan_update.weights_after[0][0] = std::numeric_limits<float>::quiet_NaN();
        CHECK_FALSE(check(nan_update)->passed());
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
    CHECK(e.host_buffers == floats * 4);
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
        // The checked first step's copies on the host: weights before and after, gradients, master before and after.
        CHECK(e.host_buffers == (dtype == "fp32" ? 3 : 5) * [&] {
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
