#pragma once
// Copying rows by column name from a database attached to this one ("main"): the results of a
// cell's process (Store::import_cell) and the shards of a merge. Columns are matched by name, so
// the two may be of different schema versions as long as main has every column it copies into.
#include <cstdint>
#include <string>
#include <vector>

#include "harness/store/sqlite.hpp"

namespace sweetspot {

// The tables whose rows belong to one cell, by its cell_id (besides `cells`).
extern const std::vector<std::string> kCellTables;

// The columns of `table` in the database `schema` ("main", or the name it is attached under).
std::vector<std::string> table_columns(Database& db, const std::string& schema, const std::string& table);

// An INSERT…SELECT that copies the rows of `table` in `from` whose `key_column` equals ?1 into
// main's, with `key_column` set to ?2, over the columns both have; string ids (kernel and NVTX
// names) are renumbered through the StringIds of both, which must hold every name the rows use.
std::string copy_rows_sql(Database& db, const std::string& from, const std::string& table, const std::string& key_column);

// Runs copy_rows_sql's statements for the rows of `from_id`, giving them `to_id`.
void copy_rows(Database& db, const std::vector<std::string>& copies, std::int64_t from_id, std::int64_t to_id);

// `name` quoted as an SQL identifier.
std::string quoted(const std::string& name);

// The URI that attaches the database at `path` read-only, so that nothing writes to it: the path
// absolute, the characters a URI gives a meaning to escaped. `immutable` for a file SQLite must
// read as it stands (a WAL database in a folder it cannot write, whose -wal file holds nothing).
std::string read_only_uri(const std::string& path, bool immutable = false);

// ATTACHes the database at `uri` (read_only_uri) under `name` for as long as it lives.
class Attached {
public:
    Attached(Database& db, const std::string& uri, const std::string& name);
    Attached(const Attached&) = delete;
    Attached& operator=(const Attached&) = delete;
    ~Attached();

private:
    Database& db_;
    std::string name_;
};

}  // namespace sweetspot
