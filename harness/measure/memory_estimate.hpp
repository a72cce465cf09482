#pragma once
// A cell's memory, predicted from its parameters alone before anything runs (no GPU needed): the
// weights as its backend will place them, the GPU forward's activations and attention scores for
// its variant, and the GEMM workspace. Each term is computed by the code that allocates it (the
// backend registry's footprint, activation_layout, kGemmWorkspaceBytes), so the prediction
// follows any change there.
//
// The CUDA context and the libraries' own allocations are fixed per GPU model and driver: they
// are measured from a results database (measured_fixed_costs) and added by the caller. The host's
// pageable memory is not predicted yet.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/matrix/cell.hpp"
#include "harness/store/sqlite.hpp"

namespace sweetspot {

struct MemoryEstimate {
    // Device memory, bytes.
    std::int64_t weights = 0;      // what the backend holds on the GPU for the weights
    std::int64_t activations = 0;  // the forward's activation allocation without the scores
    std::int64_t scores = 0;       // the [batch, heads, seq, seq] scores; 0 for flash_attention
    std::int64_t workspace = 0;    // the GEMM workspace
    // activations = "managed": the activation allocation is managed memory, counted above at its
    // full size (the forward touches all of it, so all of it migrates to the GPU).
    bool managed_activations = false;
    // Host memory, bytes.
    std::int64_t pinned_host = 0;  // page-locked weights (explicit-copy)
    std::int64_t managed = 0;      // managed allocations (UVM weights; managed activations)

    // The device terms above: the peak minus the CUDA context and the libraries' own memory.
    std::int64_t device_total() const { return weights + activations + scores + workspace; }
};

// The device memory a GPU process holds besides what sweetspot allocates (the CUDA context, the
// libraries' code and pools), measured, not guessed: a cell's measured peak (gpu_peak_bytes, NVML's
// used memory less what was in use before the cell; device_used_bytes where there is none) less
// the weights and activations it allocated, over a results database's ok `device` and `explicit-copy` cells
// (whose device memory is all their own; UVM cells' managed pages come and go) of one GPU and
// driver.
struct FixedCost {
    std::string gpu, driver;
    std::int64_t largest = 0, smallest = 0;  // over the cells: the estimate adds the largest
    int cells = 0;
};

// One entry per GPU and driver with such cells, from a results database (a run's own connection
// serves: the query only reads).
std::vector<FixedCost> measured_fixed_costs(Database& db);

// Why `cell` is predicted not to fit a GPU of `capacity` bytes, `fixed` of which the CUDA context
// and libraries take (the numbers, and --force), or empty when its predicted peak fits.
std::string predicted_oom(const CellParams& cell, std::int64_t capacity, const FixedCost& fixed);

// What fits a GPU of `capacity` bytes, `fixed` of which the CUDA context and libraries take, for a
// cell taken as a template: the largest batch at its seq and the largest seq at its batch whose
// predicted peak fits (empty when not even 1 does), and, for a backend that runs under a budget,
// the smallest budget (bytes) at which it can still run at all.
struct Fit {
    std::optional<int> batch, seq;
    std::optional<std::int64_t> smallest_budget;
};
Fit fit(const CellParams& cell, std::int64_t capacity, std::int64_t fixed);

// The estimate for a cell that cell_impossible_reason accepts (throws std::invalid_argument
// with the backend's reason otherwise). A host-backend cell uses no device memory.
MemoryEstimate estimate_memory(const CellParams& cell);

}  // namespace sweetspot
