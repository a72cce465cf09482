#pragma once
// The results database's schema, compiled in from the .sql files beside this header
// (cmake/embed_text.cmake).
namespace sweetspot {

// schema.sql: every table, index, enum table and view of the current schema (kSchemaVersion), run
// once on a new database.
extern const char* const kSchemaSql;
// later_views.sql: views added after version 2, run on every open for writing, after the upgrades.
extern const char* const kLaterViewsSql;
// upgrade_vN.sql: turns a version-N database into version N + 1, when a run writes to it (one
// after the other, up to the current version).
extern const char* const kUpgradeV2Sql;
extern const char* const kUpgradeV3Sql;
extern const char* const kUpgradeV4Sql;
extern const char* const kUpgradeV5Sql;
extern const char* const kUpgradeV6Sql;
extern const char* const kUpgradeV7Sql;
extern const char* const kUpgradeV8Sql;
extern const char* const kUpgradeV9Sql;

}  // namespace sweetspot
