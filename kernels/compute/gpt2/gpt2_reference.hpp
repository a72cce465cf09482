#pragma once
// GPT-2's float64 reference, plain loops in double (reference_ops), nothing shared with the host
// compute, so an error in one is not repeated in the other: the logits of one sequence and a
// training step's loss and gradients, its embedding and blocks each forward beside its backward.
// family_compute.hpp's entry reads them.
#include "kernels/compute/family_compute.hpp"

namespace sweetspot::gpt2 {

// FamilyCompute's reference_sequence and reference_sequence_gradients.
ReferenceSequence reference_sequence;
ReferenceSequenceGradients reference_sequence_gradients;

}  // namespace sweetspot::gpt2
