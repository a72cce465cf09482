// The GPU training step (kernels/compute/gpu_train_step.hpp) on weights a DeviceBackend placed for
// UnitSchedule::training: the first step's loss and every gradient against the float64 reference
// (reference_gradients.hpp) on the same weights rounded to the dtype, the update against the
// float64 AdamW (reference_optimizer.hpp) applied to the GPU's own gradients, many steps
// against CpuTrainStep, every recompute setting (recompute.hpp) against the default's step, the
// inplace_ln and inplace_gelu variants against the same cells without them, and the optimizer on
// the host (host_adamw.hpp, ZeRO-Offload's placement) against the one on the device. GPT-2's
// models first; LLaMA's (tagged [llama]: grouped-query, multi-query and multi-head attention,
// head dimensions 16, 32, 48 and 80) with the variants and settings its step takes, at the end.
// Tests tagged [gpu] need a CUDA device.
//
// Tolerances, each a relative L2 error per tensor (‖gpu − reference‖ / ‖reference‖), so a tensor
// whose gradient is small everywhere is judged by its own size:
// - fp32 (TF32 off): every op computes and stores in fp32; a gradient is the end of a chain of
//   a few dozen ops, each contributing about its dot products' length (at most 4C = 640) times
//   2^-24 in the worst case: 1e-4 leaves room above that.
// - fp16 and bf16: every stored activation and gradient is rounded to the dtype (unit roundoff
//   2^-11 and 2^-8 in relative terms of the stored value). A gradient passes through up to ~40
//   such roundings from the loss to the embedding in these two-layer models; were they all
//   adding in the same direction, 40 · 2^-11 ≈ 0.02 and 40 · 2^-8 ≈ 0.16; they are independent
//   roundings, so their sum grows as √40 ≈ 6.3: 6.3 · 2^-11 ≈ 3e-3, 6.3 · 2^-8 ≈ 2.5e-2. The
//   tolerances are twice those: 6e-3 and 5e-2.
// - The loss, a mean of per-row losses computed in fp32 from the logits in the dtype: the same
//   tolerances.
// - The update, against the reference AdamW on the same gradients: fp32 arithmetic on the same
//   inputs (a few roundings of 2^-24) after the fp32 weight's own rounding, which is discounted
//   as step_check.cpp does: 1e-4.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "backends/backend_registry.hpp"
#include "backends/host_backend.hpp"
#include "backends/residency_plan.hpp"
#include "kernels/compute/cpu_train_step.hpp"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/family_compute.hpp"
#include "kernels/compute/gpu_train_step.hpp"
#include "kernels/compute/reference_gradients.hpp"
#include "kernels/compute/reference_optimizer.hpp"
#include "kernels/compute/train_arena.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "kernels/model/weight_layout.hpp"
#include "gpu_test_support.hpp"
#include "test_models.hpp"

using namespace sweetspot;
using sweetspot::test::require_gpu;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr std::uint64_t kSeed = 4321;

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

// Head dimensions 25 (C 50, 2 heads) and 80 (C 160, 2 heads): neither a power of two, odd
// vocabularies, an untied head (the layout's lm_head is its own tensor); positions for seq 777.
ModelConfig head25_model() { return {"head25", 2, 50, 2, 97, 1024, 1e-5f}; }
ModelConfig head80_model() { return {"head80", 2, 160, 2, 131, 1024, 1e-5f}; }
ModelConfig head128_model() { return {"head128", 2, 256, 2, 131, 1024, 1e-5f}; }

// The synthetic weights of every unit, rounded to `dtype`: what the backend holds, exactly.
std::vector<std::vector<float>> rounded_units(const ModelConfig& m, const WeightLayout& layout, DType dtype) {
    std::vector<std::vector<float>> units;
    for (int u = 0; u < layout.unit_count(); ++u) {
        auto& w = units.emplace_back(as_size(layout.units[as_size(u)].numel));
        fill_synthetic_unit(m, layout, u, kSeed, w);
        round_through_dtype(w, dtype);
    }
    return units;
}

std::vector<std::int32_t> ids(const ModelConfig& m, int n, std::uint32_t salt) {
    std::vector<std::int32_t> out(as_size(n));
    std::uint32_t x = 2463534242u ^ salt;
    for (auto& id : out) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        id = static_cast<std::int32_t>(x % static_cast<std::uint32_t>(m.vocab_size));
    }
    return out;
}

// n values of `dtype` at src (device memory, or host memory where the optimizer's state is kept
// there), as doubles.
std::vector<double> to_host(const void* src, std::int64_t n, DType dtype) {
    std::vector<double> out(as_size(n));
    if (dtype == DType::fp32) {
        std::vector<float> f(as_size(n));
        CUDA_CHECK(cudaMemcpy(f.data(), src, f.size() * sizeof(float), cudaMemcpyDefault));
        std::copy(f.begin(), f.end(), out.begin());
        return out;
    }
    std::vector<std::uint16_t> bits(as_size(n));
    CUDA_CHECK(cudaMemcpy(bits.data(), src, bits.size() * sizeof(std::uint16_t), cudaMemcpyDefault));
    for (std::size_t i = 0; i < bits.size(); ++i)
        out[i] = dtype == DType::fp16 ? fp16_bits_to_float(bits[i]) : bf16_bits_to_float(bits[i]);
    return out;
}

double relative_l2(std::span<const double> got, std::span<const double> want) {
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        diff += (got[i] - want[i]) * (got[i] - want[i]);
        norm += want[i] * want[i];
    }
    return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

double gradient_tolerance(DType dtype) {
    switch (dtype) {
        case DType::fp32: return 1e-4;
        case DType::fp16: return 6e-3;
        case DType::bf16: return 5e-2;
    }
    return 0;
}

struct Case {
    ModelConfig model;
    int batch, seq;
    DType dtype;
    Variant variant;
    float dropout;
    Recompute recompute = Recompute::gelu;
    StateHome optimizer = StateHome::device;
    Fp32Gemm fp32_gemm = Fp32Gemm::exact;
    std::optional<BatchShape> ragged = std::nullopt;  // in place of batch × seq
    BatchShape shape() const { return ragged ? *ragged : BatchShape::rectangular(batch, seq); }
    std::string name() const {
        std::string lengths;
        if (ragged) {
            lengths = std::string(" ") + std::string(enum_name(ragged->packing()));
            for (const int n : ragged->lengths()) lengths += " " + std::to_string(n);
            lengths += " stride " + std::to_string(ragged->stride());
        }
        return model.name + " b" + std::to_string(batch) + " t" + std::to_string(seq) + lengths + " " +
               std::string(enum_name(dtype)) + (fp32_gemm == Fp32Gemm::split_tf32 ? " split_tf32 " : " ") +
               variant.text() + " p" + std::to_string(dropout) + " recompute " + std::string(enum_name(recompute)) +
               " optimizer " + std::string(enum_name(optimizer));
    }
};

struct Worst {
    double loss = 0, gradient = 0, update = 0;
};

TrainSettings test_settings() {
    TrainSettings s;
    s.weight_decay = 0.1f;  // so the decayed and undecayed tensors differ
    s.max_grad_norm = 1.0f;
    return s;
}

GpuTrainOptions options_for(const Case& c, const TrainSettings& settings) {
    GpuTrainOptions o;
    o.variant = c.variant;
    o.dropout = Dropout{.p = c.dropout, .seed = kSeed};
    o.recompute = c.recompute;
    o.settings = settings;
    o.fp32_gemm = c.fp32_gemm;
    return o;
}

std::unique_ptr<Backend> placed_backend(const WeightLayout& layout, const std::vector<std::vector<float>>& units,
                                        DType dtype, cudaStream_t stream, StateHome optimizer = StateHome::device) {
    BackendConfig config;
    config.backend = BackendId::device;
    config.dtype = dtype;
    config.optimizer = optimizer;
    config.compute_stream = stream;
    config.budget_bytes = std::int64_t{1} << 30;  // holds every test model's weights
    auto backend = make_backend(config);
    backend->place(
        layout, [&](int u, std::span<float> dst) { std::ranges::copy(units[as_size(u)], dst.begin()); },
        UnitSchedule::training(layout.unit_count()));
    return backend;
}

// What the first step from `units` leaves: its loss and gradient norm, every gradient (divided by
// the loss scale it carries, which is exact), and each unit's weights after the update and, below
// fp32, its fp32 master weights (in fp32 the weights are their own master).
struct FirstStep {
    double loss = 0, norm = 0;
    float loss_scale = 1;
    int steps = 0, skipped = 0;
    UnitValues gradients, weights, master;
    LinkBytes link;  // the last update's
};

FirstStep first_step(const Case& c, const WeightLayout& layout, const std::vector<std::vector<float>>& units,
                     const TrainSettings& settings) {
    FirstStep r;
    CudaStream stream;
    const auto backend = placed_backend(layout, units, c.dtype, stream.get(), c.optimizer);
    GpuTrainStep step(c.model, layout, c.dtype, c.shape(), stream.get(), options_for(c, settings));
    const auto n = static_cast<int>(c.shape().rows());
    step.set_batch(ids(c.model, n, 1), ids(c.model, n, 2));

    // fp16's first scale may overflow the gradient: the update is then skipped and the scale
    // halved, and the same step is made again.
    for (int attempt = 0; attempt < 24 && step.steps() == 0; ++attempt) {
        step.forward(*backend);
        step.backward(*backend);
        const double scale = step.loss_scale();
        r.loss = step.loss();
        r.norm = step.grad_norm();
        r.gradients.clear();
        for (int u = 0; u < layout.unit_count(); ++u) {
            auto g = to_host(backend->gradient(u), layout.units[as_size(u)].numel, c.dtype);
            for (double& x : g) x /= scale;
            r.gradients.push_back(std::move(g));
        }
        step.update(*backend);
        if (step.steps() == 0) {
            CHECK_FALSE(std::isfinite(r.norm));
            CHECK(step.loss_scale() == static_cast<float>(scale / 2));
        }
    }
    // The step's work is ordered on `stream` (a host update's copies up included), which is not
    // the legacy stream that cudaMemcpy reads on.
    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    r.steps = step.steps();
    r.skipped = step.skipped_steps();
    r.link = step.update_link_bytes();
    r.loss_scale = step.loss_scale();
    for (int u = 0; u < layout.unit_count(); ++u) {
        const std::int64_t numel = layout.units[as_size(u)].numel;
        const UnitUpdate unit = backend->acquire_update(u);
        r.weights.push_back(to_host(unit.weights, numel, c.dtype));
        r.master.push_back(c.dtype == DType::fp32 ? r.weights.back() : to_host(unit.master, numel, DType::fp32));
        backend->release_update(u);
    }
    return r;
}

