#pragma once
// A GPU cell's step, a forward (inference): the backend places the weights, the GPU forward runs
// on one compute stream, CUDA events time each step, CUPTI records the traced ones, and the logits
// are checked against the host forward.
#include <memory>
#include <span>

#include "harness/measure/measurement.hpp"

namespace sweetspot {

std::unique_ptr<CellStep> make_gpu_step(const CellParams& cell, std::span<const std::int32_t> tokens,
                                        const MeasureOptions& options);

}  // namespace sweetspot
