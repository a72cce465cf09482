#include "harness/measure/gpu_cell.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "backends/backend.hpp"
#include "backends/backend_registry.hpp"
#include "harness/collect/cupti_collector.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/cell_weights.hpp"
#include "harness/measure/check_step_source.hpp"
#include "harness/measure/gpu_memory_watch.hpp"
#include "harness/measure/link_load.hpp"
#include "harness/measure/nvml_memory.hpp"
#include "harness/measure/step_check.hpp"
#include "harness/system/memory_bandwidth.hpp"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/gpu_forward.hpp"
#include "kernels/compute/gpu_synthetic_weights.hpp"
#include "kernels/compute/gpu_train_step.hpp"
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
    f.fp32_gemm = c.fp32_gemm();
    f.managed_activations = c.activations == Activations::managed;
    f.allow_oversubscription = options.allow_oversubscription;
    f.variant = c.variant;
    f.dropout = c.dropout_masks();
    f.unit_graphs = c.launch == Launch::graphs;
    return f;
}

// Device memory for a prefix step's scratch (check_step_source.hpp), every copy on the step's
// stream.
class DeviceUnitMemory final : public UnitMemory {
public:
    explicit DeviceUnitMemory(cudaStream_t stream) : stream_(stream) {}
    std::shared_ptr<void> allocate(std::size_t bytes) override {
        void* p = nullptr;
        CUDA_CHECK(cudaMalloc(&p, bytes));
        return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
    }
    // The source may be host memory: a backend keeping the optimizer's state there (optimizer = "host").
    void copy(void* dst, const void* src, std::size_t bytes) override {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
    }
    void zero(void* dst, std::size_t bytes) override { CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_)); }
    void gather(void* host, const void* src, std::size_t element, std::int64_t count, std::int64_t stride) override {
        move(host, element, src, element * static_cast<std::size_t>(stride), element, count, cudaMemcpyDeviceToHost);
    }
    void scatter(void* dst, const void* host, std::size_t element, std::int64_t count, std::int64_t stride) override {
        move(dst, element * static_cast<std::size_t>(stride), host, element, element, count, cudaMemcpyHostToDevice);
    }

private:
    void move(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t element,
              std::int64_t count, cudaMemcpyKind kind) {
        if (dst_pitch == element && src_pitch == element)
            CUDA_CHECK(cudaMemcpyAsync(dst, src, element * static_cast<std::size_t>(count), kind, stream_));
        else
            CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, element, static_cast<std::size_t>(count), kind, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    cudaStream_t stream_;
};

// What every GPU cell holds, whatever its step. Members in construction order: the memory watch
// takes its first reading before anything touches the GPU, the NVTX ranges open first (and close
// last), the collector is configured before anything is placed (UM counters do not see earlier
// managed allocations), and the backend places the weights for the step's schedule.
class GpuCell {
public:
    GpuCell(const CellParams& c, const MeasureOptions& options, const UnitSchedule& schedule)
        : memory_watch_(with_context(watch_gpu_memory(memory_note_), clock_)),
          collect_(prepared_for_collection(c, options)),
          run_range_(options.run_label),
          cell_range_("cell " + c.key()),
          layout_(WeightLayout::for_model(c.model)) {
        if (collect_) collector_.emplace();
        clock_.lap("prepare");
        options.status.phase("weights");
        backend_ = make_backend(gpu_backend_config(c, options, compute_));
        backend_->place(layout_, gpu_unit_filler(c, layout_), schedule);
        clock_.lap("weights");
    }

    const WeightLayout& layout() const { return layout_; }
    Backend& backend() { return *backend_; }
    std::int64_t training_state_bytes() const { return backend_->placement().training_state_bytes; }
    cudaStream_t stream() const { return compute_.get(); }
    // Closes a set-up phase the step's own making ran since the last.
    void lap(const std::string& phase) { clock_.lap(phase); }
    const std::vector<CellPhase>& setup_phases() const { return setup_; }

    // After a step: the device memory in use, read once (the first step's).
    void note_device_used() {
        if (!device_used_) device_used_ = device_used_bytes();
    }

