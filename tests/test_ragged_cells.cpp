// Cells of ragged batches (the lengths and packing axes): how a matrix writes them, their keys,
// shapes, tokens and targets, the cells that cannot run them and why, and host cells, inference and
// training, run end to end.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness/cli/cell_list.hpp"
#include "harness/matrix/matrix.hpp"
#include "harness/matrix/sequence_lengths.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/logits_check.hpp"
#include "harness/measure/measurement.hpp"
#include "harness/measure/memory_estimate.hpp"
#include "harness/measure/step_check.hpp"
#include "harness/store/schema.hpp"
#include "harness/store/sqlite.hpp"
#include "harness/store/store.hpp"
#include "kernels/compute/cpu_forward.hpp"
#include "kernels/compute/cpu_gradients.hpp"
#include "kernels/compute/reference_gradients.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "kernels/model/weight_layout.hpp"
#include "host_logits.hpp"
#include "kernels/model/activation_layout.hpp"
#include "store_fixture.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;

namespace {

std::vector<CellParams> cells_of(const std::string& defaults, const std::string& sweep = "") {
    return parse_matrix("name = \"ragged\"\n[defaults]\n" + defaults + "\n[[sweep]]\nname = \"one\"\n" + sweep, "m.toml")
        .cells;
}

CellParams one_cell(const std::string& defaults) {
    const std::vector<CellParams> cells = cells_of(defaults);
    REQUIRE(cells.size() == 1);
    return cells.front();
}

// cells.drawn_lengths read back: "5,1,17" is {5, 1, 17}.
std::vector<int> stored_lengths(const std::string& text) {
    std::vector<int> lengths;
    std::istringstream in(text);
    for (std::string n; std::getline(in, n, ',');) lengths.push_back(std::stoi(n));
    return lengths;
}

// The database at `path`, opened for writing: upgraded to the current version.
Store upgraded(const std::string& path) {
    Store s = Store::open(path);
    auto v = s.db().prepare("SELECT version FROM schema_info");
    REQUIRE(v.step());
    CHECK(v.int64(0) == schema_version());
    return s;
}

MatrixError matrix_error(const std::string& defaults) {
    try {
        cells_of(defaults);
    } catch (const MatrixError& e) {
        return e;
    }
    FAIL("the matrix was read: " << defaults);
    return MatrixError("", 0, 0, "");
}

}  // namespace

TEST_CASE("a matrix writes lengths and packing; the cell text keeps them, normalised", "[ragged]") {
    const CellParams c = one_cell("lengths = \"lognormal:330.0,0.850\"\npacking = \"packed\"\nseq = 2048\nmodel = \"llama_1b\"");
    CHECK(c.lengths == LengthSpec{LengthSpec::Kind::lognormal, 330, 0.85, ""});
    CHECK(c.packing == Packing::packed);
    CHECK_THAT(c.canonical(), ContainsSubstring("lengths=lognormal:330,0.85\n"));
    CHECK_THAT(c.canonical(), ContainsSubstring("packing=packed\n"));
    const CellParams back = CellParams::from_canonical(c.canonical());
    CHECK(back.lengths == c.lengths);
    CHECK(back.packing == Packing::packed);
    CHECK(back.key() == c.key());
    CHECK(one_cell("lengths = \"zipf:1.1,2048\"").lengths.text() == "zipf:1.1,2048");
    CHECK(one_cell("lengths = \"uniform:16-512\"").lengths.text() == "uniform:16-512");
    CHECK_THAT(c.label(), ContainsSubstring("lengths=lognormal:330,0.85 packing=packed"));
}

