#pragma once
// Measuring one cell, the same way on every backend and mode: warm-up steps, timed steps, traced
// steps (collection on), latency statistics and the phase split, the check. What differs between
// the host and the GPU and between inference and training (what a step runs and how it is timed,
// what is collected, what the output is checked against) sits behind CellStep, one implementation
// per path.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "harness/collect/events.hpp"
#include "harness/matrix/cell.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "harness/measure/logits_check.hpp"
#include "harness/measure/status_channel.hpp"

namespace sweetspot {

struct MeasureOptions {
    bool allow_oversubscription = false;  // lifts the managed-memory guard
    bool collect = true;                  // CUPTI in traced iterations (`--collector cupti`)
    // For `sweetspot logits`: token ids (batch × seq) to run instead of the cell's random ones,
    // and where the logits of the last iteration go.
    std::span<const std::int32_t> tokens = {};
    std::vector<float>* logits = nullptr;
    // Text of the NVTX range the cell's ranges nest in: the run lives in the parent process, so
    // each cell process opens it (Nsight Systems shows it around the cell).
    std::string run_label = "run";
    // When the parent started this cell's process (steady clock, which is CLOCK_MONOTONIC and
    // so the same in both processes), for the cell's `start` phase; unset outside `run`.
    std::optional<std::chrono::steady_clock::time_point> spawned_at = std::nullopt;
    // Host reference logits an earlier cell of the same workload left in the database: a GPU
    // cell's check uses them instead of running the host forward when their key is its own.
    std::optional<ReferenceLogits> kept_reference = std::nullopt;
    // Where the cell says which phase and iteration it is in (silent outside `run`).
    StatusChannel status = {};
};

// Splits a cell's wall time into phases: each lap closes the phase that ran since the previous
// lap (or since the clock was made) under `name`.
class PhaseClock {
public:
    explicit PhaseClock(std::vector<CellPhase>& into) : into_(into), last_(std::chrono::steady_clock::now()) {}
    void lap(std::string name) { lap(std::move(name), {}, 0); }
    // Closes the phase as lap(name) does, less `part_seconds` that ran inside it and are recorded
    // after it as the phase `part`: a cost that must be told apart from the rest of the phase.
    void lap(std::string name, std::string part, double part_seconds) {
        const auto now = std::chrono::steady_clock::now();
        const double seconds = std::chrono::duration<double>(now - last_).count();
        into_.push_back({std::move(name), std::max(0.0, seconds - part_seconds)});
        if (!part.empty()) into_.push_back({std::move(part), part_seconds});
        last_ = now;
    }

private:
    std::vector<CellPhase>& into_;
    std::chrono::steady_clock::time_point last_;
};

// One step's latency and its phases' (step_phases of the cell's mode, in order), in ms.
struct StepTime {
    double ms = 0;
    std::vector<double> phase_ms;
};

// A cell's model with its weights placed, ready to run steps on the cell's tokens: forwards for
// `infer`, training steps for `train`.
class CellStep {
public:
    virtual ~CellStep() = default;
    // Bytes of activations (and workspace) the step allocated.
    virtual std::int64_t activation_bytes() const = 0;
    // Before the warm-ups, a step whose output the check compares: for training, the first step
    // from the initial weights (its loss, gradients and update); nothing for inference, whose
    // check compares the last forward.
    virtual void run_checked_step() {}
    // One step from the state the last one left (the cell's starting residency for the weights),
    // timed as the path can time it exactly (CUDA events on the GPU, the steady clock on the
    // host). `label` names the step for profilers.
    virtual StepTime run_step(const std::string& label) = 0;
    // Around the traced steps: the GPU path records CUPTI events, the host path nothing.
    virtual void start_collection() {}
    virtual std::optional<CellEvents> finish_collection() { return std::nullopt; }
    // The logits of the last forward, all of them as fp32 (what the `logits` command writes);
    // inference only.
    virtual std::vector<float> logits() = 0;
    // The output's values that are NaN or infinite, counted over all of it: the logits of the
    // last forward, or every step's loss and gradient norm.
    virtual OutputCount count_nonfinite() = 0;
    // How the output compares with the path's reference. The path fetches only what it
    // compares: a prefix check of a large batch must not copy every logit to the host.
    virtual std::optional<LogitsCheck> check() = 0;
    // What the path knows once the steps are done (where the weights went, device memory, the
    // losses).
    virtual void add_results(CellOutcome& out) const = 0;
    // The phases of making this step (CUDA context, weights, ...), or none where the path does
    // not split them: then the caller times the making as one phase.
    virtual std::vector<CellPhase> setup_phases() const { return {}; }
};

// The token ids a cell runs: `options.tokens`, else the cell's random ones.
std::vector<std::int32_t> cell_tokens(const CellParams& cell, const MeasureOptions& options);

// Runs the cell's steps through `step` and fills `out` with what they measured.
void measure_steps(const CellParams& cell, CellStep& step, const MeasureOptions& options, CellOutcome& out);

}  // namespace sweetspot
