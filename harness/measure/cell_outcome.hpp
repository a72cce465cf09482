#pragma once
// What measuring a cell produced, keyed by the measure declarations (harness/matrix/measures.hpp),
// and the one way it becomes a cell's rows in a results database. The cell's process fills what
// it measured; derive_measures makes the derived numbers; the runner adds what only it sees.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/collect/events.hpp"
#include "harness/matrix/cell.hpp"
#include "harness/matrix/measures.hpp"
#include "harness/store/store.hpp"

namespace sweetspot {

// What became of a cell.
enum class CellStatus { ok, failed, timeout, skipped, invalid };
template <>
struct EnumNames<CellStatus> {
    static constexpr std::array<EnumName<CellStatus>, 5> list = {{{CellStatus::ok, "ok"},
                                                                  {CellStatus::failed, "failed"},
                                                                  {CellStatus::timeout, "timeout"},
                                                                  {CellStatus::skipped, "skipped"},
                                                                  {CellStatus::invalid, "invalid"}}};
};

struct LatencyStats {
    double median = 0, p10 = 0, p90 = 0, min = 0, max = 0, mean = 0;
    // Percentiles by linear interpolation between order statistics. Requires a non-empty sample.
    static LatencyStats of(std::vector<double> samples_ms);
};

// The noise of a cell's timed iterations: their relative standard deviation (sample standard
// deviation over the mean), in percent; nullopt for fewer than two.
std::optional<double> noise_pct(const std::vector<double>& samples_ms);
// Their robust spread: the interquartile range over the median, divided by 1.349 so that it is the
// relative standard deviation of normally distributed samples, in percent; one slow iteration
// cannot inflate it as it does the standard deviation. Quartiles by linear interpolation, as the
// latency percentiles. nullopt for fewer than two. What the noise criterion compares.
std::optional<double> spread_pct(const std::vector<double>& samples_ms);
// How many lie beyond Tukey's far-out fences, three interquartile ranges below the first quartile
// or above the third; nullopt for fewer than five, too few for quartiles to mean much.
std::optional<std::int64_t> outlier_count(const std::vector<double>& samples_ms);

class CellOutcome {
public:
    CellStatus status = CellStatus::failed;
    std::string reason;
    std::vector<double> warmup_ms, timed_ms;
    std::vector<double> traced_ms;     // the traced iterations (collection on), stored as phase 'traced'
    // Each timed step's phases, indexed by StepPhase, for the phase split.
    std::array<std::vector<double>, EnumNames<StepPhase>::list.size()> timed_phase_ms;
    std::optional<CellEvents> events;  // what the collector recorded in the traced iterations
    // The reference the check used, where it is one the database keeps (recording the cell adds
    // it, once per key).
    std::optional<ReferenceLogits> reference;
    // Where the cell's wall time went, phase by phase, in the order they ran.
    std::vector<CellPhase> phases;

    template <MeasureName name>
    void set(const measure_t<name>& value) {
        values_[measure_index(name.view())] = SqlValue(value);
    }
    template <MeasureName name, class T>
    void set(const std::optional<T>& value) {
        values_[measure_index(name.view())] = value ? SqlValue(measure_t<name>(*value)) : SqlValue();
    }
    template <MeasureName name>
    std::optional<measure_t<name>> get() const {
        const SqlValue& v = values_[measure_index(name.view())];
        if (std::holds_alternative<std::monostate>(v)) return std::nullopt;
        return std::get<measure_t<name>>(v);
    }
    // The measures that have a value, by column name, in declaration order.
    Row measure_row() const;

private:
    std::array<SqlValue, kMeasures.size()> values_;
};

// Sets every derived measure of `out` that its cell's parameters and measurements determine (the
// latency quantiles and noise where there are timed iterations, tokens/s, the streamed bandwidth,
// the model's size and the budget, the totals of the traced iterations' events and the
// collector's verdict on Unified Memory profiling, the key of the kept reference); leaves the
// others unset.
void derive_measures(const CellParams& cell, CellOutcome& out);

// Records `out` (its derived measures made here) as `cell`'s rows in `store`, in one transaction:
// its row, iterations, phases, events and kept reference. Returns the cell_id.
std::int64_t record_outcome(Store& store, std::int64_t run_id, int cell_index, const CellParams& cell, CellOutcome out);

}  // namespace sweetspot
