#include "harness/measure/cell_outcome.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "harness/collect/event_totals.hpp"
#include "harness/store/event_tables.hpp"

namespace sweetspot {

LatencyStats LatencyStats::of(std::vector<double> s) {
    if (s.empty()) throw std::invalid_argument("latency statistics of an empty sample");
    std::sort(s.begin(), s.end());
    auto q = [&](double p) {
        const double pos = p * static_cast<double>(s.size() - 1);
        const auto lo = static_cast<std::size_t>(std::floor(pos));
        const auto hi = std::min(lo + 1, s.size() - 1);
        return s[lo] + (s[hi] - s[lo]) * (pos - static_cast<double>(lo));
    };
    double sum = 0;
    for (double v : s) sum += v;
    return {q(0.5), q(0.1), q(0.9), s.front(), s.back(), sum / static_cast<double>(s.size())};
}

std::optional<double> noise_pct(const std::vector<double>& samples_ms) {
    if (samples_ms.size() < 2) return std::nullopt;
    double sum = 0;
    for (const double v : samples_ms) sum += v;
    const double n = static_cast<double>(samples_ms.size()), mean = sum / n;
    if (mean <= 0) return std::nullopt;
    double squares = 0;
    for (const double v : samples_ms) squares += (v - mean) * (v - mean);
    return 100.0 * std::sqrt(squares / (n - 1)) / mean;
}

Row CellOutcome::measure_row() const {
    Row row;
    for (std::size_t i = 0; i < kMeasures.size(); ++i)
        if (!std::holds_alternative<std::monostate>(values_[i])) row.emplace_back(kMeasures[i].name, values_[i]);
    return row;
}

namespace {

void derive_event_totals(CellOutcome& out) {
    if (!out.events) return;
    const CellEvents& e = *out.events;
    const EventTotals t = totals_of(e);
    out.set<"um_profiling">(e.um_supported ? "supported" : e.um_note.empty() ? "not supported" : e.um_note);
    out.set<"um_htod_bytes">(t.um_htod_bytes);
    out.set<"um_dtoh_bytes">(t.um_dtoh_bytes);
    out.set<"gpu_page_faults">(t.gpu_page_faults);
    out.set<"cpu_page_faults">(t.cpu_page_faults);
    out.set<"thrashing">(t.thrashing);
    out.set<"throttling">(t.throttling);
    out.set<"remote_maps">(t.remote_maps);
    out.set<"kernel_busy_ms">(t.kernel_busy_ms);
    out.set<"copy_ms">(t.copy_ms);
    out.set<"copy_compute_overlap_ms">(t.copy_compute_overlap_ms);
    out.set<"dropped_records">(t.dropped_records);
    out.set<"collector_overhead_ms">(t.collector_overhead_ms);
}

}  // namespace

void derive_measures(const CellParams& c, CellOutcome& out) {
    const std::int64_t weights = c.weight_bytes(), budget = c.budget_bytes();
    out.set<"n_params">(c.model.n_params());
    out.set<"weight_bytes">(weights);
    out.set<"budget_bytes">(budget);
    out.set<"oversubscription">(static_cast<double>(weights) / static_cast<double>(budget));
    const std::optional<double> noise = noise_pct(out.timed_ms);
    out.set<"noise_pct">(noise);
    out.set<"noisy">(c.max_noise_pct > 0 && noise && *noise > c.max_noise_pct);
    derive_event_totals(out);
    if (out.reference) out.set<"check_reference_key">(out.reference->key);
    if (out.timed_ms.empty()) return;
    const LatencyStats lat = LatencyStats::of(out.timed_ms);
    out.set<"latency_median_ms">(lat.median);
    out.set<"latency_p10_ms">(lat.p10);
    out.set<"latency_p90_ms">(lat.p90);
    out.set<"latency_min_ms">(lat.min);
    out.set<"latency_max_ms">(lat.max);
    out.set<"latency_mean_ms">(lat.mean);
    out.set<"tokens_per_s">(static_cast<double>(c.batch) * c.seq / (lat.median / 1000.0));
    if (const auto streamed = out.get<"streamed_bytes">())
        out.set<"streamed_gbps">(static_cast<double>(*streamed) / (lat.median * 1e6));
}

std::int64_t record_outcome(Store& store, std::int64_t run_id, int cell_index, const CellParams& cell, CellOutcome out) {
    derive_measures(cell, out);
    Row row = {{"status", sql(enum_name(out.status))}, {"reason", sql(out.reason)}};
    const Row measures = out.measure_row();
    row.insert(row.end(), measures.begin(), measures.end());
    Transaction tx(store.db());
    const std::int64_t cell_id = store.insert_cell(run_id, cell_index, cell, row);
    store.insert_iterations(cell_id, "warmup", out.warmup_ms);
    store.insert_iterations(cell_id, "timed", out.timed_ms);
    store.insert_iterations(cell_id, "traced", out.traced_ms);
    store.insert_phases(cell_id, out.phases);
    if (out.events) write_events(store.db(), cell_id, *out.events);
    if (out.reference) store.keep_reference(*out.reference);
    tx.commit();
    return cell_id;
}

}  // namespace sweetspot
