#pragma once
// The numerical check stored with every GPU cell: its logits against the fp32 host forward on
// the same weights (rounded to the cell's dtype first, so only the arithmetic differs).
#include <cstdint>
#include <span>
#include <string>

#include "harness/cell.hpp"
#include "kernels/weight_layout.hpp"

namespace sweetspot {

struct LogitsCheck {
    std::string reference;  // what was compared, for the cells table
    double max_abs_err = 0, rel_err = 0, tolerance = 0;
    bool passed() const { return rel_err <= tolerance; }  // false for NaN too
};

// Relative error (max |out − ref| / max |ref|) allowed for a GPU cell of this dtype.
double gpu_tolerance(DType dtype, bool tf32);

// Compares `logits` [batch, seq, vocab] with the host forward. The whole output is recomputed
// when that is cheap; otherwise the first positions of sample 0, which by causality depend only
// on those tokens, so the comparison is exact in kind, only shorter.
LogitsCheck check_against_host(const CellParams& cell, const WeightLayout& layout,
                               std::span<const std::int32_t> tokens, std::span<const float> logits);

}  // namespace sweetspot
