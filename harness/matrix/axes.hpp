#pragma once
// Every parameter of a cell, declared once: its name (the matrix key, the line of the cell's
// canonical text, the `--only` axis), how its values are written, checked and normalised, its
// default, its role, its `cells` column and the schema version that added it, and whether `list`
// and `summary` show it. The matrix reader, the canonical text and its parser, `--only`, the schema
// and the `cells` writer, the `axes` table of every database, `list`, `summary`, `compare` and the
// analysis all walk this table, so a new axis is one entry here plus the code that uses its value.
// Its neighbour measures.hpp declares the numbers a cell's row stores beside its parameters.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/matrix/cell.hpp"
#include "harness/matrix/measures.hpp"

namespace sweetspot {

struct Axis {
    // What a matrix file may write for the axis. The matrix reader checks the TOML type and
    // words its messages by this; normalize() then checks the value itself.
    enum class Written {
        integer,            // an integer from min to max
        boolean,            // true or false
        text,               // a non-empty string on one line
        choice,             // one of `choices`
        model,              // a built-in model or one of the file's [[models]]
        integer_or_string,  // prefetch (3 or "jit"), budget (12884901888 or "12GiB")
        number_or_string,   // timeout (90 or "90s")
        not_in_matrix,      // derived from another axis (the model's shape lines)
    };
    // Whether the axis is part of the cell's canonical text, and so of its key. Axes added after
    // the first release are keyed only when they differ from their default, so the keys of cells
    // that leave them alone stay what they were.
    enum class Keyed { always, unless_default, no };
    // When a table (`list`, `summary`) has a column for the axis: always; when some cell's value
    // differs from the default; when the cells do not all have the same value; never.
    enum class Shown { always, when_set, when_varies, never };
    enum class Column { none, integer, real, text };
    // What the axis decides about a cell: what is computed (`workload`: two cells of one workload
    // compute the same function); how it is run on the machine (`placement`: where the weights
    // live, how they and the kernels reach the GPU); how it is measured (`protocol`: warm-ups,
    // iterations, the noise criterion, the random inputs, repeats); or when its run is cut short
    // (`limit`). Cells that differ only in protocol and limit axes measure the same thing.
    enum class Role { workload, placement, protocol, limit };

    std::string_view name;
    Written written = Written::text;
    Keyed keyed = Keyed::always;
    Shown in_list = Shown::when_set, in_summary = Shown::when_set;
    std::string_view column;  // its column in `cells`, of type column_type
    Column column_type = Column::text;
    std::string default_text;          // normal form of CellParams{}'s value
    std::string expects;               // "an integer from 1 to 1024", for messages
    std::int64_t min = 0, max = 0;     // integer axes
    std::vector<std::string> choices;  // choice axes, in the order the docs list them
    Role role = Role::workload;
    Unit unit = Unit::none;
    std::string_view meaning;  // one line, for the database's `axes` table
    int since = 2;             // the schema version that added its column (2: every database sweetspot reads)
    // What the rows written before its column existed hold, in normal form: the value every cell
    // before it had (not always today's default: cells before the noise criterion had none).
    // Empty: default_text.
    std::string before;

    // The value's normal form, or nothing when `text` is not a value of this axis.
    std::function<std::optional<std::string>(std::string_view text)> normalize;
    // The cell's value in normal form, and setting it from one (normalize's output).
    std::function<std::string(const CellParams&)> get;
    std::function<void(CellParams&, const std::string& normal)> set;
    // The value as `list` prints it (a byte budget as "1.50 GiB"); get() when not set.
    std::function<std::string(const CellParams&)> display;
    // The value its column holds, in normal form, where that is not get()'s: the kv heads in
    // effect where the cell text says 0 (as many as heads). get() when not set.
    std::function<std::string(const CellParams&)> stored;
    // For a column whose rows from before it held values that differ row by row: the SQL
    // expression of what a row held, over the row's older columns, each named after `prefix`
    // ("c."). Not set: every such row held value_before().
    std::function<std::string(std::string_view prefix)> before_sql;

    bool in_matrix() const { return written != Written::not_in_matrix; }
    bool has_column() const { return column_type != Column::none; }
    const std::string& value_before() const { return before.empty() ? default_text : before; }
    std::string shown_text(const CellParams& c) const { return display ? display(c) : get(c); }
    std::string column_text(const CellParams& c) const { return stored ? stored(c) : get(c); }
};

// Every axis, in the order the matrix format documents them (and messages list them).
const std::vector<Axis>& axes();
// nullptr for a name that is no axis.
const Axis* find_axis(std::string_view name);
// The names a matrix file may set, in order.
std::vector<std::string> matrix_axis_names();

template <>
struct EnumNames<Axis::Keyed> {
    static constexpr std::array<EnumName<Axis::Keyed>, 3> list = {
        {{Axis::Keyed::always, "always"}, {Axis::Keyed::unless_default, "unless_default"}, {Axis::Keyed::no, "no"}}};
};
template <>
struct EnumNames<Axis::Role> {
    static constexpr std::array<EnumName<Axis::Role>, 4> list = {{{Axis::Role::workload, "workload"},
                                                                  {Axis::Role::placement, "placement"},
                                                                  {Axis::Role::protocol, "protocol"},
                                                                  {Axis::Role::limit, "limit"}}};
};

// The axes of these roles that have a `cells` column, in table order: e.g. the workload and
// placement axes, which tell apart what two databases measured.
std::vector<const Axis*> axes_with_role(std::initializer_list<Axis::Role> roles);

// Whether a table over `cells` shows a column for the axis, by `rule` (in_list or in_summary).
bool shows_axis(const Axis& axis, Axis::Shown rule, const std::vector<CellParams>& cells);

}  // namespace sweetspot
