#pragma once
// The `cells` table as the commands that print it read it: by column name, each value typed by
// its declaration (axes.hpp, measures.hpp), for people and for other tools alike.
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "harness/cli/table.hpp"
#include "harness/matrix/axes.hpp"
#include "harness/matrix/measures.hpp"
#include "harness/store/sqlite.hpp"

namespace sweetspot {

// The axes that have a `cells` column, in table order: the columns every machine-readable table
// of cells carries, whatever its cells' values.
std::vector<const Axis*> column_axes();
// An axis's value for a cell: for people as `list` shows it (shown_text), for other tools as its
// column holds it, typed.
Field axis_field(const Axis& axis, const CellParams& cell);

// A SELECT list of named columns and the reading of its rows by those names, so that a column's
// place in the statement is nobody's business. A column this database lacks (an axis or a
// measure added after its version) reads as what the rows before it held.
class CellColumns {
public:
    // `present`: the columns of the database's `cells`; `prefix`: the table's alias in the
    // statement ("c."), if any.
    explicit CellColumns(std::set<std::string> present, std::string prefix = "");
    void add(const Axis& axis);
    void add(const Measure& measure);
    // Another column of `cells` (cell_id, status), or `expression` under `name`.
    void add(std::string name, SqlType type, std::string expression = "");

    // The columns and expressions, in the order they were added.
    std::string select_list() const;
    Value value(const Statement& st, std::string_view name) const;
    // As people read it: SQLite's text of the value, a flag as true or false, "-" for NULL.
    std::string text(const Statement& st, std::string_view name) const;
    Field field(const Statement& st, std::string_view name) const { return {text(st, name), value(st, name)}; }

private:
    struct Column {
        std::string name, expression;
        SqlType type;
        bool flag;
    };
    std::set<std::string> present_;
    std::string prefix_;
    std::vector<Column> columns_;

    // The column's index in the statement; std::logic_error for a name never added.
    int index(std::string_view name) const;
};

}  // namespace sweetspot
