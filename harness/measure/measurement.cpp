#include "harness/measure/measurement.hpp"

#include <sys/resource.h>

namespace sweetspot {

std::vector<std::int32_t> cell_tokens(const CellParams& cell, const MeasureOptions& options) {
    if (options.tokens.empty()) return cell.token_ids();
    return {options.tokens.begin(), options.tokens.end()};
}

void measure_iterations(const CellParams& c, std::size_t token_count, CellForward& forward,
                        const MeasureOptions& options, CellOutcome& out) {
    PhaseClock clock(out.phases);
    out.activation_bytes = forward.activation_bytes();
    for (int i = 0; i < c.warmups; ++i) out.warmup_ms.push_back(forward.iteration_ms("warmup " + std::to_string(i)));
    clock.lap("warmups");
    for (int i = 0; i < c.iterations; ++i) out.timed_ms.push_back(forward.iteration_ms("iteration " + std::to_string(i)));
    clock.lap("timed");
    // Traced iterations run after the timed ones, so collection never perturbs the latencies
    // that are reported; their own latencies show what tracing costs.
    if (c.trace_iterations > 0) {
        forward.start_collection();
        for (int i = 0; i < c.trace_iterations; ++i)
            out.traced_ms.push_back(forward.iteration_ms("traced iteration " + std::to_string(i)));
        out.events = forward.finish_collection();
        clock.lap("traced");
    }
    forward.add_placement(out);
    out.tokens_per_s = static_cast<double>(token_count) / (LatencyStats::of(out.timed_ms).median / 1000.0);

    const std::vector<float> logits = forward.logits();
    judge_output(logits, forward.check(logits), out);
    clock.lap("check");
    if (options.logits != nullptr) *options.logits = logits;

    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    out.peak_host_rss_bytes = static_cast<std::int64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace sweetspot
