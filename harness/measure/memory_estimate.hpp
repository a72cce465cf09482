#pragma once
// A cell's memory, predicted from its parameters alone before anything runs (no GPU needed): the
// weights as its backend will place them, the GPU forward's activations and attention scores for
// its variant, and the GEMM workspace. Each term is computed by the code that allocates it (the
// backend registry's footprint, activation_layout, kGemmWorkspaceBytes), so the prediction
// follows any change there.
//
// Not predicted yet: the CUDA context and the libraries' own allocations, which are fixed per
// GPU model and driver and are to be measured once and stored, and the host's pageable memory.
#include <cstdint>

#include "harness/matrix/cell.hpp"

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

// The estimate for a cell that cell_unsupported_reason accepts (throws std::invalid_argument
// with the backend's reason otherwise). A host-backend cell uses no device memory.
MemoryEstimate estimate_memory(const CellParams& cell);

}  // namespace sweetspot
