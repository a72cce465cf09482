#pragma once
// `estimate --fit` for a packed cell (lengths drawn, packing = packed): the most real tokens one
// packed batch may hold within a GPU's memory. A packed batch's rows are its real tokens, so its
// memory follows how many tokens it holds, not how many sequences they come in: the answer is a
// token budget, what a loader that packs sequences fills each batch up to.
#include <cstdint>
#include <optional>
#include <span>

#include "harness/matrix/cell.hpp"
#include "harness/measure/memory_estimate.hpp"

namespace sweetspot {

// Whether `cell`'s fit is answered in tokens: its lengths are drawn (not fixed) and packed.
bool fits_in_tokens(const CellParams& cell);

// The packed batch of `tokens` real tokens made of `drawn` lengths in order: as many as hold them,
// the last one cut to the tokens left. `drawn` must hold at least `tokens`.
BatchShape packed_batch(std::span<const int> drawn, std::int64_t tokens);

// The packed batch of `tokens` tokens the cell's loader would make: the sequences the cell draws
// (draw_lengths of its lengths, seq and seed, whose first `batch` are its own batch's), in order.
// At the cell's own real tokens it is the cell's batch.
BatchShape packed_batch(const CellParams& cell, std::int64_t tokens);

// The most tokens, 1 … AxisLimits::tokens, whose packed_batch's predicted need fits `capacity`
// bytes; empty where not even one does, or the cell cannot run.
std::optional<std::int64_t> largest_packed_tokens(const CellParams& cell, std::int64_t capacity,
                                                  const FixedCost& fixed);

}  // namespace sweetspot
