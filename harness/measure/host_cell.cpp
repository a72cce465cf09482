#include "harness/measure/host_cell.hpp"

#include <chrono>

#include "backends/backend.hpp"
#include "backends/backend_registry.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/cell_weights.hpp"
#include "kernels/compute/cpu_forward.hpp"

namespace sweetspot {
namespace {

class HostForward final : public CellForward {
public:
    HostForward(const CellParams& c, std::span<const std::int32_t> tokens)
        : cell_(c),
          layout_(WeightLayout::for_model(c.model)),
          backend_(make_backend(backend_config(c))),
          tokens_(tokens.begin(), tokens.end()),
          forward_(c.model, layout_, c.batch, c.seq, c.dropout_masks()),
          logits_(tokens_.size() * static_cast<std::size_t>(c.model.vocab_size)) {
        backend_->place(layout_, make_unit_filler(c, layout_));
    }

    std::int64_t activation_bytes() const override { return forward_.activation_bytes(); }

    double iteration_ms(const std::string&) override {
        backend_->reset_residency();
        const auto t0 = std::chrono::steady_clock::now();
        forward_.run(*backend_, tokens_, logits_);
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }

    std::vector<float> logits() override { return logits_; }

    std::int64_t count_nonfinite_logits() override { return static_cast<std::int64_t>(count_nonfinite(logits_)); }

    std::optional<LogitsCheck> check() override {
        return check_against_float64(cell_, layout_, *backend_, tokens_, logits_);
    }

    // The host backend keeps every weight in host memory: nothing to report about a device.
    void add_placement(CellOutcome&) const override {}

private:
    const CellParams& cell_;
    WeightLayout layout_;
    std::unique_ptr<Backend> backend_;
    std::vector<std::int32_t> tokens_;
    CpuForward forward_;
    std::vector<float> logits_;
};

}  // namespace

std::unique_ptr<CellForward> make_host_forward(const CellParams& cell, std::span<const std::int32_t> tokens) {
    return std::make_unique<HostForward>(cell, tokens);
}

}  // namespace sweetspot