TEST_CASE("a lengths text that is no distribution, and a packing that is no choice, are refused at their line",
          "[ragged]") {
    const MatrixError bad = matrix_error("model = \"tiny\"\nlengths = \"lognormal:330\"");
    CHECK(bad.line() == 4);
    CHECK(bad.message() ==
          "'lengths' must be one of fixed, uniform:A-B, lognormal:MEDIAN,SIGMA, zipf:A,MAX or file:PATH (on one line), "
          "got string \"lognormal:330\"");
    CHECK(matrix_error("lengths = \"uniform:9-3\"").line() == 3);
    CHECK_THAT(matrix_error("lengths = 330").message(), ContainsSubstring("got integer 330"));
    const MatrixError packing = matrix_error("packing = \"rolled\"");
    CHECK(packing.line() == 3);
    CHECK_THAT(packing.message(), ContainsSubstring("unknown packing 'rolled'"));
    CHECK_THAT(packing.message(), ContainsSubstring("expected one of: padded, packed"));
    CHECK_THROWS_WITH(CellParams::from_canonical(CellParams{}.canonical() + "lengths=zipf:1.1\n"),
                      ContainsSubstring("'lengths' must be one of fixed"));
}

TEST_CASE("cells at the default lengths and packing keep their keys and their tokens", "[ragged]") {
    // The defaults are no line of the cell text: the key is the one from before the axes.
    const CellParams fixed = one_cell("model = \"tiny\"\nbatch = 2\nseq = 8\nlengths = \"fixed\"\npacking = \"padded\"");
    CHECK_THAT(fixed.canonical(), !ContainsSubstring("lengths") && !ContainsSubstring("packing"));
    CHECK(fixed.key() == one_cell("model = \"tiny\"\nbatch = 2\nseq = 8").key());
    CHECK(fixed.batch_shape() == BatchShape::rectangular(2, 8));
    // The tokens are the first batch × seq ids of the stream, as before: the stream of one longer
    // sequence of the same seed begins with them.
    const std::vector<std::int32_t> ids = fixed.token_ids();
    CHECK(ids.size() == 16);
    const std::vector<std::int32_t> longer = one_cell("model = \"tiny\"\nbatch = 1\nseq = 40").token_ids();
    CHECK(std::equal(ids.begin(), ids.end(), longer.begin()));
    // The targets too: the stream's next batch × seq ids, as before.
    CHECK(fixed.target_ids() == std::vector<std::int32_t>(longer.begin() + 1, longer.begin() + 17));
    // Packed but fixed: a rectangular batch, the same tokens, a cell of its own.
    const CellParams packed = one_cell("model = \"tiny\"\nbatch = 2\nseq = 8\npacking = \"packed\"");
    CHECK(packed.batch_shape().rows() == 16);
    CHECK(packed.token_ids() == ids);
    CHECK(packed.key() != fixed.key());
}