// The step's update against the float64 AdamW applied to the step's own gradients, from the
// weights it started from: the largest relative L2 error of a tensor (each checked <= 1e-4).
double check_update(const Case& c, const WeightLayout& layout, const std::vector<std::vector<float>>& units,
                    const TrainSettings& settings, const FirstStep& r) {
    UnitValues clipped = r.gradients, params;
    for (const auto& u : units) params.emplace_back(u.begin(), u.end());
    const UnitValues before = params;
    reference_clip_gradients(clipped, settings.max_grad_norm);
    AdamWState state;
    reference_adamw_step(layout, params, clipped, state,
                         {.lr = settings.lr, .beta1 = settings.beta1, .beta2 = settings.beta2, .eps = settings.eps,
                          .weight_decay = settings.weight_decay});
    double worst = 0;
    for (int u = 0; u < layout.unit_count(); ++u) {
        const auto& master = r.master[as_size(u)];
        if (c.dtype != DType::fp32) {
            // The weights are the master rounded to the dtype.
            std::vector<float> rounded(master.begin(), master.end());
            round_through_dtype(rounded, c.dtype);
            CHECK(std::equal(rounded.begin(), rounded.end(), r.weights[as_size(u)].begin()));
        }
        for (const TensorSpec& t : layout.units[as_size(u)].tensors) {
            INFO(t.name);
            std::vector<double> got, want;
            for (std::int64_t i = t.offset; i < t.offset + t.numel; ++i) {
                const double w = params[as_size(u)][as_size(i)], w0 = before[as_size(u)][as_size(i)];
                const double diff = master[as_size(i)] - w;
                const double beyond = std::copysign(std::max(0.0, std::abs(diff) - std::ldexp(std::abs(w), -23)), diff);
                want.push_back(w - w0);
                got.push_back(w - w0 + beyond);
            }
            const double err = relative_l2(got, want);
            CHECK(err <= 1e-4);
            worst = std::max(worst, std::isnan(err) ? INFINITY : err);
        }
    }
    return worst;
}

// The largest relative L2 error of a tensor's gradient against `want`'s, each checked <= tolerance.
double check_gradients(const WeightLayout& layout, const UnitValues& got, const UnitValues& want, double tolerance) {
    double worst = 0;
    for (std::size_t u = 0; u < want.size(); ++u) {
        for (const TensorSpec& t : layout.units[u].tensors) {
            INFO(t.name);
            const auto at = [&](const std::vector<double>& v) {
                return std::span<const double>(v).subspan(as_size(t.offset), as_size(t.numel));
            };
            const double err = relative_l2(at(got[u]), at(want[u]));
            CHECK(err <= tolerance);
            worst = std::max(worst, std::isnan(err) ? INFINITY : err);
        }
    }
    return worst;
}

// One step from the synthetic weights, each of its numbers checked against float64; the errors
// are folded into `worst`.
void check_first_step(const Case& c, Worst& worst) {
    INFO(c.name());
    Worst mine;
    const WeightLayout layout = WeightLayout::for_model(c.model);
    const auto units = rounded_units(c.model, layout, c.dtype);
    const TrainSettings settings = test_settings();
    const FirstStep r = first_step(c, layout, units, settings);
    CHECK(r.steps == 1);
    if (r.steps != 1) return;
    if (c.dtype != DType::fp16) CHECK(r.skipped == 0);

    std::vector<const float*> pointers;
    for (const auto& u : units) pointers.push_back(u.data());
    const auto n = static_cast<int>(c.shape().rows());
    const ReferenceGradients ref =
        c.ragged
            ? reference_gradients(c.model, layout, pointers, ids(c.model, n, 1), ids(c.model, n, 2), *c.ragged)
            : reference_gradients(c.model, layout, pointers, ids(c.model, n, 1), ids(c.model, n, 2), c.batch, c.seq,
                                  Dropout{.p = c.dropout, .seed = kSeed}.for_shape(c.seq, c.model.max_positions));
    const double tolerance = gradient_tolerance(c.dtype);
    mine.loss = std::abs(r.loss - ref.loss) / ref.loss;
    CHECK(mine.loss <= tolerance);
    mine.gradient = check_gradients(layout, r.gradients, ref.units, tolerance);
    double ref_squares = 0;
    for (const auto& u : ref.units)
        for (const double g : u) ref_squares += g * g;
    CHECK(std::abs(r.norm - std::sqrt(ref_squares)) <= tolerance * std::sqrt(ref_squares));
    mine.update = check_update(c, layout, units, settings, r);
    std::printf("gpu_train case %-36s loss %.3g gradient %.3g update %.3g (loss scale %g, %d skipped)\n",
                c.name().c_str(), mine.loss, mine.gradient, mine.update, r.loss_scale, r.skipped);
    worst.loss = std::max(worst.loss, mine.loss);
    worst.gradient = std::max(worst.gradient, mine.gradient);
    worst.update = std::max(worst.update, mine.update);
}

// Where the GELU output the MLP's backward reads comes from: recomputed by the GELU kernel from
// the kept pre-activation (gelu, attention), or made by the forward's own MLP input (none keeps
// it, mlp and block recompute it), which is the GEMM's epilogue under mlp_epilogue and the same
// GELU kernel otherwise. Under inplace_gelu always the in-place GELU kernel.
bool gelu_from_epilogue(const Case& c) {
    return c.variant.has(Fusion::mlp_epilogue) && !c.variant.has(Fusion::inplace_gelu) &&
           (c.recompute == Recompute::none || c.recompute >= Recompute::mlp);
}

// Whether two cases' steps compute every number with the same kernels on the same inputs, so
// that they agree bit for bit: not with flash attention, whose backward adds dQ atomically in
// whatever order its blocks finish, nor where their GELU outputs come from different kernels.
bool same_bits(const Case& a, const Case& b) {
    return !a.variant.has(Fusion::flash_attention) && gelu_from_epilogue(a) == gelu_from_epilogue(b);
}

// `got`'s gradients and norm within a quarter of the float64 test's tolerance of `want`'s, which
// it differs from by a rounding here and there rather than by a chain of them, and its update
// against the float64 AdamW on its own gradients; prints the errors, against `what`.
void check_close_step(const Case& c, const WeightLayout& layout, const std::vector<std::vector<float>>& units,
                      const TrainSettings& settings, const FirstStep& got, const FirstStep& want, const char* what) {
    const double tolerance = gradient_tolerance(c.dtype) / 4;
    const double gradient = check_gradients(layout, got.gradients, want.gradients, tolerance);
    CHECK(std::abs(got.norm - want.norm) <= tolerance * want.norm);
    const double update = check_update(c, layout, units, settings, got);
    std::printf("gpu_train %-80s against %s: gradient %.3g, update %.3g\n", c.name().c_str(), what, gradient, update);
}

// The first step of every recompute setting against gelu's (the default) on the same weights and
// tokens: the same loss (the forward is the same whatever it keeps), and the same gradients and
// update, bit for bit where same_bits says so. Elsewhere within a quarter of the float64 test's
// tolerance (they differ by the order of dQ's atomic adds, or by one rounding of the GELU's output
// between two kernels, not by a chain of roundings), with the update checked against the float64
// AdamW on the setting's own gradients. mlp and block also against none, which takes its GELU
// output from the same kernel.
void check_recompute_settings(const Case& gelu) {
    INFO(gelu.name());
    const WeightLayout layout = WeightLayout::for_model(gelu.model);
    const auto units = rounded_units(gelu.model, layout, gelu.dtype);
    const TrainSettings settings = test_settings();
    const FirstStep want = first_step(gelu, layout, units, settings);
    CHECK(want.steps == 1);
    if (want.steps != 1) return;
    Case none = gelu;
    none.recompute = Recompute::none;
    const FirstStep kept = first_step(none, layout, units, settings);
    for (const Recompute recompute : {Recompute::none, Recompute::attention, Recompute::mlp, Recompute::block}) {
        Case c = gelu;
        c.recompute = recompute;
        INFO(c.name());
        const FirstStep got = recompute == Recompute::none ? kept : first_step(c, layout, units, settings);
        CHECK(got.steps == 1);
        if (got.steps != 1) continue;
        CHECK(got.skipped == want.skipped);
        CHECK(got.loss_scale == want.loss_scale);
        CHECK(got.loss == want.loss);
        for (const auto& [other, reference] : {std::pair{gelu, &want}, std::pair{none, &kept}}) {
            if (other.recompute == c.recompute || !same_bits(c, other)) continue;
            INFO("bit for bit against recompute " << enum_name(other.recompute));
            CHECK(got.norm == reference->norm);
            CHECK(got.gradients == reference->gradients);
            CHECK(got.weights == reference->weights);
            CHECK(got.master == reference->master);
        }
        if (same_bits(c, gelu)) continue;
        check_close_step(c, layout, units, settings, got, want, "recompute gelu");
    }
}

