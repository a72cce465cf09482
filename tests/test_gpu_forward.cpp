// The GPU forward (kernels/compute/gpu_forward.hpp) against the CPU forward on the same weights, in
// fp32, fp16 and bf16. Tests tagged [gpu] need a CUDA device; ctest runs them only under the
// `gpu` label, so reaching one without a device is an error, not a skip.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "kernels/compute/cpu_forward.hpp"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/compute/gpu_forward.hpp"
#include "kernels/model/activation_layout.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/layer_source.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "kernels/model/weight_layout.hpp"
#include "gpu_test_support.hpp"
#include "test_models.hpp"

using namespace sweetspot;
using sweetspot::test::require_gpu;

namespace {

constexpr std::uint64_t kSeed = 1234;
constexpr DType kAllDtypes[] = {DType::fp32, DType::fp16, DType::bf16};

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

using test::builtin;
using test::llama_hd80;

// Head dimension 130, as gpt3_13b_seed: neither a power of two nor a multiple of 32.
ModelConfig head130_model() { return {"head130", 2, 520, 4, 1000, 128, 1e-5f}; }

class Stream {
public:
    Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
    ~Stream() { (void)cudaStreamDestroy(stream_); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return stream_; }

private:
    cudaStream_t stream_ = nullptr;
};

// The synthetic fp32 weights of every unit.
std::vector<std::vector<float>> synthetic_units(const ModelConfig& m, const WeightLayout& layout) {
    std::vector<std::vector<float>> units;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        units.emplace_back(as_size(layout.units[u].numel));
        fill_synthetic_unit(m, layout, static_cast<int>(u), kSeed, units.back());
    }
    return units;
}

// The weights as a cell of `dtype` holds them (bytes, uploaded to the GPU) and the same values
// back in fp32 (what the CPU reference computes with), so both forwards see identical weights.
struct DtypeUnits {
    std::vector<std::vector<std::byte>> bytes;
    std::vector<std::vector<float>> rounded;
};

DtypeUnits in_dtype(const std::vector<std::vector<float>>& units, DType dtype) {
    DtypeUnits out;
    for (const auto& unit : units) {
        std::vector<std::byte> bytes(unit.size() * dtype_size(dtype));
        convert_from_f32(unit, dtype, bytes.data());
        std::vector<float> rounded(unit.size());
        if (dtype == DType::fp32) {
            rounded = unit;
        } else {
            for (std::size_t i = 0; i < unit.size(); ++i) {
                std::uint16_t bits;
                std::memcpy(&bits, bytes.data() + 2 * i, 2);
                rounded[i] = dtype == DType::fp16 ? fp16_bits_to_float(bits) : bf16_bits_to_float(bits);
            }
        }
        out.bytes.push_back(std::move(bytes));
        out.rounded.push_back(std::move(rounded));
    }
    return out;
}

struct Event {
    bool acquire;
    int unit;
    bool operator==(const Event&) const = default;
};

// One run's expected protocol: acquire u, release u, for every unit in order.
std::vector<Event> expected_events(const WeightLayout& layout) {
    std::vector<Event> events;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        events.push_back({true, static_cast<int>(u)});
        events.push_back({false, static_cast<int>(u)});
    }
    return events;
}

// Host fp32 units for the CPU reference.
class HostSource final : public LayerSource {
public:
    explicit HostSource(const std::vector<std::vector<float>>& units) : units_(units) {}
    const void* acquire(int unit) override { return units_.at(as_size(unit)).data(); }
    void release(int) override {}

private:
    const std::vector<std::vector<float>>& units_;
};