TEST_CASE("a ragged cell's shape is drawn from its seed, and its tokens fill the real rows from one stream", "[ragged]") {
    const std::string axes = "model = \"tiny\"\nbatch = 5\nseq = 12\nlengths = \"uniform:1-12\"\nseed = 7\n";
    const CellParams padded = one_cell(axes);
    const CellParams packed = one_cell(axes + "packing = \"packed\"");
    const std::vector<int> lengths = draw_lengths(padded.lengths, 5, 12, 7);
    const int real = std::accumulate(lengths.begin(), lengths.end(), 0);
    const int longest = *std::max_element(lengths.begin(), lengths.end());

    const BatchShape shape = padded.batch_shape();
    CHECK(std::vector<int>(shape.lengths().begin(), shape.lengths().end()) == lengths);
    CHECK(shape.packing() == Packing::padded);
    CHECK(shape.rows() == 5 * longest);
    CHECK(packed.batch_shape().rows() == real);
    CHECK(packed.batch_shape().packing() == Packing::packed);

    // The stream: the first `real` ids of a rectangular cell of the same seed.
    const std::vector<std::int32_t> stream = one_cell("model = \"tiny\"\nbatch = 1\nseq = 64\nseed = 7").token_ids();
    const std::vector<std::int32_t> packed_ids = packed.token_ids();
    CHECK(packed_ids == std::vector<std::int32_t>(stream.begin(), stream.begin() + real));
    const std::vector<std::int32_t> padded_ids = padded.token_ids();
    REQUIRE(padded_ids.size() == static_cast<std::size_t>(5 * longest));
    // The targets: each real token's the stream's next id (a sequence's last, the next one's
    // first), laid out as the tokens; a padding row's 0, which the training step ignores.
    CHECK(packed.target_ids() == std::vector<std::int32_t>(stream.begin() + 1, stream.begin() + real + 1));
    const std::vector<std::int32_t> padded_targets = padded.target_ids();
    REQUIRE(padded_targets.size() == padded_ids.size());
    int next = 0;
    for (int b = 0; b < 5; ++b) {
        for (int t = 0; t < longest; ++t) {
            INFO("sequence " << b << ", position " << t);
            const auto row = static_cast<std::size_t>(b * longest + t);
            if (t < lengths[static_cast<std::size_t>(b)]) {
                CHECK(padded_ids[row] == stream[static_cast<std::size_t>(next)]);
                CHECK(padded_targets[row] == stream[static_cast<std::size_t>(++next)]);
            } else {
                CHECK(padded_ids[row] == 0);
                CHECK(padded_targets[row] == 0);
            }
        }
    }
}

TEST_CASE(
    "ragged cells the GPU's attention and dropout cannot run are refused with the reason, "
    "and list agrees",
    "[ragged]") {
    const std::string ragged = "model = \"tiny\"\nbatch = 2\nseq = 8\nlengths = \"uniform:2-8\"\n";
    CHECK(cell_impossible_reason(one_cell(ragged)).empty());
    CHECK(cell_impossible_reason(one_cell(ragged + "packing = \"packed\"")).empty());
    CHECK(cell_impossible_reason(one_cell(ragged + "backend = \"device\"\ndtype = \"bf16\"\nvariant = \"softmax\"")) ==
          "lengths = \"uniform:2-8\" draws a ragged batch, which the GPU forward runs with the flash_attention fusion "
          "only (its attention takes each sequence's own rows): variant 'softmax' has softmax");
    // The host trains on ragged batches; the GPU training step with flash_attention only, as the
    // GPU forward runs them.
    CHECK(cell_impossible_reason(one_cell(ragged + "mode = \"train\"")).empty());
    CHECK(cell_impossible_reason(one_cell(ragged + "mode = \"train\"\npacking = \"packed\"")).empty());
    for (const std::string packing : {"padded", "packed"}) {
        INFO(packing);
        const std::string gpu_train =
            ragged + "mode = \"train\"\nbackend = \"device\"\npacking = \"" + packing + "\"\n";
        CHECK(cell_impossible_reason(one_cell(gpu_train + "variant = \"flash_attention\"")).empty());
        CHECK(cell_impossible_reason(one_cell(gpu_train + "variant = \"baseline\"")) ==
              "lengths = \"uniform:2-8\" draws a ragged batch, which the GPU training step runs with the "
              "flash_attention fusion only (its attention takes each sequence's own rows): variant 'baseline' has "
              "none");
    }
    CHECK(cell_impossible_reason(one_cell(ragged + "mode = \"train\"\ndropout = 0.1")) ==
          "lengths = \"uniform:2-8\" draws a ragged batch, and dropout's masks are numbered by the positions of a "
          "rectangular one: dropout = 0.1 needs lengths = \"fixed\"");
    CHECK(cell_impossible_reason(one_cell(ragged + "dropout = 0.1")) ==
          "lengths = \"uniform:2-8\" draws a ragged batch, and dropout's masks are numbered by the positions of a "
          "rectangular one: dropout = 0.1 needs lengths = \"fixed\"");
    // Fixed lengths keep what those cells could do.
    CHECK(cell_impossible_reason(one_cell("model = \"tiny\"\nseq = 8\ndropout = 0.1")).empty());
    CHECK(cell_impossible_reason(one_cell("model = \"tiny\"\nseq = 8\nmode = \"train\"\npacking = \"packed\"")).empty());

    std::ostringstream out;
    print_cell_list(cells_of(ragged, "mode = [\"infer\", \"train\"]\ndropout = [0, 0.1]\n"), std::nullopt,
                    TableFormat::text, out);
    CHECK_THAT(out.str(), !ContainsSubstring("flash_attention fusion only"));
    CHECK_THAT(out.str(), ContainsSubstring("dropout = 0.1 needs lengths = \"fixed\""));
}