// The first step with inplace_ln against the same cell's without it: the same loss bit for bit
// (the forward's LayerNorm writes the same outputs, and keeping rstd changes no other kernel),
// and the rest as check_close_step says: x̂ differs by y's rounding over |w|
// (layernorm_recovery.hpp; the synthetic weights' w are about 1), one rounding per LayerNorm.
void check_inplace_ln(const Case& without, const Variant& with) {
    INFO(without.name());
    const WeightLayout layout = WeightLayout::for_model(without.model);
    const auto units = rounded_units(without.model, layout, without.dtype);
    const TrainSettings settings = test_settings();
    const FirstStep want = first_step(without, layout, units, settings);
    Case c = without;
    c.variant = with;
    INFO(c.name());
    const FirstStep got = first_step(c, layout, units, settings);
    CHECK(want.steps == 1);
    CHECK(got.steps == 1);
    if (want.steps != 1 || got.steps != 1) return;
    CHECK(got.skipped == want.skipped);
    CHECK(got.loss == want.loss);
    check_close_step(c, layout, units, settings, got, want, "the cell without inplace_ln");
}

// The first step with inplace_gelu added to `without` against its own, on the same weights and
// tokens. The forward is the same function: without mlp_epilogue the same kernels on the same
// values (the GEMM's output and bias added in place of fc_pre, then the same GELU formula), so the
// loss is equal bit for bit; under mlp_epilogue the GELU's input is rounded to the dtype before the
// GELU kernel where cuBLASLt's GELU epilogue took it in fp32, one rounding apart. The gradients
// differ by gelu' from the kept output and bit against gelu' from the kept input, each a rounding
// of the dtype from the exact gelu'(x) (gelu_from_output.hpp bounds the first; near the minimum
// x0 ≈ -0.75 by more, but these synthetic models' pre-activations, of standard deviation
// 0.02·√C ≲ 0.3, seldom reach it): one rounding of dfc, as check_close_step says.
void check_inplace_gelu(const Case& without) {
    Case c = without;
    c.variant = without.variant.with(Fusion::inplace_gelu);
    INFO(c.name());
    const WeightLayout layout = WeightLayout::for_model(c.model);
    const auto units = rounded_units(c.model, layout, c.dtype);
    const TrainSettings settings = test_settings();
    const FirstStep want = first_step(without, layout, units, settings);
    const FirstStep got = first_step(c, layout, units, settings);
    CHECK(want.steps == 1);
    CHECK(got.steps == 1);
    if (want.steps != 1 || got.steps != 1) return;
    CHECK(got.skipped == want.skipped);
    if (c.variant.has(Fusion::mlp_epilogue)) {
        CHECK(std::abs(got.loss - want.loss) <= gradient_tolerance(c.dtype) / 4 * want.loss);
    } else {
        CHECK(got.loss == want.loss);
    }
    check_close_step(c, layout, units, settings, got, want, "the cell without inplace_gelu");
}

// Every unit's bytes in the dtype, as the layout lays it out: what an update on the host moves
// each way (each unit's gradient down, its new weights up).
std::int64_t layout_bytes(const WeightLayout& layout, DType dtype) {
    std::int64_t bytes = 0;
    for (const UnitLayout& u : layout.units) bytes += u.numel * static_cast<std::int64_t>(dtype_size(dtype));
    return bytes;
}

// The host's update against the device's from the same first step: the same loss, norm and
// gradients bit for bit (the same kernels on the same weights), and the same update to within a
// rounding of each fp32 operation: nvcc contracts AdamW's multiply-adds into FMAs, the host's
// compile does not, so the two may differ by one rounding here and there (not by a chain of them):
// each tensor's update (master after − before) within 1e-5 relative L2 of the device's, after one
// ulp of the weight is discounted per element, as check_update does. Where they agree bit for
// bit, so do the weights. The host's update also against the float64 AdamW (check_update); the
// link bytes each way are every unit's in the dtype, none on the device.
void check_host_optimizer(const Case& device) {
    INFO(device.name());
    const WeightLayout layout = WeightLayout::for_model(device.model);
    const auto units = rounded_units(device.model, layout, device.dtype);
    const TrainSettings settings = test_settings();
    Case host = device;
    host.optimizer = StateHome::host;
    const FirstStep want = first_step(device, layout, units, settings);
    const FirstStep got = first_step(host, layout, units, settings);
    CHECK(want.steps == 1);
    CHECK(got.steps == 1);
    if (want.steps != 1 || got.steps != 1) return;
    CHECK(got.skipped == want.skipped);
    CHECK(got.loss_scale == want.loss_scale);
    CHECK(got.loss == want.loss);
    CHECK(got.norm == want.norm);
    CHECK(got.gradients == want.gradients);
    const std::int64_t bytes = layout_bytes(layout, device.dtype);
    CHECK(got.link == LinkBytes{bytes, bytes});
    CHECK(want.link == LinkBytes{});
    for (int u = 0; u < layout.unit_count(); ++u) {
        for (const TensorSpec& t : layout.units[as_size(u)].tensors) {
            INFO(t.name);
            std::vector<double> got_update, want_update;
            for (std::int64_t i = t.offset; i < t.offset + t.numel; ++i) {
                const double w0 = units[as_size(u)][as_size(i)];
                const double g = got.master[as_size(u)][as_size(i)], w = want.master[as_size(u)][as_size(i)];
                const double diff = g - w;
                const double beyond = std::copysign(std::max(0.0, std::abs(diff) - std::ldexp(std::abs(w), -23)), diff);
                want_update.push_back(w - w0);
                got_update.push_back(w - w0 + beyond);
            }
            CHECK(relative_l2(got_update, want_update) <= 1e-5);
        }
    }
    if (got.master == want.master) CHECK(got.weights == want.weights);
    const double update = check_update(host, layout, units, settings, got);
    std::printf("gpu_train optimizer host %-70s update %.3g against float64, master %s the device's\n",
                device.name().c_str(), update, got.master == want.master ? "bit for bit" : "within a rounding of");
}

// f(case) for each odd shape of the training tests (head dimensions 25 and 80, seq 1, 33 and 90,
// dropout 0 and 0.1) in fp32 and bf16, each of `variants` and each of `settings`; an exception
// fails its case and the others go on.
template <class F>
void for_each_odd_case(std::initializer_list<Variant> variants, std::initializer_list<Recompute> settings, const F& f) {
    for (const ModelConfig& model : {head25_model(), head80_model()}) {
        for (const int seq : {1, 33, 90}) {
            for (const float p : {0.0f, 0.1f}) {
                for (const DType dtype : {DType::fp32, DType::bf16}) {
                    for (const Variant& variant : variants) {
                        for (const Recompute recompute : settings) {
                            const Case c{model, 2, seq, dtype, variant, p, recompute};
                            try {
                                f(c);
                            } catch (const std::exception& e) {
                                FAIL_CHECK(c.name() << ": " << e.what());
                            }
                        }
                    }
                }
            }
        }
    }
}

}  // namespace

TEST_CASE("GpuTrainStep with the optimizer on the host: the first step's update is the device optimizer's", "[gpu]") {
    require_gpu();
    for (const ModelConfig& model : {head25_model(), head80_model()}) {
        for (const float p : {0.0f, 0.1f}) {
            for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
                // Kernels that are deterministic (no flash attention's atomic dQ), so the gradients
                // the two updates start from are the same bits.
                for (const Variant variant : {Variant{}, Variant{Fusion::mlp_epilogue, Fusion::proj_epilogue}}) {
                    const Case c{model, 2, 33, dtype, variant, p};
                    try {
                        check_host_optimizer(c);
                    } catch (const std::exception& e) {
                        FAIL_CHECK(c.name() << ": " << e.what());
                    }
                }
            }
        }
    }
}

TEST_CASE("GpuTrainStep with the optimizer on the host follows the device optimizer over steps, moving each unit "
          "both ways", "[gpu]") {
    require_gpu();
    const ModelConfig model = head25_model();
    const WeightLayout layout = WeightLayout::for_model(model);
    const int batch = 2, seq = 33, n = batch * seq, steps = 4;
    const auto tokens = ids(model, n, 3), targets = ids(model, n, 4);
    TrainSettings settings = test_settings();
    settings.lr = 3e-3f;
    for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
        const Case c{model, batch, seq, dtype, Variant{}, 0.1f};
        INFO(c.name());
        try {
            const auto units = rounded_units(model, layout, dtype);
            CudaStream stream;
            const auto device = placed_backend(layout, units, dtype, stream.get());
            const auto host = placed_backend(layout, units, dtype, stream.get(), StateHome::host);
            GpuTrainStep on_device(model, layout, dtype, BatchShape::rectangular(batch, seq), stream.get(),
                                   options_for(c, settings));
            GpuTrainStep on_host(model, layout, dtype, BatchShape::rectangular(batch, seq), stream.get(),
                                 options_for(c, settings));
            on_device.set_batch(tokens, targets);
            on_host.set_batch(tokens, targets);
            const std::int64_t bytes = layout_bytes(layout, dtype);
            for (int s = 0; s < steps; ++s) {
                INFO("step " << s);
                const int skipped = on_host.skipped_steps();
                for (const auto& [step, backend] : {std::pair{&on_device, device.get()}, std::pair{&on_host, host.get()}}) {
                    step->forward(*backend);
                    step->backward(*backend);
                    step->update(*backend);
                }
                // The first forward reads the same weights; later ones weights a rounding apart.
                const double d = on_device.loss(), h = on_host.loss();
                if (s == 0) CHECK(h == d);
                CHECK(std::abs(h - d) <= (dtype == DType::fp32 ? 1e-5 : gradient_tolerance(dtype) / 4) * d);
                CHECK(on_host.skipped_steps() == on_device.skipped_steps());
                // A skipped (fp16 overflow) update moves nothing.
                const bool updated = on_host.skipped_steps() == skipped;
                CHECK(on_host.update_link_bytes() == (updated ? LinkBytes{bytes, bytes} : LinkBytes{}));
                CHECK(on_device.update_link_bytes() == LinkBytes{});
            }
            // The weights the next forward reads are the host's master rounded to the dtype (once
            // the copies up, ordered on `stream`, are done).
            CUDA_CHECK(cudaStreamSynchronize(stream.get()));
            for (int u = 0; u < layout.unit_count(); ++u) {
                const std::int64_t numel = layout.units[as_size(u)].numel;
                const UnitUpdate unit = host->acquire_update(u);
                REQUIRE(unit.on_host());
                std::vector<double> master = to_host(unit.master, numel, DType::fp32);
                std::vector<float> rounded(master.begin(), master.end());
                round_through_dtype(rounded, dtype);
                const std::vector<double> weights = to_host(unit.weights, numel, dtype);
                CHECK(std::equal(rounded.begin(), rounded.end(), weights.begin()));
                host->release_update(u);
            }
            std::printf("gpu_train optimizer host %-60s %d steps, losses %.6f (device %.6f)\n", c.name().c_str(), steps,
                        on_host.loss(), on_device.loss());
        } catch (const std::exception& e) {
            FAIL_CHECK(c.name() << ": " << e.what());
        }
    }
}

