#include "harness/measure/gpu_cell.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "backends/backend.hpp"
#include "backends/backend_registry.hpp"
#include "harness/collect/cupti_collector.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/cell_weights.hpp"
#include "harness/measure/gpu_memory_watch.hpp"
#include "harness/measure/nvml_memory.hpp"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/gpu_forward.hpp"
#include "kernels/compute/gpu_synthetic_weights.hpp"
#include "kernels/compute/nvtx.hpp"

namespace sweetspot {
namespace {

std::string gpu_name() {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    return prop.name;
}

std::int64_t device_used_bytes() {
    std::size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return static_cast<std::int64_t>(total_bytes - free_bytes);
}

// How often the memory watch reads the GPU's memory: far below an iteration of any model worth
// streaming, and an NVML reading costs microseconds of a CPU core the forward does not use.
constexpr std::chrono::milliseconds kMemoryReadPeriod{5};

// The cell's weights; synthetic ones are also made by kernels, straight into the memory each GPU
// backend keeps them in (Backend::UnitFiller), a checkpoint's are only read on the host.
Backend::UnitFiller gpu_unit_filler(const CellParams& c, const WeightLayout& layout) {
    Backend::UnitFiller fill = make_unit_filler(c, layout);
    if (c.weights != kSyntheticWeights) return fill;
    return fill.with_device_fill([model = c.model, layout, seed = c.seed](int unit, DType dtype, void* dst,
                                                                          CUstream_st* stream) {
        gpu::fill_synthetic_unit(model, layout, unit, seed, dtype, dst, stream);
    });
}

// NVML's watch over this process's GPU, started before the process creates its CUDA context (the
// device's UUID comes from cudaGetDeviceProperties, which creates none), or nullptr with `why_not`
// set where NVML cannot read it.
std::unique_ptr<GpuMemoryWatch> watch_gpu_memory(std::string& why_not) {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    unsigned char uuid[16];
    std::memcpy(uuid, prop.uuid.bytes, sizeof uuid);
    std::shared_ptr<const NvmlDevice> nvml = NvmlDevice::open(gpu_uuid_string(uuid), why_not);
    if (!nvml) return nullptr;
    try {
        return std::make_unique<GpuMemoryWatch>([nvml] { return nvml->read(); }, kMemoryReadPeriod);
    } catch (const std::exception& e) {
        why_not = e.what();
        return nullptr;
    }
}

// The CUDA context, created now rather than by the first call that needs it, so the watch sees
// what it costs on its own (and the cell's phases, how long it takes).
std::unique_ptr<GpuMemoryWatch> with_context(std::unique_ptr<GpuMemoryWatch> watch, PhaseClock& clock) {
    clock.lap("nvml");
    CUDA_CHECK(cudaFree(nullptr));
    if (watch) watch->context_created();
    clock.lap("cuda_context");
    return watch;
}

// CUPTI's NVTX injection must be in place before the process's first NVTX range.
bool prepared_for_collection(const CellParams& c, const MeasureOptions& options) {
    const bool collect = options.collect && c.trace_iterations > 0;
    if (collect) prepare_nvtx_injection();
    return collect;
}

BackendConfig gpu_backend_config(const CellParams& c, const MeasureOptions& options, const CudaStream& compute) {
    BackendConfig config = backend_config(c);
    config.allow_oversubscription = options.allow_oversubscription;
    config.compute_stream = compute.get();
    return config;
}

GpuForwardOptions forward_options(const CellParams& c, const MeasureOptions& options) {
    GpuForwardOptions f;
    f.tf32 = c.tf32;
    f.managed_activations = c.activations == Activations::managed;
    f.allow_oversubscription = options.allow_oversubscription;
    f.variant = c.variant;
    f.dropout = c.dropout_masks();
    f.unit_graphs = c.launch == Launch::graphs;
    return f;
}

// Members in construction order: the memory watch takes its first reading before anything
// touches the GPU, the NVTX ranges open first (and close last), the collector is configured
// before anything is placed (UM counters do not see earlier managed allocations).
class GpuCellStep final : public CellStep {
public:
    GpuCellStep(const CellParams& c, std::span<const std::int32_t> tokens, const MeasureOptions& options)
        : cell_(c),
          memory_watch_(with_context(watch_gpu_memory(memory_note_), clock_)),
          collect_(prepared_for_collection(c, options)),
          run_range_(options.run_label),
          cell_range_("cell " + c.key()),
          kept_reference_(options.kept_reference),
          layout_(WeightLayout::for_model(c.model)),
          tokens_(tokens.begin(), tokens.end()) {
        if (collect_) collector_.emplace();
        clock_.lap("prepare");
        options.status.phase("weights");
        backend_ = make_backend(gpu_backend_config(c, options, compute_));
        backend_->place(layout_, gpu_unit_filler(c, layout_), UnitSchedule::inference(layout_.unit_count()));
        clock_.lap("weights");
        options.status.phase("forward_setup");
        forward_.emplace(c.model, layout_, c.dtype, c.batch, c.seq, compute_.get(), forward_options(c, options));
        forward_->set_tokens(tokens_);
        CUDA_CHECK(cudaStreamSynchronize(compute_.get()));
        clock_.lap("forward_setup");
    }