    void start_collection() {
        if (collector_) collector_->start();
    }
    std::optional<CellEvents> finish_collection() {
        if (!collector_) return std::nullopt;
        return collector_->finish();
    }

    // Where the weights went, the GPU and the device memory NVML read.
    void add_results(CellOutcome& out) const {
        out.set<"gpu_model">(gpu_name());
        const PlacementStats placed = backend_->placement();
        out.set<"resident_bytes">(placed.resident_bytes);
        out.set<"streamed_bytes">(placed.streamed_bytes);
        out.set<"device_weight_bytes">(placed.device_weight_bytes);
        out.set<"pinned_host_bytes">(placed.pinned_host_bytes);
        out.set<"device_used_bytes">(device_used_);
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
    std::vector<CellPhase> setup_;  // first, with its clock: every member after it is timed
    PhaseClock clock_{setup_};
    std::string memory_note_;  // why there is no memory watch
    std::unique_ptr<GpuMemoryWatch> memory_watch_;
    bool collect_;
    NvtxRange run_range_, cell_range_;
    WeightLayout layout_;
    CudaStream compute_;
    std::optional<CuptiCollector> collector_;
    std::unique_ptr<Backend> backend_;
    std::optional<std::int64_t> device_used_;
};

// Inference: a forward per step, its logits checked against the host forward.
class GpuInferStep final : public CellStep {
public:
    GpuInferStep(const CellParams& c, std::span<const std::int32_t> tokens, const MeasureOptions& options)
        : cell_(c),
          gpu_(c, options, UnitSchedule::inference(WeightLayout::for_model(c.model).unit_count())),
          kept_reference_(options.kept_reference),
          tokens_(tokens.begin(), tokens.end()) {
        options.status.phase("forward_setup");
        forward_.emplace(c.model, gpu_.layout(), c.dtype, c.batch_shape(), gpu_.stream(),
                         forward_options(c, options));
        forward_->set_tokens(tokens_);
        CUDA_CHECK(cudaStreamSynchronize(gpu_.stream()));
        gpu_.lap("forward_setup");
    }

    std::vector<CellPhase> setup_phases() const override { return gpu_.setup_phases(); }

    std::int64_t activation_bytes() const override { return forward_->activation_bytes() + forward_->workspace_bytes(); }

    StepTime run_step(const std::string& label) override {
        const NvtxRange iteration(label);
        gpu_.backend().reset_residency();
        start_.record(gpu_.stream());
        forward_->run(gpu_.backend());
        stop_.record(gpu_.stream());
        stop_.synchronize();
        gpu_.note_device_used();
        const auto ms = static_cast<double>(stop_.ms_since(start_));
        return {ms, {ms}};
    }

    void start_collection() override { gpu_.start_collection(); }
    std::optional<CellEvents> finish_collection() override { return gpu_.finish_collection(); }

    std::vector<float> logits() override { return forward_->logits_to_host(); }

    OutputCount count_nonfinite() override {
        return {forward_->count_nonfinite_logits(),
                static_cast<std::int64_t>(tokens_.size()) * cell_.model.vocab_size, "logits"};
    }

    std::optional<LogitsCheck> check() override {
        const std::vector<float> compared = forward_->logits_to_host(host_reference_rows(cell_));
        return check_against_host(cell_, gpu_.layout(), tokens_, compared, kept_reference_);
    }

