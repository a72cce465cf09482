#pragma once
// The weights a cell computes with: synthetic from its seed, or read from the checkpoint its
// `weights` names. Either way they reach a backend through one UnitFiller, a unit at a time, so
// no second copy of the whole model is ever made.
#include <string_view>
#include <vector>

#include "backends/backend.hpp"
#include "harness/matrix/cell.hpp"

namespace sweetspot {

// The `weights` value of synthetic weights, made from the cell's seed.
inline constexpr std::string_view kSyntheticWeights = "synthetic";

// Fills the units of `layout`, which must be made for cell.model. A checkpoint is opened and
// checked here (CheckpointError when it cannot be loaded as cell.model) and stays mapped for as
// long as the returned filler, or a copy of it, lives.
Backend::UnitFiller make_unit_filler(const CellParams& cell, const WeightLayout& layout);

// Opens every distinct (checkpoint, model) the cells name, reading headers only, so a sweep with
// a bad checkpoint is refused before anything runs. Throws CheckpointError naming the first cell
// whose weights cannot be loaded.
void require_loadable_weights(const std::vector<CellParams>& cells);

}  // namespace sweetspot
