#include "harness/measure/step_check.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "backends/backend_registry.hpp"
#include "harness/measure/cell_weights.hpp"
#include "kernels/compute/reference_forward.hpp"
#include "kernels/compute/reference_gradients.hpp"
#include "kernels/compute/reference_optimizer.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/model_family.hpp"
#include "kernels/model/model_fields.hpp"

namespace sweetspot {
namespace {

// A forward and its backward in the float64 loops: the backward costs about twice the forward.
double step_macs(const ModelConfig& model, const BatchShape& shape) {
    return 3.0 * reference_forward_macs(model, shape);
}

// The sample laid out as a model's weights: each run a tensor of the packed sampled values, with
// its tensor's weight decay, so the float64 AdamW updates exactly the sampled elements.
WeightLayout sample_layout(const GradientSample& sample) {
    WeightLayout layout;
    for (const auto& runs : sample.units) {
        UnitLayout& unit = layout.units.emplace_back();
        for (const SampleRun& run : runs) {
            TensorSpec t;
            t.shape = run.decays ? std::vector<std::int64_t>{1, run.count} : std::vector<std::int64_t>{run.count};
            t.offset = unit.numel;
            t.numel = run.count;
            unit.tensors.push_back(t);
            unit.numel += run.count;
        }
        layout.total_numel += unit.numel;
    }
    return layout;
}

UnitValues as_double(const std::vector<std::vector<float>>& units) {
    UnitValues out;
    for (const auto& u : units) out.emplace_back(u.begin(), u.end());
    return out;
}

// The float64 reference of a checked step: its loss, the norm of all its gradients and their sample.
struct SampledReference {
    double loss = 0, grad_norm = 0;
    UnitValues gradients;
};

SampledReference sampled_reference(const CellParams& cell, const WeightLayout& layout, const CheckedStep& step) {
    std::vector<const float*> units;
    for (const auto& u : step.weights) units.push_back(u.data());
    const Dropout dropout = cell.dropout_masks();
    SampledReference ref;
    ref.gradients.resize(layout.units.size());
    double squares = 0;
    const auto keep = [&](int u, std::span<const double> gradient) {
        for (const double g : gradient) squares += g * g;
        for (const SampleRun& run : step.sample.units[static_cast<std::size_t>(u)])
            for (std::int64_t k = 0; k < run.count; ++k)
                ref.gradients[static_cast<std::size_t>(u)].push_back(gradient[static_cast<std::size_t>(run.offset + k * run.stride)]);
    };
    if (step.check.shape.batch() == 1) {
        // One sequence: each unit's gradient is sampled as soon as it is final, so a large model
        // never holds 8 bytes per parameter.
        ref.loss = reference_gradients_by_unit(cell.model, layout, units, step.tokens, step.targets, dropout, keep);
    } else {
        const ReferenceGradients full =
            reference_gradients(cell.model, layout, units, step.tokens, step.targets, step.check.shape, dropout);
        ref.loss = full.loss;
        for (std::size_t u = 0; u < full.units.size(); ++u) keep(static_cast<int>(u), full.units[u]);
    }
    ref.grad_norm = std::sqrt(squares);
    return ref;
}

// kept_training_key for a prefix step's ids.
std::optional<std::string> training_key(const CellParams& cell, const TrainingCheckShape& check,
                                        std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) {
    if (check.full || cell.weights != kSyntheticWeights || !backend_traits(cell.backend).needs_gpu) return std::nullopt;
    const ModelConfig& m = cell.model;
    std::ostringstream text;
    text << std::hexfloat << "float64 training reference 2|model " << m.name << ' ' << model_fields_text(m) << "|seed "
         << cell.seed << "|dtype " << enum_name(cell.dtype) << "|dropout " << cell.dropout << "|positions "
         << check.shape.stride()
         << "|sample " << kSampledPerTensor << "|tokens";
    for (const std::int32_t t : tokens) text << ' ' << t;
    text << "|targets";
    for (const std::int32_t t : targets) text << ' ' << t;
    return fnv1a64_hex(text.str());
}

// A reference as the database keeps it: one row of fp32 values, the loss, the norm, the sample.
ReferenceLogits packed(const std::string& key, const CellParams& cell, const SampledReference& ref) {
    std::vector<float> values{static_cast<float>(ref.loss), static_cast<float>(ref.grad_norm)};
    for (const auto& unit : ref.gradients)
        for (const double g : unit) values.push_back(static_cast<float>(g));
    const auto n = static_cast<int>(values.size());
    return {key, cell.model.name, 1, 1, n, std::move(values)};
}

SampledReference unpacked(const ReferenceLogits& kept, const GradientSample& sample) {
    SampledReference ref;
    ref.loss = kept.logits[0];
    ref.grad_norm = kept.logits[1];
    std::size_t at = 2;
    for (std::size_t u = 0; u < sample.units.size(); ++u) {
        const auto n = static_cast<std::size_t>(sample.values(static_cast<int>(u)));
        ref.gradients.emplace_back(kept.logits.begin() + static_cast<std::ptrdiff_t>(at),
                                   kept.logits.begin() + static_cast<std::ptrdiff_t>(at + n));
        at += n;
    }
    return ref;
}

std::int64_t largest_unit(const WeightLayout& layout) {
    std::int64_t most = 0;
    for (const UnitLayout& u : layout.units) most = std::max(most, u.numel);
    return most;
}

}  // namespace

std::optional<TrainingCheckShape> training_check_shape(const CellParams& cell, double max_macs) {
    const BatchShape shape = cell.batch_shape();
    if (step_macs(cell.model, shape) <= max_macs) return TrainingCheckShape{shape, true};
    const auto prefix = [](int n) { return BatchShape::rectangular(1, n); };
    const int least = std::min(shape.length(0), kLeastPrefixPositions);
    int seq = std::min(shape.length(0), kMostPrefixPositions);
    while (seq > least && step_macs(cell.model, prefix(seq)) > max_macs) --seq;
    if (step_macs(cell.model, prefix(seq)) > kMaxPrefixCheckMacs) return std::nullopt;
    return TrainingCheckShape{prefix(seq), false};
}

std::int64_t GradientSample::values(int unit) const {
    std::int64_t n = 0;
    for (const SampleRun& run : units[static_cast<std::size_t>(unit)]) n += run.count;
    return n;
}

std::int64_t GradientSample::values() const {
    std::int64_t n = 0;
    for (std::size_t u = 0; u < units.size(); ++u) n += values(static_cast<int>(u));
    return n;
}

std::vector<float> GradientSample::take(int unit, const float* unit_values) const {
    std::vector<float> out;
    out.reserve(static_cast<std::size_t>(values(unit)));
    for (const SampleRun& run : units[static_cast<std::size_t>(unit)])
        for (std::int64_t k = 0; k < run.count; ++k) out.push_back(unit_values[run.offset + k * run.stride]);
    return out;
}

GradientSample every_element(const WeightLayout& layout) {
    GradientSample sample;
    for (const UnitLayout& unit : layout.units) {
        auto& runs = sample.units.emplace_back();
        for (const TensorSpec& t : unit.tensors) runs.push_back({t.offset, t.numel, 1, decays_weights(t)});
    }
    return sample;
}

GradientSample prefix_sample(const ModelConfig& model, const WeightLayout& layout, std::span<const std::int32_t> tokens) {
    GradientSample sample;
    for (const UnitLayout& unit : layout.units) {
        auto& runs = sample.units.emplace_back();
        for (const TensorSpec& t : unit.tensors) {
            const std::int64_t count = std::min(t.numel, kSampledPerTensor);
            runs.push_back({t.offset, count, t.numel / count, decays_weights(t)});
        }
    }
    // The rows the prefix's embedding backward writes: each distinct token's row of the token
    // table, and the prefix's positions' rows of the position table.
    const FamilyDecl& family = family_of(model);
    const int n_embd = model.n_embd;
    const UnitLayout& embedding = layout.units[0];
    const TensorSpec& token_table = embedding.tensors[static_cast<std::size_t>(family.token_table)];
    const bool decays = decays_weights(token_table);
    std::vector<std::int32_t> rows(tokens.begin(), tokens.end());
    std::ranges::sort(rows);
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    for (const std::int32_t row : rows)
        sample.units[0].push_back({token_table.offset + std::int64_t{row} * n_embd, n_embd, 1, decays});
    if (family.position_table >= 0) {
        const TensorSpec& position_table = embedding.tensors[static_cast<std::size_t>(family.position_table)];
        sample.units[0].push_back({position_table.offset, static_cast<std::int64_t>(tokens.size()) * n_embd, 1,
                                   decays_weights(position_table)});
    }
    return sample;
}

std::vector<std::int32_t> checked_ids(const TrainingCheckShape& check, std::span<const std::int32_t> ids) {
    const auto rows = ids.first(static_cast<std::size_t>(check.shape.rows()));
    return {rows.begin(), rows.end()};
}

OutputCount StepLosses::count_nonfinite() const {
    std::int64_t bad = 0;
    for (std::size_t i = 0; i < losses_.size(); ++i)
        bad += !std::isfinite(losses_[i]) + (!std::isfinite(norms_[i]) && !scaling_skipped_[i]);
    return {bad, static_cast<std::int64_t>(2 * losses_.size()), "losses and gradient norms of its steps"};
}

void StepLosses::add_results(CellOutcome& out) const {
    if (losses_.empty()) return;
    out.set<"loss_first">(losses_.front());
    out.set<"grad_norm_first">(norms_.front());
    out.set<"loss_last">(losses_.back());
    out.set<"grad_norm_last">(norms_.back());
}

std::optional<std::string> kept_training_key(const CellParams& cell, std::span<const std::int32_t> tokens) {
    const std::optional<TrainingCheckShape> shape = training_check_shape(cell);
    if (!shape) return std::nullopt;
    return training_key(cell, *shape, checked_ids(*shape, tokens), checked_ids(*shape, cell.target_ids()));
}

std::int64_t checked_step_host_bytes(const CellParams& cell) {
    const std::optional<TrainingCheckShape> shape = training_check_shape(cell);
    if (!shape || !shape->full) return 0;
    // The weights, the gradients and the updated weights before and after, every element of them,
    // and the full copy of one of them while it is sampled.
    return 5 * WeightLayout::total_numel_of(cell.model) * std::int64_t{sizeof(float)};
}

std::int64_t check_reference_host_bytes(const CellParams& cell) {
    const std::optional<TrainingCheckShape> shape = training_check_shape(cell);
    if (!shape || shape->full) return 0;
    const WeightLayout layout = WeightLayout::for_model(cell.model);
    return layout.total_numel * std::int64_t{sizeof(float)} + largest_unit(layout) * std::int64_t{sizeof(double)};
}

std::int64_t check_step_scratch_bytes(const CellParams& cell) {
    const std::optional<TrainingCheckShape> shape = training_check_shape(cell);
    if (!shape || shape->full) return 0;
    const auto dtype = static_cast<std::int64_t>(dtype_size(cell.dtype));
    const std::int64_t fp32_state = cell.dtype == DType::fp32 ? 2 : 3;  // m and v, and the master
    return largest_unit(WeightLayout::for_model(cell.model)) * (2 * dtype + fp32_state * std::int64_t{sizeof(float)});
}

TrainSettings train_settings(const CellParams& cell) {
    TrainSettings s;
    s.max_grad_norm = static_cast<float>(cell.max_grad_norm);
    return s;
}

LogitsCheck check_training_step(const CellParams& cell, const WeightLayout& layout, const TrainSettings& settings,
                                const CheckedStep& step, double tolerance, const std::optional<ReferenceLogits>& kept) {
    LogitsCheck check;
    const std::optional<std::string> key = training_key(cell, step.check, step.tokens, step.targets);
    SampledReference ref;
    if (key && kept && kept->key == *key && kept->logits.size() == static_cast<std::size_t>(2 + step.sample.values())) {
        ref = unpacked(*kept, step.sample);
        check.reference_computed = false;
        check.kept = kept;  // the row the check compared with, as the database names it
    } else {
        const auto start = std::chrono::steady_clock::now();
        ref = sampled_reference(cell, layout, step);
        check.reference_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (key) {
            check.kept = packed(*key, cell, ref);
            ref = unpacked(*check.kept, step.sample);
        }
    }

    ErrorMeasure loss, norm, gradients, update;
    loss.add(step.loss, ref.loss);
    norm.add(step.grad_norm, ref.grad_norm);
    for (std::size_t u = 0; u < ref.gradients.size(); ++u)
        for (std::size_t i = 0; i < ref.gradients[u].size(); ++i) gradients.add(step.gradients[u][i], ref.gradients[u][i]);

    // The reference optimizer on the step's own gradients, clipped by its own norm (compared
    // above): only the update's own arithmetic is compared.
    const double clip = reference_clip_scale(step.grad_norm, settings.max_grad_norm);
    UnitValues grads = as_double(step.gradients), params = as_double(step.updated_before);
    for (auto& unit : grads)
        for (double& g : unit) g *= clip;
    AdamWState state;
    reference_adamw_step(sample_layout(step.sample), params, grads, state,
                         {.lr = settings.lr, .beta1 = settings.beta1, .beta2 = settings.beta2, .eps = settings.eps,
                          .weight_decay = settings.weight_decay});
    // The update is judged against its own size, not the weights'; but an fp32 weight cannot come
    // nearer the reference's than one unit in its last place, so only what lies beyond that counts.
    for (std::size_t u = 0; u < params.size(); ++u) {
        for (std::size_t i = 0; i < params[u].size(); ++i) {
            const double want = params[u][i], want_update = want - step.updated_before[u][i];
            const double diff = std::abs(static_cast<double>(step.updated_after[u][i]) - want);
            const double beyond_rounding = std::isnan(diff) ? diff : std::max(0.0, diff - std::ldexp(std::abs(want), -23));
            update.add(want_update + beyond_rounding, want_update);
        }
    }

    if (step.check.full) {
        check.compared = "the first step's loss, gradient norm, gradients and update";
        check.reference = "float64 loss, gradients and AdamW step";
    } else {
        check.compared = "the prefix step's loss, gradient norm, sampled gradients and update";
        check.reference = "float64 loss, gradients and AdamW step of a prefix step: sample 0, first " +
                          std::to_string(step.check.shape.stride()) + " positions; " +
                          std::to_string(step.sample.values()) + " sampled gradients and updates";
    }
    check.tolerance = tolerance;
    // The worst of the four; a NaN anywhere makes it NaN, which fails.
    for (const ErrorMeasure* e : {&loss, &norm, &gradients, &update}) {
        if (std::isnan(check.rel_err)) break;
        if (std::isnan(e->rel_err()) || e->rel_err() > check.rel_err) {
            check.rel_err = e->rel_err();
            check.max_abs_err = e->max_abs_err();
        }
    }
    return check;
}

}  // namespace sweetspot
