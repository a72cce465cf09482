#pragma once
// A GPU cell's forward: the backend places the weights, the GPU forward runs on one compute
// stream, CUDA events time each iteration, CUPTI records the traced ones, and the logits are
// checked against the host forward.
#include <memory>
#include <span>

#include "harness/measure/measurement.hpp"

namespace sweetspot {

std::unique_ptr<CellForward> make_gpu_forward(const CellParams& cell, std::span<const std::int32_t> tokens,
                                              const MeasureOptions& options);

}  // namespace sweetspot
