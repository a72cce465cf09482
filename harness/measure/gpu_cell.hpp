#pragma once
// Measuring a cell on the GPU: the backend places the weights, the GPU forward runs on one
// compute stream, iterations are timed with CUDA events, and the logits are checked against
// the host forward.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "harness/matrix/cell.hpp"
#include "harness/store/store.hpp"

namespace sweetspot {

struct GpuCellOptions {
    bool allow_oversubscription = false;
    bool collect = true;  // CUPTI collection in the traced iterations; false leaves CUPTI to another tool
    std::span<const std::int32_t> tokens = {};  // token ids to run; empty: the cell's random ones
    std::vector<float>* logits = nullptr;      // receives the logits of the last iteration
    std::string run_label = "run";             // the NVTX range around the cell's
};

CellOutcome measure_gpu_cell(const CellParams& cell, const GpuCellOptions& options);

}  // namespace sweetspot
