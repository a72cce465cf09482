#pragma once
// GPT-2's entry in the compute-side family table (kernels/compute/family_compute.hpp): its host
// forward and training step (gpt2_cpu_block.hpp's block) and its float64 reference
// (gpt2_reference.hpp).
#include "kernels/compute/family_compute.hpp"

namespace sweetspot::gpt2 {

const FamilyCompute& compute();

}  // namespace sweetspot::gpt2