    std::vector<CellPhase> setup_phases() const override { return setup_; }

    std::int64_t activation_bytes() const override { return forward_->activation_bytes() + forward_->workspace_bytes(); }

    StepTime run_step(const std::string& label) override {
        const NvtxRange iteration(label);
        backend_->reset_residency();
        start_.record(compute_.get());
        forward_->run(*backend_);
        stop_.record(compute_.get());
        stop_.synchronize();
        if (!device_used_) device_used_ = device_used_bytes();
        const auto ms = static_cast<double>(stop_.ms_since(start_));
        return {ms, {ms}};
    }

    void start_collection() override {
        if (collector_) collector_->start();
    }
    std::optional<CellEvents> finish_collection() override {
        if (!collector_) return std::nullopt;
        return collector_->finish();
    }

    std::vector<float> logits() override { return forward_->logits_to_host(); }

    OutputCount count_nonfinite() override {
        return {forward_->count_nonfinite_logits(),
                static_cast<std::int64_t>(tokens_.size()) * cell_.model.vocab_size, "logits"};
    }

    std::optional<LogitsCheck> check() override {
        const std::vector<float> compared = forward_->logits_to_host(host_reference_rows(cell_));
        return check_against_host(cell_, layout_, tokens_, compared, kept_reference_);
    }

    void add_results(CellOutcome& out) const override {
        out.set<"gpu_model">(gpu_name());
        const PlacementStats placed = backend_->placement();
        out.set<"resident_bytes">(placed.resident_bytes);
        out.set<"streamed_bytes">(placed.streamed_bytes);
        out.set<"device_weight_bytes">(placed.device_weight_bytes);
        out.set<"pinned_host_bytes">(placed.pinned_host_bytes);
        out.set<"device_used_bytes">(device_used_);
        out.set<"launches_per_forward">(forward_->launches_per_forward());
        if (!memory_note_.empty()) out.set<"gpu_memory_note">(memory_note_);
        if (!memory_watch_) return;
        const GpuMemoryMeasurement m = memory_watch_->measurement();
        out.set<"gpu_used_before_bytes">(m.before_bytes);
        out.set<"gpu_context_bytes">(m.context_bytes);
        out.set<"gpu_peak_bytes">(m.peak_bytes);
        out.set<"gpu_own_peak_bytes">(m.own_peak_bytes);
        out.set<"gpu_other_processes">(m.other_processes);
        out.set<"gpu_other_bytes">(m.other_peak_bytes);
        out.set<"gpu_memory_readings">(m.readings);
        out.set<"gpu_sm_clock_mhz">(m.sm_clock_busy_mhz);
        out.set<"gpu_power_max_w">(m.power_max_w);
        out.set<"gpu_temperature_max_c">(m.temperature_max_c);
        if (m.throttling_events) out.set<"gpu_clock_events">(throttling_names(*m.throttling_events));
        if (!m.error.empty()) out.set<"gpu_memory_note">("NVML readings stopped: " + m.error);
    }

private:
    const CellParams& cell_;
    std::vector<CellPhase> setup_;  // first, with its clock: every member after it is timed
    PhaseClock clock_{setup_};
    std::string memory_note_;  // why there is no memory watch
    std::unique_ptr<GpuMemoryWatch> memory_watch_;
    bool collect_;
    NvtxRange run_range_, cell_range_;
    std::optional<ReferenceLogits> kept_reference_;
    WeightLayout layout_;
    std::vector<std::int32_t> tokens_;
    CudaStream compute_;
    std::optional<CuptiCollector> collector_;
    std::unique_ptr<Backend> backend_;
    std::optional<GpuForward> forward_;
    CudaEvent start_{CudaEvent::Timing::on}, stop_{CudaEvent::Timing::on};
    std::optional<std::int64_t> device_used_;
};

}  // namespace

std::unique_ptr<CellStep> make_gpu_step(const CellParams& cell, std::span<const std::int32_t> tokens,
                                        const MeasureOptions& options) {
    return std::make_unique<GpuCellStep>(cell, tokens, options);
}

}  // namespace sweetspot