TEST_CASE("the host estimate of a ragged cell is what its forward or training step allocates: packed below padded",
          "[ragged][estimate]") {
    const std::string axes = "model = \"tiny_llama\"\nbatch = 6\nseq = 32\nlengths = \"lognormal:9,0.8\"\nseed = 3\n";
    for (const std::string mode : {"infer", "train"}) {
        std::int64_t padded_bytes = 0, packed_bytes = 0;
        for (const std::string packing : {"padded", "packed"}) {
            INFO(mode << ", " << packing);
            const CellParams c = one_cell(axes + "mode = \"" + mode + "\"\npacking = \"" + packing + "\"");
            const BatchShape shape = c.batch_shape();
            const WeightLayout layout = WeightLayout::for_model(c.model);
            const std::int64_t bytes = estimate_memory(c).host_buffers;
            if (mode == "infer") {
                const CpuForward forward(c.model, layout, shape);
                CHECK(bytes == forward.activation_bytes() + shape.rows() * c.model.vocab_size * 4);
            } else {
                // Beside the step's buffers, the full check's five fp32 copies of the weights.
                const CpuBackprop step(c.model, layout, shape);
                CHECK(bytes == step.buffer_bytes() + 5 * layout.total_numel * 4);
            }
            (packing == "padded" ? padded_bytes : packed_bytes) = bytes;
        }
        CHECK(packed_bytes < padded_bytes);
    }
}

namespace {

// A sweep of host cells, batch 4 × seq 16 of the tiny models, padded and packed, and `lines` (its
// mode, lengths, iterations), run through `sweetspot run` into a database in `tmp`.
Store run_host_matrix(const test::TempDir& tmp, const std::string& lines) {
    test::write_file(tmp.file("m.toml"), "name = \"ragged\"\n[defaults]\nbackend = \"host\"\nbatch = 4\nseq = 16\n"
                                         "warmups = 0\n[[sweep]]\nmodel = [\"tiny\", \"tiny_llama\"]\n"
                                         "packing = [\"padded\", \"packed\"]\n" + lines + "\n");
    const std::string db = tmp.file("m.db");
    const auto run = test::run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "'");
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    return Store::open_read_only(db);
}

}  // namespace

