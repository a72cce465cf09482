#pragma once
// LLaMA's entry in the compute-side family table (kernels/compute/family_compute.hpp): its host
// forward and training step (llama_cpu_block.hpp's block) and its float64 reference
// (llama_reference.hpp), transformers' LlamaForCausalLM: embedding; per block
// x += o_proj(attention(rope(q, k), v)) over RMSNorm(x), x += down(silu(gate) · up) over
// RMSNorm(x); then RMSNorm and lm_head.
#include "kernels/compute/family_compute.hpp"

namespace sweetspot::llama {

const FamilyCompute& compute();

}  // namespace sweetspot::llama