    void add_results(CellOutcome& out) const override {
        gpu_.add_results(out);
        out.set<"launches_per_forward">(forward_->launches_per_forward());
    }

private:
    const CellParams& cell_;
    GpuCell gpu_;
    std::optional<ReferenceLogits> kept_reference_;
    std::vector<std::int32_t> tokens_;
    std::optional<GpuForward> forward_;
    CudaEvent start_{CudaEvent::Timing::on}, stop_{CudaEvent::Timing::on};
};

// Training: forward, backward and the optimizer's update per step, each phase between CUDA events;
// every step starts from the weights and moments the last one left. The check (step_check.hpp)
// compares the first, from the initial weights, with the float64 reference, or where the
// reference cannot afford the cell's shape, a prefix step made beside it before the cell's own.
class GpuTrainCellStep final : public CellStep {
public:
    GpuTrainCellStep(const CellParams& c, std::span<const std::int32_t> tokens, const MeasureOptions& options)
        : cell_(c),
          gpu_(c, options, UnitSchedule::training(WeightLayout::for_model(c.model).unit_count())),
          tokens_(tokens.begin(), tokens.end()),
          targets_(c.target_ids()),
          check_shape_(training_check_shape(c)),
          kept_reference_(options.kept_reference) {
        // A prefix check's step runs first: its buffers are freed before the cell's own step
        // allocates, so the cell's peak holds the larger of the two, not both.
        if (check_shape_ && !check_shape_->full) {
            options.status.phase("check_step");
            run_prefix_step();
            gpu_.lap("check_step");
        }
        options.status.phase("train_setup");
        step_.emplace(c.model, gpu_.layout(), c.dtype, c.batch_shape(), gpu_.stream(), train_options());
        step_->set_batch(tokens_, targets_);
        CUDA_CHECK(cudaStreamSynchronize(gpu_.stream()));
        gpu_.lap("train_setup");
        measure_host_state(options);
    }

    std::vector<CellPhase> setup_phases() const override { return gpu_.setup_phases(); }

    std::int64_t activation_bytes() const override { return step_->activation_bytes() + step_->workspace_bytes(); }

    // fp16's dynamic loss scale starts high: a first step whose scaled gradients overflow makes
    // no update (the scale halves), and the next step from the same state is the checked one.
    static constexpr int kMostCheckedStepTries = 24;

    void run_checked_step() override {
        const bool full = check_shape_ && check_shape_->full;
        if (full) {
            CheckedStep& s = checked_.emplace(started_check(every_element(gpu_.layout())));
            s.updated_before = cell_.dtype == DType::fp32 ? sampled(s.weights) : sampled(master_copy());
        }
        float scale = step_->loss_scale();
        // The check reads the step's gradients and new weights: its update ends before it returns.
        overlap_update_ = false;
        for (int tries = 0; tries < kMostCheckedStepTries; ++tries) {
            scale = step_->loss_scale();
            const int skipped = step_->skipped_steps();
            run_step("checked step");
            if (step_->skipped_steps() == skipped || cell_.dtype != DType::fp16) break;
        }
        overlap_update_ = true;
        // Not overlapped, the checked step's update has ended: AdamW's time with the GPU idle.
        if (const double ms = step_->host_update_times().adamw_ms; ms > 0) adamw_alone_ms_ = ms;
        if (!full) return;
        CheckedStep& s = *checked_;
        s.loss = losses_.last_loss();
        s.grad_norm = losses_.last_grad_norm();
        // The gradients the backward stored carry the loss scale.
        s.gradients = sampled(copy_units([&](int u) { return gpu_.backend().gradient(u); }, cell_.dtype));
        for (auto& unit : s.gradients)
            for (float& g : unit) g /= scale;
        s.updated_after = cell_.dtype == DType::fp32
                              ? sampled(copy_units([&](int u) { return gpu_.backend().stored_weights(u); }, cell_.dtype))
                              : sampled(master_copy());
    }

