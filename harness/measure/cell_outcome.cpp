#include "harness/measure/cell_outcome.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "base/number_text.hpp"
#include "harness/collect/event_totals.hpp"
#include "harness/matrix/sequence_lengths.hpp"
#include "harness/measure/gpu_peaks.hpp"
#include "harness/store/event_tables.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

namespace {

// The p-quantile of sorted samples, by linear interpolation between order statistics.
double quantile(const std::vector<double>& sorted, double p) {
    const double pos = p * static_cast<double>(sorted.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    const auto hi = std::min(lo + 1, sorted.size() - 1);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

}  // namespace

LatencyStats LatencyStats::of(std::vector<double> s) {
    if (s.empty()) throw std::invalid_argument("latency statistics of an empty sample");
    std::sort(s.begin(), s.end());
    double sum = 0;
    for (double v : s) sum += v;
    return {quantile(s, 0.5), quantile(s, 0.1), quantile(s, 0.9), s.front(), s.back(), sum / static_cast<double>(s.size())};
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

namespace {

// The quartiles, as LatencyStats's percentiles are made.
std::pair<double, double> quartiles(std::vector<double> samples) {
    std::sort(samples.begin(), samples.end());
    return {quantile(samples, 0.25), quantile(samples, 0.75)};
}

}  // namespace

std::optional<double> spread_pct(const std::vector<double>& samples_ms) {
    if (samples_ms.size() < 2) return std::nullopt;
    const double median = LatencyStats::of(samples_ms).median;
    if (median <= 0) return std::nullopt;
    const auto [q1, q3] = quartiles(samples_ms);
    return 100.0 * (q3 - q1) / 1.349 / median;
}

std::optional<std::int64_t> outlier_count(const std::vector<double>& samples_ms) {
    if (samples_ms.size() < 5) return std::nullopt;
    const auto [q1, q3] = quartiles(samples_ms);
    const double reach = 3.0 * (q3 - q1);
    return std::count_if(samples_ms.begin(), samples_ms.end(), [&](double v) { return v < q1 - reach || v > q3 + reach; });
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

// What a reader of the cell's numbers should know: each an observation with its figure.
void derive_warnings(const CellParams& c, CellOutcome& out) {
    std::vector<std::string> warnings;
    if (out.get<"noisy">().value_or(0) != 0)
        warnings.push_back("noisy: spread " + fixed(*out.get<"spread_pct">(), 1) + " % above max_noise " +
                           format_number(c.max_noise_pct) + " %");
    if (const auto outliers = out.get<"outliers">(); outliers && *outliers > 0)
        warnings.push_back(std::to_string(*outliers) + " outlier" + (*outliers > 1 ? "s" : "") + " among " +
                           std::to_string(out.timed_ms.size()) + " timed iterations");
    if (const auto events = out.get<"gpu_clock_events">(); events && !events->empty())
        warnings.push_back("GPU throttled: " + *events);
    const auto load = out.get<"cpu_load_1m">();
    const auto cores = out.get<"cpu_cores">();
    if (load && cores && *load > static_cast<double>(*cores))
        warnings.push_back("loaded host: load " + fixed(*load, 1) + " on " + std::to_string(*cores) + " cores");
    if (warnings.empty()) return;
    std::string text;
    for (const std::string& w : warnings) text += (text.empty() ? "" : "; ") + w;
    out.set<"warnings">(text);
}

std::optional<double> median_of(const std::vector<double>& samples) {
    if (samples.empty()) return std::nullopt;
    return LatencyStats::of(samples).median;
}

// Model flops of one step over the real tokens of `shape`: a padding row's work is not the
// model's, and each sequence attends only within itself.
double shape_flops(const CellParams& c, const BatchShape& shape) {
    const bool training = c.mode == Mode::train;
    if (shape.is_rectangular()) return step_flops(c.model, shape.batch(), shape.stride(), training);
    double flops = 0;
    for (const int length : shape.lengths()) flops += step_flops(c.model, 1, length, training);
    return flops;
}

// The phase split, the model flops and the utilisation they give at the median step.
void derive_step_measures(const CellParams& c, const BatchShape& shape, double median_ms, CellOutcome& out) {
    const auto phase = [&](StepPhase p) { return median_of(out.timed_phase_ms[static_cast<std::size_t>(p)]); };
    out.set<"forward_ms">(phase(StepPhase::forward));
    out.set<"backward_ms">(phase(StepPhase::backward));
    out.set<"optimizer_ms">(phase(StepPhase::optimizer));
    const double flops = shape_flops(c, shape);
    const double tflops = flops / (median_ms * 1e-3) / 1e12;
    out.set<"model_flops">(flops);
    out.set<"achieved_tflops">(tflops);
    const std::optional<std::string> gpu = out.get<"gpu_model">();
    if (!gpu) {
        out.set<"mfu_note">("no GPU: MFU is measured against a GPU's dense peak");
    } else if (const std::optional<double> peak = dense_peak_tflops(*gpu, c.dtype, c.tf32 || c.split_tf32)) {
        out.set<"mfu_pct">(100.0 * tflops / *peak);
    } else {
        out.set<"mfu_note">("no dense peak is known for '" + *gpu + "' (harness/measure/gpu_peaks.cpp)");
    }
}

}  // namespace

void derive_measures(const CellParams& c, CellOutcome& out) {
    const std::int64_t weights = c.weight_bytes(), budget = c.budget_bytes();
    out.set<"n_params">(n_params(c.model));
    out.set<"weight_bytes">(weights);
    out.set<"budget_bytes">(budget);
    out.set<"oversubscription">(static_cast<double>(weights) / static_cast<double>(budget));
    out.set<"noise_pct">(noise_pct(out.timed_ms));
    const std::optional<double> spread = spread_pct(out.timed_ms);
    out.set<"spread_pct">(spread);
    out.set<"outliers">(outlier_count(out.timed_ms));
    out.set<"noisy">(c.max_noise_pct > 0 && spread && *spread > c.max_noise_pct);
    derive_event_totals(out);
    derive_warnings(c, out);
    if (out.reference) out.set<"check_reference_key">(out.reference->key);
    if (out.timed_ms.empty()) return;
    const LatencyStats lat = LatencyStats::of(out.timed_ms);
    out.set<"latency_median_ms">(lat.median);
    out.set<"latency_p10_ms">(lat.p10);
    out.set<"latency_p90_ms">(lat.p90);
    out.set<"latency_min_ms">(lat.min);
    out.set<"latency_max_ms">(lat.max);
    out.set<"latency_mean_ms">(lat.mean);
    // Drawn here, once the cell has run: a cell that ran could read its length file.
    const BatchShape shape = c.batch_shape();
    out.set<"real_tokens">(shape.real_tokens());
    out.set<"padded_tokens">(shape.padded_tokens());
    out.set<"padding_share">(shape.padding_share());
    if (!c.lengths.is_fixed()) out.set<"drawn_lengths">(lengths_text(shape.lengths()));
    out.set<"tokens_per_s">(static_cast<double>(shape.real_tokens()) / (lat.median / 1000.0));
    if (const auto streamed = out.get<"streamed_bytes">())
        out.set<"streamed_gbps">(static_cast<double>(*streamed) / (lat.median * 1e6));
    derive_step_measures(c, shape, lat.median, out);
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
