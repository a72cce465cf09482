// The compute layer: model shapes, weight layout, synthetic weights, dtype conversions, and the
// fp32 CPU forward checked against the independent float64 reference; each CPU operation checked
// on its own against values worked out by hand (their GPU kernels: test_kernel_ops.cpp).
#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "kernels/compute/cpu_forward.hpp"
#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/family_compute.hpp"
#include "kernels/model/activation_layout.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/gpt2/gpt2_checkpoint.hpp"
#include "kernels/model/gpt2/gpt2_family.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"
#include "kernels/model/llama/llama_checkpoint.hpp"
#include "kernels/model/llama/llama_family.hpp"
#include "kernels/model/llama/llama_tensors.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/model_family.hpp"
#include "kernels/compute/reference_forward.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "base/item_progress.hpp"
#include "base/parallel_for.hpp"
#include "kernels/model/weight_layout.hpp"
#include "test_models.hpp"

using namespace sweetspot;

namespace {

using test::builtin;
using test::llama_hd80;

std::vector<float> synthetic_unit(const ModelConfig& m, const WeightLayout& layout, int unit, std::uint64_t seed) {
    std::vector<float> w(static_cast<std::size_t>(layout.units[static_cast<std::size_t>(unit)].numel));
    fill_synthetic_unit(m, layout, unit, seed, w);
    return w;
}

std::span<const float> tensor_span(const std::vector<float>& unit, const TensorSpec& t) {
    return std::span<const float>(unit).subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.numel));
}

// FNV-1a over the bit patterns: any change in any bit of any value changes it.
std::uint64_t fnv1a(std::span<const float> values, std::uint64_t h = 0xCBF29CE484222325ull) {
    for (const float v : values) {
        const auto bits = std::bit_cast<std::uint32_t>(v);
        for (int byte = 0; byte < 4; ++byte) {
            h ^= (bits >> (8 * byte)) & 0xFFu;
            h *= 0x100000001B3ull;
        }
    }
    return h;
}

// A LayerSource over synthetic weights in host vectors that logs every call, so tests can check
// the forward's acquire/release protocol.
class RecordingSource final : public LayerSource {
public:
    struct Event {
        bool acquire;
        int unit;
        bool operator==(const Event&) const = default;
    };

    RecordingSource(const ModelConfig& m, const WeightLayout& layout, std::uint64_t seed) {
        for (std::size_t u = 0; u < layout.units.size(); ++u) {
            units_.push_back(synthetic_unit(m, layout, static_cast<int>(u), seed));
        }
    }

    const void* acquire(int unit) override {
        events.push_back({true, unit});
        return units_.at(static_cast<std::size_t>(unit)).data();
    }
    void release(int unit) override { events.push_back({false, unit}); }

    std::vector<const float*> pointers() const {
        std::vector<const float*> p;
        for (const auto& u : units_) p.push_back(u.data());
        return p;
    }

    std::vector<Event> events;

private:
    std::vector<std::vector<float>> units_;
};

// Deterministic token ids spread over the whole vocabulary.
std::vector<std::int32_t> make_tokens(const ModelConfig& m, int batch, int seq, std::uint32_t salt = 0) {
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq));
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] =
            static_cast<std::int32_t>((i * 7919u + salt * 104729u + 17u) % static_cast<std::uint32_t>(m.vocab_size));
    }
    return tokens;
}

std::vector<float> run_shape(const ModelConfig& m, RecordingSource& source, std::span<const std::int32_t> tokens,
                             const BatchShape& shape, const Dropout& dropout = {}) {
    CpuForward forward(m, WeightLayout::for_model(m), shape, dropout);
    std::vector<float> logits(tokens.size() * static_cast<std::size_t>(m.vocab_size));
    forward.run(source, tokens, logits);
    return logits;
}

std::vector<float> run_cpu(const ModelConfig& m, RecordingSource& source, std::span<const std::int32_t> tokens,
                           int batch, int seq) {
    return run_shape(m, source, tokens, BatchShape::rectangular(batch, seq));
}

// Logits of one (sample, position) row.
std::span<const float> logit_row(const std::vector<float>& logits, const ModelConfig& m, int seq, int b, int t) {
    const auto v = static_cast<std::size_t>(m.vocab_size);
    return std::span<const float>(logits).subspan(
        (static_cast<std::size_t>(b) * static_cast<std::size_t>(seq) + static_cast<std::size_t>(t)) * v, v);
}

