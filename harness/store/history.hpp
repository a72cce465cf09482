#pragma once
// cell_history: the earlier measurements of a cell that a newer one replaced in `cells` (a rerun, a
// merge, the version-8 re-keying), each kept as its whole row and its iterations, as JSON.
#include <string>

#include "harness/store/sqlite.hpp"

namespace sweetspot {

// The measurement stored for `key` in the `cells` of `schema` (this database, "main", or one
// attached to it), if any, into this database's cell_history: its row (every column, whatever the
// schema version adds) and its iterations, as JSON. Called before a newer measurement replaces it.
void keep_as_history(Database& db, const std::string& key, const std::string& schema = "main");

// Recomputes every stored cell's key and canonical text from its canonical text, for when what
// the key covers changes (schema version 8: warmups and iterations left it).
// Cells that now share a key become one: the last recorded stays in `cells`, the others go to
// its cell_history, and each cell's history moves to its new key.
void rekey_cells(Database& db);

}  // namespace sweetspot