TEST_CASE("the device backend with the optimizer on the host holds what the registry's footprint says", "[gpu]") {
    require_gpu();
    const ModelConfig model = head80_model();
    const WeightLayout layout = WeightLayout::for_model(model);
    CudaStream stream;
    for (const DType dtype : {DType::fp32, DType::bf16}) {
        INFO(enum_name(dtype));
        const auto units = rounded_units(model, layout, dtype);
        const auto backend = placed_backend(layout, units, dtype, stream.get(), StateHome::host);
        BackendConfig config;
        config.backend = BackendId::device;
        config.dtype = dtype;
        config.optimizer = StateHome::host;
        const WeightFootprint want = backend_traits(BackendId::device)
                                         .training->footprint(config, unit_bytes(layout, dtype), unit_bytes(layout, DType::fp32));
        const PlacementStats placed = backend->placement();
        CHECK(placed.training_state_bytes == want.device_bytes);
        CHECK(placed.pinned_host_bytes == want.pinned_host_bytes);
        // Each unit's master weights (in fp32 too) are the fill's values; the moments start at 0;
        // units u and u + 1 have their own page-locked buffers.
        for (int u = 0; u + 1 < layout.unit_count(); ++u) {
            const std::int64_t numel = layout.units[as_size(u)].numel;
            const UnitUpdate unit = backend->acquire_update(u), next = backend->acquire_update(u + 1);
            REQUIRE(unit.on_host());
            REQUIRE(unit.master != nullptr);
            CHECK(std::equal(units[as_size(u)].begin(), units[as_size(u)].end(), unit.master));
            CHECK(std::all_of(unit.m, unit.m + numel, [](float v) { return v == 0.0f; }));
            CHECK(std::all_of(unit.v, unit.v + numel, [](float v) { return v == 0.0f; }));
            const std::set<void*> buffers = {unit.host_gradient, unit.host_weights, next.host_gradient, next.host_weights};
            CHECK(buffers.size() == 4);
            backend->release_update(u + 1);
            backend->release_update(u);
        }
    }
}

namespace {

// Unit u's values of `dtype` at `src` (device or host memory), as doubles, for every unit.
UnitValues all_units(const WeightLayout& layout, DType dtype, const std::function<const void*(int)>& src) {
    UnitValues out;
    for (int u = 0; u < layout.unit_count(); ++u) out.push_back(to_host(src(u), layout.units[as_size(u)].numel, dtype));
    return out;
}

// Two backends after the same steps hold the same bits: every gradient, the fp32 master weights,
// and the weights the next forward reads (where each unit is kept between steps).
void check_same_state(const WeightLayout& layout, DType dtype, Backend& got, Backend& want) {
    CHECK(all_units(layout, dtype, [&](int u) { return got.gradient(u); }) ==
          all_units(layout, dtype, [&](int u) { return want.gradient(u); }));
    const auto master = [&](Backend& b) {
        return all_units(layout, DType::fp32, [&](int u) {
            const float* m = b.acquire_update(u).master;
            b.release_update(u);
            return m;
        });
    };
    CHECK(master(got) == master(want));
    CHECK(all_units(layout, dtype, [&](int u) { return got.stored_weights(u); }) ==
          all_units(layout, dtype, [&](int u) { return want.stored_weights(u); }));
}

}  // namespace

TEST_CASE("explicit-copy and uvm-prefetch with the optimizer on the host train as the device backend with it, bit "
          "for bit, moving the streamed units in twice and their gradients out", "[gpu]") {
    require_gpu();
    // head25's units, in elements: the embedding 56 064 (wte 4 864, wpe 51 200), two blocks of
    // 31 616, the head 5 120. Two placements: every unit streamed through two slots of the
    // embedding's size (a look-ahead of 1 over two streams, at the smallest budget that allows it),
    // and, at a budget of the embedding, a block and the head with one slot (jit), the embedding
    // resident (larger than a block, it would take a slot of its size) and the blocks and the head
    // streamed through a block-sized slot.
    const ModelConfig model = head25_model();
    const WeightLayout layout = WeightLayout::for_model(model);
    const int batch = 2, seq = 33, n = batch * seq, steps = 3;
    const auto tokens = ids(model, n, 5), targets = ids(model, n, 6);
    TrainSettings settings = test_settings();
    settings.lr = 3e-3f;
    struct Placement {
        int prefetch, streams;
        std::int64_t budget_elements;
        std::vector<bool> resident;
    };
    const std::int64_t E = 56064, B = 31616, H = 5120;
    REQUIRE(layout.units[0].numel == E);
    REQUIRE(layout.units[1].numel == B);
    REQUIRE(layout.units[3].numel == H);
    const Placement placements[] = {{1, 2, 2 * E, {false, false, false, false}}, {-1, 1, E + B + H, {true, false, false, false}}};
    for (const auto& [id, dtype] : {std::pair{BackendId::explicit_copy, DType::fp32}, std::pair{BackendId::explicit_copy, DType::bf16},
                                    std::pair{BackendId::uvm_prefetch, DType::fp32}, std::pair{BackendId::uvm_prefetch, DType::bf16}}) {
        for (const Placement& p : placements) {
            const Case c{model, batch, seq, dtype, Variant{}, 0.1f, Recompute::gelu, StateHome::host};
            const std::string backend(enum_name(id));
            INFO(backend << " " << c.name() << ", prefetch " << p.prefetch << ", streams " << p.streams << ", budget "
                         << p.budget_elements << " elements");
            try {
                const auto units = rounded_units(model, layout, dtype);
                CudaStream stream;
                const auto device = placed_backend(layout, units, dtype, stream.get(), StateHome::host);
                BackendConfig config;
                config.backend = id;
                config.dtype = dtype;
                config.optimizer = StateHome::host;
                config.prefetch_depth = p.prefetch;
                config.streams = p.streams;
                config.budget_bytes = p.budget_elements * static_cast<std::int64_t>(dtype_size(dtype));
                config.compute_stream = stream.get();
                const auto copy = make_backend(config);
                copy->place(
                    layout, [&](int u, std::span<float> dst) { std::ranges::copy(units[as_size(u)], dst.begin()); },
                    UnitSchedule::training(layout.unit_count()));

                // The placement the budget gives, and what the registry predicts it holds.
                std::int64_t streamed = 0, resident = 0;
                for (int u = 0; u < layout.unit_count(); ++u) {
                    const std::int64_t bytes = layout.units[as_size(u)].numel * static_cast<std::int64_t>(dtype_size(dtype));
                    (p.resident[as_size(u)] ? resident : streamed) += bytes;
                }
                const PlacementStats placed = copy->placement();
                REQUIRE(placed.streamed_bytes == streamed);
                REQUIRE(placed.resident_bytes == resident);
                const BackendTraits& traits = backend_traits(id);
                const auto unit_sizes = unit_bytes(layout, dtype);
                const WeightFootprint weights = traits.footprint(config, unit_sizes);
                const WeightFootprint state = traits.training->footprint(config, unit_sizes, unit_bytes(layout, DType::fp32));
                CHECK(placed.device_weight_bytes == weights.device_bytes);
                CHECK(placed.training_state_bytes == state.device_bytes);
                // explicit-copy lays its gradients out as its weights.
                if (id == BackendId::explicit_copy) CHECK(placed.training_state_bytes == placed.device_weight_bytes);
                CHECK(placed.pinned_host_bytes == weights.pinned_host_bytes + state.pinned_host_bytes);

                GpuTrainStep on_device(model, layout, dtype, BatchShape::rectangular(batch, seq), stream.get(),
                                       options_for(c, settings));
                GpuTrainStep on_copy(model, layout, dtype, BatchShape::rectangular(batch, seq), stream.get(),
                                     options_for(c, settings));
                on_device.set_batch(tokens, targets);
                on_copy.set_batch(tokens, targets);
                for (int s = 0; s < steps; ++s) {
                    INFO("step " << s);
                    for (const auto& [step, backend] : {std::pair{&on_device, device.get()}, std::pair{&on_copy, copy.get()}}) {
                        backend->reset_residency();
                        step->forward(*backend);
                        step->backward(*backend);
                        step->update(*backend);
                    }
                    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
                    // The same kernels on the same weights, the same host AdamW on the same gradients.
                    CHECK(on_copy.loss() == on_device.loss());
                    CHECK(on_copy.grad_norm() == on_device.grad_norm());
                    CHECK(on_copy.skipped_steps() == 0);
                    check_same_state(layout, dtype, *copy, *device);
                    // The streamed units in for the forward and again for the backward, their
                    // gradients out; the resident units' gradients down and new weights up.
                    const LinkBytes by_backend = copy->link_bytes_since_reset(), by_update = on_copy.update_link_bytes();
                    CHECK(by_backend == LinkBytes{streamed, 2 * streamed});
                    CHECK(by_update == LinkBytes{resident, resident});
                    CHECK(device->link_bytes_since_reset() == LinkBytes{});
                    CHECK(on_device.update_link_bytes() == LinkBytes{streamed + resident, streamed + resident});
                }
                std::printf("gpu_train %s %-60s prefetch %d: %d steps bit for bit with device, loss %.6f\n",
                            backend.c_str(), c.name().c_str(), p.prefetch, steps, on_copy.loss());
            } catch (const std::exception& e) {
                FAIL_CHECK(c.name() << ": " << e.what());
            }
        }
    }
}