TEST_CASE("ragged host cells run through `sweetspot run`: checked, their tokens counted, padding apart", "[ragged][runner]") {
    test::TempDir tmp;
    auto store = run_host_matrix(tmp, "iterations = 2\nlengths = [\"lognormal:6,0.8\", \"uniform:2-16\"]");
    auto st = store.db().prepare(
        "SELECT model, lengths, packing, status, coalesce(reason, ''), check_reference, real_tokens, padded_tokens,"
        " padding_share, tokens_per_s, latency_median_ms, model_flops, canonical, drawn_lengths FROM cells"
        " ORDER BY cell_index");
    int rows = 0;
    std::set<std::string> seen;
    while (st.step()) {
        ++rows;
        const std::string model = st.text(0), lengths = st.text(1), packing = st.text(2);
        INFO(model << " " << lengths << " " << packing);
        seen.insert(model + " " + lengths + " " + packing);
        CHECK(st.text(3) == "ok");
        CHECK(st.text(4).empty());
        CHECK(st.text(5) == "float64 loops");
        // By hand from the lengths the cell drew (seed 1, the default).
        const std::vector<int> drawn = draw_lengths(*LengthSpec::parse(lengths), 4, 16, 1);
        const std::int64_t real = std::accumulate(drawn.begin(), drawn.end(), std::int64_t{0});
        const std::int64_t padding =
            packing == "packed" ? 0 : 4 * std::int64_t{*std::max_element(drawn.begin(), drawn.end())} - real;
        CHECK(st.int64(6) == real);
        CHECK(st.int64(7) == padding);
        CHECK(st.real(8) == Catch::Approx(static_cast<double>(padding) / static_cast<double>(real + padding)));
        // Tokens per second count the real tokens only.
        CHECK(st.real(9) == Catch::Approx(static_cast<double>(real) / (st.real(10) / 1000.0)));
        // Model flops: each sequence's own, whatever the padding.
        const ModelConfig m = *find_builtin_model(model);
        double flops = 0;
        for (const int length : drawn) flops += step_flops(m, 1, length, false);
        CHECK(st.real(11) == Catch::Approx(flops));
        // The lengths it stored are its shape's, in batch order.
        const BatchShape shape = CellParams::from_canonical(st.text(12)).batch_shape();
        CHECK(stored_lengths(st.text(13)) == std::vector<int>(shape.lengths().begin(), shape.lengths().end()));
    }
    CHECK(rows == 8);
    CHECK(seen.size() == 8);
}

namespace {

// The float64 loss of a training cell's first step, from its synthetic weights, over its shape.
double reference_loss(const CellParams& c) {
    const WeightLayout layout = WeightLayout::for_model(c.model);
    std::vector<std::vector<float>> units;
    std::vector<const float*> pointers;
    for (int u = 0; u < layout.unit_count(); ++u) {
        auto& w = units.emplace_back(static_cast<std::size_t>(layout.units[static_cast<std::size_t>(u)].numel));
        fill_synthetic_unit(c.model, layout, u, c.seed, w);
    }
    for (const auto& w : units) pointers.push_back(w.data());
    return reference_gradients(c.model, layout, pointers, c.token_ids(), c.target_ids(), c.batch_shape()).loss;
}

}  // namespace

TEST_CASE("ragged host training cells run through `sweetspot run`: checked against each sequence alone, the loss "
          "over the real tokens", "[ragged][runner][train]") {
    test::TempDir tmp;
    auto store = run_host_matrix(tmp, "mode = \"train\"\niterations = 3\nlengths = \"lognormal:6,0.8\"");
    auto st = store.db().prepare(
        "SELECT model, packing, status, coalesce(reason, ''), check_reference, check_rel_err, loss_first, loss_last,"
        " real_tokens, padded_tokens, activation_bytes FROM cells ORDER BY cell_index");
    int rows = 0;
    while (st.step()) {
        ++rows;
        const std::string model = st.text(0), packing = st.text(1);
        INFO(model << " " << packing);
        CHECK(st.text(2) == "ok");
        CHECK(st.text(3).empty());
        CHECK(st.text(4) == "float64 loss, gradients and AdamW step");
        CHECK(st.real(5) < 1e-4);
        const CellParams c = one_cell("model = \"" + model + "\"\nmode = \"train\"\nbatch = 4\nseq = 16\n"
                                      "lengths = \"lognormal:6,0.8\"\npacking = \"" + packing + "\"");
        const BatchShape shape = c.batch_shape();
        REQUIRE(!shape.is_rectangular());
        CHECK(st.real(6) == Catch::Approx(reference_loss(c)).epsilon(1e-5));
        CHECK(st.real(7) < st.real(6));  // four steps on one batch
        CHECK(st.int64(8) == shape.real_tokens());
        CHECK(st.int64(9) == shape.padded_tokens());
        CHECK(st.int64(10) == CpuBackprop::buffer_bytes_for(c.model, shape));
    }
    CHECK(rows == 4);
}

