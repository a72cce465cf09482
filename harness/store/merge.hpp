#pragma once
// `sweetspot merge OUT SHARD...`: the shards' databases (run --shard, sweetspot submit) combined into
// one. Idempotent: merging a shard again adds nothing. Runs keep their metadata and probe, cells
// their iterations, phases and events. A cell measured in two places (the same key, two different
// measurements) is a conflict: the newer measurement is the cell, the older goes to cell_history,
// so nothing measured is dropped.
#include <string>

#include "harness/store/store.hpp"

namespace sweetspot {

struct MergeCounts {
    int runs_added = 0, cells_added = 0, cells_already_there = 0, conflicts = 0;
};

// Merges the database at `shard_path` (of this schema version; opened read-only) into `out`.
MergeCounts merge_database(Store& out, const std::string& shard_path);

}  // namespace sweetspot
