#pragma once
// The results database's schema: the tables of tables.sql, the `cells` columns the axis and
// measure declarations make (harness/matrix/axes.cpp, measures.hpp), the `runs` columns added after
// version 2, the views of views.sql, and the ordered list of the versions, whose changes that are
// not additive (re-keying, a dropped column) run when an older database is upgraded. What is
// additive (a table, a column) needs no step: opening adds what is missing, with its declared
// default. The schema version follows from the list and the declarations.
#include <string>
#include <string_view>
#include <vector>

#include "harness/matrix/measures.hpp"
#include "harness/store/sqlite.hpp"

namespace sweetspot {

// tables.sql and views.sql, compiled in (cmake/embed_text.cmake).
extern const char* const kTablesSql;
extern const char* const kViewsSql;

// The oldest version this sweetspot reads; a run that writes to one upgrades it first.
inline constexpr int kOldestReadableSchemaVersion = 2;

struct SchemaStep {
    int version;  // the version this step brings a database to
    std::string_view change;
    // What is not additive in the change, run on an older database when it is upgraded; nullptr
    // where the version only added tables and columns.
    void (*upgrade)(Database& db);
    // SQL that takes the version's tables and views out of a database again and undoes what
    // `upgrade` did to columns: the tests make databases of older versions with it
    // (downgrade_schema). The declared columns of the version are dropped without it.
    std::string_view downgrade_sql;
    // What the version's new columns hold in the rows from before it, where the rows' other
    // columns tell (nullptr: their declared default): run after every column is added.
    void (*fill)(Database& db) = nullptr;
};

// Every version after the oldest readable one, in order.
const std::vector<SchemaStep>& schema_steps();
// The current version: the last step's, or a later one where a declaration says so.
int schema_version();

// A column some version added to `cells` or `runs`: an axis's, a measure's, or a run's.
struct DeclaredColumn {
    std::string table;
    std::string name;
    SqlType type = SqlType::text;
    int since = kOldestReadableSchemaVersion;
    bool not_null = false;
    std::string default_sql;  // what rows before the column hold, as an SQL literal; empty: NULL
};
// Every declared column, in table order.
const std::vector<DeclaredColumn>& declared_columns();

// Thrown for a file whose tables lack what its version has: changed outside sweetspot, or damaged.
class SchemaError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Makes an empty database one of the current version (inside the caller's transaction).
void create_schema(Database& db);
// Checks that a database of `version` has every column and table that version has; throws
// SchemaError naming the first that is missing.
void check_schema(Database& db, int version);
// Brings a database of `version` (check_schema passed) to the current version: the steps' upgrades,
// then what is missing of the tables, declared columns and views, then the steps' fills. Also run
// at the current version: it adds nothing then, but the description below is rewritten if this
// sweetspot's differs.
void upgrade_schema(Database& db, int version);

// For the tests: turns a database of the current version into one of `version`, as that version
// wrote it, by the steps' downgrade_sql and dropping the columns declared since.
void downgrade_schema(Database& db, int version);

}  // namespace sweetspot
