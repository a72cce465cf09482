#pragma once
// The results database's schema, compiled in from the .sql files beside this header
// (cmake/embed_text.cmake).
namespace sweetspot {

// schema.sql: every table, index, enum table and view of the current schema (kSchemaVersion), run
// once on a new database.
extern const char* const kSchemaSql;
// later_views.sql: views added without a version change, run on every open for writing.
extern const char* const kLaterViewsSql;
// upgrade_v2.sql: turns a version-2 database into the current version, when a run writes to it.
extern const char* const kUpgradeV2Sql;

}  // namespace sweetspot
