#pragma once
// Every number a cell's row stores beside its parameters, declared once: its `cells` column, SQL
// type, unit, who fills it, whether `summary` and `compare` show it, the schema version that added
// it and what it means. The schema (harness/store/schema.cpp), the row a cell writes and the
// runner moves (harness/measure/cell_outcome.cpp), the `measures` table of every database, and
// `summary` and `compare` walk this table, so a new measurement is one entry here plus the code
// that measures it. The table is constexpr so that code naming a measure
// (`outcome.set<"streamed_bytes">(n)`) is checked against it when it compiles.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/named_enum.hpp"

namespace sweetspot {

enum class SqlType { integer, real, text };
template <>
struct EnumNames<SqlType> {
    static constexpr std::array<EnumName<SqlType>, 3> list = {
        {{SqlType::integer, "INTEGER"}, {SqlType::real, "REAL"}, {SqlType::text, "TEXT"}}};
};

enum class Unit { ms, s, bytes, gbps, percent, count, tokens_per_s, ratio, flag, text, timestamp, none };
template <>
struct EnumNames<Unit> {
    static constexpr std::array<EnumName<Unit>, 12> list = {{{Unit::ms, "ms"},
                                                             {Unit::s, "s"},
                                                             {Unit::bytes, "bytes"},
                                                             {Unit::gbps, "GB/s"},
                                                             {Unit::percent, "%"},
                                                             {Unit::count, "count"},
                                                             {Unit::tokens_per_s, "tokens/s"},
                                                             {Unit::ratio, "ratio"},
                                                             {Unit::flag, "0/1"},
                                                             {Unit::text, "text"},
                                                             {Unit::timestamp, "ISO 8601 UTC"},
                                                             {Unit::none, ""}}};
};

// Who sets a value. `cell`: the cell's process, from what it measured. `parent`: the runner, which
// alone sees the process's exit, wall time and output. `estimator`: the memory estimator, before
// the cell runs. `derived`: computed from the cell's parameters and its other values by
// derive_measures (harness/measure/cell_outcome.cpp), the one place each of them is made.
enum class FilledBy { cell, parent, estimator, derived };
template <>
struct EnumNames<FilledBy> {
    static constexpr std::array<EnumName<FilledBy>, 4> list = {{{FilledBy::cell, "cell"},
                                                                {FilledBy::parent, "parent"},
                                                                {FilledBy::estimator, "estimator"},
                                                                {FilledBy::derived, "derived"}}};
};

struct Measure {
    std::string_view name;  // its `cells` column
    SqlType type = SqlType::real;
    Unit unit = Unit::none;
    FilledBy filled_by = FilledBy::cell;
    int since = 2;  // the schema version that added it (2: every database sweetspot reads)
    std::string_view meaning;
    // Its column in `summary`'s cells table (under `label`, with `decimals`, -1 for scientific
    // notation, in the text table) and in its csv and json.
    bool in_summary = false;
    // Set against each other by `compare` for the workloads two databases share.
    bool in_compare = false;
    std::string_view label = {};
    int decimals = 3;
    // What rows written before the column existed hold (an SQL literal): the column is then NOT
    // NULL with this default. Empty: NULL where nothing was measured.
    std::string_view before = {};
};

// The declarations, in the order of their `cells` columns.
inline constexpr auto kMeasures = std::to_array<Measure>({
    // What the cell's parameters make of the model and the budget.
    {.name = "n_params", .type = SqlType::integer, .unit = Unit::count, .filled_by = FilledBy::derived,
     .meaning = "parameters of the model (untied lm_head)"},
    {.name = "budget_bytes", .type = SqlType::integer, .unit = Unit::bytes, .filled_by = FilledBy::derived,
     .meaning = "device bytes the weights may occupy"},
    {.name = "weight_bytes", .type = SqlType::integer, .unit = Unit::bytes, .filled_by = FilledBy::derived,
     .meaning = "bytes of all weights in the cell's dtype, as laid out"},
    {.name = "oversubscription", .type = SqlType::real, .unit = Unit::ratio, .filled_by = FilledBy::derived,
     .meaning = "weight_bytes / budget_bytes"},
    // The cell's process, as the runner saw it.
    {.name = "started_at", .type = SqlType::text, .unit = Unit::timestamp, .filled_by = FilledBy::parent,
     .meaning = "when the cell started"},
    {.name = "finished_at", .type = SqlType::text, .unit = Unit::timestamp, .filled_by = FilledBy::parent,
     .meaning = "when it ended"},
    {.name = "wall_s", .type = SqlType::real, .unit = Unit::s, .filled_by = FilledBy::parent,
     .meaning = "wall time of the cell's process"},
    {.name = "init_s", .type = SqlType::real, .unit = Unit::s, .meaning = "model and weight set-up time inside it"},
    {.name = "exit_code", .type = SqlType::integer, .filled_by = FilledBy::parent,
     .meaning = "exit status of the cell's process"},
    {.name = "signal", .type = SqlType::integer, .filled_by = FilledBy::parent, .meaning = "signal that ended it"},
    {.name = "stderr_tail", .type = SqlType::text, .unit = Unit::text, .filled_by = FilledBy::parent,
     .meaning = "last 4 kB of its stdout and stderr"},
    // The timed iterations.
    {.name = "latency_median_ms", .unit = Unit::ms, .filled_by = FilledBy::derived,
     .meaning = "median latency of the timed iterations", .in_summary = true, .in_compare = true, .label = "median ms"},
    {.name = "latency_p10_ms", .unit = Unit::ms, .filled_by = FilledBy::derived,
     .meaning = "10th percentile of the timed iterations", .in_summary = true, .label = "p10 ms"},
    {.name = "latency_p90_ms", .unit = Unit::ms, .filled_by = FilledBy::derived,
     .meaning = "90th percentile of the timed iterations", .in_summary = true, .label = "p90 ms"},
    {.name = "latency_min_ms", .unit = Unit::ms, .filled_by = FilledBy::derived, .meaning = "fastest timed iteration"},
    {.name = "latency_max_ms", .unit = Unit::ms, .filled_by = FilledBy::derived, .meaning = "slowest timed iteration"},
    {.name = "latency_mean_ms", .unit = Unit::ms, .filled_by = FilledBy::derived, .meaning = "mean of the timed iterations"},
    {.name = "noise_pct", .unit = Unit::percent, .filled_by = FilledBy::derived, .since = 7,
     .meaning = "relative standard deviation of the timed iterations"},
    {.name = "spread_pct", .unit = Unit::percent, .filled_by = FilledBy::derived, .since = 13,
     .meaning = "robust spread of the timed iterations: interquartile range / 1.349 / median; the noise criterion's",
     .in_summary = true, .label = "spread %", .decimals = 2},
    {.name = "outliers", .type = SqlType::integer, .unit = Unit::count, .filled_by = FilledBy::derived, .since = 13,
     .meaning = "timed iterations beyond Tukey's far-out fences (3 interquartile ranges past a quartile)"},
    {.name = "noisy", .type = SqlType::integer, .unit = Unit::flag, .filled_by = FilledBy::derived, .since = 7,
     .meaning = "the timed iterations stopped on a limit with spread_pct (noise_pct before schema 13) above max_noise_pct",
     .before = "0"},
    {.name = "tokens_per_s", .unit = Unit::tokens_per_s, .filled_by = FilledBy::derived,
     .meaning = "real tokens / median latency (batch x seq where lengths are fixed); padding rows do not count",
     .in_summary = true, .label = "tokens/s", .decimals = 0},
    // The batch's shape (CellParams::batch_shape), from the lengths the cell drew.
    {.name = "real_tokens", .type = SqlType::integer, .unit = Unit::count, .filled_by = FilledBy::derived, .since = 26,
     .meaning = "tokens of the batch's sequences: the sum of their lengths (batch x seq where lengths are fixed)"},
    {.name = "padded_tokens", .type = SqlType::integer, .unit = Unit::count, .filled_by = FilledBy::derived,
     .since = 26,
     .meaning = "padding rows the batch computes beside its real tokens: batch x its longest length, less real_tokens, "
                "where padded; 0 where packed or lengths are fixed"},
    {.name = "padding_share", .unit = Unit::ratio, .filled_by = FilledBy::derived, .since = 26,
     .meaning = "padded_tokens / (real_tokens + padded_tokens): the share of the computed rows that is padding"},
    {.name = "drawn_lengths", .type = SqlType::text, .unit = Unit::text, .filled_by = FilledBy::derived, .since = 27,
     .meaning = "each sequence's real length as the cell drew it, in batch order, comma-separated (\"330,12,871\"); "
                "NULL where lengths are fixed (every sequence seq tokens)"},
    // A step's phases (cell.hpp's StepPhase) and what it computed.
    {.name = "forward_ms", .unit = Unit::ms, .filled_by = FilledBy::derived, .since = 16,
     .meaning = "median over the timed steps of their forward phase (with the fused classifier and loss, for train; "
                "with the optimizer on the host, the wait for the last step's update it overlaps)",
     .in_summary = true, .label = "fwd ms"},
    {.name = "backward_ms", .unit = Unit::ms, .filled_by = FilledBy::derived, .since = 16,
     .meaning = "median over the timed steps of their backward phase (train; with the optimizer on the host and "
                "max_grad_norm 0, the update of the units it is done with runs beside it)",
     .in_summary = true, .label = "bwd ms"},
    {.name = "optimizer_ms", .unit = Unit::ms, .filled_by = FilledBy::derived, .since = 16,
     .meaning = "median over the timed steps of their optimizer phase: gradient-norm clipping and AdamW (train; with "
                "the optimizer on the host, only what the GPU waits for before the next forward, about 0)",
     .in_summary = true, .label = "opt ms"},
    {.name = "loss_first", .unit = Unit::none, .since = 16,
     .meaning = "mean next-token cross-entropy over the real tokens of the checked first step, from the initial "
                "weights (train)",
     .in_summary = true, .label = "loss", .decimals = 4},
    {.name = "loss_last", .unit = Unit::none, .since = 16,
     .meaning = "mean next-token cross-entropy over the real tokens of the last timed step, after every step before "
                "it (train)"},
    {.name = "grad_norm_first", .unit = Unit::none, .since = 16,
     .meaning = "global gradient norm, before clipping, of the checked first step (train)"},
    {.name = "grad_norm_last", .unit = Unit::none, .since = 16,
     .meaning = "global gradient norm, before clipping, of the last timed step (train)"},
    {.name = "model_flops", .unit = Unit::count, .filled_by = FilledBy::derived, .since = 16,
     .meaning = "model flops of one step, as results/README.md counts them (2 per parameter and token for a forward, "
                "6 for a training step, and causal attention), over the real tokens, each sequence attending within itself"},
    {.name = "achieved_tflops", .unit = Unit::none, .filled_by = FilledBy::derived, .since = 16,
     .meaning = "model_flops / median latency, in TFLOP/s"},
    {.name = "mfu_pct", .unit = Unit::percent, .filled_by = FilledBy::derived, .since = 16,
     .meaning = "model flops utilisation: achieved_tflops over the GPU's dense peak for the dtype (harness/measure/gpu_peaks.cpp)",
     .in_summary = true, .label = "MFU %", .decimals = 1},
    {.name = "mfu_note", .type = SqlType::text, .unit = Unit::text, .filled_by = FilledBy::derived, .since = 16,
     .meaning = "why a cell has no mfu_pct"},
    // Where the backend put the weights.
    {.name = "resident_bytes", .type = SqlType::integer, .unit = Unit::bytes,
     .meaning = "weight bytes kept on the device for the whole cell"},
    {.name = "streamed_bytes", .type = SqlType::integer, .unit = Unit::bytes,
     .meaning = "weight bytes that cross the host link in every iteration"},
    {.name = "streamed_gbps", .unit = Unit::gbps, .filled_by = FilledBy::derived,
     .meaning = "streamed_bytes / median latency: the link bandwidth the cell achieved"},
    {.name = "device_weight_bytes", .type = SqlType::integer, .unit = Unit::bytes,
     .meaning = "device memory the backend held for weights"},
    {.name = "pinned_host_bytes", .type = SqlType::integer, .unit = Unit::bytes, .since = 9,
     .meaning = "page-locked host memory the backend held for weights, and for the staging of a training state kept on "
                "the host (optimizer = host) and explicit-copy's streamed units' gradients"},
    {.name = "training_state_bytes", .type = SqlType::integer, .unit = Unit::bytes, .since = 16,
     .meaning = "device memory the backend held for a training step's state: gradients, fp32 master weights, AdamW's "
                "moments (train)"},
    {.name = "link_to_host_bytes", .type = SqlType::integer, .unit = Unit::bytes, .since = 21,
     .meaning = "bytes a training step copied from the device to the host: each unit's gradient where AdamW runs on "
                "the host (optimizer = host; explicit-copy's and uvm-prefetch's streamed units' as the backward releases them), 0 where "
                "it runs on the device (GPU train)"},
    {.name = "link_to_device_bytes", .type = SqlType::integer, .unit = Unit::bytes, .since = 21,
     .meaning = "bytes a training step copied from the host to the device: each unit's new weights where AdamW runs "
                "on the host, and explicit-copy's and uvm-prefetch's streamed units twice (forward and backward, copied or prefetched) instead of theirs, 0 where "
                "it runs on the device (GPU train)"},
    {.name = "host_state_gbps", .unit = Unit::gbps, .since = 30,
     .meaning = "the rate the cell's optimizer state on the host (optimizer = host: fp32 master weights, m and v) "
                "moved at, read and written in place where it lay, best of 3 passes before the steps (2 from schema 33 "
                "on): the bound's host update term before schema 33 (analysis/bound.py)"},
    {.name = "host_arrays_gbps", .unit = Unit::gbps, .since = 33,
     .meaning = "the rate the cell's host update's every array moved at, read and written in place where it lay: "
                "the optimizer state as host_state_gbps, the gradients read and the weights rewritten besides, as many "
                "bytes as the update moves, best of 3 passes: the bound's host update term (analysis/bound.py)"},
    {.name = "host_shared_gbps", .unit = Unit::gbps, .since = 31,
     .meaning = "the rate the host's memory moved the cell's update arrays in place (as host_arrays_gbps, best of 2 "
                "passes; the optimizer state only before schema 33) and page-locked copies across the link both ways "
                "at once, their bytes together: the bound's host memory term, for a step whose copies go through the "
                "memory its update streams (analysis/bound.py)"},
    {.name = "host_adamw_alone_ms", .unit = Unit::ms, .since = 32,
     .meaning = "the same cells: the time the host's cores spent in AdamW's passes over the units in the checked "
                "step's update, which is not overlapped (the GPU idle, no copies but the resident units' own)"},
    {.name = "host_adamw_ms", .unit = Unit::ms, .since = 32,
     .meaning = "the same cells: the median time the host's cores spent in AdamW's passes in each overlapped update, "
                "beside the next step's forward and, without clipping, the backward (the warm-ups' and timed steps')"},
    {.name = "device_used_bytes", .type = SqlType::integer, .unit = Unit::bytes,
     .meaning = "device memory in use after the first iteration (cudaMemGetInfo)"},
    // The memory estimator's predictions, made before the cell runs.
    {.name = "predicted_alloc_bytes", .type = SqlType::integer, .unit = Unit::bytes, .filled_by = FilledBy::estimator,
     .since = 5, .meaning = "device memory the estimator predicts the cell allocates"},
    {.name = "predicted_peak_bytes", .type = SqlType::integer, .unit = Unit::bytes, .filled_by = FilledBy::estimator,
     .since = 6, .meaning = "predicted_alloc_bytes plus the fixed cost measured on this GPU and driver"},
    {.name = "predicted_host_peak_bytes", .type = SqlType::integer, .unit = Unit::bytes,
     .filled_by = FilledBy::estimator, .since = 9, .meaning = "the peak host memory predicted for the cell's process"},
    {.name = "predicted_host_alloc_bytes", .type = SqlType::integer, .unit = Unit::bytes,
     .filled_by = FilledBy::estimator, .since = 9,
     .meaning = "the part of that prediction the estimator computes, without the process's own memory"},
    // predicted_alloc_bytes's terms, each beside the column that measures it.
    {.name = "predicted_weight_bytes", .type = SqlType::integer, .unit = Unit::bytes, .filled_by = FilledBy::estimator,
     .since = 18, .meaning = "the device memory predicted for the weights as the backend places them (device_weight_bytes)"},
    {.name = "predicted_training_state_bytes", .type = SqlType::integer, .unit = Unit::bytes,
     .filled_by = FilledBy::estimator, .since = 18,
     .meaning = "predicted for a training step's gradients, master weights and AdamW moments (training_state_bytes)"},
    {.name = "predicted_activation_bytes", .type = SqlType::integer, .unit = Unit::bytes,
     .filled_by = FilledBy::estimator, .since = 18,
     .meaning = "predicted for the forward's activations, or the training step's kept activations and scratch"},
    {.name = "predicted_scores_bytes", .type = SqlType::integer, .unit = Unit::bytes, .filled_by = FilledBy::estimator,
     .since = 18, .meaning = "predicted for the attention's [batch, heads, seq, seq] scores (0 with flash_attention)"},
    {.name = "predicted_workspace_bytes", .type = SqlType::integer, .unit = Unit::bytes,
     .filled_by = FilledBy::estimator, .since = 18, .meaning = "predicted for the GEMM workspace"},
    {.name = "predicted_check_step_bytes", .type = SqlType::integer, .unit = Unit::bytes,
     .filled_by = FilledBy::estimator, .since = 18,
     .meaning = "predicted for a training cell's prefix check step, freed before the cell's own step allocates"},
    // The device memory NVML read around the cell.
    {.name = "gpu_used_before_bytes", .type = SqlType::integer, .unit = Unit::bytes, .since = 6,
     .meaning = "device memory in use before the cell's CUDA context"},
    {.name = "gpu_context_bytes", .type = SqlType::integer, .unit = Unit::bytes, .since = 6,
     .meaning = "what creating the cell's CUDA context added"},
    {.name = "gpu_peak_bytes", .type = SqlType::integer, .unit = Unit::bytes, .since = 6,
     .meaning = "the cell's measured device memory peak, less gpu_used_before_bytes"},
    {.name = "gpu_own_peak_bytes", .type = SqlType::integer, .unit = Unit::bytes, .since = 6,
     .meaning = "the most device memory NVML attributed to the cell's process"},
    {.name = "gpu_other_processes", .type = SqlType::integer, .unit = Unit::count, .since = 6,
     .meaning = "the most other processes on the GPU at once"},
    {.name = "gpu_other_bytes", .type = SqlType::integer, .unit = Unit::bytes, .since = 6,
     .meaning = "the most device memory those processes held at once"},
    {.name = "gpu_memory_readings", .type = SqlType::integer, .unit = Unit::count, .since = 6,
     .meaning = "NVML readings taken"},
    {.name = "gpu_memory_note", .type = SqlType::text, .unit = Unit::text, .since = 6,
     .meaning = "why the NVML columns are missing or stopped early"},
    {.name = "gpu", .type = SqlType::text, .unit = Unit::text, .filled_by = FilledBy::parent, .since = 6,
     .meaning = "the CUDA_VISIBLE_DEVICES the cell's process ran with"},
    {.name = "gpu_model", .type = SqlType::text, .unit = Unit::text, .since = 16,
     .meaning = "the name CUDA gives the cell's GPU, what its dense peak is looked up by (runs.gpu_name is the run's "
                "first GPU's; under Slurm a cell may run on another)"},
    // The output against its reference.
    {.name = "check_reference", .type = SqlType::text, .unit = Unit::text, .meaning = "what the output was compared with"},
    {.name = "check_max_abs_err", .unit = Unit::ratio, .meaning = "max absolute difference of the logits"},
    {.name = "check_rel_err", .unit = Unit::ratio, .meaning = "max absolute difference / max absolute reference value",
     .in_summary = true, .label = "rel err", .decimals = -1},
    {.name = "check_tolerance", .unit = Unit::ratio, .meaning = "the relative error allowed for the dtype"},
    {.name = "check_reference_key", .type = SqlType::text, .unit = Unit::text, .filled_by = FilledBy::derived, .since = 7,
     .meaning = "the reference_logits row the check compared with"},
    {.name = "check_reference_computed", .type = SqlType::integer, .unit = Unit::flag, .since = 9,
     .meaning = "the check ran its reference forward (0: reused the database's)"},
    // The process's memory and work.
    {.name = "peak_host_rss_bytes", .type = SqlType::integer, .unit = Unit::bytes,
     .meaning = "peak resident memory of the cell's process"},
    {.name = "activation_bytes", .type = SqlType::integer, .unit = Unit::bytes,
     .meaning = "bytes of the forward's activation buffers"},
    {.name = "launches_per_forward", .type = SqlType::integer, .unit = Unit::count, .since = 3,
     .meaning = "kernels and GEMMs one GPU forward enqueues"},
    // The machine the cell ran on, as its iterations ran.
    {.name = "cpu_load_1m", .unit = Unit::count, .since = 12,
     .meaning = "the host's 1-minute load average as the cell's iterations began"},
    {.name = "cpu_cores", .type = SqlType::integer, .unit = Unit::count, .since = 13,
     .meaning = "the host's online cores as the cell's iterations began"},
    {.name = "cpu_mhz", .unit = Unit::none, .since = 13,
     .meaning = "the host cores' mean clock (MHz) as the cell's iterations began"},
    {.name = "gpu_sm_clock_mhz", .unit = Unit::none, .since = 13,
     .meaning = "the GPU's median SM clock (MHz) over NVML's readings while it was busy"},
    {.name = "gpu_power_max_w", .unit = Unit::none, .since = 13, .meaning = "the most power (W) NVML read"},
    {.name = "gpu_temperature_max_c", .type = SqlType::integer, .unit = Unit::none, .since = 13,
     .meaning = "the highest GPU temperature (degrees C) NVML read"},
    {.name = "gpu_clock_events", .type = SqlType::text, .unit = Unit::text, .since = 13,
     .meaning = "what lowered the GPU's clocks while it was busy (power cap, thermal slowdown...); empty: nothing"},
    {.name = "warnings", .type = SqlType::text, .unit = Unit::text, .filled_by = FilledBy::derived, .since = 13,
     .meaning = "what makes the cell's numbers less trustworthy: noisy, outliers, throttled, a loaded host",
     .in_summary = true, .label = "warnings"},
    // The totals of the traced iterations' events (harness/collect/event_totals.hpp).
    {.name = "um_profiling", .type = SqlType::text, .unit = Unit::text, .filled_by = FilledBy::derived,
     .meaning = "whether CUPTI recorded Unified Memory counters, else why not"},
    {.name = "um_htod_bytes", .type = SqlType::integer, .unit = Unit::bytes, .filled_by = FilledBy::derived, .meaning = "UM bytes migrated host to device"},
    {.name = "um_dtoh_bytes", .type = SqlType::integer, .unit = Unit::bytes, .filled_by = FilledBy::derived, .meaning = "UM bytes migrated device to host"},
    {.name = "gpu_page_faults", .type = SqlType::integer, .unit = Unit::count, .filled_by = FilledBy::derived, .meaning = "GPU page faults"},
    {.name = "cpu_page_faults", .type = SqlType::integer, .unit = Unit::count, .filled_by = FilledBy::derived, .meaning = "CPU page faults"},
    {.name = "thrashing", .type = SqlType::integer, .unit = Unit::count, .filled_by = FilledBy::derived, .meaning = "UM thrashing records"},
    {.name = "throttling", .type = SqlType::integer, .unit = Unit::count, .filled_by = FilledBy::derived, .meaning = "UM throttling records"},
    {.name = "remote_maps", .type = SqlType::integer, .unit = Unit::count, .filled_by = FilledBy::derived, .meaning = "UM remote-map records"},
    {.name = "kernel_busy_ms", .unit = Unit::ms, .filled_by = FilledBy::derived, .meaning = "time at least one kernel ran"},
    {.name = "copy_ms", .unit = Unit::ms, .filled_by = FilledBy::derived, .meaning = "time at least one copy ran"},
    {.name = "copy_compute_overlap_ms", .unit = Unit::ms, .filled_by = FilledBy::derived, .meaning = "time a copy and a kernel ran at once"},
    {.name = "dropped_records", .type = SqlType::integer, .unit = Unit::count, .filled_by = FilledBy::derived,
     .meaning = "records CUPTI dropped: non-zero means the events are incomplete"},
    {.name = "collector_overhead_ms", .unit = Unit::ms, .filled_by = FilledBy::derived, .meaning = "time covered by CUPTI's overhead records"},
});

// A measure's name as a template argument: outcome.set<"streamed_bytes">(n) names the measure at
// compile time, so a misspelt name or a value of the wrong type does not compile.
template <std::size_t N>
struct MeasureName {
    char chars[N]{};
    consteval MeasureName(const char (&name)[N]) {
        for (std::size_t i = 0; i < N; ++i) chars[i] = name[i];
    }
    constexpr std::string_view view() const { return {chars, N - 1}; }
};

consteval std::size_t measure_index(std::string_view name) {
    for (std::size_t i = 0; i < kMeasures.size(); ++i)
        if (kMeasures[i].name == name) return i;
    throw "no measure of that name in kMeasures (harness/matrix/measures.hpp)";
}

// The C++ type of a measure's values.
template <SqlType type>
struct MeasureValue;
template <>
struct MeasureValue<SqlType::integer> {
    using type = std::int64_t;
};
template <>
struct MeasureValue<SqlType::real> {
    using type = double;
};
template <>
struct MeasureValue<SqlType::text> {
    using type = std::string;
};
template <MeasureName name>
using measure_t = typename MeasureValue<kMeasures[measure_index(name.view())].type>::type;

// The declaration of `name`, or nullptr for a name that is no measure (names read from elsewhere).
const Measure* find_measure(std::string_view name);

}  // namespace sweetspot