// The host update overlapped with the next forward (GpuTrainStep::update's `overlapped`) on each
// backend that keeps the optimizer's state on the host: every unit streamed where the backend
// streams (a look-ahead of 1 over two streams, so the fetch of the next unit waits for its update
// too), fp32 and bf16, 4 steps without waiting for the update between them, against the same
// backend's steps with the update ended before each returns. The losses each forward computes
// from the weights the last update wrote, then the gradients, master weights and weights: the same
// bits.
TEST_CASE("an overlapped host update gives the bits of the one that ends before the next forward, on device, "
          "explicit-copy and uvm-prefetch, with clipping and without (the backward then starting it)",
          "[gpu]") {
    require_gpu();
    const ModelConfig model = head25_model();
    const WeightLayout layout = WeightLayout::for_model(model);
    const int batch = 2, seq = 33, n = batch * seq, steps = 4;
    const auto tokens = ids(model, n, 7), targets = ids(model, n, 8);
    TrainSettings settings = test_settings();
    settings.lr = 3e-3f;
    for (const float clip : {1.0f, 0.0f}) {
        for (const BackendId id : {BackendId::device, BackendId::explicit_copy, BackendId::uvm_prefetch}) {
            for (const DType dtype : {DType::fp32, DType::bf16}) {
                settings.max_grad_norm = clip;
                const Case c{model, batch, seq, dtype, Variant{}, 0.1f, Recompute::gelu, StateHome::host};
                const std::string backend(enum_name(id));
                INFO(backend << " " << c.name() << " max_grad_norm " << clip);
                try {
                    const auto units = rounded_units(model, layout, dtype);
                    CudaStream stream;
                    const auto make = [&] {
                        BackendConfig config;
                        config.backend = id;
                        config.dtype = dtype;
                        config.optimizer = StateHome::host;
                        config.prefetch_depth = 1;
                        config.streams = 2;
                        // Every unit streamed through two embedding-sized slots, or all of them resident.
                        const auto slot_bytes = 2 * layout.units[0].numel * static_cast<std::int64_t>(dtype_size(dtype));
                        config.budget_bytes = id == BackendId::device ? std::int64_t{1} << 30 : slot_bytes;
                        config.compute_stream = stream.get();
                        auto b = make_backend(config);
                        b->place(
                            layout,
                            [&](int u, std::span<float> dst) { std::ranges::copy(units[as_size(u)], dst.begin()); },
                            UnitSchedule::training(layout.unit_count()));
                        return b;
                    };
                    const auto ended = make(), overlapped = make();
                    GpuTrainStep on_ended(model, layout, dtype, BatchShape::rectangular(batch, seq), stream.get(),
                                          options_for(c, settings));
                    GpuTrainStep on_overlapped(model, layout, dtype, BatchShape::rectangular(batch, seq), stream.get(),
                                               options_for(c, settings));
                    on_ended.set_batch(tokens, targets);
                    on_overlapped.set_batch(tokens, targets);
                    for (int s = 0; s < steps; ++s) {
                        INFO("step " << s);
                        for (const bool overlap : {false, true}) {
                            GpuTrainStep& step = overlap ? on_overlapped : on_ended;
                            Backend& b = overlap ? *overlapped : *ended;
                            b.reset_residency();
                            step.forward(b);
                            step.backward(b, overlap);
                            step.update(b, overlap);
                        }
                        CHECK(on_overlapped.loss() == on_ended.loss());
                        CHECK(on_overlapped.grad_norm() == on_ended.grad_norm());
                    }
                    on_overlapped.finish_update();
                    CUDA_CHECK(cudaStreamSynchronize(stream.get()));
                    CHECK(on_overlapped.update_link_bytes() == on_ended.update_link_bytes());
                    // Both last updates ran on the host: AdamW and the waits are parts of the span.
                    for (const GpuTrainStep* step : {&on_overlapped, &on_ended}) {
                        const HostUpdateTimes times = step->host_update_times();
                        CHECK(times.adamw_ms > 0.0);
                        CHECK(times.wait_ms >= 0.0);
                        CHECK(times.span_ms >= times.adamw_ms + times.wait_ms - 1e-9);
                        CHECK(times.overlapped == (step == &on_overlapped));
                    }
                    check_same_state(layout, dtype, *overlapped, *ended);
                    std::printf("gpu_train overlapped host update %-14s %-60s clip %g %d steps bit for bit, "
                                "loss %.6f\n",
                                backend.c_str(), c.name().c_str(), static_cast<double>(clip), steps,
                                on_overlapped.loss());
                } catch (const std::exception& e) {
                    FAIL_CHECK(c.name() << ": " << e.what());
                }
            }
        }
    }
}

TEST_CASE("explicit-copy refuses to train with the optimizer's state on the device", "[gpu]") {
    require_gpu();
    const WeightLayout layout = WeightLayout::for_model(head25_model());
    CudaStream stream;
    BackendConfig config;
    config.backend = BackendId::explicit_copy;
    config.budget_bytes = std::int64_t{1} << 30;
    config.compute_stream = stream.get();
    const auto copy = make_backend(config);
    CHECK_THROWS_WITH(copy->place(layout, [](int, std::span<float> dst) { std::ranges::fill(dst, 0.5f); },
                                  UnitSchedule::training(layout.unit_count())),
                      ContainsSubstring("optimizer = \"host\""));
}

TEST_CASE("GpuTrainStep's first step matches the float64 loss, gradients and AdamW", "[gpu]") {
    require_gpu();
    std::map<std::string, Worst> worst;  // by dtype and attention
    for (const ModelConfig& model : {head25_model(), head80_model()}) {
        for (const int seq : {1, 33, 90, 777}) {
            for (const float p : {0.0f, 0.1f}) {
                for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
                    // The epilogues' variants without and with flash attention; at 777 positions
                    // (one sequence: its float64 reference takes seconds) the two ends only.
                    for (const Variant variant : {Variant{}, Variant{Fusion::flash_attention},
                                                  Variant{Fusion::mlp_epilogue, Fusion::proj_epilogue},
                                                  kTrainingFusions}) {
                        if (seq == 777 && variant != Variant{} && variant != kTrainingFusions) continue;
                        const Case c{model, seq == 777 ? 1 : 2, seq, dtype, variant, p};
                        try {
                            check_first_step(c, worst[std::string(enum_name(dtype)) + " " + variant.text()]);
                        } catch (const std::exception& e) {
                            FAIL_CHECK(c.name() << ": " << e.what());
                        }
                    }
                }
            }
        }
    }
    for (const auto& [what, w] : worst)
        std::printf("gpu_train first step, worst relative L2 error, %-50s loss %.3g gradient %.3g update %.3g\n",
                    what.c_str(), w.loss, w.gradient, w.update);
}

// The products as three TF32 products of split operands keep fp32's tolerance, the epilogues'
// (the GELU's kept input forward, its derivative backward, the residual) included.
TEST_CASE("GpuTrainStep's first step with split_tf32 GEMMs matches the float64 reference within fp32's tolerance",
          "[gpu]") {
    require_gpu();
    std::map<std::string, Worst> worst;
    for (const ModelConfig& model : {head25_model(), head80_model()}) {
        for (const int seq : {1, 33, 90}) {
            for (const float p : {0.0f, 0.1f}) {
                for (const Variant variant : {Variant{}, Variant{Fusion::mlp_epilogue, Fusion::proj_epilogue},
                                              kTrainingFusions}) {
                    Case c{model, 2, seq, DType::fp32, variant, p};
                    c.fp32_gemm = Fp32Gemm::split_tf32;
                    try {
                        check_first_step(c, worst[variant.text()]);
                    } catch (const std::exception& e) {
                        FAIL_CHECK(c.name() << ": " << e.what());
                    }
                }
            }
        }
    }
    for (const auto& [what, w] : worst)
        std::printf("gpu_train first step, split_tf32, worst relative L2 error, %-50s loss %.3g gradient %.3g "
                    "update %.3g\n",
                    what.c_str(), w.loss, w.gradient, w.update);
}

TEST_CASE("every recompute setting's first step matches the float64 loss, gradients and AdamW", "[gpu]") {
    require_gpu();
    std::map<std::string, Worst> worst;  // by setting
    for (const Recompute recompute : {Recompute::none, Recompute::attention, Recompute::mlp, Recompute::block}) {
        for (const float p : {0.0f, 0.1f}) {
            for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
                for (const Variant variant : {Variant{}, Variant{Fusion::flash_attention}, kTrainingFusions}) {
                    const Case c{head80_model(), 2, 90, dtype, variant, p, recompute};
                    try {
                        check_first_step(c, worst[std::string(enum_name(recompute))]);
                    } catch (const std::exception& e) {
                        FAIL_CHECK(c.name() << ": " << e.what());
                    }
                }
            }
        }
    }
    for (const auto& [what, w] : worst)
        std::printf("gpu_train first step, worst relative L2 error, recompute %-10s loss %.3g gradient %.3g update %.3g\n",
                    what.c_str(), w.loss, w.gradient, w.update);
}