TEST_CASE("a ragged host training cell too large for the full check is checked on sequence 0's prefix",
          "[ragged][train]") {
    // 12 sequences of 400 to 512 positions of a model whose lm_head makes each cost 1.4e5
    // multiply-adds: the full step's float64 loops would take past 2e9; 16 positions of sequence 0
    // do not.
    const CellParams c = parse_matrix("name = \"t\"\n[[models]]\nname = \"wide_vocab\"\nlayers = 1\nhidden = 32\n"
                                      "heads = 2\nvocab = 4096\npositions = 512\n"
                                      "[defaults]\nmodel = \"wide_vocab\"\nbackend = \"host\"\nmode = \"train\"\n"
                                      "batch = 12\nseq = 512\nlengths = \"uniform:400-512\"\npacking = \"packed\"\n"
                                      "warmups = 0\niterations = 1\n[[sweep]]\nname = \"s\"\n",
                                      "test")
                             .cells.at(0);
    const auto check = training_check_shape(c);
    REQUIRE(check);
    CHECK(check->shape == BatchShape::rectangular(1, 16));
    CHECK_FALSE(check->full);
    // Its tokens and targets: the cell's first 16 rows, sequence 0's first positions.
    const std::vector<std::int32_t> targets = c.target_ids();
    CHECK(checked_ids(*check, targets) == std::vector<std::int32_t>(targets.begin(), targets.begin() + 16));
    // The estimate holds the cell's step and the prefix's, each over its own shape.
    const MemoryEstimate e = estimate_memory(c);
    CHECK(e.host_buffers == CpuBackprop::buffer_bytes_for(c.model, c.batch_shape()) + check_reference_host_bytes(c) +
                                CpuBackprop::buffer_bytes_for(c.model, check->shape) + check_step_scratch_bytes(c));

    const CellOutcome out = measure_cell(c, MeasureOptions{});
    INFO(out.reason);
    CHECK(out.status == CellStatus::ok);
    CHECK_THAT(out.get<"check_reference">().value_or(""), ContainsSubstring("prefix step: sample 0, first 16 positions"));
    CHECK(out.get<"check_rel_err">().value_or(1.0) < 1e-5);
}

TEST_CASE("a fixed cell counts batch x seq real tokens and no padding", "[ragged][runner]") {
    test::TempDir tmp;
    auto s = Store::open(tmp.file("f.db"));
    const CellParams c = test::tiny_cell(3, 8);
    record_outcome(s, s.begin_run(test::sample_run()), 0, c, test::ok_outcome(2.0));
    auto st = s.db().prepare("SELECT real_tokens, padded_tokens, padding_share, tokens_per_s, latency_median_ms, lengths,"
                             " packing, drawn_lengths IS NULL FROM cells");
    REQUIRE(st.step());
    CHECK(st.int64(0) == 24);
    CHECK(st.int64(1) == 0);
    CHECK(st.real(2) == 0.0);
    CHECK(st.real(3) == Catch::Approx(24.0 / (st.real(4) / 1000.0)));
    CHECK(st.text(5) == "fixed");
    CHECK(st.text(6) == "padded");
    // Its lengths are batch x seq: nothing is stored for them.
    CHECK(st.int64(7) == 1);
}

TEST_CASE("a ragged cell that measured nothing stores no lengths", "[ragged][store]") {
    test::TempDir tmp;
    auto s = Store::open(tmp.file("n.db"));
    CellOutcome skipped;
    skipped.status = CellStatus::skipped;
    skipped.reason = "not here";
    record_outcome(s, s.begin_run(test::sample_run()), 0, one_cell("model = \"tiny\"\nbatch = 3\nseq = 8\n"
                                                                   "lengths = \"uniform:1-8\""), skipped);
    auto st = s.db().prepare("SELECT drawn_lengths IS NULL, real_tokens IS NULL FROM cells");
    REQUIRE(st.step());
    CHECK(st.int64(0) == 1);
    CHECK(st.int64(1) == 1);
}