    StepTime run_step(const std::string& label) override {
        const NvtxRange iteration(label);
        const cudaStream_t stream = gpu_.stream();
        gpu_.backend().reset_residency();
        const int skipped_before = step_->skipped_steps();
        marks_[0].record(stream);
        step_->forward(gpu_.backend());
        // What the last update moved itself (an overlapped one has ended once the forward waited
        // for it; every update moves the same bytes), and AdamW's time in it beside the step.
        const LinkBytes update = step_->update_link_bytes();
        if (const HostUpdateTimes last = step_->host_update_times(); last.overlapped && last.adamw_ms > 0)
            adamw_overlapped_ms_.push_back(last.adamw_ms);
        marks_[1].record(stream);
        step_->backward(gpu_.backend(), overlap_update_);
        marks_[2].record(stream);
        // With the optimizer on the host the update runs beside the next step's forward, which
        // waits for each unit's new weights: this step's time runs to its backward's end and the
        // next forward holds what the update did not hide. Without clipping the backward starts
        // it (GpuTrainStep::backward), and it works beside the backward too.
        step_->update(gpu_.backend(), overlap_update_);
        marks_[3].record(stream);
        marks_[3].synchronize();
        // What the backend streamed (explicit-copy's weights in, gradients out) and the update's;
        // a skipped fp16 update moves nothing: the cell keeps an updating step's.
        const LinkBytes streamed = gpu_.backend().link_bytes_since_reset();
        link_.to_host = std::max(link_.to_host, streamed.to_host + update.to_host);
        link_.to_device = std::max(link_.to_device, streamed.to_device + update.to_device);
        gpu_.note_device_used();
        losses_.add(step_->loss(), step_->grad_norm(), cell_.dtype == DType::fp16 && step_->skipped_steps() > skipped_before);
        StepTime t;
        for (std::size_t i = 0; i + 1 < marks_.size(); ++i)
            t.phase_ms.push_back(static_cast<double>(marks_[i + 1].ms_since(marks_[i])));
        t.ms = static_cast<double>(marks_[3].ms_since(marks_[0]));
        return t;
    }

    void start_collection() override { gpu_.start_collection(); }
    std::optional<CellEvents> finish_collection() override { return gpu_.finish_collection(); }

    std::vector<float> logits() override {
        throw std::logic_error("a training step keeps no logits: `sweetspot logits` runs inference cells");
    }

    OutputCount count_nonfinite() override { return losses_.count_nonfinite(); }

    std::optional<LogitsCheck> check() override {
        if (!checked_) return std::nullopt;
        return check_training_step(cell_, gpu_.layout(), settings_, *checked_, gpu_tolerance(cell_.dtype, cell_.tf32),
                                   kept_reference_);
    }

