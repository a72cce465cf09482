#include "harness/measure/cell_exec.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "backends/backend.hpp"
#include "backends/residency_plan.hpp"
#include "harness/measure/cell_weights.hpp"
#include "harness/system/exit_codes.hpp"
#include "harness/measure/logits_check.hpp"
#include "harness/store/store.hpp"
#ifdef SWEETSPOT_HAVE_CUDA
#include "harness/measure/gpu_cell.hpp"
#endif
#include "harness/system/system_info.hpp"
#include "kernels/compute/cpu_forward.hpp"
#include "kernels/compute/managed_memory.hpp"

namespace sweetspot {
namespace {

[[noreturn]] void inject_fault(const std::string& fault) {
    std::fprintf(stderr, "debug_fault = \"%s\": failing on purpose\n", fault.c_str());
    std::fflush(stderr);
    // A deliberate crash should not leave a core file behind.
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    if (fault == "segfault") std::raise(SIGSEGV);
    if (fault == "abort") std::abort();
    if (fault == "hang") {
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    std::_Exit(3);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

CellOutcome measure_host_cell(const CellParams& c, const ExecuteOptions& options) {
    CellOutcome out;
    out.started_at = utc_timestamp();
    const auto t_init = std::chrono::steady_clock::now();
    const auto layout = WeightLayout::for_model(c.model);
    auto backend = make_backend(backend_config(c));
    backend->place(layout, make_unit_filler(c, layout));
    const auto tokens = options.tokens.empty() ? c.token_ids() : std::vector(options.tokens.begin(), options.tokens.end());
    CpuForward forward(c.model, layout, c.batch, c.seq);
    std::vector<float> logits(tokens.size() * static_cast<std::size_t>(c.model.vocab_size));
    out.init_s = ms_since(t_init) / 1000.0;
    out.activation_bytes = forward.activation_bytes();

    auto one_iteration = [&] {
        backend->reset_residency();
        const auto t0 = std::chrono::steady_clock::now();
        forward.run(*backend, tokens, logits);
        return ms_since(t0);
    };
    for (int i = 0; i < c.warmups; ++i) out.warmup_ms.push_back(one_iteration());
    for (int i = 0; i < c.iterations; ++i) out.timed_ms.push_back(one_iteration());

    const double median_ms = LatencyStats::of(out.timed_ms).median;
    out.tokens_per_s = static_cast<double>(tokens.size()) / (median_ms / 1000.0);
    judge_output(logits, check_against_float64(c, layout, *backend, tokens, logits), out);
    if (options.logits != nullptr) *options.logits = logits;

    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    out.peak_host_rss_bytes = static_cast<std::int64_t>(ru.ru_maxrss) * 1024;
    out.finished_at = utc_timestamp();
    return out;
}

void write_outcome(const std::string& scratch_db, const CellParams& c, const CellOutcome& o) {
    auto store = Store::open(scratch_db);
    RunInfo info;
    info.started_at = o.started_at.empty() ? utc_timestamp() : o.started_at;
    const auto run = store.begin_run(info);
    store.record_cell(run, 0, c, o);
}

}  // namespace

bool uses_gpu(const CellParams& c) { return c.backend != "host"; }

BackendConfig backend_config(const CellParams& c) {
    BackendConfig b;
    b.name = c.backend;
    b.dtype = c.dtype;
    b.streams = c.streams;
    b.prefetch_depth = c.prefetch.kind == Prefetch::Kind::off   ? 0
                       : c.prefetch.kind == Prefetch::Kind::jit ? -1
                                                                : c.prefetch.depth;
    b.budget_bytes = c.budget_bytes();
    b.resident = c.resident == "first" ? ResidentPolicy::first
                 : c.resident == "last" ? ResidentPolicy::last
                                        : ResidentPolicy::interleaved;
    b.evict = c.evict == "read-mostly" ? UvmEvict::read_mostly : UvmEvict::migrate;
    return b;
}

#ifdef SWEETSPOT_HAVE_CUDA
namespace {

// Whether the budget can hold what the backend needs to stream, decided by the same planner
// the backend uses, so an impossible cell is reported before any process or GPU is involved.
std::string budget_unusable_reason(const CellParams& c) {
    const auto bytes = unit_bytes(WeightLayout::for_model(c.model), c.dtype);
    const auto config = backend_config(c);
    if (c.backend == "uvm") {
        const auto largest = *std::max_element(bytes.begin(), bytes.end());
        if (config.budget_bytes >= largest) return {};
        return "a budget of " + std::to_string(config.budget_bytes) + " bytes cannot hold the largest layer (" +
               std::to_string(largest) + " bytes), which uvm must fault in whole";
    }
    if (c.backend != "explicit-copy" && c.backend != "uvm-prefetch") return {};
    try {
        plan_residency(bytes, config.budget_bytes, streaming_slots(config.prefetch_depth), config.resident);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return {};
}

}  // namespace
#endif

std::string cell_unsupported_reason(const CellParams& c) {
    if (c.mode != "infer") return "mode '" + c.mode + "' is not implemented in this version of sweetspot";
    if (c.backend == "host") {
        if (c.dtype != DType::fp32) return "the host backend computes in fp32 only";
        if (c.variant != "baseline") return "the host backend runs the baseline variant only (fusions are GPU kernels)";
        if (c.activations != "device") return "activations = \"managed\" needs a GPU backend";
        return {};
    }
#ifndef SWEETSPOT_HAVE_CUDA
    return "this sweetspot was built without CUDA, so backend '" + c.backend + "' is not available";
#else
    if (c.variant != "baseline") return "variant '" + c.variant + "' is not implemented yet (the GPU forward runs baseline)";
    if (c.backend == "device" && c.budget_bytes() < c.weight_bytes())
        return "the device backend keeps all weights resident, and the budget (" + std::to_string(c.budget_bytes()) +
               " bytes) is smaller than the weights (" + std::to_string(c.weight_bytes()) + " bytes)";
    return budget_unusable_reason(c);
#endif
}

CellOutcome measure_cell(const CellParams& cell, const ExecuteOptions& options) {
#ifdef SWEETSPOT_HAVE_CUDA
    if (uses_gpu(cell))
        return measure_gpu_cell(cell, {options.allow_oversubscription, options.collect, options.tokens, options.logits,
                                       options.run_label});
#endif
    return measure_host_cell(cell, options);
}

int execute_cell(const CellParams& cell, const std::string& scratch_db, const ExecuteOptions& options) {
    if (cell.debug_fault != "none") inject_fault(cell.debug_fault);
    CellOutcome out;
    int code = kExitOk;
    std::string why = cell_unsupported_reason(cell);
    if (why.empty() && uses_gpu(cell)) why = backend_unavailable_reason(cell.backend);
    if (!why.empty()) {
        out.status = "skipped";
        out.reason = why;
    } else {
        try {
            out = measure_cell(cell, options);
        } catch (const ManagedMemoryRefused& e) {
            // A safety refusal, not a failed measurement: the cell cannot run on this GPU as asked.
            std::cerr << "sweetspot: " << e.what() << "\n";
            out = CellOutcome{};
            out.status = "skipped";
            out.reason = e.what();
        } catch (const std::exception& e) {
            std::cerr << "sweetspot: cell failed: " << e.what() << "\n";
            out = CellOutcome{};
            out.status = "failed";
            out.reason = e.what();
            code = kExitFailed;
        }
    }
    write_outcome(scratch_db, cell, out);
    return code;
}

}  // namespace sweetspot