// Each unit in its own cudaMalloc buffer, uploaded once; logs every call.
class DeviceSource final : public LayerSource {
public:
    explicit DeviceSource(const DtypeUnits& units) {
        for (const auto& bytes : units.bytes) {
            void* p = nullptr;
            CUDA_CHECK(cudaMalloc(&p, bytes.size()));
            buffers_.push_back(p);
            CUDA_CHECK(cudaMemcpy(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
        }
    }
    ~DeviceSource() override {
        for (void* p : buffers_) (void)cudaFree(p);
    }
    DeviceSource(const DeviceSource&) = delete;
    DeviceSource& operator=(const DeviceSource&) = delete;

    const void* acquire(int unit) override {
        events.push_back({true, unit});
        return buffers_.at(as_size(unit));
    }
    void release(int unit) override { events.push_back({false, unit}); }

    std::vector<Event> events;

private:
    std::vector<void*> buffers_;
};

// Deterministic token ids spread over the whole vocabulary.
std::vector<std::int32_t> make_tokens(const ModelConfig& m, int batch, int seq) {
    std::vector<std::int32_t> tokens(as_size(batch) * as_size(seq));
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = static_cast<std::int32_t>((i * 7919u + 17u) % static_cast<std::uint32_t>(m.vocab_size));
    }
    return tokens;
}

std::vector<float> run_cpu(const ModelConfig& m, const WeightLayout& layout, const std::vector<std::vector<float>>& units,
                           const std::vector<std::int32_t>& tokens, int batch, int seq, const Dropout& dropout = {}) {
    HostSource source(units);
    CpuForward forward(m, layout, BatchShape::rectangular(batch, seq), dropout);
    std::vector<float> logits(tokens.size() * as_size(m.vocab_size));
    forward.run(source, tokens, logits);
    return logits;
}

// CpuForward over any BatchShape: logits [rows, vocab].
std::vector<float> run_cpu(const ModelConfig& m, const WeightLayout& layout, const std::vector<std::vector<float>>& units,
                           const std::vector<std::int32_t>& tokens, const BatchShape& shape) {
    HostSource source(units);
    CpuForward forward(m, layout, shape);
    std::vector<float> logits(tokens.size() * as_size(m.vocab_size));
    forward.run(source, tokens, logits);
    return logits;
}

// The logits of the shape's real rows, in row order (a padded batch's padding rows left out).
std::vector<float> real_rows(std::span<const float> logits, const BatchShape& shape, int vocab) {
    std::vector<float> out;
    for (std::int64_t r = 0; r < shape.rows(); ++r) {
        if (!shape.is_real(r)) continue;
        const auto row = logits.subspan(as_size(r * vocab), as_size(vocab));
        out.insert(out.end(), row.begin(), row.end());
    }
    return out;
}

// One forward of `tokens` over `source`: the logits.
std::vector<float> forward_logits(GpuForward& forward, LayerSource& source, const std::vector<std::int32_t>& tokens) {
    forward.set_tokens(tokens);
    forward.run(source);
    return forward.logits_to_host();
}

bool all_finite(std::span<const float> v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

// max|got − want| / max|want|; +inf when the sizes differ or any value is NaN or infinite, so a
// NaN can never pass a `< tolerance` check.
double relative_error(std::span<const float> got, std::span<const float> want) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    if (got.size() != want.size() || want.empty()) return inf;
    double max_diff = 0.0;
    double max_ref = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i]) || !std::isfinite(want[i])) return inf;
        max_diff = std::max(max_diff, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
        max_ref = std::max(max_ref, std::abs(static_cast<double>(want[i])));
    }
    return max_ref > 0.0 ? max_diff / max_ref : inf;
}

bool all_zero(std::span<const float> v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
}

