#pragma once
// A host cell's forward: the host backend holds the weights, the CPU forward (OpenBLAS) runs,
// the steady clock times it, and float64 loops over the same weights check it.
#include <memory>
#include <span>

#include "harness/measure/measurement.hpp"

namespace sweetspot {

std::unique_ptr<CellForward> make_host_forward(const CellParams& cell, std::span<const std::int32_t> tokens);

}  // namespace sweetspot
