#include "harness/measure/measurement.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>

#include "harness/system/system_info.hpp"

namespace sweetspot {

std::vector<std::int32_t> cell_tokens(const CellParams& cell, const MeasureOptions& options) {
    if (options.tokens.empty()) return cell.token_ids();
    return {options.tokens.begin(), options.tokens.end()};
}

namespace {

// Records a timed step of `mode`: its latency and each phase's (step_phases(mode) order).
void add_timed(const StepTime& t, Mode mode, CellOutcome& out) {
    out.timed_ms.push_back(t.ms);
    const std::span<const StepPhase> phases = step_phases(mode);
    for (std::size_t i = 0; i < t.phase_ms.size(); ++i)
        out.timed_phase_ms.at(static_cast<std::size_t>(phases[i])).push_back(t.phase_ms[i]);
}

}  // namespace

void measure_steps(const CellParams& c, CellStep& step, const MeasureOptions& options, CellOutcome& out) {
    PhaseClock clock(out.phases);
    out.set<"activation_bytes">(step.activation_bytes());
    // What else the machine was running, and how fast its cores went: a host cell computes on them,
    // a GPU cell needs their threads to launch its kernels and copies.
    const HostLoad host = host_load();
    out.set<"cpu_load_1m">(host.load_1m);
    out.set<"cpu_cores">(host.cores);
    out.set<"cpu_mhz">(host.mean_mhz);
    if (c.mode == Mode::train) {
        options.status.phase("checked_step");
        step.run_checked_step();
        clock.lap("checked_step");
    }
    for (int i = 0; i < c.warmups; ++i) {
        options.status.iteration("warmup", i + 1, c.warmups);
        out.warmup_ms.push_back(step.run_step("warmup " + std::to_string(i)).ms);
    }
    clock.lap("warmups");
    // The noise criterion (cell.hpp): at least `iterations`, then more while the noise is above
    // max_noise, up to the limits.
    const int most = std::max(c.iterations, c.max_iterations);
    const auto timed_start = std::chrono::steady_clock::now();
    const auto more_wanted = [&] {
        const int done = static_cast<int>(out.timed_ms.size());
        if (done < c.iterations) return true;
        if (done >= most || c.max_noise_pct <= 0) return false;
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - timed_start;
        if (c.max_time_s > 0 && elapsed.count() >= c.max_time_s) return false;
        const std::optional<double> spread = spread_pct(out.timed_ms);
        return !spread || *spread > c.max_noise_pct;
    };
    const std::optional<int> up_to = c.max_noise_pct > 0 ? std::optional<int>(most) : std::nullopt;
    while (more_wanted()) {
        options.status.iteration("iteration", static_cast<int>(out.timed_ms.size()) + 1, c.iterations, up_to);
        add_timed(step.run_step("iteration " + std::to_string(out.timed_ms.size())), c.mode, out);
    }
    clock.lap("timed");
    // Traced steps run after the timed ones, so collection never perturbs the latencies that are
    // reported; their own latencies show what tracing costs.
    if (c.trace_iterations > 0) {
        step.start_collection();
        for (int i = 0; i < c.trace_iterations; ++i) {
            options.status.iteration("traced", i + 1, c.trace_iterations);
            out.traced_ms.push_back(step.run_step("traced iteration " + std::to_string(i)).ms);
        }
        out.events = step.finish_collection();
        clock.lap("traced");
    }
    step.add_results(out);

    options.status.phase("check");
    const OutputCount nonfinite = step.count_nonfinite();
    const std::optional<LogitsCheck> check = step.check();
    judge_output(nonfinite, check, out);
    // A kept reference forward, which a workload's first cell runs and later cells reuse, is a cost
    // of the workload, not of that cell's backend: it is a phase of its own.
    if (check && check->reference_computed && check->kept)
        clock.lap("check", "reference", check->reference_seconds);
    else
        clock.lap("check");
    if (options.logits != nullptr) *options.logits = step.logits();

    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    out.set<"peak_host_rss_bytes">(static_cast<std::int64_t>(ru.ru_maxrss) * 1024);
}

}  // namespace sweetspot