bool bit_identical(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

double tolerance(DType dtype) {
    switch (dtype) {
        case DType::fp32: return 1e-4;  // true fp32 GEMMs; only the summation order differs
        case DType::fp16: return 2e-2;
        case DType::bf16: return 5e-2;
    }
    return 0.0;
}

// Runs GpuForward twice on `m` in each of `dtypes` and checks it against CpuForward on the same
// (dtype-rounded) weights: error below `tolerance_of(dtype)`, bit-identical reruns, non-zero
// logits, and one acquire/release per unit per run, in order.
template <class Tolerance>
void check_against_cpu(const ModelConfig& m, int batch, int seq, const GpuForwardOptions& options,
                       std::span<const DType> dtypes, Tolerance tolerance_of) {
    const WeightLayout layout = WeightLayout::for_model(m);
    const auto units = synthetic_units(m, layout);
    const auto tokens = make_tokens(m, batch, seq);
    const std::vector<Event> one_run = expected_events(layout);
    Stream stream;

    for (const DType dtype : dtypes) {
        INFO("model " << m.name << ", dtype " << enum_name(dtype) << ", batch " << batch << ", seq " << seq
                      << (options.fp32_gemm == Fp32Gemm::tf32 ? ", tf32" : "") << (options.managed_activations ? ", managed activations" : ""));
        const DtypeUnits weights = in_dtype(units, dtype);
        const std::vector<float> want = run_cpu(m, layout, weights.rounded, tokens, batch, seq);

        DeviceSource source(weights);
        GpuForward forward(m, layout, dtype, BatchShape::rectangular(batch, seq), stream.get(), options);
        forward.set_tokens(tokens);

        forward.run(source);
        const std::vector<float> first = forward.logits_to_host();
        CHECK(source.events == one_run);
        source.events.clear();
        forward.run(source);
        const std::vector<float> second = forward.logits_to_host();
        CHECK(source.events == one_run);

        const double err = relative_error(first, want);
        const double tol = tolerance_of(dtype);
        WARN(m.name << " " << enum_name(dtype) << (options.fp32_gemm == Fp32Gemm::tf32 ? " tf32" : "")
                    << (options.managed_activations ? " managed" : "") << ": relative error max|gpu-cpu|/max|cpu| = "
                    << err << " (tolerance " << tol << ")");
        CHECK(err < tol);
        CHECK_FALSE(all_zero(first));
        CHECK(bit_identical(first, second));

        const std::int64_t esize = static_cast<std::int64_t>(dtype_size(dtype));
        const std::int64_t bt = static_cast<std::int64_t>(batch) * seq;
        // x, ln, att and y of n_embd, q | k | v, the MLP's inputs and the logits per token; the
        // scores unless the attention is flash.
        const std::int64_t qkv_width = (std::int64_t{m.n_head} + 2 * m.kv_heads()) * m.head_dim();
        const std::int64_t mlp = std::int64_t{m.ffn_width()} * (m.family == ModelFamily::llama ? 2 : 1);
        const std::int64_t scores = options.variant.has(Fusion::flash_attention)
                                        ? 0
                                        : static_cast<std::int64_t>(batch) * m.n_head * seq * seq;
        const std::int64_t at_least =
            (bt * (4 * std::int64_t{m.n_embd} + qkv_width + mlp + m.vocab_size) + scores) * esize;
        CHECK(forward.activation_bytes() >= at_least);
        CHECK(forward.workspace_bytes() > 0);
    }
}

void check_against_cpu(const ModelConfig& m, int batch, int seq) {
    check_against_cpu(m, batch, seq, GpuForwardOptions{}, kAllDtypes, tolerance);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Needs no device: every argument is validated before the first CUDA call.

TEST_CASE("GpuForward rejects bad shapes before touching the GPU", "[kernels]") {
    const ModelConfig m = builtin("tiny");
    const WeightLayout layout = WeightLayout::for_model(m);
    const GpuForwardOptions options;
    const auto make = [&](const ModelConfig& model, const WeightLayout& l, int batch, int seq) {
        GpuForward forward(model, l, DType::fp32, BatchShape::rectangular(batch, seq), nullptr, options);
    };
    CHECK_THROWS_AS(make(m, layout, 2, m.max_positions + 1), std::invalid_argument);
    CHECK_THROWS_AS(make(m, layout, 2, 0), std::invalid_argument);
    CHECK_THROWS_AS(make(m, layout, 0, 8), std::invalid_argument);
    CHECK_THROWS_AS(make(m, WeightLayout::for_model(builtin("tiny_odd")), 2, 8), std::invalid_argument);
    ModelConfig broken = m;
    broken.n_head = 5;  // 64 is not divisible by 5
    CHECK_THROWS_AS(make(broken, layout, 2, 8), std::invalid_argument);
}

TEST_CASE("GpuForward runs ragged batches with flash attention only, and without dropout, refused before touching "
          "the GPU",
          "[kernels]") {
    using Catch::Matchers::ContainsSubstring;
    const BatchShape packed = BatchShape::ragged({5, 1, 17, 9}, Packing::packed);
    const BatchShape padded = BatchShape::ragged({5, 1, 17, 9}, Packing::padded);
    CHECK_FALSE(gpu_forward_runs_ragged(Variant{}));
    CHECK_FALSE(gpu_forward_runs_ragged(Variant{Fusion::softmax, Fusion::proj_epilogue}));
    CHECK(gpu_forward_runs_ragged(Variant{Fusion::flash_attention}));
    CHECK(gpu_forward_runs_ragged(*Variant::parse("all")));
    for (const char* name : {"tiny", "tiny_llama"}) {
        const ModelConfig m = builtin(name);
        const WeightLayout layout = WeightLayout::for_model(m);
        for (const BatchShape& shape : {packed, padded}) {
            INFO(name << " " << enum_name(shape.packing()));
            for (const Variant& variant : {Variant{}, Variant{Fusion::softmax}}) {
                GpuForwardOptions options;
                options.variant = variant;
                CHECK_THROWS_WITH(GpuForward(m, layout, DType::fp32, shape, nullptr, options),
                                  ContainsSubstring("runs ragged batches with the flash_attention fusion only"));
            }
        }
    }
    // GPT-2's dropout masks are numbered by rows of the stride.
    GpuForwardOptions options;
    options.variant = Variant{Fusion::flash_attention};
    options.dropout = Dropout{0.1f, 5};
    CHECK_THROWS_WITH(GpuForward(builtin("tiny"), WeightLayout::for_model(builtin("tiny")), DType::fp32, packed, nullptr,
                                 options),
                      ContainsSubstring("dropout needs a rectangular batch"));
    // A ragged batch is checked as the host forward checks it: no length past max_positions.
    options.dropout = Dropout{};
    const ModelConfig tiny = builtin("tiny");
    CHECK_THROWS_AS(GpuForward(tiny, WeightLayout::for_model(tiny), DType::fp32,
                               BatchShape::ragged({1, tiny.max_positions + 1}, Packing::packed), nullptr, options),
                    std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// Against the CPU forward.

TEST_CASE("GpuForward matches CpuForward: tiny", "[gpu][kernels]") {
    require_gpu();
    check_against_cpu(builtin("tiny"), 2, 33);
}

TEST_CASE("GpuForward matches CpuForward: tiny_odd (head_dim 26)", "[gpu][kernels]") {
    require_gpu();
    check_against_cpu(builtin("tiny_odd"), 2, 33);
}

TEST_CASE("GpuForward matches CpuForward: head_dim 130", "[gpu][kernels]") {
    require_gpu();
    check_against_cpu(head130_model(), 2, 33);
}

TEST_CASE("GpuForward matches CpuForward: LLaMA's blocks, grouped kv heads, every variant it takes",
          "[gpu][kernels]") {
    require_gpu();
    // 4 heads over 2 kv heads of 16; 3 heads over 1 kv head of 48 with Llama 3's scaling; 6
    // heads over 3 kv heads of 80. Every variant llama_compute.cpp declares: the materialised
    // attention (baseline, the fused softmax), flash attention, and o_proj's residual add in its
    // GEMM with each of them.
    const Variant takes[] = {Variant{},
                             Variant{Fusion::softmax},
                             Variant{Fusion::flash_attention},
                             Variant{Fusion::proj_epilogue},
                             Variant{Fusion::softmax, Fusion::proj_epilogue},
                             Variant{Fusion::flash_attention, Fusion::proj_epilogue}};
    for (const Variant& variant : takes) {
        GpuForwardOptions options;
        options.variant = variant;
        for (const ModelConfig& m : {builtin("tiny_llama"), builtin("tiny_llama_odd"), llama_hd80()}) {
            INFO(m.name << " variant " << variant.text());
            for (const int seq : {1, 33}) check_against_cpu(m, 2, seq, options, kAllDtypes, tolerance);
        }
    }
    // Against baseline on the same weights: each fusion enqueues fewer kernels; the fused softmax
    // computes baseline's numbers (the same bits), o_proj's epilogue and flash attention round
    // elsewhere (the same function, other last bits).
    for (const ModelConfig& m : {builtin("tiny_llama_odd"), llama_hd80()}) {
        const WeightLayout layout = WeightLayout::for_model(m);
        const auto units = synthetic_units(m, layout);
        const auto tokens = make_tokens(m, 2, 33);
        Stream stream;
        for (const DType dtype : kAllDtypes) {
            const DtypeUnits weights = in_dtype(units, dtype);
            std::vector<float> baseline_logits;
            int baseline_launches = 0;
            for (const Variant& variant : takes) {
                INFO(m.name << " " << enum_name(dtype) << " variant " << variant.text());
                GpuForwardOptions options;
                options.variant = variant;
                DeviceSource source(weights);
                GpuForward forward(m, layout, dtype, BatchShape::rectangular(2, 33), stream.get(), options);
                forward.set_tokens(tokens);
                forward.run(source);
                const std::vector<float> logits = forward.logits_to_host();
                if (variant.is_baseline()) {
                    baseline_logits = logits;
                    baseline_launches = forward.launches_per_forward();
                    continue;
                }
                CHECK(forward.launches_per_forward() < baseline_launches);
                if (variant == Variant{Fusion::softmax}) CHECK(bit_identical(logits, baseline_logits));
                else CHECK(relative_error(logits, baseline_logits) < tolerance(dtype));
            }
        }
    }
    // GPT-2's LayerNorm and GELU fusions have no LLaMA form.
    for (const Variant& variant : {Variant{Fusion::residual_ln}, Variant{Fusion::mlp_epilogue}}) {
        GpuForwardOptions options;
        options.variant = variant;
        INFO(variant.text());
        CHECK_THROWS_AS(GpuForward(builtin("tiny_llama"), WeightLayout::for_model(builtin("tiny_llama")), DType::fp32,
                                   BatchShape::rectangular(1, 8), nullptr, options),
                        std::invalid_argument);
    }
}

TEST_CASE("GpuForward matches CpuForward: gpt2_small", "[gpu][kernels]") {
    require_gpu();
    check_against_cpu(builtin("gpt2_small"), 2, 64);
}

// A model of two heads of `head_dim`, long enough for seq 777.
ModelConfig two_heads(int head_dim) {
    ModelConfig m = builtin("tiny");
    m.name = "heads of " + std::to_string(head_dim);
    m.n_head = 2;
    m.n_embd = 2 * head_dim;
    m.max_positions = 1024;
    return m;
}

TEST_CASE("the fusions compute baseline's logits: bit for bit without epilogues or flash_attention, within the dtype's "
          "tolerance with them",
          "[gpu][kernels]") {
    require_gpu();
    struct Case {
        ModelConfig model;
        int batch, seq;
    };
    for (const Case& k : {Case{two_heads(25), 2, 1}, Case{two_heads(25), 1, 777}, Case{two_heads(80), 2, 77},
                          Case{builtin("tiny_odd"), 2, 33}}) {
        const WeightLayout layout = WeightLayout::for_model(k.model);
        const auto units = synthetic_units(k.model, layout);
        const auto tokens = make_tokens(k.model, k.batch, k.seq);
        Stream stream;
        for (const DType dtype : kAllDtypes) {
            const DtypeUnits weights = in_dtype(units, dtype);
            for (const float p : {0.0f, 0.1f}) {
                INFO(k.model.name << " " << enum_name(dtype) << " batch " << k.batch << " seq " << k.seq << " dropout " << p);
                const Dropout dropout{p, 5};
                const std::vector<float> want = run_cpu(k.model, layout, weights.rounded, tokens, k.batch, k.seq, dropout);
                std::vector<float> baseline_logits;
                int baseline_launches = 0;
                std::int64_t baseline_activation_bytes = 0;
                for (const char* name : {"baseline", "dropout_ln", "attn_ln", "residual_ln+softmax", "softmax", "ffn_ln",
                                         "proj_epilogue", "residual_ln+softmax+mlp_epilogue+proj_epilogue",
                                         "flash_attention", "attn_proj", "all"}) {
                    INFO("variant " << name);
                    GpuForwardOptions options;
                    options.variant = *Variant::parse(name);
                    options.dropout = dropout;
                    DeviceSource source(weights);
                    GpuForward forward(k.model, layout, dtype, BatchShape::rectangular(k.batch, k.seq), stream.get(), options);
                    forward.set_tokens(tokens);
                    forward.run(source);
                    const std::vector<float> logits = forward.logits_to_host();
                    CHECK_FALSE(all_zero(logits));
                    if (options.variant.is_baseline()) {
                        baseline_logits = logits;
                        baseline_launches = forward.launches_per_forward();
                        baseline_activation_bytes = forward.activation_bytes();
                        CHECK(relative_error(logits, want) < tolerance(dtype));
                        continue;
                    }
                    // Each fusion replaces two or three kernels by one, in every layer.
                    CHECK(forward.launches_per_forward() < baseline_launches);
                    const bool rounds_otherwise = options.variant.has(Fusion::mlp_epilogue) ||
                                                  options.variant.has(Fusion::proj_epilogue) ||
                                                  options.variant.has(Fusion::flash_attention);
                    if (options.variant.has(Fusion::flash_attention)) {
                        // No [seq, seq] scores buffer.
                        CHECK(forward.activation_bytes() <= baseline_activation_bytes - static_cast<std::int64_t>(
                                  k.batch * k.model.n_head * k.seq * k.seq * dtype_size(dtype)));
                    }
                    if (!rounds_otherwise) {
                        CHECK(bit_identical(logits, baseline_logits));
                        continue;
                    }
                    // An epilogue adds the bias (and GELU, the residual) before the one rounding
                    // where baseline rounds after each step, and flash_attention keeps the scores in
                    // fp32: the same function, other last bits.
                    CHECK(relative_error(logits, want) < tolerance(dtype));
                    CHECK(relative_error(logits, baseline_logits) < tolerance(dtype));
                }
            }
        }
    }
}

TEST_CASE("GpuForward with TF32 GEMMs stays close to fp32", "[gpu][kernels]") {
    require_gpu();
    GpuForwardOptions options;
    options.fp32_gemm = Fp32Gemm::tf32;
    const DType fp32[] = {DType::fp32};
    const auto tf32_tolerance = [](DType) { return 5e-3; };
    check_against_cpu(builtin("tiny"), 2, 33, options, fp32, tf32_tolerance);
    check_against_cpu(head130_model(), 2, 33, options, fp32, tf32_tolerance);
}

// Three TF32 products of split operands keep fp32's tolerance, with and without the epilogues
// (whose fused product is the last of the three).
TEST_CASE("GpuForward with split_tf32 GEMMs matches the CPU within fp32's tolerance", "[gpu][kernels]") {
    require_gpu();
    const DType fp32[] = {DType::fp32};
    for (const Variant variant : {Variant{}, Variant{Fusion::mlp_epilogue, Fusion::proj_epilogue, Fusion::residual_ln}}) {
        GpuForwardOptions options;
        options.fp32_gemm = Fp32Gemm::split_tf32;
        options.variant = variant;
        check_against_cpu(builtin("tiny"), 2, 33, options, fp32, tolerance);
        check_against_cpu(head130_model(), 2, 33, options, fp32, tolerance);
    }
}

TEST_CASE("GpuForward with managed activations", "[gpu][kernels]") {
    require_gpu();
    GpuForwardOptions options;
    options.managed_activations = true;
    check_against_cpu(builtin("tiny"), 2, 33, options, kAllDtypes, tolerance);
}

TEST_CASE("unit graphs compute what the kernels launched one by one compute, bit for bit", "[gpu][kernels]") {
    require_gpu();
    const ModelConfig m = builtin("tiny_odd");
    const WeightLayout layout = WeightLayout::for_model(m);
    const int units = static_cast<int>(layout.units.size());
    const auto synthetic = synthetic_units(m, layout);
    const auto tokens = make_tokens(m, 2, 33);
    const std::vector<Event> one_run = expected_events(layout);
    Stream stream;
    for (const DType dtype : kAllDtypes) {
        const DtypeUnits weights = in_dtype(synthetic, dtype);
        // residual_ln hands each block's MLP output to the next unit's kernels: the state a
        // replayed graph must restore on the host.
        for (const char* name : {"baseline", "dropout_ln", "all"}) {
            for (const float p : {0.0f, 0.1f}) {
                INFO(enum_name(dtype) << " variant " << name << " dropout " << p);
                GpuForwardOptions options;
                options.variant = *Variant::parse(name);
                options.dropout = Dropout{p, 5};
                DeviceSource one_by_one_source(weights);
                GpuForward one_by_one(m, layout, dtype, BatchShape::rectangular(2, 33), stream.get(), options);
                one_by_one.set_tokens(tokens);
                one_by_one.run(one_by_one_source);
                const std::vector<float> want = one_by_one.logits_to_host();
                REQUIRE_FALSE(all_zero(want));
                CHECK(one_by_one.graph_captures() == 0);

                options.unit_graphs = true;
                // Two copies of the weights: a forward over the other copy captures every unit
                // again, a forward over the same copy replays.
                DeviceSource first(weights), second(weights);
                GpuForward graphs(m, layout, dtype, BatchShape::rectangular(2, 33), stream.get(), options);
                graphs.set_tokens(tokens);
                const std::pair<DeviceSource*, int> runs[] = {
                    {&first, units}, {&first, units}, {&second, 2 * units}, {&second, 2 * units}, {&first, 3 * units}};
                for (const auto& [source, captures] : runs) {
                    source->events.clear();
                    graphs.run(*source);
                    CHECK(source->events == one_run);
                    CHECK(graphs.graph_captures() == captures);
                    CHECK(graphs.launches_per_forward() == one_by_one.launches_per_forward());
                    CHECK(bit_identical(graphs.logits_to_host(), want));
                }
            }
        }
    }
}

TEST_CASE("GpuForward checks its tokens", "[gpu][kernels]") {
    require_gpu();
    const ModelConfig m = builtin("tiny");
    const WeightLayout layout = WeightLayout::for_model(m);
    Stream stream;
    GpuForward forward(m, layout, DType::fp32, BatchShape::rectangular(2, 8), stream.get(), GpuForwardOptions{});

    const auto units = synthetic_units(m, layout);
    DeviceSource source(in_dtype(units, DType::fp32));
    CHECK_THROWS_AS(forward.run(source), std::logic_error);  // no tokens yet
    CHECK(source.events.empty());

    std::vector<std::int32_t> tokens = make_tokens(m, 2, 8);
    CHECK_THROWS_AS(forward.set_tokens(std::span(tokens).first(15)), std::invalid_argument);
    tokens[5] = m.vocab_size;
    CHECK_THROWS_AS(forward.set_tokens(tokens), std::invalid_argument);
    tokens[5] = -1;
    CHECK_THROWS_AS(forward.set_tokens(tokens), std::invalid_argument);
    tokens[5] = m.vocab_size - 1;
    CHECK_NOTHROW(forward.set_tokens(tokens));
    CHECK_NOTHROW(forward.run(source));
    CHECK_FALSE(all_zero(forward.logits_to_host()));
}

// ---------------------------------------------------------------------------------------------
// Ragged batches (batch_shape.hpp): the flash attention over each sequence's own rows.

namespace {

// The variants of `m`'s family that run ragged batches: flash attention alone, and with every
// other fusion the family's GPU forward builds.
std::vector<Variant> ragged_variants(const ModelConfig& m) {
    if (m.family == ModelFamily::llama) return {Variant{Fusion::flash_attention}, Variant{Fusion::flash_attention, Fusion::proj_epilogue}};
    return {Variant{Fusion::flash_attention}, *Variant::parse("all")};
}

}  // namespace

TEST_CASE("GpuForward over ragged batches, packed and padded, matches CpuForward on every real row", "[gpu][kernels]") {
    require_gpu();
    for (const ModelConfig& m : {builtin("tiny"), builtin("tiny_odd"), builtin("tiny_llama"), builtin("tiny_llama_odd")}) {
        const WeightLayout layout = WeightLayout::for_model(m);
        const auto units = synthetic_units(m, layout);
        const std::vector<Event> one_run = expected_events(layout);
        Stream stream;
        for (const Packing packing : {Packing::packed, Packing::padded}) {
            const BatchShape shape = BatchShape::ragged({5, 1, 17, 9}, packing);
            // 32 rows packed, 4 × 17 = 68 padded (36 of them padding).
            REQUIRE(shape.rows() == (packing == Packing::packed ? 32 : 68));
            const auto tokens = make_tokens(m, 1, static_cast<int>(shape.rows()));
            for (const DType dtype : kAllDtypes) {
                const DtypeUnits weights = in_dtype(units, dtype);
                const std::vector<float> want = real_rows(run_cpu(m, layout, weights.rounded, tokens, shape), shape, m.vocab_size);
                REQUIRE(want.size() == as_size(32 * std::int64_t{m.vocab_size}));
                for (const Variant& variant : ragged_variants(m)) {
                    INFO(m.name << " " << enum_name(packing) << " " << enum_name(dtype) << " variant " << variant.text());
                    GpuForwardOptions options;
                    options.variant = variant;
                    DeviceSource source(weights);
                    GpuForward forward(m, layout, dtype, shape, stream.get(), options);
                    const std::vector<float> first = forward_logits(forward, source, tokens);
                    CHECK(source.events == one_run);
                    REQUIRE(first.size() == as_size(shape.rows() * m.vocab_size));
                    // Padding rows compute what they compute, but nothing that is not finite.
                    CHECK(all_finite(first));
                    CHECK(forward.count_nonfinite_logits() == 0);
                    const double err = relative_error(real_rows(first, shape, m.vocab_size), want);
                    WARN(m.name << " " << enum_name(packing) << " " << enum_name(dtype) << " " << variant.text()
                                << ": relative error on the real rows = " << err << " (tolerance " << tolerance(dtype) << ")");
                    CHECK(err < tolerance(dtype));
                    CHECK_FALSE(all_zero(first));
                    // Buffers of the shape's rows, its positions and spans; no scores.
                    CHECK(forward.activation_bytes() == activation_layout(m, dtype, shape, false).total_bytes);

                    // Again, and as unit graphs: the same bits (the spans and positions are
                    // uploaded once, read by the captured kernels as by the launched ones).
                    forward.run(source);
                    CHECK(bit_identical(forward.logits_to_host(), first));
                    options.unit_graphs = true;
                    GpuForward graphs(m, layout, dtype, shape, stream.get(), options);
                    graphs.set_tokens(tokens);
                    graphs.run(source);  // captures every unit
                    graphs.run(source);  // replays them
                    CHECK(bit_identical(graphs.logits_to_host(), first));
                }
            }
        }
    }
}

TEST_CASE("GpuForward over a rectangular BatchShape computes the same bits packed, padded or rectangular",
          "[gpu][kernels]") {
    require_gpu();
    for (const ModelConfig& m : {builtin("tiny_odd"), builtin("tiny_llama_odd")}) {
        const WeightLayout layout = WeightLayout::for_model(m);
        const auto units = synthetic_units(m, layout);
        const auto tokens = make_tokens(m, 4, 9);
        Stream stream;
        for (const DType dtype : kAllDtypes) {
            const DtypeUnits weights = in_dtype(units, dtype);
            const std::vector<float> want = run_cpu(m, layout, weights.rounded, tokens, 4, 9);
            for (const Variant& variant : {Variant{}, Variant{Fusion::flash_attention}}) {
                INFO(m.name << " " << enum_name(dtype) << " variant " << variant.text());
                GpuForwardOptions options;
                options.variant = variant;
                DeviceSource source(weights);
                GpuForward rectangular(m, layout, dtype, BatchShape::rectangular(4, 9), stream.get(), options);
                const std::vector<float> logits = forward_logits(rectangular, source, tokens);
                CHECK(relative_error(logits, want) < tolerance(dtype));
                for (const Packing packing : {Packing::packed, Packing::padded}) {
                    INFO(enum_name(packing));
                    GpuForward same(m, layout, dtype, BatchShape::ragged({9, 9, 9, 9}, packing), stream.get(), options);
                    CHECK(bit_identical(forward_logits(same, source, tokens), logits));
                    // Nothing more allocated or launched: no positions table, no spans.
                    CHECK(same.activation_bytes() == rectangular.activation_bytes());
                    CHECK(same.launches_per_forward() == rectangular.launches_per_forward());
                }
            }
        }
    }
}
