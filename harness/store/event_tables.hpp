#pragma once
// The event tables: what the collector recorded in a cell's traced iterations (CellEvents), in
// the tables of an Nsight Systems export that schema.sql creates.
#include <cstdint>

#include "harness/collect/events.hpp"
#include "harness/store/sqlite.hpp"

namespace sweetspot {

// Writes the records of cell `cell_id`, within the caller's transaction.
void write_events(Database& db, std::int64_t cell_id, const CellEvents& events);

// The records write_events wrote for `cell_id`, in the order they were handed over. What the
// event tables do not hold (dropped_records, um_supported, um_note: `cells` columns) is left at
// its default.
CellEvents load_events(Database& db, std::int64_t cell_id);

// Whether the events of `cell_id` hold CUDA API calls, which sweetspot records since schema
// version 15: a cell recorded before has none (and a database from before lacks their table).
bool has_api_calls(Database& db, std::int64_t cell_id);

}  // namespace sweetspot