bool bit_identical(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

constexpr std::uint64_t kSeed = 1234;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Model configs

TEST_CASE("built-in models have the documented shapes", "[kernels]") {
    const auto small = builtin("gpt2_small");
    CHECK(small.n_layer == 12);
    CHECK(small.n_embd == 768);
    CHECK(small.n_head == 12);
    CHECK(small.vocab_size == 50257);
    CHECK(small.max_positions == 1024);
    CHECK(builtin("gpt3_13b_seed").n_embd == 5200);
    CHECK(builtin("gpt3_13b_seed").head_dim() == 130);
    CHECK(builtin("gpt3_6.7b").max_positions == 2048);
    CHECK(builtin("tiny").head_dim() == 16);
    CHECK(builtin("tiny_odd").head_dim() == 26);
    CHECK(builtin("tiny_odd").vocab_size == 300);
    CHECK_FALSE(find_builtin_model("gpt2_huge").has_value());

    // LLaMA's as their config.json files give them.
    const auto l1 = builtin("llama_1b");
    CHECK(l1.family == ModelFamily::llama);
    CHECK((l1.n_layer == 16 && l1.n_embd == 2048 && l1.n_head == 32 && l1.kv_heads() == 8 && l1.ffn_width() == 8192));
    CHECK((l1.vocab_size == 128256 && l1.rope_theta == 500000.0 && l1.rope_scaling.enabled && l1.rope_scaling.factor == 32));
    const auto l7 = builtin("llama2_7b");
    CHECK((l7.n_layer == 32 && l7.n_embd == 4096 && l7.kv_heads() == 32 && l7.ffn_width() == 11008 && l7.vocab_size == 32000));
    const auto l8 = builtin("llama3_8b");
    CHECK((l8.kv_heads() == 8 && l8.ffn_width() == 14336 && l8.vocab_size == 128256 && !l8.rope_scaling.enabled));
    const auto l13 = builtin("llama2_13b");
    CHECK((l13.n_layer == 40 && l13.n_embd == 5120 && l13.n_head == 40 && l13.kv_heads() == 40 && l13.ffn_width() == 13824));
    CHECK(builtin("tiny_llama_odd").head_dim() == 48);
    CHECK(builtin("tiny_llama_odd").kv_heads() == 1);

    CHECK(builtin_models().size() == 13);
    for (const auto& m : builtin_models()) {
        INFO(m.name);
        CHECK(m.validate().empty());
        CHECK(m.ln_eps == (m.name == "tiny_llama_odd" ? 1e-6f : 1e-5f));
    }
    // GPT-2's MLP is 4 × n_embd wide and its attention multi-head.
    CHECK(small.ffn_width() == 4 * 768);
    CHECK(small.kv_heads() == 12);
}

TEST_CASE("a model's kv heads must divide its heads; a LLaMA head dimension must be even", "[kernels]") {
    ModelConfig m = builtin("tiny_llama");
    m.n_kv_head = 3;
    CHECK(m.validate().find("must divide n_head = 4") != std::string::npos);
    m.n_kv_head = 8;
    CHECK_FALSE(m.validate().empty());
    m = builtin("tiny_llama");
    m.n_embd = 60;  // 4 heads of 15
    CHECK(m.validate().find("rotary embeddings need it even") != std::string::npos);
    m = builtin("tiny_llama");
    m.rope_scaling = {.factor = 8, .low_freq_factor = 4, .high_freq_factor = 1, .enabled = true};
    CHECK(m.validate().find("high_freq_factor above low_freq_factor") != std::string::npos);
}

TEST_CASE("n_params counts the untied GPT-2 layout", "[kernels]") {
    // wte 50257·768 + wpe 1024·768 + 12 blocks · 7,087,872 + ln_f 1536 + lm_head 50257·768.
    CHECK(n_params(builtin("gpt2_small")) == 163'037'184);
    // The same from transformers' count for GPT-2 small (GPT2LMHeadModel.num_parameters(), its
    // lm_head tied to wte and so counted once), plus the lm_head our layout holds apart.
    CHECK(n_params(builtin("gpt2_small")) == 124'439'808 + 50257 * 768);
    CHECK(n_params(builtin("gpt2_1.5b")) > 1'500'000'000);
    CHECK(n_params(builtin("gpt2_1.5b")) < 1'700'000'000);
    CHECK(n_params(builtin("gpt3_6.7b")) > 6'700'000'000);
    CHECK(n_params(builtin("gpt3_6.7b")) < 7'000'000'000);
    CHECK(n_params(builtin("gpt3_13b")) > 12'900'000'000);
    CHECK(n_params(builtin("gpt3_13b")) < 13'300'000'000);
    CHECK(n_params(builtin("gpt3_13b_seed")) > n_params(builtin("gpt3_13b")));
}

TEST_CASE("validate rejects unusable shapes with a sentence naming the model", "[kernels]") {
    const auto base = builtin("tiny");
    std::vector<std::pair<const char*, ModelConfig>> bad;
    auto with = [&](const char* what, auto change) {
        ModelConfig m = base;
        m.name = "broken";
        change(m);
        bad.emplace_back(what, m);
    };
    with("no layers", [](ModelConfig& m) { m.n_layer = 0; });
    with("negative hidden", [](ModelConfig& m) { m.n_embd = -64; });
    with("no heads", [](ModelConfig& m) { m.n_head = 0; });
    with("heads do not divide hidden", [](ModelConfig& m) { m.n_head = 5; });
    with("no vocabulary", [](ModelConfig& m) { m.vocab_size = 0; });
    with("no positions", [](ModelConfig& m) { m.max_positions = 0; });
    with("zero eps", [](ModelConfig& m) { m.ln_eps = 0.0f; });
    with("NaN eps", [](ModelConfig& m) { m.ln_eps = std::numeric_limits<float>::quiet_NaN(); });
    for (const auto& [what, m] : bad) {
        INFO(what);
        const std::string why = m.validate();
        CHECK_THAT(why, Catch::Matchers::ContainsSubstring("'broken'"));
        CHECK(why.back() == '.');
        CHECK_THROWS_AS(WeightLayout::for_model(m), std::invalid_argument);
    }
    CHECK_THAT(bad[3].second.validate(), Catch::Matchers::ContainsSubstring("divisible"));
}

TEST_CASE("a forward refuses a batch it cannot run, saying who refuses and why", "[kernels][model]") {
    const ModelConfig m = *find_builtin_model("tiny");  // 128 positions, vocab 512
    const WeightLayout layout = WeightLayout::for_model(m);
    const auto refused = [](const auto& make, const std::string& why) {
        try {
            make();
            FAIL("accepted: " << why);
        } catch (const std::invalid_argument& e) {
            CHECK(std::string(e.what()) == why);
        }
    };
    refused([&] { check_batch_shape("CpuForward", m, layout, 0, 4); }, "CpuForward: batch must be at least 1, got 0.");
    refused([&] { CpuForward(m, layout, BatchShape::rectangular(1, 129)); },
            "CpuForward: seq must be between 1 and 128 (the max_positions of model 'tiny'), got 129.");
    refused([&] { CpuForward(m, layout, BatchShape::ragged({5, 129}, Packing::packed)); },
            "CpuForward: sequence 1 has length 129; every length must be at most 128 (the max_positions of model "
            "'tiny').");
    refused([&] { CpuForward(m, layout, BatchShape::ragged({5, 9}, Packing::padded, 129)); },
            "CpuForward: a stride of 129 rows is longer than 128 (the max_positions of model 'tiny').");
    const WeightLayout other = WeightLayout::for_model(*find_builtin_model("tiny_odd"));
    refused([&] { CpuForward(m, other, BatchShape::rectangular(1, 4)); },
            "CpuForward: the weight layout was not made for model 'tiny'.");
    refused([&] { CpuForward(m, layout, BatchShape::ragged({5, 9}, Packing::packed), Dropout{0.1f, 3}); },
            "CpuForward: dropout needs a rectangular batch (its masks are numbered by sequence and position in rows "
            "of one length); this batch is ragged.");

    CpuForward forward(m, layout, BatchShape::rectangular(2, 3));
    RecordingSource source(m, layout, 1);
    std::vector<float> logits(6 * 512);
    std::vector<std::int32_t> tokens(5, 1);
    refused([&] { forward.run(source, tokens, logits); },
            "CpuForward: expected 6 token ids (one per row of the batch), got 5.");
    tokens.assign(6, 1);
    tokens[4] = 512;
    refused([&] { forward.run(source, tokens, logits); },
            "CpuForward: token 512 at index 4 is outside the vocabulary of model 'tiny' (512 tokens).");
    tokens[4] = -1;
    refused([&] { check_batch_ids("GpuTrainStep", m, tokens, 6, "target"); },
            "GpuTrainStep: target -1 at index 4 is outside the vocabulary of model 'tiny' (512 tokens).");
    tokens[4] = 511;
    CHECK_NOTHROW(check_batch_ids("GpuTrainStep", m, tokens, 6, "target"));
    CHECK_NOTHROW(forward.run(source, tokens, logits));
}

// ---------------------------------------------------------------------------------------------
// Weight layout

TEST_CASE("weight layout: aligned, non-overlapping tensors in enum order, padded units", "[kernels]") {
    for (const char* name : {"tiny", "tiny_odd", "gpt2_small", "gpt3_13b_seed"}) {
        INFO(name);
        const auto m = builtin(name);
        const auto layout = WeightLayout::for_model(m);
        REQUIRE(layout.units.size() == static_cast<std::size_t>(m.n_layer) + 2);
        CHECK(layout.units.front().kind == UnitKind::embedding);
        CHECK(layout.units.back().kind == UnitKind::head);
        CHECK(layout.head_unit() == m.n_layer + 1);
        CHECK(layout.unit_name(0) == "embedding");
        CHECK(layout.unit_name(layout.head_unit()) == "head");
        CHECK_THROWS_AS(layout.unit_name(layout.head_unit() + 1), std::out_of_range);
        CHECK_THROWS_AS(layout.unit_name(-1), std::out_of_range);
        CHECK(layout.units[0].tensors.size() == gpt2::embed_tensor::count);
        CHECK(layout.units.back().tensors.size() == gpt2::head_tensor::count);

        std::int64_t params = 0, total = 0;
        for (std::size_t u = 0; u < layout.units.size(); ++u) {
            const auto& unit = layout.units[u];
            if (unit.kind == UnitKind::block) {
                CHECK(unit.block == static_cast<int>(u) - 1);
                CHECK(WeightLayout::block_unit(unit.block) == static_cast<int>(u));
                CHECK(layout.unit_name(static_cast<int>(u)) == "layer " + std::to_string(u - 1));
                CHECK(unit.tensors.size() == gpt2::block_tensor::count);
            } else {
                CHECK(unit.block == -1);
            }
            std::int64_t end = 0;
            for (const auto& t : unit.tensors) {
                std::int64_t shape_numel = 1;
                for (const auto d : t.shape) shape_numel *= d;
                CHECK(t.numel == shape_numel);
                CHECK(t.offset % kTensorAlignElems == 0);
                CHECK(t.offset >= end);
                CHECK(t.offset - end < kTensorAlignElems);  // no more padding than alignment needs
                end = t.offset + t.numel;
                params += t.numel;
            }
            CHECK(unit.numel % kTensorAlignElems == 0);
            CHECK(unit.numel >= end);
            CHECK(unit.numel - end < kTensorAlignElems);
            total += unit.numel;
        }
        CHECK(params == n_params(m));
        CHECK(layout.total_numel == total);
    }
}

TEST_CASE("weight layout: GPT-2 names and nn.Linear shapes", "[kernels]") {
    const auto m = builtin("tiny_odd");
    const std::int64_t c = m.n_embd, v = m.vocab_size;
    const auto layout = WeightLayout::for_model(m);
    const auto& emb = layout.units[0].tensors;
    CHECK(emb[gpt2::embed_tensor::wte].name == "wte.weight");
    CHECK(emb[gpt2::embed_tensor::wte].shape == std::vector<std::int64_t>{v, c});
    CHECK(emb[gpt2::embed_tensor::wpe].name == "wpe.weight");
    CHECK(emb[gpt2::embed_tensor::wpe].shape == std::vector<std::int64_t>{m.max_positions, c});

    const auto& blk = layout.units[static_cast<std::size_t>(WeightLayout::block_unit(2))].tensors;
    const std::vector<std::pair<std::string, std::vector<std::int64_t>>> expected = {
        {"h.2.ln_1.weight", {c}},
        {"h.2.ln_1.bias", {c}},
        {"h.2.attn.c_attn.weight", {3 * c, c}},
        {"h.2.attn.c_attn.bias", {3 * c}},
        {"h.2.attn.c_proj.weight", {c, c}},
        {"h.2.attn.c_proj.bias", {c}},
        {"h.2.ln_2.weight", {c}},
        {"h.2.ln_2.bias", {c}},
        {"h.2.mlp.c_fc.weight", {4 * c, c}},
        {"h.2.mlp.c_fc.bias", {4 * c}},
        {"h.2.mlp.c_proj.weight", {c, 4 * c}},
        {"h.2.mlp.c_proj.bias", {c}},
    };
    REQUIRE(blk.size() == expected.size());
    for (std::size_t i = 0; i < blk.size(); ++i) {
        CHECK(blk[i].name == expected[i].first);
        CHECK(blk[i].shape == expected[i].second);
    }

    const auto& head = layout.units.back().tensors;
    CHECK(head[gpt2::head_tensor::lnf_w].name == "ln_f.weight");
    CHECK(head[gpt2::head_tensor::lnf_b].name == "ln_f.bias");
    CHECK(head[gpt2::head_tensor::lm_head].name == "lm_head.weight");
    CHECK(head[gpt2::head_tensor::lm_head].shape == std::vector<std::int64_t>{v, c});
}

TEST_CASE("GPT-2's declaration: checkpoints store the four Conv1D weights transposed, nothing else", "[kernels]") {
    const auto m = builtin("tiny_odd");
    for (const UnitKind kind : {UnitKind::embedding, UnitKind::block, UnitKind::head}) {
        const std::vector<TensorDecl> decls = gpt2::unit_tensors(m, kind, 1);
        for (std::size_t t = 0; t < decls.size(); ++t) {
            INFO(decls[t].name);
            const bool conv1d = decls[t].name == "h.1.attn.c_attn.weight" || decls[t].name == "h.1.attn.c_proj.weight" ||
                                decls[t].name == "h.1.mlp.c_fc.weight" || decls[t].name == "h.1.mlp.c_proj.weight";
            CHECK(decls[t].stored_transposed == conv1d);
        }
    }
}

TEST_CASE("each built-in model's family declaration points at its directory's tables", "[kernels]") {
    CHECK(enum_names<ModelFamily>() == std::vector<std::string>{"gpt2", "llama"});
    CHECK(ModelConfig{}.family == ModelFamily::gpt2);
    for (const ModelConfig& m : builtin_models()) {
        INFO(m.name);
        const bool llama = m.name.find("llama") != std::string::npos;
        CHECK(m.family == (llama ? ModelFamily::llama : ModelFamily::gpt2));
        CHECK(&family_of(m) == (llama ? &llama::family() : &gpt2::family()));
    }
    const FamilyDecl& l = family_of(ModelFamily::llama);
    CHECK(l.title == "LLaMA");
    CHECK(l.unit_tensors == &llama::unit_tensors);
    CHECK(l.parse_config == &llama::parse_config);
    CHECK(l.checkpoint_prefix == "model.");
    const FamilyDecl& f = family_of(ModelFamily::gpt2);
    CHECK(f.title == "GPT-2");
    CHECK(f.unit_tensors == &gpt2::unit_tensors);
    CHECK(f.parse_config == &gpt2::parse_config);
    CHECK(std::vector<std::string_view>(f.model_types.begin(), f.model_types.end()) ==
          std::vector<std::string_view>{"gpt2"});
    // config.json's model_type finds the family by its declaration.
    CHECK(family_of_model_type("gpt2") == ModelFamily::gpt2);
    CHECK(family_of_model_type("llama") == ModelFamily::llama);
    CHECK_FALSE(family_of_model_type("mistral").has_value());
    CHECK_FALSE(family_of_model_type("").has_value());
    CHECK(known_model_types() == std::vector<std::string>{"gpt2", "llama"});
    CHECK(f.checkpoint_prefix == gpt2::kCheckpointPrefix);
    CHECK(f.is_checkpoint_buffer == &gpt2::is_checkpoint_buffer);
    CHECK(f.tied_head_tensor == gpt2::head_tensor::lm_head);
    CHECK(f.tied_head_source == gpt2::kTiedHeadSource);
}

// ---------------------------------------------------------------------------------------------
// Synthetic weights

TEST_CASE("synthetic weights are a pure function of the seed", "[kernels]") {
    const auto m = builtin("tiny_odd");
    const auto layout = WeightLayout::for_model(m);
    for (int u = 0; u < static_cast<int>(layout.units.size()); ++u) {
        const auto a = synthetic_unit(m, layout, u, kSeed);
        CHECK(bit_identical(a, synthetic_unit(m, layout, u, kSeed)));
        CHECK_FALSE(bit_identical(a, synthetic_unit(m, layout, u, kSeed + 1)));
    }
    // Same tensor in two blocks must not repeat.
    const auto b0 = synthetic_unit(m, layout, WeightLayout::block_unit(0), kSeed);
    const auto b1 = synthetic_unit(m, layout, WeightLayout::block_unit(1), kSeed);
    CHECK_FALSE(bit_identical(b0, b1));
}

TEST_CASE("synthetic weights: no zero parameter, zero padding", "[kernels]") {
    for (const char* name : {"tiny", "tiny_odd"}) {
        INFO(name);
        const auto m = builtin(name);
        const auto layout = WeightLayout::for_model(m);
        for (int u = 0; u < static_cast<int>(layout.units.size()); ++u) {
            const auto w = synthetic_unit(m, layout, u, kSeed);
            std::vector<bool> is_tensor(w.size(), false);
            std::int64_t zeros = 0, non_finite = 0, nonzero_padding = 0;
            for (const auto& t : layout.units[static_cast<std::size_t>(u)].tensors) {
                for (std::int64_t i = t.offset; i < t.offset + t.numel; ++i) {
                    is_tensor[static_cast<std::size_t>(i)] = true;
                    zeros += w[static_cast<std::size_t>(i)] == 0.0f;
                    non_finite += !std::isfinite(w[static_cast<std::size_t>(i)]);
                }
            }
            for (std::size_t i = 0; i < w.size(); ++i) {
                nonzero_padding += !is_tensor[i] && std::bit_cast<std::uint32_t>(w[i]) != 0;
            }
            CHECK(zeros == 0);
            CHECK(non_finite == 0);
            CHECK(nonzero_padding == 0);
        }
    }
}

TEST_CASE("synthetic weights follow GPT-2's initialisation", "[kernels]") {
    const auto m = builtin("gpt2_small");
    const auto layout = WeightLayout::for_model(m);
    const int unit = WeightLayout::block_unit(0);
    const auto w = synthetic_unit(m, layout, unit, kSeed);
    const auto& tensors = layout.units[static_cast<std::size_t>(unit)].tensors;

    struct Moments {
        double mean, std, max_abs_dev;
    };
    const auto moments = [&](int tensor) {
        const auto values = tensor_span(w, tensors[static_cast<std::size_t>(tensor)]);
        const auto n = static_cast<double>(values.size());
        double sum = 0.0, sum_sq = 0.0, max_abs_dev = 0.0;
        for (const float v : values) sum += v;
        const double mean = sum / n;
        for (const float v : values) {
            sum_sq += (v - mean) * (v - mean);
            max_abs_dev = std::max(max_abs_dev, std::abs(v - mean));
        }
        return Moments{mean, std::sqrt(sum_sq / n), max_abs_dev};
    };

    // 2.4M draws: the mean's standard error is 1.3e-5.
    const Moments fc = moments(gpt2::block_tensor::fc_w);
    CHECK(std::abs(fc.mean) < 1e-4);
    CHECK(std::abs(fc.std / 0.02 - 1.0) < 0.005);
    CHECK(fc.max_abs_dev <= 2.0 * std::sqrt(3.0) * 0.02 * 1.001);  // Irwin–Hall(4) is bounded at 2·sqrt(3) sigma

    const double residual_std = 0.02 / std::sqrt(2.0 * m.n_layer);
    CHECK(std::abs(moments(gpt2::block_tensor::proj_w).std / residual_std - 1.0) < 0.01);
    CHECK(std::abs(moments(gpt2::block_tensor::fc_proj_w).std / residual_std - 1.0) < 0.01);

    const Moments ln = moments(gpt2::block_tensor::ln1_w);
    CHECK(std::abs(ln.mean - 1.0) < 0.005);
    CHECK(std::abs(ln.std / 0.02 - 1.0) < 0.15);
    const Moments bias = moments(gpt2::block_tensor::fc_b);
    CHECK(std::abs(bias.mean) < 0.005);
    CHECK(std::abs(bias.std / 0.02 - 1.0) < 0.1);
}

TEST_CASE("synthetic weights match the golden checksum", "[kernels]") {
    // Hard-coded so that a change of generator, compiler or machine that alters any bit shows
    // up here; a GPU port of fill_synthetic_unit must reproduce the same values.
    const auto m = builtin("tiny");
    const auto layout = WeightLayout::for_model(m);
    std::uint64_t h = 0xCBF29CE484222325ull;
    for (int u = 0; u < static_cast<int>(layout.units.size()); ++u) h = fnv1a(synthetic_unit(m, layout, u, kSeed), h);
    CHECK(h == 0xFE066639ABC36118ull);

    const auto emb = synthetic_unit(m, layout, 0, kSeed);
    CHECK(std::bit_cast<std::uint32_t>(emb[0]) == 0xBD1942ACu);  // wte[0][0] = -0.0374
    CHECK(std::bit_cast<std::uint32_t>(emb[1]) == 0x3C9D2593u);  // wte[0][1] = 0.0192
}

TEST_CASE("convert_to_f32 widens each dtype's bits exactly", "[kernels]") {
    // 1.5 is 0x3FC0 in bf16 and 0x3E00 in fp16; -0.25 is 0xBE80 and 0xB400.
    const std::uint16_t bf16[] = {0x3FC0, 0xBE80};
    const std::uint16_t fp16[] = {0x3E00, 0xB400};
    const float fp32[] = {1.5f, -0.25f};
    const std::vector<float> want = {1.5f, -0.25f};
    CHECK(convert_to_f32(bf16, 2, DType::bf16) == want);
    CHECK(convert_to_f32(fp16, 2, DType::fp16) == want);
    CHECK(convert_to_f32(fp32, 2, DType::fp32) == want);
}

TEST_CASE("fill_synthetic_unit_as writes what fill_synthetic_unit then convert_from_f32 would, padding included",
          "[kernels]") {
    const auto m = builtin("tiny_odd");  // padded units
    const auto layout = WeightLayout::for_model(m);
    for (const DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
        for (int u = 0; u < static_cast<int>(layout.units.size()); ++u) {
            INFO(enum_name(dtype) << " unit " << u);
            const auto values = synthetic_unit(m, layout, u, kSeed);
            std::vector<std::byte> want(values.size() * dtype_size(dtype)), got(want.size(), std::byte{0x5A});
            convert_from_f32(values, dtype, want.data());
            fill_synthetic_unit_as(m, layout, u, kSeed, dtype, got.data());
            CHECK(want == got);
        }
    }
    std::vector<float> any(8);
    CHECK_THROWS_WITH(fill_synthetic_unit_as(m, layout, -1, kSeed, DType::fp32, any.data()),
                      Catch::Matchers::ContainsSubstring("unit -1 is not in the layout"));
}

TEST_CASE("fill_synthetic_unit rejects a wrong buffer or unit", "[kernels]") {
    const auto m = builtin("tiny");
    const auto layout = WeightLayout::for_model(m);
    std::vector<float> too_small(static_cast<std::size_t>(layout.units[0].numel) - 1);
    CHECK_THROWS_AS(fill_synthetic_unit(m, layout, 0, kSeed, too_small), std::invalid_argument);
    std::vector<float> any(16);
    CHECK_THROWS_AS(fill_synthetic_unit(m, layout, static_cast<int>(layout.units.size()), kSeed, any),
                    std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// dtype conversions

namespace {

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }
float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }

// Every finite non-negative value h of a 16-bit format and the next one up: the midpoint must
// round to the even one, and the floats just either side of it to the nearer one. This covers
// normal, subnormal and overflow rounding exhaustively. `overflow` is the value the rounding
// rule puts one step above the largest finite (2^16 for fp16, 2^128 for bf16).
template <class ToBits, class ToFloat>
void check_rounding_around_midpoints(ToBits to_bits, ToFloat to_float, std::uint16_t max_finite, double overflow) {
    for (std::uint32_t h = 0; h <= max_finite; ++h) {
        const double lo = to_float(static_cast<std::uint16_t>(h));
        const double hi = h == max_finite ? overflow : to_float(static_cast<std::uint16_t>(h + 1));
        const double mid = (lo + hi) / 2.0;
        const auto mid_f = static_cast<float>(mid);  // exact: a midpoint needs one bit more than the format
        const auto even = static_cast<std::uint16_t>((h & 1u) == 0 ? h : h + 1);
        const auto below = std::nextafter(mid_f, 0.0f);
        const auto above = std::nextafter(mid_f, std::numeric_limits<float>::infinity());
        if (static_cast<double>(mid_f) != mid || to_bits(mid_f) != even || to_bits(below) != h ||
            to_bits(above) != h + 1 || to_bits(-mid_f) != (even | 0x8000u) || to_bits(-below) != (h | 0x8000u)) {
            FAIL("rounding is wrong around the midpoint above 0x" << std::hex << h);
        }
    }
}

bool bf16_is_nan(std::uint16_t b) { return (b & 0x7F80u) == 0x7F80u && (b & 0x007Fu) != 0; }
bool fp16_is_nan(std::uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x03FFu) != 0; }

}  // namespace

TEST_CASE("bf16 conversion of known values", "[kernels]") {
    CHECK(float_to_bf16_bits(1.0f) == 0x3F80);
    CHECK(float_to_bf16_bits(-2.5f) == 0xC020);
    CHECK(float_to_bf16_bits(0.0f) == 0x0000);
    CHECK(float_to_bf16_bits(-0.0f) == 0x8000);
    CHECK(float_to_bf16_bits(65504.0f) == 0x4780);               // 0x477FE000: more than half up, rounds to 65536
    CHECK(float_to_bf16_bits(from_bits(0x3F808000)) == 0x3F80);  // tie, even stays
    CHECK(float_to_bf16_bits(from_bits(0x3F818000)) == 0x3F82);  // tie, odd rounds up
    CHECK(float_to_bf16_bits(from_bits(0x3F808001)) == 0x3F81);  // just above the tie
    CHECK(float_to_bf16_bits(from_bits(0x00000001)) == 0x0000);  // smallest fp32 subnormal
    CHECK(float_to_bf16_bits(from_bits(0x00018000)) == 0x0002);  // subnormal tie, odd rounds up
    CHECK(float_to_bf16_bits(from_bits(0x007F8000)) == 0x0080);  // subnormal carries into the smallest normal
    CHECK(float_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7F80);  // overflows to Inf
    CHECK(float_to_bf16_bits(std::numeric_limits<float>::infinity()) == 0x7F80);
    CHECK(float_to_bf16_bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
    CHECK(float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()) == 0x7FC0);
    CHECK(float_to_bf16_bits(from_bits(0xFFC00000)) == 0xFFC0);
    CHECK(bf16_is_nan(float_to_bf16_bits(from_bits(0x7F800001))));  // payload only in the dropped half

    CHECK(bf16_bits_to_float(0x3F80) == 1.0f);
    CHECK(bf16_bits_to_float(0xC020) == -2.5f);
    CHECK(bf16_bits_to_float(0x0001) == from_bits(0x00010000));
    CHECK(std::isinf(bf16_bits_to_float(0xFF80)));
    CHECK(std::isnan(bf16_bits_to_float(0x7FC0)));
}

TEST_CASE("fp16 conversion of known values", "[kernels]") {
    CHECK(float_to_fp16_bits(1.0f) == 0x3C00);
    CHECK(float_to_fp16_bits(-2.5f) == 0xC100);
    CHECK(float_to_fp16_bits(0.0f) == 0x0000);
    CHECK(float_to_fp16_bits(-0.0f) == 0x8000);
    CHECK(float_to_fp16_bits(65504.0f) == 0x7BFF);
    CHECK(float_to_fp16_bits(65519.0f) == 0x7BFF);
    CHECK(float_to_fp16_bits(65520.0f) == 0x7C00);  // tie between 65504 (odd) and 2^16: Inf
    CHECK(float_to_fp16_bits(-1e6f) == 0xFC00);
    CHECK(float_to_fp16_bits(std::ldexp(1.0f, -14)) == 0x0400);     // smallest normal
    CHECK(float_to_fp16_bits(std::ldexp(1.0f, -24)) == 0x0001);     // smallest subnormal
    CHECK(float_to_fp16_bits(std::ldexp(1023.0f, -24)) == 0x03FF);  // largest subnormal
    CHECK(float_to_fp16_bits(std::ldexp(1.0f, -25)) == 0x0000);     // tie with 0: even
    CHECK(float_to_fp16_bits(std::ldexp(3.0f, -26)) == 0x0001);     // 0.75 of the smallest subnormal
    CHECK(float_to_fp16_bits(std::ldexp(3.0f, -25)) == 0x0002);     // tie between 1 and 2 subnormal steps
    CHECK(float_to_fp16_bits(std::ldexp(1.0f, -30)) == 0x0000);
    CHECK(float_to_fp16_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);  // tie, even stays
    CHECK(float_to_fp16_bits(1.0f + std::ldexp(3.0f, -11)) == 0x3C02);  // tie, odd rounds up
    CHECK(float_to_fp16_bits(std::nextafter(2.0f, 0.0f)) == 0x4000);    // carries into the exponent
    CHECK(float_to_fp16_bits(std::numeric_limits<float>::infinity()) == 0x7C00);
    CHECK(float_to_fp16_bits(-std::numeric_limits<float>::infinity()) == 0xFC00);
    CHECK(float_to_fp16_bits(std::numeric_limits<float>::quiet_NaN()) == 0x7E00);
    CHECK(float_to_fp16_bits(from_bits(0xFFC00000)) == 0xFE00);
    CHECK(fp16_is_nan(float_to_fp16_bits(from_bits(0x7F800001))));  // payload only in dropped bits

    CHECK(fp16_bits_to_float(0x3C00) == 1.0f);
    CHECK(fp16_bits_to_float(0xC100) == -2.5f);
    CHECK(fp16_bits_to_float(0x7BFF) == 65504.0f);
    CHECK(fp16_bits_to_float(0x0001) == std::ldexp(1.0f, -24));
    CHECK(fp16_bits_to_float(0x0200) == std::ldexp(1.0f, -15));
    CHECK(fp16_bits_to_float(0x83FF) == -std::ldexp(1023.0f, -24));
    CHECK(bits(fp16_bits_to_float(0x8000)) == 0x80000000u);
    CHECK(fp16_bits_to_float(0xFC00) == -std::numeric_limits<float>::infinity());
    CHECK(std::isnan(fp16_bits_to_float(0x7E00)));
}

TEST_CASE("bf16 and fp16: every value round-trips, every midpoint rounds to even", "[kernels]") {
    int bf16_mismatches = 0, fp16_mismatches = 0;
    for (std::uint32_t i = 0; i <= 0xFFFF; ++i) {
        const auto h = static_cast<std::uint16_t>(i);
        const std::uint16_t b = float_to_bf16_bits(bf16_bits_to_float(h));
        const std::uint16_t f = float_to_fp16_bits(fp16_bits_to_float(h));
        bf16_mismatches += bf16_is_nan(h) ? !bf16_is_nan(b) : b != h;
        fp16_mismatches += fp16_is_nan(h) ? !fp16_is_nan(f) : f != h;
    }
    CHECK(bf16_mismatches == 0);
    CHECK(fp16_mismatches == 0);
    check_rounding_around_midpoints(float_to_bf16_bits, bf16_bits_to_float, 0x7F7F, std::ldexp(1.0, 128));
    check_rounding_around_midpoints(float_to_fp16_bits, fp16_bits_to_float, 0x7BFF, 65536.0);
}

// ---------------------------------------------------------------------------------------------
// CPU operations (cpu_ops.hpp), on inputs small enough to work out by hand. They are the
// references of the GPU kernels, so each is pinned here on its own, not only through the forward.

namespace {

using Catch::Matchers::WithinAbs;

// ln 3 as a float: a softmax over scores {0, ln 3} is {1/4, 3/4}.
const float kLn3 = std::log(3.0f);

void check_all_near(const std::vector<float>& got, const std::vector<float>& want, double tolerance) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i);
        CHECK_THAT(got[i], WithinAbs(want[i], tolerance));
    }
}

}  // namespace

TEST_CASE("cpu::embedding adds the token's row of wte and the position's row of wpe", "[kernels]") {
    // wte [3 tokens, 2], wpe [3 positions, 2]; batch 2 × seq 2, so position 2 is never read and
    // sample 1 reads positions 0 and 1 again (not 2 and 3).
    const std::vector<float> wte = {1, 2, 10, 20, 100, 200};
    const std::vector<float> wpe = {0.5f, 0.25f, 3, 4, 999, 999};
    const std::vector<std::int32_t> tokens = {2, 0, 1, 1};
    std::vector<float> x(8, -1.0f);
    cpu::embedding(x.data(), tokens.data(), wte.data(), wpe.data(), 2, 2, 2);
    CHECK(x == std::vector<float>{100.5f, 200.25f, 4, 6, 10.5f, 20.25f, 13, 24});
}

TEST_CASE("cpu::embedding_backward adds each row's gradient to its token's and its position's rows", "[kernels]") {
    // batch 2 × seq 2, tokens {2, 0, 2, 1}: token 2 gets rows 0 and 2, token 1 row 3, token 0 row 1;
    // position 0 gets rows 0 and 2, position 1 rows 1 and 3. wpe's row 2 (never read) stays.
    const std::vector<float> dx = {1, 2, 10, 20, 100, 200, 1000, 2000};
    const std::vector<std::int32_t> tokens = {2, 0, 2, 1};
    std::vector<float> dwte = {0.5f, 0.5f, 0.25f, 0.25f, 3, 3}, dwpe = {1, 1, 2, 2, 7, 7};
    cpu::embedding_backward(dwte.data(), dwpe.data(), dx.data(), tokens.data(), 2, 2, 2);
    CHECK(dwte == std::vector<float>{10.5f, 20.5f, 1000.25f, 2000.25f, 104, 205});
    CHECK(dwpe == std::vector<float>{102, 203, 1012, 2022, 7, 7});
}

TEST_CASE("without a position table cpu::embedding copies the token's row, and its backward adds to that row alone",
          "[kernels]") {
    const std::vector<float> table = {1, 2, 10, 20, 100, 200};
    const std::vector<std::int32_t> tokens = {2, 0, 2, 1};
    std::vector<float> x(8, -1.0f);
    cpu::embedding(x.data(), tokens.data(), table.data(), nullptr, 2, 2, 2);
    CHECK(x == std::vector<float>{100, 200, 1, 2, 100, 200, 10, 20});
    const std::vector<float> dx = {1, 2, 10, 20, 100, 200, 1000, 2000};
    std::vector<float> dtable = {0.5f, 0.5f, 0.25f, 0.25f, 3, 3};
    cpu::embedding_backward(dtable.data(), nullptr, dx.data(), tokens.data(), 2, 2, 2);
    CHECK(dtable == std::vector<float>{10.5f, 20.5f, 1000.25f, 2000.25f, 104, 205});
}

TEST_CASE("cpu::embedding's positions form reads each row's own position of wpe", "[kernels]") {
    // A ragged batch packed: sequence 0 at positions 0, 1, 2, sequence 1 at 0 again. wpe's row 3
    // is never read.
    const std::vector<float> wte = {1, 2, 10, 20, 100, 200};
    const std::vector<float> wpe = {0.5f, 0.25f, 3, 4, 7, 8, 999, 999};
    const std::vector<std::int32_t> tokens = {2, 0, 1, 1}, positions = {0, 1, 2, 0};
    std::vector<float> x(8, -1.0f);
    cpu::embedding(x.data(), tokens.data(), wte.data(), wpe.data(), positions.data(), 4, 2);
    CHECK(x == std::vector<float>{100.5f, 200.25f, 4, 6, 17, 28, 10.5f, 20.25f});
}

TEST_CASE("cpu::bias_backward adds the column sums", "[kernels]") {
    // dout [3, 2]: column sums 1 + 3 + 5 = 9 and 2 + 4 + 6 = 12, onto dbias {0.5, −1}.
    const std::vector<float> dout = {1, 2, 3, 4, 5, 6};
    std::vector<float> dbias = {0.5f, -1.0f};
    cpu::bias_backward(dbias.data(), dout.data(), 3, 2);
    CHECK(dbias == std::vector<float>{9.5f, 11.0f});
}

TEST_CASE("cpu::layernorm normalises each row with the biased variance, then scales and shifts", "[kernels]") {
    // Row [1, 2, 3, 4]: mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25, so with
    // eps 1e-5 the row becomes (x − 2.5) / sqrt(1.25001).
    const std::vector<float> ones(4, 1.0f), zeros(4, 0.0f);
    const std::vector<float> row = {1, 2, 3, 4};
    std::vector<float> out(4);
    cpu::layernorm(out.data(), row.data(), ones.data(), zeros.data(), 1, 4, 1e-5f);
    check_all_near(out, {-1.3416354f, -0.4472118f, 0.4472118f, 1.3416354f}, 1e-6);

    // eps 1 makes the square roots exact: row 0 has var + eps = 2.25 (rstd 2/3), row 1
    // [10, 10, 10, 14] mean 11, variance (1 + 1 + 1 + 9) / 4 = 3, var + eps = 4 (rstd 1/2).
    // Normalised: [−1, −1/3, 1/3, 1] and [−0.5, −0.5, −0.5, 1.5]; then · w + b.
    const std::vector<float> two_rows = {1, 2, 3, 4, 10, 10, 10, 14};
    const std::vector<float> w = {2, 1, 1, 0.5f};
    const std::vector<float> b = {0, 1, -1, 0.25f};
    std::vector<float> out2(8);
    cpu::layernorm(out2.data(), two_rows.data(), w.data(), b.data(), 2, 4, 1.0f);
    check_all_near(out2, {-2, 1 - 1.0f / 3, -1 + 1.0f / 3, 0.75f, -1, 0.5f, -1.5f, 1.0f}, 1e-6);
}

TEST_CASE("cpu::linear is x · wᵀ plus the bias, or without one", "[kernels]") {
    // x [2, 3], w [2 outputs, 3 inputs] as nn.Linear.
    const std::vector<float> x = {1, 2, 3, 4, 5, 6};
    const std::vector<float> w = {1, 0, -1, 0.5f, 0.5f, 0.5f};
    const std::vector<float> bias = {10, -10};
    std::vector<float> out(4, -1.0f);
    cpu::linear(out.data(), x.data(), w.data(), bias.data(), 2, 3, 2);
    CHECK(out == std::vector<float>{8, -7, 8, -2.5f});
    cpu::linear(out.data(), x.data(), w.data(), nullptr, 2, 3, 2);
    CHECK(out == std::vector<float>{-2, 3, -2, 7.5f});
}

TEST_CASE("cpu::add_bias adds the bias to every row, cpu::residual_add adds element-wise", "[kernels]") {
    std::vector<float> y = {1, 2, 3, 4, 5, 6};
    const std::vector<float> bias = {10, 20, 30};
    cpu::add_bias(y.data(), bias.data(), 2, 3);
    CHECK(y == std::vector<float>{11, 22, 33, 14, 25, 36});

    std::vector<float> x = {1, 2, 3};
    const std::vector<float> sub_layer = {0.5f, -2, 10};
    cpu::residual_add(x.data(), sub_layer.data(), 3);
    CHECK(x == std::vector<float>{1.5f, 0, 13});
}

TEST_CASE("cpu::gelu_tanh is GPT-2's tanh approximation, not the erf GELU", "[kernels]") {
    // 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) in double. The erf GELU differs by 1.5e-4 at
    // 1 and 4e-4 at −3, far beyond the tolerance.
    std::vector<float> x = {0, 1, -1, 2, -3, 10, -10};
    cpu::gelu_tanh(x.data(), static_cast<std::int64_t>(x.size()));
    check_all_near(x, {0.0f, 0.8411920f, -0.1588080f, 1.9545977f, -0.0036374f, 10.0f, 0.0f}, 1e-6);
    CHECK(x[0] == 0.0f);
}

TEST_CASE("cpu::causal_softmax: row i is a softmax over columns 0..i and exact zeros after", "[kernels]") {
    // Two (batch, head) blocks of seq 3: rows 3..5 are positions 0..2 again.
    const float big = 1000.0f;  // exp(1000) overflows: only the max subtraction keeps it finite
    std::vector<float> scores = {
        5,   100,            100,             // position 0: the masked 100s must not count
        0,   kLn3,           7,               // {1, 3} / 4
        big, big,            big,             // equal scores
        -7,  1,              2,               // position 0 again
        2,   2,              -50,             // {1, 1} / 2
        0,   std::log(2.0f), std::log(5.0f),  // {1, 2, 5} / 8
    };
    cpu::causal_softmax(scores.data(), 6, 3);
    const float third = 1.0f / 3;
    check_all_near(scores,
                   {1, 0, 0, 0.25f, 0.75f, 0, third, third, third, 1, 0, 0, 0.5f, 0.5f, 0, 0.125f, 0.25f, 0.625f},
                   1e-6);
    for (const std::size_t masked : {1u, 2u, 5u, 10u, 11u, 14u}) {
        INFO("element " << masked);
        CHECK(scores[masked] == 0.0f);  // exact, so ·V over the full row adds nothing for them
    }
}

TEST_CASE("cpu::attention: per head, causal softmax(q·kᵀ / sqrt(hd)) · v", "[kernels]") {
    // batch 2, seq 2, c 8, 2 heads of hd 4 (scale 1/2). qkv row (b, t) is [q | k | v], 8 each.
    const int batch = 2, seq = 2, c = 8, n_head = 2, hd = 4;
    std::vector<float> qkv(static_cast<std::size_t>(batch * seq * 3 * c), 0.0f);
    enum Part { q = 0, k = 1, v = 2 };
    const auto at = [&](int b, int t, Part part, int h, int i) -> float& {
        return qkv[static_cast<std::size_t>((b * seq + t) * 3 * c + part * c + h * hd + i)];
    };
    // Sample 0, head 0: position 1 scores {0, 0.5·(ln 3 + ln 3)} = {0, ln 3} → weights {1/4, 3/4}.
    // Position 0's query would favour position 1 (score 5) if the mask let it.
    at(0, 0, q, 0, 0) = 5;
    at(0, 0, q, 0, 1) = 5;
    at(0, 1, q, 0, 0) = kLn3;
    at(0, 1, q, 0, 1) = kLn3;
    at(0, 1, k, 0, 0) = 1;
    at(0, 1, k, 0, 1) = 1;
    // Sample 1, head 1: position 1 scores {0, 0.5 · 2 ln 3} → {1/4, 3/4}. Every other
    // (sample, head) has zero q and k: equal scores, weights {1/2, 1/2}.
    at(1, 1, q, 1, 0) = 2 * kLn3;
    at(1, 1, k, 1, 0) = 1;
    for (int b = 0; b < batch; ++b) {
        for (int t = 0; t < seq; ++t) {
            for (int col = 0; col < c; ++col) {
                at(b, t, v, col / hd, col % hd) = static_cast<float>(100 * b + 10 * t + col + 1);
            }
        }
    }

    std::vector<float> out(static_cast<std::size_t>(batch * seq * c), -1.0f);
    std::vector<float> scores(static_cast<std::size_t>(seq * seq));
    cpu::attention(out.data(), scores.data(), qkv.data(), batch, seq, c, n_head);

    std::vector<float> want(out.size());
    for (int b = 0; b < batch; ++b) {
        for (int col = 0; col < c; ++col) {
            const int h = col / hd;
            const float w1 = (b == 0 && h == 0) || (b == 1 && h == 1) ? 0.75f : 0.5f;
            const float v0 = at(b, 0, v, h, col % hd), v1 = at(b, 1, v, h, col % hd);
            want[static_cast<std::size_t>((b * seq + 0) * c + col)] = v0;  // position 0 sees only itself
            want[static_cast<std::size_t>((b * seq + 1) * c + col)] = (1 - w1) * v0 + w1 * v1;
        }
    }
    check_all_near(out, want, 1e-4);
}

// The forward and its backward (dqkv from dout: qkv's layout, c the other way).
TEST_CASE("cpu attention and its backward over a ragged batch: each sequence over its own rows as if alone, padding "
          "rows zeros", "[kernels]") {
    // q heads 4, kv heads 2 (grouped) and 4 (GPT-2's attention); head_dim 6.
    const std::vector<int> lengths = {3, 1, 6};
    const int n_head = 4, hd = 6, c = n_head * hd;
    for (const int kv : {2, 4}) {
        const int ld = (n_head + 2 * kv) * hd;
        for (const BatchShape& shape : {BatchShape::ragged(lengths, Packing::packed),
                                        BatchShape::ragged(lengths, Packing::padded, 7)}) {
            INFO("kv heads " << kv << ", " << enum_name(shape.packing()) << ", stride " << shape.stride());
            const auto rows = static_cast<std::size_t>(shape.rows());
            std::vector<float> qkv(rows * static_cast<std::size_t>(ld)), dout(rows * static_cast<std::size_t>(c));
            for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>((i * 37u) % 101u) / 50.0f - 1.0f;
            for (std::size_t i = 0; i < dout.size(); ++i) dout[i] = static_cast<float>((i * 53u) % 89u) / 44.0f - 1.0f;
            std::vector<float> out(rows * static_cast<std::size_t>(c), -1.0f), dqkv(qkv.size(), 99.0f);
            const auto square = static_cast<std::size_t>(shape.stride() * shape.stride());
            std::vector<float> scores(square), grad(square);
            if (kv == n_head) {
                cpu::attention(out.data(), scores.data(), qkv.data(), shape, c, n_head);
                cpu::attention_backward(dqkv.data(), scores.data(), grad.data(), dout.data(), qkv.data(), shape, c,
                                        n_head);
            } else {
                cpu::grouped_attention(out.data(), scores.data(), qkv.data(), shape, n_head, kv, hd);
                cpu::grouped_attention_backward(dqkv.data(), scores.data(), grad.data(), dout.data(), qkv.data(), shape,
                                                n_head, kv, hd);
            }

            for (int b = 0; b < shape.batch(); ++b) {
                const int n = shape.length(b);
                const auto first = static_cast<std::size_t>(shape.first_row(b));
                std::vector<float> alone(static_cast<std::size_t>(n * c)), alone_dqkv(static_cast<std::size_t>(n * ld));
                std::vector<float> alone_scores(static_cast<std::size_t>(n * n)), alone_grad(alone_scores.size());
                const float* own = qkv.data() + first * static_cast<std::size_t>(ld);
                const float* own_dout = dout.data() + first * static_cast<std::size_t>(c);
                if (kv == n_head) {
                    cpu::attention(alone.data(), alone_scores.data(), own, 1, n, c, n_head);
                    cpu::attention_backward(alone_dqkv.data(), alone_scores.data(), alone_grad.data(), own_dout, own, 1,
                                            n, c, n_head);
                } else {
                    cpu::grouped_attention(alone.data(), alone_scores.data(), own, 1, n, n_head, kv, hd);
                    cpu::grouped_attention_backward(alone_dqkv.data(), alone_scores.data(), alone_grad.data(), own_dout,
                                                    own, 1, n, n_head, kv, hd);
                }
                // The same products on the same rows: the same bits.
                const std::size_t at = first * static_cast<std::size_t>(c);
                CHECK(bit_identical(std::span<const float>(out).subspan(at, alone.size()), alone));
                const std::size_t dat = first * static_cast<std::size_t>(ld);
                CHECK(bit_identical(std::span<const float>(dqkv).subspan(dat, alone_dqkv.size()), alone_dqkv));
            }
            for (std::size_t r = 0; r < rows; ++r) {
                if (shape.is_real(static_cast<std::int64_t>(r))) continue;
                const float* row = out.data() + r * static_cast<std::size_t>(c);
                CHECK(std::all_of(row, row + c, [](float x) { return x == 0.0f; }));
                const float* drow = dqkv.data() + r * static_cast<std::size_t>(ld);
                CHECK(std::all_of(drow, drow + ld, [](float x) { return x == 0.0f; }));
            }
        }
    }
    // Dropout's masks are numbered by the rows of a rectangular batch.
    const BatchShape ragged = BatchShape::ragged({2, 1}, Packing::padded);
    std::vector<float> qkv(2 * 2 * 3 * 4, 0.5f), out(2 * 2 * 4), scores(4);
    const Dropout dropout = Dropout{0.1f, 1}.for_shape(2, 8);
    CHECK_THROWS_AS(cpu::attention(out.data(), scores.data(), qkv.data(), ragged, 4, 2, dropout, 0),
                    std::invalid_argument);
    std::vector<float> dqkv(qkv.size()), grad(scores.size());
    CHECK_THROWS_AS(cpu::attention_backward(dqkv.data(), scores.data(), grad.data(), out.data(), qkv.data(), ragged, 4,
                                            2, dropout, 0),
                    std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// CPU forward

TEST_CASE("CpuForward matches the float64 reference", "[kernels]") {
    for (const ModelConfig& model : {builtin("tiny"), builtin("tiny_odd"), builtin("tiny_llama"),
                                     builtin("tiny_llama_odd"), llama_hd80()}) {
        for (const int seq : {16, 13, 1}) {
            const int batch = 2;
            INFO(model.name << " batch " << batch << " seq " << seq);
            const auto& m = model;
            const auto layout = WeightLayout::for_model(m);
            RecordingSource source(m, layout, kSeed);
            const auto tokens = make_tokens(m, batch, seq);

            const auto got = run_cpu(m, source, tokens, batch, seq);
            const auto want = reference_forward(m, layout, source.pointers(), tokens, batch, seq);
            REQUIRE(got.size() == want.size());
            double max_err = 0.0, max_ref = 0.0;
            for (std::size_t i = 0; i < got.size(); ++i) {
                max_err = std::max(max_err, std::abs(static_cast<double>(got[i]) - want[i]));
                max_ref = std::max(max_ref, std::abs(want[i]));
            }
            INFO("max |cpu - reference| = " << max_err << ", max |reference| = " << max_ref);
            CHECK(max_ref > 0.1);  // the logits are not degenerate
            CHECK(max_err / max_ref < 1e-5);
        }
    }
}

TEST_CASE("dropout masks: the kept fraction and the scale, the same on every path, independent of the run's length",
          "[kernels]") {
    const Dropout d = Dropout{0.1f, 7}.for_shape(64, 128);
    std::size_t dropped = 0, n = 0;
    for (std::uint64_t e = 0; e < 100000; ++e, ++n) {
        const float f = d.factor(3, e);
        CHECK((f == 0.0f || f == 1.0f / 0.9f));
        dropped += f == 0.0f;
    }
    CHECK(std::abs(static_cast<double>(dropped) / static_cast<double>(n) - 0.1) < 0.005);
    CHECK(Dropout{}.factor(3, 5) == 1.0f);  // p = 0: nothing dropped
    // Other sites and seeds draw other masks.
    std::size_t same_site = 0, same_seed = 0;
    const Dropout other_seed = Dropout{0.5f, 8}.for_shape(64, 128), half = Dropout{0.5f, 7}.for_shape(64, 128);
    for (std::uint64_t e = 0; e < 1000; ++e) {
        same_site += (half.factor(3, e) == 0.0f) == (half.factor(4, e) == 0.0f);
        same_seed += (half.factor(3, e) == 0.0f) == (other_seed.factor(3, e) == 0.0f);
    }
    CHECK(same_site < 600);
    CHECK(same_seed < 600);
    // Row 1 of a run of seq 5 is (batch 0, position 1), as row 1 of a run of seq 64 is.
    const Dropout short_run = Dropout{0.1f, 7}.for_shape(5, 128);
    for (std::uint64_t i = 0; i < 50; ++i) CHECK(short_run.row_factor(2, 1, 50, i) == d.row_factor(2, 1, 50, i));
    // Row 6 of seq 5 is (batch 1, position 1); in seq 64 that is row 65.
    for (std::uint64_t i = 0; i < 50; ++i) CHECK(short_run.row_factor(2, 6, 50, i) == d.row_factor(2, 65, 50, i));
}

TEST_CASE("CpuForward with dropout matches the float64 reference with the same masks", "[kernels]") {
    const Dropout dropout{0.2f, 11};
    for (const char* name : {"tiny", "tiny_odd"}) {
        const int batch = 2, seq = 13;
        INFO(name);
        const auto m = builtin(name);
        const auto layout = WeightLayout::for_model(m);
        RecordingSource source(m, layout, kSeed);
        const auto tokens = make_tokens(m, batch, seq);
        CpuForward forward(m, layout, BatchShape::rectangular(batch, seq), dropout);
        std::vector<float> got(tokens.size() * static_cast<std::size_t>(m.vocab_size));
        forward.run(source, tokens, got);
        const auto want = reference_forward(m, layout, source.pointers(), tokens, batch, seq, dropout);
        double max_err = 0.0, max_ref = 0.0;
        for (std::size_t i = 0; i < got.size(); ++i) {
            max_err = std::max(max_err, std::abs(static_cast<double>(got[i]) - want[i]));
            max_ref = std::max(max_ref, std::abs(want[i]));
        }
        CHECK(max_ref > 0.1);
        CHECK(max_err / max_ref < 1e-5);
        // Dropout changed the output: the masks were applied.
        const auto without = run_cpu(m, source, tokens, batch, seq);
        double moved = 0.0;
        for (std::size_t i = 0; i < got.size(); ++i) moved = std::max(moved, std::abs(double(got[i]) - without[i]));
        CHECK(moved > 0.01 * max_ref);
        // A run over the first 5 positions of sample 0 draws the same masks: by causality its
        // logits are the whole run's first 5 positions.
        const std::vector<std::int32_t> prefix(tokens.begin(), tokens.begin() + 5);
        CpuForward short_forward(m, layout, BatchShape::rectangular(1, 5), dropout);
        std::vector<float> short_logits(5 * static_cast<std::size_t>(m.vocab_size));
        short_forward.run(source, prefix, short_logits);
        double prefix_err = 0.0;
        for (int t = 0; t < 5; ++t) {
            const auto a = logit_row(got, m, seq, 0, t), b = logit_row(short_logits, m, 5, 0, t);
            for (std::size_t v = 0; v < a.size(); ++v) prefix_err = std::max(prefix_err, std::abs(double(a[v]) - b[v]));
        }
        CHECK(prefix_err < 1e-4 * max_ref);
    }
}

TEST_CASE("CpuForward acquires and releases every unit once, in order", "[kernels]") {
    const auto m = builtin("tiny_odd");
    const auto layout = WeightLayout::for_model(m);
    RecordingSource source(m, layout, kSeed);
    const int batch = 1, seq = 5;
    const auto tokens = make_tokens(m, batch, seq);
    CpuForward forward(m, layout, BatchShape::rectangular(batch, seq));
    std::vector<float> logits(tokens.size() * static_cast<std::size_t>(m.vocab_size));

    std::vector<RecordingSource::Event> one_run;
    for (int u = 0; u < static_cast<int>(layout.units.size()); ++u) {
        one_run.push_back({true, u});
        one_run.push_back({false, u});
    }
    forward.run(source, tokens, logits);
    CHECK(source.events == one_run);
    forward.run(source, tokens, logits);
    CHECK(source.events.size() == 2 * one_run.size());
}

TEST_CASE("CpuForward is causal", "[kernels]") {
    const auto m = builtin("tiny_odd");
    const auto layout = WeightLayout::for_model(m);
    RecordingSource source(m, layout, kSeed);
    const int batch = 2, seq = 13, changed = 6;
    auto tokens = make_tokens(m, batch, seq);
    const auto before = run_cpu(m, source, tokens, batch, seq);
    tokens[static_cast<std::size_t>(changed)] = (tokens[static_cast<std::size_t>(changed)] + 1) % m.vocab_size;
    const auto after = run_cpu(m, source, tokens, batch, seq);

    for (int t = 0; t < seq; ++t) {
        INFO("position " << t);
        const bool same = bit_identical(logit_row(before, m, seq, 0, t), logit_row(after, m, seq, 0, t));
        CHECK(same == (t < changed));
        CHECK(bit_identical(logit_row(before, m, seq, 1, t), logit_row(after, m, seq, 1, t)));
    }
}

TEST_CASE("CpuForward keeps the samples of a batch independent", "[kernels]") {
    const auto m = builtin("tiny");
    const auto layout = WeightLayout::for_model(m);
    RecordingSource source(m, layout, kSeed);
    const int batch = 2, seq = 13;
    auto tokens = make_tokens(m, batch, seq);
    const auto before = run_cpu(m, source, tokens, batch, seq);
    const auto other = make_tokens(m, batch, seq, 1);
    std::copy(other.begin() + seq, other.end(), tokens.begin() + seq);  // replace all of sample 1
    const auto after = run_cpu(m, source, tokens, batch, seq);

    const auto sample = [&](const std::vector<float>& l, int b) {
        const auto n = static_cast<std::size_t>(seq) * static_cast<std::size_t>(m.vocab_size);
        return std::span<const float>(l).subspan(static_cast<std::size_t>(b) * n, n);
    };
    CHECK(bit_identical(sample(before, 0), sample(after, 0)));
    CHECK_FALSE(bit_identical(sample(before, 1), sample(after, 1)));
}

namespace {

// One id per row of `shape`: sequence b's own ids in its rows, 0 in a padding row.
std::vector<std::int32_t> ragged_tokens(const BatchShape& shape, const std::vector<std::vector<std::int32_t>>& own) {
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(shape.rows()), 0);
    for (int b = 0; b < shape.batch(); ++b) {
        const auto& ids = own[static_cast<std::size_t>(b)];
        std::copy(ids.begin(), ids.end(), tokens.begin() + static_cast<std::ptrdiff_t>(shape.first_row(b)));
    }
    return tokens;
}

// Sequence b's rows of logits [rows, vocab].
template <class T>
std::span<const T> sequence_rows(const std::vector<T>& logits, const ModelConfig& m, const BatchShape& shape, int b) {
    const auto v = static_cast<std::size_t>(m.vocab_size);
    return std::span<const T>(logits).subspan(static_cast<std::size_t>(shape.first_row(b)) * v,
                                              static_cast<std::size_t>(shape.length(b)) * v);
}

// max |got − want| / max |want|.
template <class T>
double relative_error(std::span<const float> got, std::span<const T> want) {
    REQUIRE(got.size() == want.size());
    double err = 0.0, top = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        err = std::max(err, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
        top = std::max(top, std::abs(static_cast<double>(want[i])));
    }
    return err / top;
}

const std::vector<int> kRaggedLengths = {5, 1, 17, 9};
// GPT-2's and LLaMA's, each with an even and an odd head dimension.
const std::vector<const char*> kRaggedModels = {"tiny", "tiny_odd", "tiny_llama", "tiny_llama_odd"};

}  // namespace

// The expected values are each sequence run alone (a rectangular batch of one) and the float64
// reference of each sequence alone, both within 1e-5 of the largest logit: the ragged batch's
// products have other row counts (a sequence of 1 alone is a matrix-vector product), so equal
// bits are not promised. Padded and packed agree within the same bound.
TEST_CASE("CpuForward over a ragged batch, padded or packed, gives each sequence its logits alone", "[kernels]") {
    for (const char* name : kRaggedModels) {
        const ModelConfig m = builtin(name);
        const WeightLayout layout = WeightLayout::for_model(m);
        RecordingSource source(m, layout, kSeed);
        std::vector<std::vector<std::int32_t>> own;
        std::vector<std::vector<float>> alone;
        for (std::size_t b = 0; b < kRaggedLengths.size(); ++b) {
            own.push_back(make_tokens(m, 1, kRaggedLengths[b], static_cast<std::uint32_t>(b + 1)));
            alone.push_back(run_cpu(m, source, own.back(), 1, kRaggedLengths[b]));
        }
        std::vector<std::vector<float>> real_rows;
        for (const BatchShape& shape : {BatchShape::ragged(kRaggedLengths, Packing::packed),
                                        BatchShape::ragged(kRaggedLengths, Packing::padded),
                                        BatchShape::ragged(kRaggedLengths, Packing::padded, 20)}) {
            INFO(name << ", " << enum_name(shape.packing()) << ", stride " << shape.stride());
            const auto tokens = ragged_tokens(shape, own);
            const auto logits = run_shape(m, source, tokens, shape);
            const auto reference = reference_forward(m, layout, source.pointers(), tokens, shape);
            std::vector<float> real;
            for (int b = 0; b < shape.batch(); ++b) {
                INFO("sequence " << b << " of length " << shape.length(b));
                const auto rows = sequence_rows(logits, m, shape, b);
                CHECK(relative_error(rows, std::span<const float>(alone[static_cast<std::size_t>(b)])) < 1e-5);
                CHECK(relative_error(rows, sequence_rows(reference, m, shape, b)) < 1e-5);
                real.insert(real.end(), rows.begin(), rows.end());
            }
            std::size_t nonfinite = 0;
            for (const float v : logits) nonfinite += !std::isfinite(v);
            CHECK(nonfinite == 0);  // the padding rows' logits included
            real_rows.push_back(std::move(real));
        }
        CHECK(relative_error(std::span<const float>(real_rows[1]), std::span<const float>(real_rows[0])) < 1e-5);
        CHECK(relative_error(std::span<const float>(real_rows[2]), std::span<const float>(real_rows[0])) < 1e-5);
    }
}

// A packed or padded shape whose lengths are all alike is the rectangular batch: the same calls
// on the same rows, so the same bits, dropout's masks included.
TEST_CASE("CpuForward gives a rectangular batch the same bits whether its shape says rectangular, padded or packed",
          "[kernels]") {
    for (const char* name : kRaggedModels) {
        INFO(name);
        const ModelConfig m = builtin(name);
        const WeightLayout layout = WeightLayout::for_model(m);
        RecordingSource source(m, layout, kSeed);
        const auto tokens = make_tokens(m, 3, 9);
        const Dropout dropout = compute_of(m.family).dropout ? Dropout{0.2f, 5} : Dropout{};
        for (const Dropout& d : {Dropout{}, dropout}) {
            const auto rectangular = run_shape(m, source, tokens, BatchShape::rectangular(3, 9), d);
            for (const Packing packing : {Packing::packed, Packing::padded}) {
                INFO(enum_name(packing) << (d.active() ? ", dropout" : ""));
                const BatchShape alike = BatchShape::ragged({9, 9, 9}, packing);
                CHECK(bit_identical(rectangular, run_shape(m, source, tokens, alike, d)));
            }
        }
    }
}

TEST_CASE("reference_forward of a ragged batch: each sequence alone in its rows, padding rows zeros", "[kernels]") {
    for (const char* name : {"tiny", "tiny_llama"}) {
        INFO(name);
        const ModelConfig m = builtin(name);
        const WeightLayout layout = WeightLayout::for_model(m);
        RecordingSource source(m, layout, kSeed);
        const BatchShape shape = BatchShape::ragged(kRaggedLengths, Packing::padded);
        std::vector<std::vector<std::int32_t>> own;
        for (std::size_t b = 0; b < kRaggedLengths.size(); ++b)
            own.push_back(make_tokens(m, 1, kRaggedLengths[b], static_cast<std::uint32_t>(b + 1)));
        const auto tokens = ragged_tokens(shape, own);
        const auto logits = reference_forward(m, layout, source.pointers(), tokens, shape);
        REQUIRE(logits.size() == static_cast<std::size_t>(shape.rows() * m.vocab_size));
        double macs = 0.0;
        for (int b = 0; b < shape.batch(); ++b) {
            const auto& ids = own[static_cast<std::size_t>(b)];
            const auto alone = reference_forward(m, layout, source.pointers(), ids, 1, shape.length(b));
            const auto rows = sequence_rows(logits, m, shape, b);
            CHECK(std::equal(rows.begin(), rows.end(), alone.begin(), alone.end()));
            macs += reference_forward_macs(m, 1, shape.length(b));
        }
        const auto v = static_cast<std::size_t>(m.vocab_size);
        for (std::int64_t r = 0; r < shape.rows(); ++r) {
            if (shape.is_real(r)) continue;
            const auto row = std::span<const double>(logits).subspan(static_cast<std::size_t>(r) * v, v);
            CHECK(std::all_of(row.begin(), row.end(), [](double x) { return x == 0.0; }));
        }
        CHECK(reference_forward_macs(m, shape) == macs);
        CHECK(reference_forward_macs(m, BatchShape::ragged(kRaggedLengths, Packing::packed)) == macs);
        const auto short_of_one = std::span(tokens).first(tokens.size() - 1);
        CHECK_THROWS_AS(reference_forward(m, layout, source.pointers(), short_of_one, shape), std::invalid_argument);
    }
    const ModelConfig m = builtin("tiny");
    const WeightLayout layout = WeightLayout::for_model(m);
    RecordingSource source(m, layout, kSeed);
    const std::vector<std::int32_t> tokens(6, 1);
    CHECK_THROWS_AS(reference_forward(m, layout, source.pointers(), tokens, BatchShape::ragged({2, 4}, Packing::packed),
                                      Dropout{0.1f, 3}),
                    std::invalid_argument);
}

TEST_CASE("CpuForward's activation buffers follow the shape's rows: a packed batch holds fewer than its padded one",
          "[kernels]") {
    for (const char* name : kRaggedModels) {
        INFO(name);
        const ModelConfig m = builtin(name);
        const WeightLayout layout = WeightLayout::for_model(m);
        const BatchShape packed = BatchShape::ragged(kRaggedLengths, Packing::packed);
        const BatchShape padded = BatchShape::ragged(kRaggedLengths, Packing::padded);
        const std::int64_t packed_bytes = CpuForward(m, layout, packed).activation_bytes();
        const std::int64_t padded_bytes = CpuForward(m, layout, padded).activation_bytes();
        CHECK(packed_bytes < padded_bytes);
        CHECK(packed_bytes == compute_of(m.family).cpu_activation_bytes(m, packed));
        CHECK(padded_bytes == compute_of(m.family).cpu_activation_bytes(m, padded));
        CHECK(packed_bytes == CpuForward::activation_bytes_for(m, packed));
        if (m.family != ModelFamily::gpt2) continue;
        // GPT-2: 11 · n_embd floats per row (32 packed, 4 × 17 padded), one head's [17, 17] scores.
        const std::int64_t c = m.n_embd;
        CHECK(packed_bytes == static_cast<std::int64_t>(sizeof(float)) * (32 * 11 * c + 17 * 17));
        CHECK(padded_bytes == static_cast<std::int64_t>(sizeof(float)) * (68 * 11 * c + 17 * 17));
    }
}

TEST_CASE("CpuForward reports the activation buffers it holds", "[kernels]") {
    const auto m = builtin("tiny");
    const int batch = 2, seq = 16;
    const CpuForward forward(m, WeightLayout::for_model(m), BatchShape::rectangular(batch, seq));
    // x, ln, att, y: [bt, c]; qkv: [bt, 3c]; fc: [bt, 4c]; scores: [seq, seq].
    const std::int64_t bt = batch * seq, c = m.n_embd;
    CHECK(forward.activation_bytes() == static_cast<std::int64_t>(sizeof(float)) * (bt * c * 11 + seq * seq));
    // What the memory estimator asks for without making a forward is what one holds.
    CHECK(CpuForward::activation_bytes_for(m, BatchShape::rectangular(batch, seq)) == forward.activation_bytes());
    const BatchShape seven = BatchShape::rectangular(1, 7);
    CHECK(CpuForward::activation_bytes_for(m, seven) ==
          CpuForward(m, WeightLayout::for_model(m), seven).activation_bytes());
}

TEST_CASE("CpuForward and reference_forward reject bad arguments", "[kernels]") {
    const auto m = builtin("tiny");
    const auto layout = WeightLayout::for_model(m);
    RecordingSource source(m, layout, kSeed);
    const int batch = 2, seq = 8;

    CHECK_THROWS_AS(CpuForward(m, layout, BatchShape::rectangular(batch, m.max_positions + 1)), std::invalid_argument);
    CHECK_THROWS_AS(CpuForward(m, WeightLayout::for_model(builtin("tiny_odd")), BatchShape::rectangular(batch, seq)),
                    std::invalid_argument);
    CHECK_NOTHROW(CpuForward(m, layout, BatchShape::rectangular(batch, m.max_positions)));

    CpuForward forward(m, layout, BatchShape::rectangular(batch, seq));
    std::vector<float> logits(static_cast<std::size_t>(batch * seq * m.vocab_size));
    auto tokens = make_tokens(m, batch, seq);
    SECTION("token id equal to the vocabulary size") { tokens[3] = m.vocab_size; }
    SECTION("negative token id") { tokens[0] = -1; }
    CHECK_THROWS_AS(forward.run(source, tokens, logits), std::invalid_argument);
    CHECK_THROWS_AS(reference_forward(m, layout, source.pointers(), tokens, batch, seq), std::invalid_argument);
    CHECK(source.events.empty());  // rejected before any weight is touched

    const auto good = make_tokens(m, batch, seq);
    CHECK_THROWS_AS(forward.run(source, std::span(good).first(good.size() - 1), logits), std::invalid_argument);
    CHECK_THROWS_AS(forward.run(source, good, std::span(logits).first(logits.size() - 1)), std::invalid_argument);
    const auto too_long = make_tokens(m, 1, m.max_positions + 1);
    CHECK_THROWS_AS(reference_forward(m, layout, source.pointers(), too_long, 1, m.max_positions + 1),
                    std::invalid_argument);
    CHECK(source.events.empty());
}

TEST_CASE("reference_forward_macs counts the forward's multiply-adds", "[kernels]") {
    // tiny: 2 layers, c 64, vocab 512; batch 2 × seq 3 = 6 tokens. Linear layers 12c² per token
    // and layer: 6 · 2 · 12 · 4096 = 589,824. Attention: position t scores and mixes t + 1
    // positions, hd per head each, so 2 · (1 + 2 + 3) · c per sample and layer: 2 · 2 · 12 · 64 =
    // 3,072. lm_head: 6 · 512 · 64 = 196,608. Flops would be twice the sum.
    CHECK(reference_forward_macs(builtin("tiny"), 2, 3) == 589'824.0 + 3'072.0 + 196'608.0);

    const auto m = builtin("gpt2_small");
    const double weights = 12.0 * m.n_layer * 768.0 * 768.0 + 50257.0 * 768.0;
    CHECK(reference_forward_macs(m, 1, 1) == weights + 2.0 * m.n_layer * 768.0);
    CHECK(reference_forward_macs(m, 2, 64) == 2 * reference_forward_macs(m, 1, 64));
}

namespace {

// A GPT-2 model small enough to count activation_layout's bytes by hand.
ModelConfig layout_model() {
    ModelConfig m;
    m.name = "layout";
    m.n_layer = 1;
    m.n_embd = 8;
    m.n_head = 2;
    m.vocab_size = 10;
    m.max_positions = 4;
    return m;
}

}  // namespace

TEST_CASE("activation_layout carves the GPU forward's buffers, 256-byte aligned", "[kernels]") {
    const ModelConfig m = layout_model();
    // batch 2 × seq 3 = 6 rows, fp32. Each buffer's end rounded up to the next multiple of 256:
    // x 192 B, ln 192, qkv 576, scores 2·2·3·3 = 36 floats = 144, att 192, fc 768, y 192,
    // logits 240, tokens 24.
    const ActivationLayout l = activation_layout(m, DType::fp32, 2, 3, true);
    CHECK(l.x == 0);
    CHECK(l.ln == 256);
    CHECK(l.qkv == 512);
    CHECK(l.scores == 1280);   // 512 + 576 = 1088 → 1280
    CHECK(l.scores_bytes == 144);
    CHECK(l.att == 1536);      // 1280 + 144 = 1424 → 1536
    CHECK(l.fc == 1792);       // 1536 + 192 = 1728 → 1792
    CHECK(l.y == 2560);        // 1792 + 768 = 2560
    CHECK(l.logits == 2816);   // 2560 + 192 = 2752 → 2816
    CHECK(l.tokens == 3072);   // 2816 + 240 = 3056 → 3072
    CHECK(l.total_bytes == 3328);  // 3072 + 24 = 3096 → 3328

    // flash_attention keeps no scores: the buffer is empty and the rest moves up.
    const ActivationLayout flash = activation_layout(m, DType::fp32, 2, 3, false);
    CHECK(flash.scores_bytes == 0);
    CHECK(flash.att == 1280);
    CHECK(flash.total_bytes == 3072);  // att 1280, fc 1536, y 2304, logits 2560, tokens 2816 (+ 24 → 3072)

    // fp16 halves every buffer but the int32 tokens: x 96 B, ln 96, qkv 288 (512 + 288 = 800 → 1024),
    // scores 72 (→ 1280), att 96 (→ 1536), fc 384 (1920 → 2048), y 96 (→ 2304), logits 120 (→ 2560),
    // tokens 24 (→ 2816).
    const ActivationLayout half = activation_layout(m, DType::fp16, 2, 3, true);
    CHECK(half.qkv == 512);
    CHECK(half.scores == 1024);
    CHECK(half.scores_bytes == 72);
    CHECK(half.fc == 1536);
    CHECK(half.tokens == 2560);
    CHECK(half.total_bytes == 2816);

    // Sizes past 64 bits are an error, not a wrapped number.
    ModelConfig huge = m;
    huge.vocab_size = 1 << 30;
    CHECK_THROWS_AS(activation_layout(huge, DType::fp32, 1 << 30, 1 << 30, true), std::overflow_error);
}

TEST_CASE("activation_layout of a ragged batch: buffers of its rows, its positions and its spans", "[kernels]") {
    const ModelConfig m = layout_model();
    // Lengths 1 and 3 packed: 4 rows, fp32, flash attention (no scores). x 128 B, ln 128, qkv 384
    // (512 + 384 = 896 → 1024), att 128 (→ 1280), fc 512 (→ 1792), y 128 (→ 2048), logits 160
    // (→ 2304), tokens 16 (→ 2560), then what a rectangular batch needs not: positions 16 (→ 2816)
    // and the spans, offsets and lengths of 2 sequences, 16 (→ 3072).
    const BatchShape packed = BatchShape::ragged({1, 3}, Packing::packed);
    const ActivationLayout l = activation_layout(m, DType::fp32, packed, false);
    CHECK(l.ln == 256);
    CHECK(l.qkv == 512);
    CHECK(l.att == 1024);
    CHECK(l.fc == 1280);
    CHECK(l.y == 1792);
    CHECK(l.logits == 2048);
    CHECK(l.tokens == 2304);
    CHECK(l.positions == 2560);
    CHECK(l.frequencies == 0);
    CHECK(l.spans == 2816);
    CHECK(l.total_bytes == 3072);

    // Padded, the same 2 × 3 rows as the rectangular batch (whose flash layout ends with its
    // tokens at 2816, 24 B): then positions 24 (3072 → 3328) and spans 16 (→ 3584).
    const ActivationLayout padded = activation_layout(m, DType::fp32, BatchShape::ragged({1, 3}, Packing::padded), false);
    CHECK(padded.tokens == 2816);
    CHECK(padded.positions == 3072);
    CHECK(padded.spans == 3328);
    CHECK(padded.total_bytes == 3584);
    // Scores, where a variant keeps them, are [batch, H, stride, stride]: 2·2·3·3 floats = 144 B.
    CHECK(activation_layout(m, DType::fp32, BatchShape::ragged({1, 3}, Packing::padded), true).scores_bytes == 144);

    // Equal lengths are a rectangular batch, packed or padded: its layout exactly, no positions
    // or spans for GPT-2.
    const ActivationLayout rectangular = activation_layout(m, DType::fp32, 2, 3, false);
    for (const Packing packing : {Packing::packed, Packing::padded}) {
        const ActivationLayout same = activation_layout(m, DType::fp32, BatchShape::ragged({3, 3}, packing), false);
        CHECK(same.positions == 0);
        CHECK(same.spans == 0);
        CHECK(same.tokens == rectangular.tokens);
        CHECK(same.total_bytes == rectangular.total_bytes);
    }
}

TEST_CASE("ItemProgress: a wait returns once its item is done, in whatever order, at once with no worker running, "
          "and rethrows the worker's error",
          "[kernels][train]") {
    ItemProgress progress;
    progress.wait_for(5);  // none in flight
    CHECK(progress.is_done(5));
    progress.begin(4);
    CHECK_FALSE(progress.is_done(0));
    std::atomic<int> written{0};  // bit u: the worker wrote item u
    // From the top down, as the host update takes units while the backward makes their gradients.
    std::thread update([&] {
        for (int u = 3; u >= 0; --u) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            written |= 1 << u;
            progress.done(u);
        }
        progress.end();
    });
    // Each wait sees its item written before it returns, whichever order they come in.
    for (int u = 0; u < 4; ++u) {
        progress.wait_for(u);
        CHECK((written.load() & (1 << u)) != 0);
    }
    update.join();
    progress.wait_for(100);  // ended: nothing left to wait for

    progress.begin(4);
    progress.done(2);
    CHECK(progress.is_done(2));
    CHECK_FALSE(progress.is_done(1));
    std::thread failing([&] { progress.end(std::make_exception_ptr(std::runtime_error("host update failed"))); });
    CHECK_THROWS_WITH(progress.wait_for(3), "host update failed");
    failing.join();
    // A new worker forgets the old one's error and items.
    progress.begin(2);
    CHECK_FALSE(progress.is_done(0));
    progress.end();
    progress.wait_for(0);
}

TEST_CASE("parallel_for hands every index to exactly one call, over ranges around its chunk, on at most one thread "
          "per core",
          "[kernels]") {
    constexpr std::int64_t chunk = std::int64_t{1} << 18;
    for (const std::int64_t n : {std::int64_t{0}, std::int64_t{1}, chunk - 1, chunk, chunk + 1, 7 * chunk + 13}) {
        std::vector<std::atomic<int>> visits(static_cast<std::size_t>(n));
        std::mutex mutex;
        std::vector<std::thread::id> threads;
        // Catch2's assertions are not thread-safe: the workers only record what the test checks after.
        std::atomic<bool> empty_range{false};
        parallel_for(n, [&](std::int64_t begin, std::int64_t end) {
            if (begin >= end) empty_range = true;
            for (std::int64_t i = begin; i < end; ++i) ++visits[static_cast<std::size_t>(i)];
            const std::lock_guard lock(mutex);
            threads.push_back(std::this_thread::get_id());
        });
        INFO("n " << n);
        CHECK_FALSE(empty_range);
        CHECK(std::all_of(visits.begin(), visits.end(), [](const std::atomic<int>& v) { return v.load() == 1; }));
        std::sort(threads.begin(), threads.end());
        const auto distinct = std::unique(threads.begin(), threads.end()) - threads.begin();
        CHECK(distinct <= std::max<std::int64_t>(1, std::thread::hardware_concurrency()));
    }
}
