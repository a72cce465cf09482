#pragma once
// Splitting a matrix's cells into N shards for N machines or Slurm array tasks (`run --shard i/N`):
// deterministic (the same cells and N give every task the same split, with no coordination), and
// balanced by each cell's expected cost rather than by count, so that one shard does not get every
// GPT-3 13B cell.
#include <cstdint>
#include <string>
#include <vector>

#include "harness/matrix/cell.hpp"

namespace sweetspot {

// Shard `index` of `count` (1 <= index <= count), from "i/N".
struct ShardSpec {
    int index = 1, count = 1;
};
// Throws std::invalid_argument naming what is wrong with `text`.
ShardSpec parse_shard(const std::string& text);

// A cell's expected cost, in arbitrary units: its weight bytes times the forwards it runs, plus one
// for making and placing the weights and the check (what grows with the model in every backend).
double shard_cost(const CellParams& cell);

// The positions in `cells` of shard `spec`, in matrix order. The cells go, most expensive first
// (ties by position), each to the shard with the least cost so far (ties to the lowest index).
std::vector<std::size_t> shard_positions(const std::vector<CellParams>& cells, ShardSpec spec);

}  // namespace sweetspot