TEST_CASE("every recompute setting's first step equals gelu's: bit for bit where the kernels are deterministic",
          "[gpu]") {
    require_gpu();
    for (const ModelConfig& model : {head25_model(), head80_model()}) {
        for (const int seq : {1, 33, 90}) {
            for (const float p : {0.0f, 0.1f}) {
                for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
                    // The epilogues without flash attention tell the GELU's two kernels apart
                    // where every other kernel is deterministic; under inplace_gelu every setting
                    // takes the GELU's output from one kernel.
                    for (const Variant variant : {Variant{}, Variant{Fusion::flash_attention},
                                                  Variant{Fusion::mlp_epilogue, Fusion::proj_epilogue},
                                                  Variant{Fusion::mlp_epilogue, Fusion::proj_epilogue,
                                                          Fusion::inplace_gelu},
                                                  kTrainingFusions}) {
                        const Case c{model, 2, seq, dtype, variant, p};
                        try {
                            check_recompute_settings(c);
                        } catch (const std::exception& e) {
                            FAIL_CHECK(c.name() << ": " << e.what());
                        }
                    }
                }
            }
        }
    }
}

TEST_CASE("inplace_ln's first step equals the same cell's without it, at every recompute setting", "[gpu]") {
    require_gpu();
    const Variant epilogues{Fusion::flash_attention, Fusion::mlp_epilogue, Fusion::proj_epilogue};
    for_each_odd_case({Variant{}, epilogues},
                      {Recompute::none, Recompute::gelu, Recompute::attention, Recompute::mlp, Recompute::block},
                      [](const Case& c) { check_inplace_ln(c, c.variant.with(Fusion::inplace_ln)); });
}

TEST_CASE("inplace_gelu's first step equals the same cell's without it, at every recompute setting", "[gpu]") {
    require_gpu();
    // Without and with mlp_epilogue (whose GELU epilogue inplace_gelu replaces), with the other
    // training fusions, and beside inplace_ln. none and gelu keep the same under inplace_gelu,
    // attention too for the GELU; mlp and block recompute its output and bits.
    const Variant epilogues{Fusion::flash_attention, Fusion::mlp_epilogue, Fusion::proj_epilogue};
    for_each_odd_case({Variant{}, Variant{Fusion::mlp_epilogue, Fusion::proj_epilogue}, epilogues,
                       epilogues.with(Fusion::inplace_ln)},
                      {Recompute::gelu, Recompute::attention, Recompute::mlp, Recompute::block}, check_inplace_gelu);
}

TEST_CASE("inplace_ln refuses to update on a LayerNorm weight too small to divide by, naming the LayerNorm", "[gpu]") {
    require_gpu();
    const ModelConfig model = head25_model();
    const WeightLayout layout = WeightLayout::for_model(model);
    auto units = rounded_units(model, layout, DType::bf16);
    // Block 1's ln_2 weight, channel 5.
    const UnitLayout& block1 = layout.units[as_size(WeightLayout::block_unit(1))];
    units[as_size(WeightLayout::block_unit(1))][as_size(block1.tensors[gpt2::block_tensor::ln2_w].offset + 5)] = 0.0f;
    for (const bool inplace : {false, true}) {
        INFO("inplace_ln " << inplace);
        const Case c{model, 2, 33, DType::bf16, inplace ? Variant{Fusion::inplace_ln} : Variant{}, 0.0f};
        CudaStream stream;
        const auto backend = placed_backend(layout, units, c.dtype, stream.get());
        GpuTrainStep step(model, layout, c.dtype, BatchShape::rectangular(c.batch, c.seq), stream.get(),
                          options_for(c, test_settings()));
        step.set_batch(ids(model, 66, 1), ids(model, 66, 2));
        step.forward(*backend);
        step.backward(*backend);
        if (inplace) {
            CHECK_THROWS_WITH(step.update(*backend),
                              ContainsSubstring("block 1's ln_2") && ContainsSubstring("without inplace_ln"));
            CHECK(step.steps() == 0);
        } else {
            // Without inplace_ln a zero weight is an ordinary one.
            CHECK(std::isfinite(step.grad_norm()));
        }
    }
}

namespace {

// 20 steps of `c` (its batch, seq and dropout) on one batch of ids, at lr 3e-3, beside
// CpuTrainStep's from the same weights, the trajectory a correct step follows: in fp32 each loss
// within 1e-3 of the host's; in every dtype the last loss below 0.8 of the first.
void check_follows_host(const Case& c) {
    INFO(c.name());
    const WeightLayout layout = WeightLayout::for_model(c.model);
    const int n = c.batch * c.seq, steps = 20;
    const auto tokens = ids(c.model, n, 3), targets = ids(c.model, n, 4);
    TrainSettings settings = test_settings();
    settings.lr = 3e-3f;
    const auto units = rounded_units(c.model, layout, c.dtype);
    CudaStream stream;
    const auto backend = placed_backend(layout, units, c.dtype, stream.get());
    GpuTrainStep step(c.model, layout, c.dtype, BatchShape::rectangular(c.batch, c.seq), stream.get(),
                      options_for(c, settings));
    step.set_batch(tokens, targets);
    HostBackend host;
    host.place(
        layout, [&](int u, std::span<float> dst) { std::ranges::copy(units[as_size(u)], dst.begin()); },
        UnitSchedule::training(layout.unit_count()));
    CpuTrainStep cpu(c.model, layout, BatchShape::rectangular(c.batch, c.seq), Dropout{.p = c.dropout, .seed = kSeed}, settings);
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
        step.forward(*backend);
        step.backward(*backend);
        step.update(*backend);
        losses.push_back(step.loss());
        const double cpu_loss = cpu.step(host, tokens, targets).loss;
        // The trajectories part as the rounding of the dtype compounds over the steps; a skipped
        // fp16 step delays the GPU's by one.
        if (c.dtype == DType::fp32) CHECK(std::abs(losses.back() - cpu_loss) <= 1e-3 * cpu_loss);
    }
    INFO("first loss " << losses.front() << ", last " << losses.back());
    CHECK(losses.back() < 0.8 * losses.front());
    CHECK(step.steps() + step.skipped_steps() == steps);
    std::printf("gpu_train %-60s loss %.4f -> %.4f (%d skipped)\n", c.name().c_str(), losses.front(), losses.back(),
                step.skipped_steps());
}

}  // namespace

TEST_CASE("GpuTrainStep's losses follow CpuTrainStep's over 20 steps and fall", "[gpu]") {
    require_gpu();
    for (const Variant variant : {Variant{}, kTrainingFusions}) {
        for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
            const Case c{head25_model(), 2, 33, dtype, variant, 0.1f};
            try {
                check_follows_host(c);
            } catch (const std::exception& e) {
                FAIL_CHECK(c.name() << ": " << e.what());
            }
        }
    }
}

TEST_CASE("GpuTrainStep's activation_bytes is what activation_bytes_for computes", "[gpu]") {
    require_gpu();
    CudaStream stream;
    // Each family's model with every variant of these its training step takes (LLaMA's: baseline
    // and flash_attention), over grouped kv heads too.
    for (const ModelConfig& model : {head80_model(), test::llama_hd80(), test::builtin("tiny_llama_odd")}) {
        const WeightLayout layout = WeightLayout::for_model(model);
        for (const Variant variant : {Variant{}, Variant{Fusion::flash_attention}, Variant{Fusion::inplace_ln},
                                      Variant{Fusion::flash_attention, Fusion::inplace_ln}, Variant{Fusion::inplace_gelu},
                                      Variant{Fusion::flash_attention, Fusion::inplace_ln, Fusion::inplace_gelu}}) {
            if (!variant.within(compute_of(model.family).gpu_training_fusions)) continue;
            for (const Recompute recompute : {Recompute::none, Recompute::gelu, Recompute::attention, Recompute::mlp,
                                              Recompute::block}) {
                INFO(model.name << ", " << variant.text() << ", recompute " << enum_name(recompute));
                GpuTrainOptions o;
                o.variant = variant;
                o.recompute = recompute;
                // Ragged shapes with the flash attention, the only attention they train with.
                std::vector<BatchShape> shapes = {BatchShape::rectangular(3, 40)};
                if (variant.has(Fusion::flash_attention)) {
                    shapes.push_back(BatchShape::ragged({5, 40, 12}, Packing::padded));
                    shapes.push_back(BatchShape::ragged({5, 40, 12}, Packing::packed));
                }
                for (const BatchShape& shape : shapes) {
                    const GpuTrainStep step(model, layout, DType::bf16, shape, stream.get(), o);
                    CHECK(step.activation_bytes() ==
                          GpuTrainStep::activation_bytes_for(model, DType::bf16, shape, o.variant, recompute));
                }
            }
        }
    }
}

