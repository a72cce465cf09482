// The host training step over a ragged batch (BatchShape: padded or packed; the attention's
// backward within each sequence is test_kernels.cpp's, beside its forward): the loss the mean over
// the real tokens, against the float64 reference of each sequence alone; padding rows changing
// nothing; a shape of equal lengths giving the rectangular step's bits; the buffers the memory
// estimate counts.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "backends/host_backend.hpp"
#include "kernels/compute/cpu_gradients.hpp"
#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/cpu_train_step.hpp"
#include "kernels/compute/reference_gradients.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "kernels/model/weight_layout.hpp"
#include "host_op_support.hpp"
#include "test_models.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;

namespace {

using test::builtin;
using test::relative_error;

const std::vector<int> kLengths = {5, 1, 17, 9};

std::vector<BatchShape> ragged_shapes() {
    return {BatchShape::ragged(kLengths, Packing::packed), BatchShape::ragged(kLengths, Packing::padded),
            BatchShape::ragged(kLengths, Packing::padded, 20)};
}

std::string name_of(const BatchShape& shape) {
    return std::string(enum_name(shape.packing())) + ", stride " + std::to_string(shape.stride());
}

// Synthetic weights; a LLaMA's RMSNorm weights (all 1) moved off 1 so that a backward forgetting
// them fails.
struct Weights {
    std::vector<std::vector<float>> units;
    Weights(const ModelConfig& m, const WeightLayout& layout) {
        for (std::size_t u = 0; u < layout.units.size(); ++u) {
            auto& w = units.emplace_back(static_cast<std::size_t>(layout.units[u].numel));
            fill_synthetic_unit(m, layout, static_cast<int>(u), 4321, w);
            if (m.family != ModelFamily::llama) continue;
            for (const TensorSpec& t : layout.units[u].tensors)
                if (t.shape.size() == 1)
                    for (std::int64_t e = 0; e < t.numel; ++e)
                        w[static_cast<std::size_t>(t.offset + e)] = 1.0f + 0.25f * std::sin(1.3f * static_cast<float>(e + 5 * u));
        }
    }
    std::vector<const float*> pointers() const {
        std::vector<const float*> p;
        for (const auto& u : units) p.push_back(u.data());
        return p;
    }
};

// One id per row of `shape`: position t of sequence b gets an id of (b, t) alone, so every
// packing holds the same sequences; a padding row gets `padding`.
std::vector<std::int32_t> ids(const ModelConfig& m, const BatchShape& shape, int salt, std::int32_t padding = 0) {
    std::vector<std::int32_t> out(static_cast<std::size_t>(shape.rows()), padding);
    for (int b = 0; b < shape.batch(); ++b)
        for (int t = 0; t < shape.length(b); ++t)
            out[static_cast<std::size_t>(shape.first_row(b) + t)] = (b * 101 + t * 13 + salt) % m.vocab_size;
    return out;
}

// Sequence b's rows of one id per row.
std::vector<std::int32_t> sequence_ids(const std::vector<std::int32_t>& rows, const BatchShape& shape, int b) {
    const auto first = rows.begin() + static_cast<std::ptrdiff_t>(shape.first_row(b));
    return {first, first + shape.length(b)};
}

bool same_bits(const CpuGradients& a, const CpuGradients& b) {
    return std::bit_cast<std::uint64_t>(a.loss) == std::bit_cast<std::uint64_t>(b.loss) && a.units == b.units;
}

bool same_bits(const ReferenceGradients& a, const ReferenceGradients& b) {
    return std::bit_cast<std::uint64_t>(a.loss) == std::bit_cast<std::uint64_t>(b.loss) && a.units == b.units;
}

// Every tensor of `got` within 1e-4 of `want`'s largest element (exactly 0 where want is).
void check_tensors(const WeightLayout& layout, const std::vector<std::vector<float>>& got,
                   const std::vector<std::vector<double>>& want) {
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        for (const TensorSpec& tensor : layout.units[u].tensors) {
            INFO(tensor.name);
            const auto at = [&](const auto& unit) { return unit.begin() + static_cast<std::ptrdiff_t>(tensor.offset); };
            const std::vector<float> g(at(got[u]), at(got[u]) + tensor.numel);
            const std::vector<double> w(at(want[u]), at(want[u]) + tensor.numel);
            if (std::ranges::all_of(w, [](double v) { return v == 0.0; }))
                CHECK(std::ranges::all_of(g, [](float v) { return v == 0.0f; }));
            else
                CHECK(relative_error(g, w) < 1e-4);
        }
    }
}

}  // namespace

