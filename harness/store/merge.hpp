#pragma once
// `sweetspot merge OUT SHARD...`: the shards' databases (run --shard, sweetspot submit) combined into
// one. Idempotent: merging a shard again adds nothing. Runs keep their metadata and probe, cells
// their iterations, phases and events. A cell measured in two places (the same key, two different
// measurements) is a conflict: the newer measurement is the cell, the older goes to cell_history,
// so nothing measured is dropped.
#include <string>
#include <vector>

namespace sweetspot {

struct MergeCounts {
    int runs_added = 0, cells_added = 0, cells_already_there = 0, conflicts = 0;
};

// Merges the databases at `shard_paths` (of this schema version; opened read-only) into the one at
// `out_path`, created if missing. Returns what each shard added, in their order.
std::vector<MergeCounts> merge_databases(const std::string& out_path, const std::vector<std::string>& shard_paths);

}  // namespace sweetspot