TEST_CASE("GpuTrainStep::activation_bytes_for grows with the kept activations", "[gpu_train]") {
    // Per layer and row, in the dtype: ln1 (C), qkv (3C), att (C), x_mid (C), ln2 (C), fc_pre (4C),
    // fc (4C) and the block's output (C), 16C, less what the setting recomputes: fc (gelu: 12C),
    // att (attention: 11C), ln2 and fc_pre (mlp: 6C), ln1, qkv and x_mid (block: 1C). With
    // inplace_ln, neither x_mid nor the block's output (the next one's input) but where a setting
    // recomputes from them: 2C less for none, gelu and attention (14C, 10C, 9C); mlp keeps ln2
    // instead of x_mid and not the block's output (5C); block as before (1C); and ln_1's and
    // ln_2's fp32 rstd, B·T·4 bytes each, where ln1 and ln2 are kept (not under block). Each unit
    // adds the norm's 1024 double partials; flash_attention adds the layer's fp32 logsumexp
    // [B, H, T] where att is kept. What is recomputed is one buffer whatever the layers: a second
    // layer adds none of it. Every size here is a multiple of the arena's 256-byte alignment.
    ModelConfig one = head25_model(), two = head25_model();
    one.n_layer = 1;
    const std::int64_t b = 2, t = 64, c = one.n_embd, h = one.n_head;
    struct Kept {
        Recompute recompute;
        std::int64_t values, values_inplace;
    };
    const Kept kept_per_row[] = {{Recompute::none, 16, 14},
                                 {Recompute::gelu, 12, 10},
                                 {Recompute::attention, 11, 9},
                                 {Recompute::mlp, 6, 5},
                                 {Recompute::block, 1, 1}};
    for (const bool flash : {false, true}) {
        for (const bool inplace : {false, true}) {
            Variant v = flash ? Variant{Fusion::flash_attention} : Variant{};
            if (inplace) v = flash ? Variant{Fusion::flash_attention, Fusion::inplace_ln} : Variant{Fusion::inplace_ln};
            for (const auto& [recompute, values, values_inplace] : kept_per_row) {
                INFO(v.text() << ", recompute " << enum_name(recompute));
                const bool lse_kept = flash && recompute < Recompute::attention;
                const bool rstd_kept = inplace && recompute != Recompute::block;
                const std::int64_t added =
                    GpuTrainStep::activation_bytes_for(two, DType::bf16, BatchShape::rectangular(2, 64), v, recompute) -
                    GpuTrainStep::activation_bytes_for(one, DType::bf16, BatchShape::rectangular(2, 64), v, recompute);
                CHECK(added == (inplace ? values_inplace : values) * c * b * t * 2 + 1024 * 8 +
                                   (lse_kept ? b * h * t * 4 : 0) + (rstd_kept ? 2 * b * t * 4 : 0));
            }
        }
    }
}

TEST_CASE("TrainArena: what a setting keeps has a buffer per layer, what it recomputes one in the dead scratch",
          "[gpu_train]") {
    // Which activations each setting recomputes, by recompute.hpp's ladder; under inplace_gelu the
    // GELU's branch bits in place of its input, and both they and its output first at mlp.
    const ModelConfig model = head80_model();
    for (const bool inplace_gelu : {false, true}) {
        std::map<std::string, Recompute> first_recomputed = {
            {"fc", Recompute::gelu},  {"att", Recompute::attention}, {"lse", Recompute::attention},
            {"ln2", Recompute::mlp},  {"fc_pre", Recompute::mlp},    {"ln1", Recompute::block},
            {"qkv", Recompute::block}, {"x_mid", Recompute::block}};
        if (inplace_gelu) {
            first_recomputed.erase("fc_pre");
            first_recomputed["fc"] = Recompute::mlp;
            first_recomputed["gelu_branch"] = Recompute::mlp;
        }
        const Variant variant = inplace_gelu ? Variant{Fusion::flash_attention, Fusion::inplace_gelu}
                                             : Variant{Fusion::flash_attention};
        for (const Recompute recompute :
             {Recompute::none, Recompute::gelu, Recompute::attention, Recompute::mlp, Recompute::block}) {
            const TrainArena a(model, DType::fp16, BatchShape::rectangular(2, 24), variant, recompute);
            std::map<std::string, const std::vector<std::int64_t>*> entries = {
                {"fc", &a.fc},         {"att", &a.att}, {"lse", &a.lse}, {"ln2", &a.ln2},
                {"fc_pre", &a.fc_pre}, {"ln1", &a.ln1}, {"qkv", &a.qkv}, {"x_mid", &a.x_mid},
                {"gelu_branch", &a.gelu_branch}};
            CHECK(a.resid.size() == as_size(model.n_layer + 1));
            // What the variant does without has no entry.
            CHECK((inplace_gelu ? a.fc_pre : a.gelu_branch).empty());
            entries.erase(inplace_gelu ? "fc_pre" : "gelu_branch");
            for (const auto& [name, offsets] : entries) {
                INFO(variant.text() << ", recompute " << enum_name(recompute) << ", " << name);
                REQUIRE(offsets->size() == as_size(model.n_layer));
                const std::set<std::int64_t> distinct(offsets->begin(), offsets->end());
                if (recompute >= first_recomputed.at(name)) {
                    // Shared by every layer, in the scratch the embedding's backward takes at the end.
                    CHECK(distinct.size() == 1);
                    CHECK(offsets->front() >= a.scratch);
                    CHECK(offsets->front() < a.dres);
                } else {
                    CHECK(distinct.size() == as_size(model.n_layer));
                    CHECK(*distinct.rbegin() < a.resid.front());
                }
            }
        }
    }
}

TEST_CASE("TrainArena with inplace_ln: the residual stream kept only where a setting recomputes from it",
          "[gpu_train]") {
    // recompute.hpp's inplace_ln table: x_mid is never kept; ln2 and both rstd are kept but under
    // block (ln2 even under mlp, which recomputes from it); each block's input is kept under block
    // only; ln_f's input (the last block's output) never; ln_f's rstd always.
    const ModelConfig model = head80_model();
    const std::size_t layers = as_size(model.n_layer);
    for (const Recompute recompute :
         {Recompute::none, Recompute::gelu, Recompute::attention, Recompute::mlp, Recompute::block}) {
        INFO("recompute " << enum_name(recompute));
        const TrainArena a(model, DType::bf16, BatchShape::rectangular(2, 24), Variant{Fusion::inplace_ln}, recompute);
        const auto shared = [&](const std::vector<std::int64_t>& entry) {
            REQUIRE(entry.size() == layers);
            const std::set<std::int64_t> distinct(entry.begin(), entry.end());
            return distinct.size() == 1 && entry.front() >= a.scratch && entry.front() < a.dres;
        };
        const auto own = [&](const std::vector<std::int64_t>& entry) {
            REQUIRE(entry.size() == layers);
            const std::set<std::int64_t> distinct(entry.begin(), entry.end());
            return distinct.size() == layers && *distinct.rbegin() < a.scratch;
        };
        const bool block = recompute == Recompute::block;
        CHECK(shared(a.x_mid));
        CHECK((block ? shared(a.ln2) : own(a.ln2)));
        CHECK((block ? shared(a.ln1_rstd) : own(a.ln1_rstd)));
        CHECK((block ? shared(a.ln2_rstd) : own(a.ln2_rstd)));
        CHECK((recompute >= Recompute::mlp ? shared(a.fc_pre) : own(a.fc_pre)));
        REQUIRE(a.resid.size() == layers + 1);
        const std::vector<std::int64_t> inputs(a.resid.begin(), a.resid.end() - 1);
        CHECK((block ? own(inputs) : shared(inputs)));
        CHECK(a.resid.back() >= a.scratch);
        CHECK(a.resid.back() < a.dres);
        if (!block) CHECK(a.resid.back() == a.resid.front());
        CHECK(a.lnf_rstd > a.xf);
        CHECK(a.lnf_rstd < a.scratch);
        CHECK(a.unrecoverable > a.squared_norm);
        // The stream, x_mid and what is recomputed are distinct buffers in the scratch.
        std::set<std::int64_t> scratch_buffers = {a.resid.back(), a.x_mid.front()};
        if (block) scratch_buffers.insert({a.ln1.front(), a.ln2.front(), a.ln1_rstd.front(), a.ln2_rstd.front()});
        CHECK(scratch_buffers.size() == (block ? 6u : 2u));
    }
}

TEST_CASE("inplace_gelu keeps the GELU's output and C/2 bytes of bits a row in place of its input", "[gpu_train]") {
    // head25 (C = 50, H = 2) at batch 2 × seq 128, bf16: a [B·T, C] buffer is 256 · 50 · 2 = 25600
    // bytes, the bits of [B·T, 4C] 256 · 200 / 8 = 6400, flash's logsumexp 2 · 2 · 128 · 4 = 2048,
    // each a multiple of the arena's 256-byte alignment. Per layer (what a second layer adds) the
    // kept values are as recompute.hpp's table says, 12C at none and gelu, 11C at attention, 6C at
    // mlp and 1C at block, with the bits below mlp, the norm's 1024 double partials, and the
    // logsumexp where it is kept. Against the same cell without inplace_gelu a layer keeps the
    // bits and not the pre-activation (4C) at none; the bits besides what gelu and attention keep
    // (their GELU output is kept now, and its one buffer in the scratch gone); the same at mlp
    // and block, which keep neither.
    ModelConfig one = head25_model(), two = head25_model();
    one.n_layer = 1;
    const std::int64_t row = 25600, bits = 6400, lse = 2048, partials = 1024 * 8;
    const auto per_layer = [&](const Variant& v, Recompute recompute) {
        return GpuTrainStep::activation_bytes_for(two, DType::bf16, BatchShape::rectangular(2, 128), v, recompute) -
               GpuTrainStep::activation_bytes_for(one, DType::bf16, BatchShape::rectangular(2, 128), v, recompute);
    };
    struct Expected {
        Recompute recompute;
        std::int64_t rows_kept, bits_kept, change;
    };
    const Expected expected[] = {{Recompute::none, 12, bits, bits - 4 * row},
                                 {Recompute::gelu, 12, bits, bits},
                                 {Recompute::attention, 11, bits, bits},
                                 {Recompute::mlp, 6, 0, 0},
                                 {Recompute::block, 1, 0, 0}};
    for (const bool flash : {false, true}) {
        const Variant without = flash ? Variant{Fusion::flash_attention} : Variant{};
        const Variant with = flash ? Variant{Fusion::flash_attention, Fusion::inplace_gelu} : Variant{Fusion::inplace_gelu};
        for (const Expected& e : expected) {
            INFO("flash " << flash << ", recompute " << enum_name(e.recompute));
            const bool lse_kept = flash && e.recompute < Recompute::attention;
            CHECK(per_layer(with, e.recompute) == e.rows_kept * row + e.bits_kept + partials + (lse_kept ? lse : 0));
            CHECK(per_layer(with, e.recompute) - per_layer(without, e.recompute) == e.change);
        }
    }
}