    void add_results(CellOutcome& out) const override {
        gpu_.add_results(out);
        out.set<"training_state_bytes">(gpu_.training_state_bytes());
        out.set<"link_to_host_bytes">(link_.to_host);
        out.set<"link_to_device_bytes">(link_.to_device);
        if (host_state_gbps_) out.set<"host_state_gbps">(*host_state_gbps_);
        if (host_arrays_gbps_) out.set<"host_arrays_gbps">(*host_arrays_gbps_);
        if (host_shared_gbps_) out.set<"host_shared_gbps">(*host_shared_gbps_);
        if (adamw_alone_ms_) out.set<"host_adamw_alone_ms">(*adamw_alone_ms_);
        if (!adamw_overlapped_ms_.empty()) out.set<"host_adamw_ms">(LatencyStats::of(adamw_overlapped_ms_).median);
        losses_.add_results(out);
    }

private:
    // Where the optimizer's state is on the host (optimizer = host), the rates the host's memory
    // moves, read and written in place where they lie: its fp32 master weights, m and v; the
    // update's every array (those and the gradients and weights it reads and writes), for the
    // bound's host update term (analysis/bound.py); and those arrays and the link's copies
    // together, for its host memory term: the copies of a step go through the same memory as its
    // update, and slow the cores' streams down while they run (link_load.hpp). Each cell's arrays
    // lie somewhere else in the host's memory, and on a lent host some of it is slower than the
    // run's probe was (memory_bandwidth.hpp).
    static constexpr std::size_t kLinkLoadBytes = std::size_t{256} << 20;
    static constexpr int kStatePasses = 2, kSharedPasses = 2;
    void measure_host_state(const MeasureOptions& options) {
        std::vector<UpdateArrays> state, arrays;
        // The page-locked host buffers the step copies through, by their bytes: the gradients
        // (which every backward overwrites, so the copies down may land there) and the weights where
        // they are page-locked (uvm-prefetch's streamed weights are managed memory, which a copy
        // would migrate). A staging slot serves several units: it has the largest one's bytes.
        std::map<void*, std::size_t> gradients, sources;
        const auto dtype_bytes = static_cast<int>(dtype_size(cell_.dtype));
        for (int u = 0; u < gpu_.layout().unit_count(); ++u) {
            const UnitUpdate unit = gpu_.backend().acquire_update(u);
            if (!unit.on_host() || unit.master == nullptr) return;
            const std::int64_t numel = gpu_.layout().units[static_cast<std::size_t>(u)].numel;
            state.push_back({.state = {unit.master, unit.m, unit.v}, .n = numel});
            arrays.push_back({.state = {unit.master, unit.m, unit.v},
                              .gradient = unit.host_gradient,
                              .weights = unit.host_weights,
                              .dtype_bytes = dtype_bytes,
                              .n = numel});
            const std::size_t bytes = static_cast<std::size_t>(numel * dtype_bytes);
            for (void* buffer : {unit.host_gradient, unit.host_weights}) {
                if (!page_locked(buffer)) continue;
                sources[buffer] = std::max(sources[buffer], bytes);
                if (buffer == unit.host_gradient) gradients[buffer] = sources[buffer];
            }
        }
        options.status.phase("host_state_rate");
        host_state_gbps_ = measure_in_place_bandwidth(state, kStatePasses).gbps;
        host_arrays_gbps_ = measure_in_place_bandwidth(arrays).gbps;
        // The update's arrays again while the link copies both ways, down into the largest
        // gradient and up from the largest other buffer.
        const auto by_bytes = [](const auto& a, const auto& b) { return a.second < b.second; };
        const auto sink = std::ranges::max_element(gradients, by_bytes);
        if (sink != gradients.end()) sources.erase(sink->first);
        const auto source = std::ranges::max_element(sources, by_bytes);
        const std::span<std::byte> device = step_->per_step_memory();
        const std::size_t bytes = sink == gradients.end() || source == sources.end()
                                      ? 0
                                      : std::min({sink->second, source->second, device.size() / 2, kLinkLoadBytes});
        if (bytes > 0) {
            LinkLoad load(device, source->first, sink->first, bytes);
            const MemoryBandwidth cores = measure_in_place_bandwidth(arrays, kSharedPasses);
            host_shared_gbps_ = cores.gbps + load.stop().gbps();
        }
        gpu_.lap("host_state_rate");
    }

    static bool page_locked(const void* p) {
        cudaPointerAttributes attributes{};
        CUDA_CHECK(cudaPointerGetAttributes(&attributes, p));
        return attributes.type == cudaMemoryTypeHost;
    }

    GpuTrainOptions train_options() const {
        GpuTrainOptions train;
        train.fp32_gemm = cell_.fp32_gemm();
        train.variant = cell_.variant;
        train.dropout = cell_.dropout_masks();
        train.recompute = cell_.recompute;
        train.settings = settings_;
        return train;
    }

    // A checked step's shape, ids and the weights it reads, as fp32 (its reference's input; not
    // copied where the database keeps the reference, which an earlier cell computed).
    CheckedStep started_check(GradientSample sample) {
        CheckedStep s;
        s.check = *check_shape_;
        s.tokens = checked_ids(s.check, tokens_);
        s.targets = checked_ids(s.check, targets_);
        const std::optional<std::string> key = kept_training_key(cell_, tokens_);
        if (!key || !kept_reference_ || kept_reference_->key != *key)
            s.weights = copy_units([&](int u) { return gpu_.backend().stored_weights(u); }, cell_.dtype);
        s.sample = std::move(sample);
        return s;
    }

