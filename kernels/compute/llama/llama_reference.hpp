#pragma once
// LLaMA's float64 reference, plain loops in double (reference_ops) with the rotation's
// frequencies in double, nothing shared with the host compute (llama_cpu_block.hpp), so an error
// in one is not repeated in the other: the logits of one sequence and a training step's loss and
// gradients, each block's forward beside its backward. family_compute.hpp's entry reads them.
#include "kernels/compute/family_compute.hpp"

namespace sweetspot::llama {

// FamilyCompute's reference_sequence and reference_sequence_gradients.
ReferenceSequence reference_sequence;
ReferenceSequenceGradients reference_sequence_gradients;

}  // namespace sweetspot::llama
