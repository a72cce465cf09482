#include "harness/measure/gpu_cell.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#include <optional>
#include <string>

#include "backends/backend.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/cell_weights.hpp"
#include "harness/collect/cupti_collector.hpp"
#include "harness/measure/logits_check.hpp"
#include "harness/system/system_info.hpp"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/gpu_forward.hpp"
#include "kernels/compute/nvtx.hpp"

namespace sweetspot {
namespace {

std::int64_t device_used_bytes() {
    std::size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return static_cast<std::int64_t>(total_bytes - free_bytes);
}

}  // namespace

CellOutcome measure_gpu_cell(const CellParams& c, const GpuCellOptions& options) {
    const bool collect = options.collect && c.trace_iterations > 0;
    if (collect) prepare_nvtx_injection();  // before the first NVTX range of the process
    const NvtxRange run_range(options.run_label);
    const NvtxRange cell_range("cell " + c.key());
    CellOutcome out;
    out.started_at = utc_timestamp();
    const auto t_init = std::chrono::steady_clock::now();
    const auto layout = WeightLayout::for_model(c.model);
    const CudaStream compute;
    // Configured before anything is placed: UM counters do not see earlier managed allocations.
    std::optional<CuptiCollector> collector;
    if (collect) collector.emplace();

    BackendConfig config = backend_config(c);
    config.allow_oversubscription = options.allow_oversubscription;
    config.compute_stream = compute.get();
    auto backend = make_backend(config);
    backend->place(layout, make_unit_filler(c, layout));
    GpuForwardOptions forward_options;
    forward_options.tf32 = c.tf32;
    forward_options.managed_activations = c.activations == "managed";
    forward_options.allow_oversubscription = options.allow_oversubscription;
    GpuForward forward(c.model, layout, c.dtype, c.batch, c.seq, compute.get(), forward_options);
    const auto tokens = options.tokens.empty() ? c.token_ids() : std::vector(options.tokens.begin(), options.tokens.end());
    forward.set_tokens(tokens);
    CUDA_CHECK(cudaStreamSynchronize(compute.get()));
    out.init_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_init).count();
    out.activation_bytes = forward.activation_bytes() + forward.workspace_bytes();

    const CudaEvent start(CudaEvent::Timing::on), stop(CudaEvent::Timing::on);
    auto one_iteration = [&](const std::string& label) {
        const NvtxRange iteration(label);
        backend->reset_residency();
        start.record(compute.get());
        forward.run(*backend);
        stop.record(compute.get());
        stop.synchronize();
        if (!out.device_used_bytes) out.device_used_bytes = device_used_bytes();
        return static_cast<double>(stop.ms_since(start));
    };
    for (int i = 0; i < c.warmups; ++i) out.warmup_ms.push_back(one_iteration("warmup " + std::to_string(i)));
    for (int i = 0; i < c.iterations; ++i) out.timed_ms.push_back(one_iteration("iteration " + std::to_string(i)));
    // Traced iterations run after the timed ones, so collection never perturbs the latencies
    // that are reported; their own latencies show what tracing costs.
    if (c.trace_iterations > 0) {
        if (collector) collector->start();
        for (int i = 0; i < c.trace_iterations; ++i)
            out.traced_ms.push_back(one_iteration("traced iteration " + std::to_string(i)));
        if (collector) out.events = collector->finish();
    }

    const PlacementStats placed = backend->placement();
    out.resident_bytes = placed.resident_bytes;
    out.streamed_bytes = placed.streamed_bytes;
    out.device_weight_bytes = placed.device_weight_bytes;
    out.tokens_per_s = static_cast<double>(tokens.size()) / (LatencyStats::of(out.timed_ms).median / 1000.0);

    const auto logits = forward.logits_to_host();
    if (options.logits != nullptr) *options.logits = logits;
    judge_output(logits, check_against_host(c, layout, tokens, logits), out);
    out.finished_at = utc_timestamp();
    return out;
}

}  // namespace sweetspot