TEST_CASE("a version-26 database is upgraded with each ragged cell's lengths drawn again where they add up to its "
          "real tokens", "[ragged][store]") {
    test::TempDir tmp;
    // Two length files: one changed and one removed after their cells ran.
    test::write_file(tmp.file("changed.txt"), "5\n7\n");
    test::write_file(tmp.file("removed.txt"), "4\n");
    const std::string path = tmp.file("v26.db");
    const std::vector<CellParams> cells = {
        one_cell("model = \"tiny\"\nbatch = 6\nseq = 32\nlengths = \"lognormal:9,0.8\"\nseed = 3"),
        one_cell("model = \"tiny\"\nbatch = 4\nseq = 16\nlengths = \"zipf:1.1,16\"\npacking = \"packed\""),
        one_cell("model = \"tiny\"\nbatch = 5\nseq = 16\nlengths = \"file:" + tmp.file("changed.txt") + "\""),
        one_cell("model = \"tiny\"\nbatch = 2\nseq = 16\nlengths = \"file:" + tmp.file("removed.txt") + "\""),
        test::tiny_cell(2, 8)};
    {
        auto s = Store::open(path);
        const std::int64_t run = s.begin_run(test::sample_run());
        for (std::size_t i = 0; i < cells.size(); ++i)
            record_outcome(s, run, static_cast<int>(i), cells[i], test::ok_outcome(1.0));
        downgrade_schema(s.db(), 26);
        CHECK_FALSE(has_column(s.db(), "cells", "drawn_lengths"));
    }
    test::write_file(tmp.file("changed.txt"), "6\n");
    std::filesystem::remove(tmp.file("removed.txt"));
    Store s = upgraded(path);
    auto st = s.db().prepare("SELECT drawn_lengths FROM cells ORDER BY cell_index");
    for (int i = 0; i < 2; ++i) {
        REQUIRE(st.step());
        const BatchShape shape = cells[static_cast<std::size_t>(i)].batch_shape();
        CHECK(stored_lengths(st.text(0)) == std::vector<int>(shape.lengths().begin(), shape.lengths().end()));
    }
    for (const std::string which : {"changed file", "removed file", "fixed"}) {
        INFO(which);
        REQUIRE(st.step());
        CHECK(st.is_null(0));
    }
    CHECK_FALSE(st.step());
}

TEST_CASE("a version-25 database is upgraded with lengths fixed and packing padded in every old row", "[ragged][store]") {
    test::TempDir tmp;
    const std::string path = tmp.file("v25.db");
    {
        auto s = Store::open(path);
        const std::int64_t run = s.begin_run(test::sample_run());
        record_outcome(s, run, 0, test::tiny_cell(2, 8), test::ok_outcome(1.0));
        record_outcome(s, run, 1, test::tiny_cell(1, 16), test::ok_outcome(1.0));
        downgrade_schema(s.db(), 25);
        CHECK_FALSE(has_column(s.db(), "cells", "lengths"));
        CHECK_FALSE(has_column(s.db(), "cells", "real_tokens"));
    }
    Store s = upgraded(path);
    auto st = s.db().prepare("SELECT lengths, packing, real_tokens IS NULL, padding_share IS NULL FROM cells ORDER BY cell_index");
    for (int i = 0; i < 2; ++i) {
        REQUIRE(st.step());
        CHECK(st.text(0) == "fixed");
        CHECK(st.text(1) == "padded");
        // Not measured before schema 26: no number is made up for them.
        CHECK(st.int64(2) == 1);
        CHECK(st.int64(3) == 1);
    }
    CHECK_FALSE(st.step());
}