TEST_CASE("GpuTrainStep refuses fusions it has no training kernels for, before touching a GPU", "[gpu_train]") {
    const ModelConfig model = head80_model();
    const WeightLayout layout = WeightLayout::for_model(model);
    GpuTrainOptions o;
    o.variant = Variant{Fusion::residual_ln, Fusion::flash_attention};
    CHECK_THROWS_AS(GpuTrainStep(model, layout, DType::bf16, BatchShape::rectangular(1, 8), nullptr, o),
                    std::invalid_argument);
    // n_embd 50 · 4 = 200 is a multiple of 8; 45 · 4 = 180 is not.
    const ModelConfig odd{"odd", 1, 45, 3, 97, 96, 1e-5f};
    o.variant = Variant{Fusion::mlp_epilogue};
    CHECK_THROWS_AS(
        GpuTrainStep(odd, WeightLayout::for_model(odd), DType::bf16, BatchShape::rectangular(1, 8), nullptr, o),
        std::invalid_argument);
}

namespace {

// LLaMA's training test models: grouped-query attention 4 / 2 at head dimension 16 (tiny_llama),
// one kv head at 48 with Llama 3's rotary scaling (tiny_llama_odd, at most 64 positions), 6 / 3
// at 80 (the tensor-core kernels' odd one), and multi-head attention at 32.
std::vector<ModelConfig> llama_models() {
    return {test::builtin("tiny_llama"), test::builtin("tiny_llama_odd"), test::llama_hd80(), test::llama_mha()};
}

// The variants LLaMA's training step takes (llama_compute.cpp): the materialised attention over
// grouped heads and the flash one.
const Variant kLlamaVariants[] = {Variant{}, Variant{Fusion::flash_attention}};

}  // namespace

TEST_CASE("LLaMA's GPU training step: the first step matches the float64 loss, gradients and AdamW",
          "[gpu][llama]") {
    require_gpu();
    std::map<std::string, Worst> worst;  // by dtype and attention
    for (const ModelConfig& model : llama_models()) {
        for (const int seq : {1, 33, 64}) {
            for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
                for (const Variant& variant : kLlamaVariants) {
                    const Case c{model, 2, seq, dtype, variant, 0.0f};
                    try {
                        check_first_step(c, worst[std::string(enum_name(dtype)) + " " + variant.text()]);
                    } catch (const std::exception& e) {
                        FAIL_CHECK(c.name() << ": " << e.what());
                    }
                }
            }
            // fp32's GEMMs as three TF32 products keep fp32's tolerance.
            for (const Variant& variant : kLlamaVariants) {
                Case c{model, 2, seq, DType::fp32, variant, 0.0f};
                c.fp32_gemm = Fp32Gemm::split_tf32;
                try {
                    check_first_step(c, worst["split_tf32 " + variant.text()]);
                } catch (const std::exception& e) {
                    FAIL_CHECK(c.name() << ": " << e.what());
                }
            }
        }
    }
    for (const auto& [what, w] : worst)
        std::printf("gpu_train llama first step, worst relative L2 error, %-30s loss %.3g gradient %.3g update %.3g\n",
                    what.c_str(), w.loss, w.gradient, w.update);
}

TEST_CASE("LLaMA's every recompute setting matches the float64 reference and equals gelu's, bit for bit where the "
          "kernels are deterministic", "[gpu][llama]") {
    require_gpu();
    std::map<std::string, Worst> worst;  // by setting
    for (const ModelConfig& model : llama_models()) {
        for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
            for (const Variant& variant : kLlamaVariants) {
                const Case gelu{model, 2, 33, dtype, variant, 0.0f};
                try {
                    for (const Recompute recompute :
                         {Recompute::none, Recompute::attention, Recompute::mlp, Recompute::block}) {
                        Case c = gelu;
                        c.recompute = recompute;
                        check_first_step(c, worst[std::string(enum_name(recompute))]);
                    }
                    check_recompute_settings(gelu);
                } catch (const std::exception& e) {
                    FAIL_CHECK(gelu.name() << ": " << e.what());
                }
            }
        }
    }
    for (const auto& [what, w] : worst)
        std::printf("gpu_train llama first step, worst relative L2 error, recompute %-10s loss %.3g gradient %.3g "
                    "update %.3g\n",
                    what.c_str(), w.loss, w.gradient, w.update);
}

TEST_CASE("LLaMA's GPU losses follow CpuTrainStep's over 20 steps and fall", "[gpu][llama]") {
    require_gpu();
    for (const ModelConfig& model : {test::builtin("tiny_llama"), test::builtin("tiny_llama_odd")}) {
        for (const Variant& variant : kLlamaVariants) {
            for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
                const Case c{model, 2, 33, dtype, variant, 0.0f};
                try {
                    check_follows_host(c);
                } catch (const std::exception& e) {
                    FAIL_CHECK(c.name() << ": " << e.what());
                }
            }
        }
    }
}

TEST_CASE("LLaMA's GPU training step with the optimizer on the host: the first step's update is the device "
          "optimizer's", "[gpu][llama]") {
    require_gpu();
    for (const ModelConfig& model : llama_models()) {
        for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
            // The materialised attention: deterministic, so both updates start from the same bits.
            const Case c{model, 2, 33, dtype, Variant{}, 0.0f};
            try {
                check_host_optimizer(c);
            } catch (const std::exception& e) {
                FAIL_CHECK(c.name() << ": " << e.what());
            }
        }
    }
}

TEST_CASE("LLaMA's GPU training step refuses what it has no kernels for, before touching a GPU", "[gpu_train][llama]") {
    const ModelConfig model = test::builtin("tiny_llama");
    const WeightLayout layout = WeightLayout::for_model(model);
    for (const Variant& variant : {Variant{Fusion::softmax}, Variant{Fusion::proj_epilogue},
                                   Variant{Fusion::mlp_epilogue}, Variant{Fusion::inplace_ln},
                                   Variant{Fusion::inplace_gelu}, Variant{Fusion::flash_attention, Fusion::inplace_ln}}) {
        INFO(variant.text());
        GpuTrainOptions o;
        o.variant = variant;
        CHECK_THROWS_WITH(GpuTrainStep(model, layout, DType::bf16, BatchShape::rectangular(1, 8), nullptr, o),
                          ContainsSubstring("has kernels for the fusions flash_attention only"));
    }
    GpuTrainOptions dropped;
    dropped.dropout = Dropout{.p = 0.1f, .seed = kSeed};
    CHECK_THROWS_WITH(GpuTrainStep(model, layout, DType::bf16, BatchShape::rectangular(1, 8), nullptr, dropped),
                      ContainsSubstring("no dropout"));
}

// Ragged batches (batch_shape.hpp): the same sequences padded to the longest, padded to a stride
// beyond it and packed, each first step against the float64 step of each sequence alone (the loss
// the mean over the real tokens, reference_gradients over the shape). Head dimensions 25 and 48
// (the CUDA-core backward), 80 (tensor cores; 3xTF32 in fp32), 128 (in bf16 the form whose
// products are split over the warps in two dimensions), multi-head and grouped kv heads (the
// shares' padding rows), recomputing nothing of the attention and all of it (the attention's
// output then in the scratch the embedding backward reuses).
TEST_CASE("GpuTrainStep over ragged batches, padded and packed, matches the float64 step of each sequence alone",
          "[gpu][ragged]") {
    require_gpu();
    const std::vector<int> lengths = {7, 33, 1, 20};
    const BatchShape shapes[] = {BatchShape::ragged(lengths, Packing::padded),
                                 BatchShape::ragged(lengths, Packing::padded, 40),
                                 BatchShape::ragged(lengths, Packing::packed)};
    std::map<std::string, Worst> worst;  // by dtype and packing
    for (const ModelConfig& model :
         {head25_model(), head80_model(), head128_model(), test::builtin("tiny_llama_odd"), test::llama_hd80()}) {
        const bool llama = model.family == ModelFamily::llama;
        for (const DType dtype : {DType::fp32, DType::bf16}) {
            for (const Variant variant : {Variant{Fusion::flash_attention}, kTrainingFusions}) {
                if (llama && variant != Variant{Fusion::flash_attention}) continue;
                for (const Recompute recompute : {Recompute::none, Recompute::block}) {
                    for (const BatchShape& shape : shapes) {
                        Case c{model, shape.batch(), shape.stride(), dtype, variant, 0.0f, recompute};
                        c.ragged = shape;
                        try {
                            check_first_step(
                                c,
                                worst[std::string(enum_name(dtype)) + " " + std::string(enum_name(shape.packing()))]);
                        } catch (const std::exception& e) {
                            FAIL_CHECK(c.name() << ": " << e.what());
                        }
                    }
                }
            }
        }
    }
    for (const auto& [what, w] : worst)
        std::printf("gpu_train ragged first step, worst relative L2 error, %-20s loss %.3g gradient %.3g update %.3g\n",
                    what.c_str(), w.loss, w.gradient, w.update);
}

TEST_CASE("GpuTrainStep refuses a ragged batch without the flash attention, or with dropout, before touching a GPU",
          "[gpu_train][ragged]") {
    const BatchShape ragged = BatchShape::ragged({3, 8}, Packing::packed);
    for (const ModelConfig& model : {head25_model(), test::builtin("tiny_llama")}) {
        INFO(model.name);
        const WeightLayout layout = WeightLayout::for_model(model);
        CHECK_THROWS_WITH(GpuTrainStep(model, layout, DType::bf16, ragged, nullptr, GpuTrainOptions{}),
                          ContainsSubstring("runs ragged batches with the flash_attention fusion only"));
    }
    const WeightLayout layout = WeightLayout::for_model(head25_model());
    GpuTrainOptions dropped;
    dropped.variant = Variant{Fusion::flash_attention};
    dropped.dropout = Dropout{.p = 0.1f, .seed = kSeed};
    CHECK_THROWS_WITH(GpuTrainStep(head25_model(), layout, DType::bf16, ragged, nullptr, dropped),
                      ContainsSubstring("dropout needs a rectangular batch"));
}
