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
#include "backends/backend_registry.hpp"
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

bool uses_gpu(const CellParams& c) { return find_backend(c.backend)->needs_gpu; }

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

std::string cell_unsupported_reason(const CellParams& c) {
    if (c.mode != "infer") return "mode '" + c.mode + "' is not implemented in this version of sweetspot";
    const BackendTraits& backend = *find_backend(c.backend);
    if (!backend.computes_in(c.dtype))
        return "the " + c.backend + " backend does not compute in " + std::string(dtype_name(c.dtype));
    if (!backend.needs_gpu && c.variant != "baseline")
        return "the " + c.backend + " backend runs the baseline variant only (fusions are GPU kernels)";
    if (!backend.needs_gpu && c.activations != "device") return "activations = \"managed\" needs a GPU backend";
#ifndef SWEETSPOT_HAVE_CUDA
    if (backend.needs_gpu) return "this sweetspot was built without CUDA, so backend '" + c.backend + "' is not available";
#endif
    if (c.variant != "baseline") return "variant '" + c.variant + "' is not implemented yet (the GPU forward runs baseline)";
    return backend.cannot_honour(backend_config(c), unit_bytes(WeightLayout::for_model(c.model), c.dtype));
}

std::string cell_unavailable_reason(const CellParams& c) {
    std::string why = cell_unsupported_reason(c);
    if (why.empty() && uses_gpu(c)) why = backend_unavailable_reason(c.backend);
    return why;
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
    if (const std::string why = cell_unavailable_reason(cell); !why.empty()) {
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
