#pragma once
// Independent float64 forward written as plain loops (no BLAS, no shared code with
// CpuForward): the yardstick the fp32 host forward is tested against, and the check stored for
// host-backend cells whose model is small enough.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/compute/dropout.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

// units[i] points at unit i's fp32 weights. Returns logits [batch, seq, vocab]. With `dropout`
// active, every dropout of the family applies its mask (dropout.hpp), as every other forward
// does; a family without dropout refuses it (std::invalid_argument).
std::vector<double> reference_forward(const ModelConfig& model, const WeightLayout& layout,
                                      std::span<const float* const> units,
                                      std::span<const std::int32_t> tokens, int batch, int seq,
                                      const Dropout& dropout = {});

// The float64 logits [shape.rows(), vocab] of a batch laid out as `shape` (tokens: one per row):
// each sequence computed alone, from its own tokens at positions 0 .. length − 1, into its rows;
// padding rows are zeros. What any forward over the batch must give on its real rows, and sequence
// b's logits alone are rows first_row(b) .. first_row(b) + length(b) − 1. Dropout as above, with
// a rectangular shape only (std::invalid_argument otherwise: its masks are numbered by rows of
// one length).
std::vector<double> reference_forward(const ModelConfig& model, const WeightLayout& layout,
                                      std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                      const BatchShape& shape, const Dropout& dropout = {});

// Multiply-adds of reference_forward (one per weight and token, plus attention's; flops are
// twice this), to decide whether running it is affordable.
double reference_forward_macs(const ModelConfig& model, int batch, int seq);
// Those of a batch of this shape: each sequence's alone (padding rows are not computed).
double reference_forward_macs(const ModelConfig& model, const BatchShape& shape);

}  // namespace sweetspot
