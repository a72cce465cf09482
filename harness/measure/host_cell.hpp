#pragma once
// A host cell's step: the host backend holds the weights (and, for training, their gradients and
// AdamW's moments), the CPU computes (OpenBLAS), the steady clock times each phase, and float64
// loops over the same weights check the output: the logits of a forward, or the first training
// step's loss, gradients and update.
#include <memory>
#include <span>

#include "harness/measure/measurement.hpp"

namespace sweetspot {

std::unique_ptr<CellStep> make_host_step(const CellParams& cell, std::span<const std::int32_t> tokens);

}  // namespace sweetspot
