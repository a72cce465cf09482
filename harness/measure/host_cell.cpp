#include "harness/measure/host_cell.hpp"

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "backends/backend.hpp"
#include "backends/backend_registry.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/cell_weights.hpp"
#include "harness/measure/check_step_source.hpp"
#include "harness/measure/step_check.hpp"
#include "kernels/compute/cpu_forward.hpp"
#include "kernels/compute/cpu_train_step.hpp"

namespace sweetspot {
namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The host backend placed for `schedule` with the cell's weights.
std::unique_ptr<Backend> placed_backend(const CellParams& c, const WeightLayout& layout, const UnitSchedule& schedule) {
    std::unique_ptr<Backend> backend = make_backend(backend_config(c));
    backend->place(layout, make_unit_filler(c, layout), schedule);
    return backend;
}

class HostInferStep final : public CellStep {
public:
    HostInferStep(const CellParams& c, std::span<const std::int32_t> tokens)
        : cell_(c),
          layout_(WeightLayout::for_model(c.model)),
          backend_(placed_backend(c, layout_, UnitSchedule::inference(layout_.unit_count()))),
          shape_(c.batch_shape()),
          tokens_(tokens.begin(), tokens.end()),
          forward_(c.model, layout_, shape_, c.dropout_masks()),
          logits_(tokens_.size() * static_cast<std::size_t>(c.model.vocab_size)) {}

    std::int64_t activation_bytes() const override { return forward_.activation_bytes(); }

    StepTime run_step(const std::string&) override {
        backend_->reset_residency();
        const auto t0 = std::chrono::steady_clock::now();
        forward_.run(*backend_, tokens_, logits_);
        const double ms = ms_since(t0);
        return {ms, {ms}};
    }

    std::vector<float> logits() override { return logits_; }

    OutputCount count_nonfinite() override {
        return {static_cast<std::int64_t>(sweetspot::count_nonfinite(logits_)), static_cast<std::int64_t>(logits_.size()),
                "logits"};
    }

    std::optional<LogitsCheck> check() override {
        return check_against_float64(cell_, layout_, *backend_, shape_, tokens_, logits_);
    }

    // The host backend keeps every weight in host memory: nothing to report about a device.
    void add_results(CellOutcome&) const override {}

private:
    const CellParams& cell_;
    WeightLayout layout_;
    std::unique_ptr<Backend> backend_;
    BatchShape shape_;
    std::vector<std::int32_t> tokens_;
    CpuForward forward_;
    std::vector<float> logits_;
};

// A training loop on the host: every step (the checked one, the warm-ups, the timed ones) starts
// from the weights and moments the previous one left.
class HostTrainStep final : public CellStep {
public:
    HostTrainStep(const CellParams& c, std::span<const std::int32_t> tokens)
        : cell_(c),
          layout_(WeightLayout::for_model(c.model)),
          backend_(placed_backend(c, layout_, UnitSchedule::training(layout_.unit_count()))),
          tokens_(tokens.begin(), tokens.end()),
          targets_(c.target_ids()),
          trainer_(c.model, layout_, c.batch_shape(), c.dropout_masks(), settings_) {}

    // The kept activations and the step's scratch; the gradients and moments are the backend's.
    std::int64_t activation_bytes() const override { return trainer_.buffer_bytes(); }

    // The cell's first step, checked where the float64 loops afford its shape; otherwise a prefix
    // step on the side first (step_check.hpp), which leaves the backend as it found it.
    void run_checked_step() override {
        const std::optional<TrainingCheckShape> shape = training_check_shape(cell_);
        if (!shape) {
            run_step("checked step");
            return;
        }
        CheckedStep& s = checked_.emplace();
        s.check = *shape;
        s.tokens = checked_ids(*shape, tokens_);
        s.targets = checked_ids(*shape, targets_);
        s.weights = weight_copy();
        if (!shape->full) {
            run_host_prefix_step(cell_, layout_, settings_, *backend_, s);
            run_step("checked step");
            return;
        }
        s.sample = every_element(layout_);
        s.updated_before = sampled(s.weights);
        run_step("checked step");
        s.loss = losses_.last_loss();
        s.grad_norm = losses_.last_grad_norm();
        s.gradients = sampled(copy_units([&](int u) { return static_cast<const float*>(backend_->gradient(u)); }));
        s.updated_after = sampled(weight_copy());
    }

    StepTime run_step(const std::string&) override {
        StepTime t;
        const auto t0 = std::chrono::steady_clock::now();
        const double loss = trainer_.forward(*backend_, tokens_, targets_);
        t.phase_ms.push_back(ms_since(t0));
        const auto t1 = std::chrono::steady_clock::now();
        losses_.add(loss, trainer_.backward(*backend_));
        t.phase_ms.push_back(ms_since(t1));
        const auto t2 = std::chrono::steady_clock::now();
        trainer_.update(*backend_);
        t.phase_ms.push_back(ms_since(t2));
        t.ms = ms_since(t0);
        return t;
    }

    std::vector<float> logits() override {
        throw std::logic_error("a training step keeps no logits: `sweetspot logits` runs inference cells");
    }

    OutputCount count_nonfinite() override { return losses_.count_nonfinite(); }

    std::optional<LogitsCheck> check() override {
        if (!checked_) return std::nullopt;
        return check_training_step(cell_, layout_, settings_, *checked_, kHostFp32Tolerance);
    }

    void add_results(CellOutcome& out) const override { losses_.add_results(out); }

private:
    template <class UnitPointer>
    std::vector<std::vector<float>> copy_units(UnitPointer pointer) const {
        std::vector<std::vector<float>> copy;
        for (int u = 0; u < layout_.unit_count(); ++u) {
            const float* p = pointer(u);
            copy.emplace_back(p, p + layout_.units[static_cast<std::size_t>(u)].numel);
        }
        return copy;
    }
    std::vector<std::vector<float>> sampled(const std::vector<std::vector<float>>& units) const {
        std::vector<std::vector<float>> out;
        for (int u = 0; u < layout_.unit_count(); ++u) out.push_back(checked_->sample.take(u, units[static_cast<std::size_t>(u)].data()));
        return out;
    }
    std::vector<std::vector<float>> weight_copy() const {
        return copy_units([&](int u) {
            const float* p = static_cast<const float*>(backend_->acquire(u));
            backend_->release(u);
            return p;
        });
    }

    const CellParams& cell_;
    TrainSettings settings_ = train_settings(cell_);
    WeightLayout layout_;
    std::unique_ptr<Backend> backend_;
    std::vector<std::int32_t> tokens_, targets_;
    CpuTrainStep trainer_;
    std::optional<CheckedStep> checked_;
    StepLosses losses_;
};

}  // namespace

std::unique_ptr<CellStep> make_host_step(const CellParams& cell, std::span<const std::int32_t> tokens) {
    if (cell.mode == Mode::train) return std::make_unique<HostTrainStep>(cell, tokens);
    return std::make_unique<HostInferStep>(cell, tokens);
}

}  // namespace sweetspot
