#include "harness/cell_exec.hpp"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <thread>

#include "backends/backend.hpp"
#include "harness/store.hpp"
#include "harness/system_info.hpp"
#include "kernels/cpu_forward.hpp"
#include "kernels/reference_forward.hpp"
#include "kernels/synthetic_weights.hpp"

namespace sweetspot {
namespace {

// The float64 reference runs as plain loops; above this many multiply-adds it would take
// longer than the measurement itself, and the cell is stored as not checked.
constexpr double kMaxReferenceFlops = 2e9;

// Relative error (max |out - ref| / max |ref|) allowed for fp32 host output against float64.
constexpr double kHostFp32Tolerance = 1e-4;

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

std::vector<std::int32_t> random_tokens(const CellParams& c) {
    // Token ids depend only on the seed and the shape, like the seed project's random ids.
    std::mt19937_64 rng(c.seed ^ 0x9e3779b97f4a7c15ull);
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(c.batch) * static_cast<std::size_t>(c.seq));
    for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(c.model.vocab_size));
    return tokens;
}

BackendConfig backend_config(const CellParams& c) {
    BackendConfig b;
    b.name = c.backend;
    b.dtype = c.dtype;
    b.streams = c.streams;
    b.prefetch_depth = c.prefetch.kind == Prefetch::Kind::off ? 0 : c.prefetch.kind == Prefetch::Kind::jit ? -1 : c.prefetch.depth;
    b.budget_bytes = c.budget_bytes();
    b.managed_activations = c.activations == "managed";
    return b;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Compares fp32 logits with the float64 reference of the same weights and tokens.
void check_against_reference(const CellParams& c, const WeightLayout& layout, Backend& backend,
                             const std::vector<std::int32_t>& tokens, const std::vector<float>& logits,
                             CellOutcome& out) {
    if (reference_forward_flops(c.model, c.batch, c.seq) > kMaxReferenceFlops) return;
    std::vector<const float*> units;
    for (std::size_t i = 0; i < layout.units.size(); ++i)
        units.push_back(static_cast<const float*>(backend.acquire(static_cast<int>(i))));
    const auto ref = reference_forward(c.model, layout, units, tokens, c.batch, c.seq);
    for (std::size_t i = 0; i < layout.units.size(); ++i) backend.release(static_cast<int>(i));

    double max_err = 0, max_ref = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        max_err = std::max(max_err, std::abs(static_cast<double>(logits[i]) - ref[i]));
        max_ref = std::max(max_ref, std::abs(ref[i]));
    }
    out.check_reference = "float64 loops";
    out.check_max_abs_err = max_err;
    out.check_rel_err = max_ref > 0 ? max_err / max_ref : max_err;
    out.check_tolerance = kHostFp32Tolerance;
    if (*out.check_rel_err > kHostFp32Tolerance || !std::isfinite(*out.check_rel_err)) {
        out.status = "invalid";
        out.reason = "output differs from the float64 reference: relative error " + std::to_string(*out.check_rel_err) +
                     " > tolerance " + std::to_string(kHostFp32Tolerance);
    }
}

CellOutcome measure(const CellParams& c) {
    CellOutcome out;
    out.started_at = utc_timestamp();
    const auto t_init = std::chrono::steady_clock::now();
    const auto layout = WeightLayout::for_model(c.model);
    auto backend = make_backend(backend_config(c));
    backend->place(layout, [&](int unit, std::span<float> dst) { fill_synthetic_unit(c.model, layout, unit, c.seed, dst); });
    const auto tokens = random_tokens(c);
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

    out.status = "ok";
    const double median_ms = LatencyStats::of(out.timed_ms).median;
    out.tokens_per_s = static_cast<double>(tokens.size()) / (median_ms / 1000.0);
    check_against_reference(c, layout, *backend, tokens, logits, out);

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

std::string cell_unavailable_reason(const CellParams& c) {
    if (auto why = backend_unavailable_reason(c.backend); !why.empty()) return why;
    if (c.mode != "infer") return "mode '" + c.mode + "' is not implemented in this version of sweetspot";
    if (c.weights != "synthetic") return "loading checkpoints (weights = \"" + c.weights + "\") is not implemented in this version";
    if (c.backend == "host") {
        if (c.dtype != DType::fp32) return "the host backend computes in fp32 only";
        if (c.variant != "baseline") return "the host backend runs the baseline variant only (fusions are GPU kernels)";
        if (c.activations != "device") return "activations = \"managed\" needs a GPU backend";
    }
    return {};
}

int execute_cell(const CellParams& cell, const std::string& scratch_db) {
    if (cell.debug_fault != "none") inject_fault(cell.debug_fault);
    CellOutcome out;
    int code = 0;
    if (auto why = cell_unavailable_reason(cell); !why.empty()) {
        out.status = "skipped";
        out.reason = why;
    } else {
        try {
            out = measure(cell);
        } catch (const std::exception& e) {
            std::cerr << "sweetspot: cell failed: " << e.what() << "\n";
            out = CellOutcome{};
            out.status = "failed";
            out.reason = e.what();
            code = 1;
        }
    }
    write_outcome(scratch_db, cell, out);
    return code;
}

}  // namespace sweetspot