TEST_CASE("cross_entropy over a ragged batch: the real rows' terms, padding rows' gradient zeros", "[kernels][ragged]") {
    const int vocab = 11;
    const BatchShape padded = BatchShape::ragged({2, 3}, Packing::padded, 4);
    const auto logits = test::random_values(static_cast<std::size_t>(padded.rows() * vocab), 0.0f, 8);
    const std::vector<std::int32_t> targets{3, 7, 5, 5, 1, 2, 9, 4};  // rows 2, 3 and 7 are padding
    std::vector<float> got = logits;
    const double loss = cpu::cross_entropy(got.data(), targets.data(), padded, vocab, 0.2f);
    // The real rows alone, in order, through the rows form: the same terms and the same gradient.
    double want_loss = 0.0;
    for (const std::int64_t r : {0, 1, 4, 5, 6}) {
        std::vector<float> row(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
        want_loss += cpu::cross_entropy(row.data(), &targets[static_cast<std::size_t>(r)], 1, vocab, 0.2f);
        CHECK(std::equal(row.begin(), row.end(), got.begin() + r * vocab));
    }
    CHECK(loss == want_loss);
    for (const std::int64_t r : {2, 3, 7})
        CHECK(std::all_of(got.begin() + r * vocab, got.begin() + (r + 1) * vocab, [](float x) { return x == 0.0f; }));
    // A rectangular shape: the rows form's bits.
    std::vector<float> rows_form = logits, shape_form = logits;
    const double by_rows = cpu::cross_entropy(rows_form.data(), targets.data(), 8, vocab, 0.125f);
    CHECK(cpu::cross_entropy(shape_form.data(), targets.data(), BatchShape::rectangular(2, 4), vocab, 0.125f) == by_rows);
    CHECK(shape_form == rows_form);
}

// The host step's loss and gradients against reference_gradients over the same shape, and that
// reference against its own rectangular form, sequence by sequence: the batch's loss and
// gradients are each sequence's alone weighted by its length over the real tokens (each
// sequence's loss is the mean over its own).
TEST_CASE("a ragged batch's host loss and gradients are the float64 reference's, each sequence alone, the mean over "
          "the real tokens", "[kernels][backward][ragged]") {
    for (const char* name : {"tiny", "tiny_odd", "tiny_llama", "tiny_llama_odd"}) {
        const ModelConfig m = builtin(name);
        const WeightLayout layout = WeightLayout::for_model(m);
        const Weights w(m, layout);
        std::vector<CpuGradients> by_shape;
        for (const BatchShape& shape : ragged_shapes()) {
            INFO(name << ", " << name_of(shape));
            const auto tokens = ids(m, shape, 5), targets = ids(m, shape, 2);
            const CpuGradients got = cpu_gradients(m, layout, w.pointers(), tokens, targets, shape);
            const ReferenceGradients want = reference_gradients(m, layout, w.pointers(), tokens, targets, shape);
            CHECK(std::abs(got.loss - want.loss) < 1e-5 * want.loss);
            check_tensors(layout, got.units, want.units);

            double loss = 0.0;
            std::vector<std::vector<double>> sum;
            for (const UnitLayout& u : layout.units) sum.emplace_back(static_cast<std::size_t>(u.numel), 0.0);
            for (int b = 0; b < shape.batch(); ++b) {
                const int n = shape.length(b);
                const ReferenceGradients alone = reference_gradients(
                    m, layout, w.pointers(), sequence_ids(tokens, shape, b), sequence_ids(targets, shape, b), 1, n);
                loss += n * alone.loss;
                for (std::size_t u = 0; u < sum.size(); ++u)
                    for (std::size_t i = 0; i < sum[u].size(); ++i) sum[u][i] += n * alone.units[u][i];
            }
            const auto real = static_cast<double>(shape.real_tokens());
            CHECK(std::abs(loss / real - want.loss) < 1e-12 * want.loss);
            double worst = 0.0;
            for (std::size_t u = 0; u < sum.size(); ++u)
                for (std::size_t i = 0; i < sum[u].size(); ++i)
                    worst = std::max(worst, std::abs(sum[u][i] / real - want.units[u][i]));
            CHECK(worst < 1e-12);
            by_shape.push_back(got);
        }
        // Packed and padded: the same sequences, the same numbers to fp32's rounding.
        INFO(name);
        for (std::size_t s = 1; s < by_shape.size(); ++s) {
            CHECK(std::abs(by_shape[s].loss - by_shape[0].loss) < 1e-6 * by_shape[0].loss);
            for (std::size_t u = 0; u < by_shape[0].units.size(); ++u)
                CHECK(relative_error(by_shape[s].units[u], test::as_double(by_shape[0].units[u])) < 1e-5);
        }
    }
}

TEST_CASE("a padding row's token and target change neither the loss nor any gradient", "[kernels][backward][ragged]") {
    for (const char* name : {"tiny", "tiny_llama"}) {
        const ModelConfig m = builtin(name);
        const WeightLayout layout = WeightLayout::for_model(m);
        const Weights w(m, layout);
        const BatchShape shape = BatchShape::ragged(kLengths, Packing::padded, 20);
        INFO(name);
        const auto tokens = ids(m, shape, 5), targets = ids(m, shape, 2);
        const CpuGradients zeros = cpu_gradients(m, layout, w.pointers(), tokens, targets, shape);
        const auto other_tokens = ids(m, shape, 5, m.vocab_size - 1), other_targets = ids(m, shape, 2, 7);
        REQUIRE(other_tokens != tokens);
        CHECK(same_bits(cpu_gradients(m, layout, w.pointers(), other_tokens, other_targets, shape), zeros));
        // A real row's target does change them.
        auto moved = targets;
        moved[0] = (moved[0] + 1) % m.vocab_size;
        CHECK_FALSE(same_bits(cpu_gradients(m, layout, w.pointers(), tokens, moved, shape), zeros));
        CHECK(same_bits(reference_gradients(m, layout, w.pointers(), other_tokens, other_targets, shape),
                        reference_gradients(m, layout, w.pointers(), tokens, targets, shape)));
    }
}

// The same calls on the same rows: the loss, the gradients, the float64 reference and two steps'
// weights are the rectangular batch's bit for bit, dropout's masks included.
TEST_CASE("a ragged shape of equal lengths, padded or packed, trains with the rectangular batch's bits",
          "[kernels][backward][ragged]") {
    for (const char* name : {"tiny", "tiny_llama_odd"}) {
        const ModelConfig m = builtin(name);
        const WeightLayout layout = WeightLayout::for_model(m);
        const Weights w(m, layout);
        const BatchShape rectangular = BatchShape::rectangular(3, 9);
        const auto tokens = ids(m, rectangular, 5), targets = ids(m, rectangular, 2);
        const Dropout dropout = m.family == ModelFamily::gpt2 ? Dropout{0.1f, 3} : Dropout{};
        const auto weights_after_two_steps = [&](const BatchShape& shape) {
            HostBackend backend;
            backend.place(layout,
                          [&](int u, std::span<float> dst) { std::ranges::copy(w.units[static_cast<std::size_t>(u)], dst.begin()); },
                          UnitSchedule::training(layout.unit_count()));
            CpuTrainStep step(m, layout, shape, dropout, TrainSettings{});
            step.step(backend, tokens, targets);
            step.step(backend, tokens, targets);
            std::vector<std::vector<float>> out;
            for (int u = 0; u < layout.unit_count(); ++u) {
                const auto* p = static_cast<const float*>(backend.acquire(u));
                out.emplace_back(p, p + layout.units[static_cast<std::size_t>(u)].numel);
                backend.release(u);
            }
            return out;
        };
        const CpuGradients want = cpu_gradients(m, layout, w.pointers(), tokens, targets, rectangular, dropout);
        const ReferenceGradients want_reference =
            reference_gradients(m, layout, w.pointers(), tokens, targets, 3, 9, dropout);
        const auto want_weights = weights_after_two_steps(rectangular);
        for (const Packing packing : {Packing::padded, Packing::packed}) {
            INFO(name << ", " << enum_name(packing));
            const BatchShape alike = BatchShape::ragged({9, 9, 9}, packing);
            CHECK(same_bits(cpu_gradients(m, layout, w.pointers(), tokens, targets, alike, dropout), want));
            CHECK(same_bits(reference_gradients(m, layout, w.pointers(), tokens, targets, alike, dropout), want_reference));
            CHECK(weights_after_two_steps(alike) == want_weights);
        }
    }
}

TEST_CASE("the host training step refuses dropout on a ragged batch, and holds the buffers its estimate counts",
          "[kernels][backward][ragged]") {
    const ModelConfig m = builtin("tiny");
    const WeightLayout layout = WeightLayout::for_model(m);
    const BatchShape ragged = BatchShape::ragged(kLengths, Packing::packed);
    CHECK_THROWS_WITH(CpuBackprop(m, layout, ragged, Dropout{0.1f, 1}),
                      "CpuBackprop: dropout needs a rectangular batch (its masks are numbered by sequence and position "
                      "in rows of one length); this batch is ragged.");
    const Weights w(m, layout);
    const auto tokens = ids(m, ragged, 5);
    CHECK_THROWS_WITH(reference_gradients(m, layout, w.pointers(), tokens, tokens, ragged, Dropout{0.1f, 1}),
                      ContainsSubstring("reference_gradients: dropout needs a rectangular batch"));
    CHECK_THROWS_AS(cpu_gradients(m, layout, w.pointers(), std::span(tokens).first(3), tokens, ragged),
                    std::invalid_argument);

    for (const char* name : {"tiny_odd", "tiny_llama_odd"}) {
        const ModelConfig model = builtin(name);
        std::int64_t packed = 0;
        for (const BatchShape& shape : ragged_shapes()) {  // packed first
            INFO(name << ", " << name_of(shape));
            const CpuBackprop step(model, WeightLayout::for_model(model), shape);
            CHECK(step.buffer_bytes() == CpuBackprop::buffer_bytes_for(model, shape));
            if (shape.packing() == Packing::packed)
                packed = step.buffer_bytes();
            else
                CHECK(step.buffer_bytes() > packed);
        }
    }
}