    // The prefix step (step_check.hpp): the cell's kernels, dtype and weights at batch 1 on the
    // first positions, through a CheckStepSource that leaves the backend's state as it was.
    void run_prefix_step() {
        const BatchShape& shape = check_shape_->shape;
        CheckedStep& s = checked_.emplace(started_check(GradientSample{}));
        s.sample = prefix_sample(cell_.model, gpu_.layout(), s.tokens);
        DeviceUnitMemory memory(gpu_.stream());
        CheckStepSource source(gpu_.backend(), gpu_.layout(), cell_.dtype, s.sample, memory);
        GpuTrainStep prefix(cell_.model, gpu_.layout(), cell_.dtype, shape, gpu_.stream(), train_options());
        prefix.set_batch(s.tokens, s.targets);
        // As the checked step: fp16's first scale may overflow; the backend is untouched, so the
        // step is simply made again at the halved scale.
        float scale = prefix.loss_scale();
        for (int tries = 0; tries < kMostCheckedStepTries; ++tries) {
            scale = prefix.loss_scale();
            const int skipped = prefix.skipped_steps();
            prefix.forward(source);
            prefix.backward(source);
            prefix.update(source);
            if (prefix.skipped_steps() == skipped || cell_.dtype != DType::fp16) break;
        }
        s.loss = prefix.loss();
        s.grad_norm = prefix.grad_norm();
        s.gradients = source.gradients();
        for (auto& unit : s.gradients)
            for (float& g : unit) g /= scale;
        s.updated_before = source.updated_before();
        s.updated_after = source.updated_after();
    }

    std::vector<std::vector<float>> sampled(const std::vector<std::vector<float>>& units) const {
        std::vector<std::vector<float>> out;
        for (int u = 0; u < gpu_.layout().unit_count(); ++u) out.push_back(checked_->sample.take(u, units[static_cast<std::size_t>(u)].data()));
        return out;
    }

    std::vector<std::vector<float>> master_copy() {
        return copy_units([&](int u) { return gpu_.backend().acquire_update(u).master; }, DType::fp32);
    }

    // Every unit's `dtype` values at the pointer `pointer(unit)` gives, as fp32: device memory, or
    // host memory where the backend keeps the optimizer's state there (optimizer = "host").
    template <class DevicePointer>
    std::vector<std::vector<float>> copy_units(DevicePointer pointer, DType dtype) {
        CUDA_CHECK(cudaStreamSynchronize(gpu_.stream()));
        std::vector<std::vector<float>> units;
        std::vector<std::byte> raw;
        for (int u = 0; u < gpu_.layout().unit_count(); ++u) {
            const auto numel = static_cast<std::size_t>(gpu_.layout().units[static_cast<std::size_t>(u)].numel);
            raw.resize(numel * dtype_size(dtype));
            CUDA_CHECK(cudaMemcpy(raw.data(), pointer(u), raw.size(), cudaMemcpyDefault));
            units.push_back(convert_to_f32(raw.data(), numel, dtype));
        }
        return units;
    }

    const CellParams& cell_;
    TrainSettings settings_ = train_settings(cell_);
    std::optional<double> host_state_gbps_, host_arrays_gbps_, host_shared_gbps_;
    // AdamW's passes on the host (HostUpdateTimes::adamw_ms): the checked step's, alone, and each
    // overlapped update's beside the steps that followed (warm-ups and timed ones alike).
    std::optional<double> adamw_alone_ms_;
    std::vector<double> adamw_overlapped_ms_;
    GpuCell gpu_;
    std::vector<std::int32_t> tokens_, targets_;
    std::optional<TrainingCheckShape> check_shape_;
    std::optional<ReferenceLogits> kept_reference_;
    std::optional<GpuTrainStep> step_;
    std::array<CudaEvent, 4> marks_{CudaEvent(CudaEvent::Timing::on), CudaEvent(CudaEvent::Timing::on),
                                    CudaEvent(CudaEvent::Timing::on), CudaEvent(CudaEvent::Timing::on)};
    std::optional<CheckedStep> checked_;
    StepLosses losses_;
    LinkBytes link_;  // the most a step moved each way
    bool overlap_update_ = true;  // the host update beside the next forward (GpuTrainStep::update)
};

}  // namespace

std::unique_ptr<CellStep> make_gpu_step(const CellParams& cell, std::span<const std::int32_t> tokens,
                                        const MeasureOptions& options) {
    if (cell.mode == Mode::train) return std::make_unique<GpuTrainCellStep>(cell, tokens, options);
    return std::make_unique<GpuInferStep>(cell, tokens, options);
}

}  // namespace sweetspot
