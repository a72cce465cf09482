#pragma once
// `sweetspot merge -o OUT SHARD...`: the shards' databases (run --shard, sweetspot submit) combined into
// one. Idempotent: merging a shard again adds nothing. Runs keep their metadata and probe, cells
// their iterations, phases and events, and the shards' cell_history comes along, each row naming
// its run in OUT. A cell measured in two places (the same key, two different measurements) is a
// conflict: the newer measurement is the cell, the older goes to cell_history, so nothing measured
// is dropped. A measurement (key, start, end, run) is kept once, as the cell or in its history.
#include <string>
#include <vector>

namespace sweetspot {

struct MergeCounts {
    int runs_added = 0, cells_added = 0, cells_already_there = 0, conflicts = 0, history_added = 0;
};

// Merges the databases at `shard_paths` into the one at `out_path`, created if missing, and returns
// what each shard added, in their order. The shards are only read: one of an older schema version
// is merged from an upgraded copy in the temporary folder. Every shard is checked before OUT is
// opened; one merge cannot take (unreadable, not a results database, of a schema version this
// sweetspot does not read, with a cell or history row whose run is missing) throws, naming it and
// why, with OUT as it was or not created. The shards are merged in one transaction, or in one per
// group where there are more than SQLite attaches at once (Database::attach_limit, 10).
std::vector<MergeCounts> merge_databases(const std::string& out_path, const std::vector<std::string>& shard_paths);

}  // namespace sweetspot