TEST_CASE("a large ragged cell's check is its first sequence's prefix, kept under the rectangular prefix's key",
          "[ragged][checks]") {
    const std::string axes = "model = \"llama_1b\"\nbackend = \"device\"\ndtype = \"bf16\"\nbatch = 3\nseq = 2048\n"
                             "variant = \"flash_attention\"\n";
    for (const std::string packing : {"padded", "packed"}) {
        INFO(packing);
        const CellParams ragged = one_cell(axes + "lengths = \"lognormal:330,0.85\"\npacking = \"" + packing + "\"");
        const BatchShape shape = ragged.batch_shape();
        REQUIRE(shape.length(0) > 16);
        CHECK(host_reference_shape(ragged) == BatchShape::rectangular(1, 16));
        CHECK(host_reference_rows(ragged) == 16);
        // The same 16 tokens at the start of a rectangular batch: the same host forward.
        const std::vector<std::int32_t> tokens = ragged.token_ids();
        CellParams fixed = one_cell(axes);
        std::vector<std::int32_t> fixed_tokens = fixed.token_ids();
        std::copy_n(tokens.begin(), 16, fixed_tokens.begin());
        const auto key = kept_reference_key(ragged, tokens);
        REQUIRE(key);
        CHECK(key == kept_reference_key(fixed, fixed_tokens));
        fixed_tokens[3] ^= 1;
        CHECK(key != kept_reference_key(fixed, fixed_tokens));
    }
}

TEST_CASE("a small ragged GPU cell is checked over its whole shape, real rows only", "[ragged][checks]") {
    const CellParams c = one_cell("model = \"tiny_llama\"\nbackend = \"device\"\ndtype = \"fp32\"\nbatch = 4\nseq = 32\n"
                                  "variant = \"flash_attention\"\nlengths = \"uniform:3-32\"\npacking = \"padded\"\nseed = 5");
    const BatchShape shape = c.batch_shape();
    REQUIRE(shape.padded_tokens() > 0);
    CHECK(host_reference_shape(c) == shape);
    CHECK_FALSE(kept_reference_key(c, c.token_ids()));

    // The host forward's own logits pass; a change in a padding row is not looked at, one in a
    // real row is.
    const WeightLayout layout = WeightLayout::for_model(c.model);
    const std::vector<std::int32_t> tokens = c.token_ids();
    std::vector<float> logits = test::host_logits(c, layout, DType::fp32, shape, tokens);
    CHECK(check_against_host(c, layout, tokens, logits).rel_err == 0);
    const auto vocab = static_cast<std::size_t>(c.model.vocab_size);
    std::int64_t padding = 0;
    while (shape.is_real(padding)) ++padding;
    logits[static_cast<std::size_t>(padding) * vocab] += 100.0f;
    CHECK(check_against_host(c, layout, tokens, logits).rel_err == 0);
    logits[0] += 1.0f;
    CHECK(check_against_host(c, layout, tokens, logits).max_abs_err == Catch::Approx(1.0).margin(1e-6));
}

TEST_CASE("the GPU estimate of a ragged cell uses the activation layout of its shape: packed below padded",
          "[ragged][estimate]") {
    const std::string axes = "model = \"llama_1b\"\nbackend = \"device\"\ndtype = \"bf16\"\nbatch = 32\nseq = 2048\n"
                             "variant = \"attn_proj\"\nlengths = \"lognormal:330,0.85\"\n";
    std::int64_t padded = 0, packed = 0;
    for (const std::string packing : {"padded", "packed"}) {
        INFO(packing);
        const CellParams c = one_cell(axes + "packing = \"" + packing + "\"");
        const MemoryEstimate e = estimate_memory(c);
        const ActivationLayout layout = activation_layout(c.model, c.dtype, c.batch_shape(), false);
        CHECK(e.activations == layout.total_bytes);
        CHECK(e.scores == 0);
        (packing == "padded" ? padded : packed) = e.activations;
    }
    CHECK(packed < padded);
}
