#pragma once
// The dense peak throughput of the GPUs sweetspot knows, per compute dtype, keyed by the name
// CUDA gives the GPU: what a cell's model flops utilisation is measured against. A GPU not in the
// table gets no MFU, never a guess.
#include <optional>
#include <string_view>

#include "kernels/model/dtype.hpp"

namespace sweetspot {

// TFLOP/s without sparsity at the boost clock, from NVIDIA's data sheets: tensor cores for fp16
// and bf16, and for fp32 with `tf32`; the CUDA cores' fp32 FMA rate otherwise.
std::optional<double> dense_peak_tflops(std::string_view gpu_name, DType dtype, bool tf32);

}  // namespace sweetspot
