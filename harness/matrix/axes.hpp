#pragma once
// Every parameter of a cell, declared once: its name (the matrix key, the line of the cell's
// canonical text, the `--only` axis), how its values are written, checked and normalised, its
// default, its `cells` column, and whether `list` and `summary` show it. The matrix reader, the
// canonical text and its parser, `--only`, the `cells` writer, `list` and `summary` all walk
// this table, so a new axis is one entry here plus the code that uses its value.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/matrix/cell.hpp"

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

    // The value's normal form, or nothing when `text` is not a value of this axis.
    std::function<std::optional<std::string>(std::string_view text)> normalize;
    // The cell's value in normal form, and setting it from one (normalize's output).
    std::function<std::string(const CellParams&)> get;
    std::function<void(CellParams&, const std::string& normal)> set;
    // The value as `list` prints it (a byte budget as "1.50 GiB"); get() when not set.
    std::function<std::string(const CellParams&)> display;

    bool in_matrix() const { return written != Written::not_in_matrix; }
    std::string shown_text(const CellParams& c) const { return display ? display(c) : get(c); }
};

// Every axis, in the order the matrix format documents them (and messages list them).
const std::vector<Axis>& axes();
// nullptr for a name that is no axis.
const Axis* find_axis(std::string_view name);
// The names a matrix file may set, in order.
std::vector<std::string> matrix_axis_names();

// Whether a table over `cells` shows a column for the axis, by `rule` (in_list or in_summary).
bool shows_axis(const Axis& axis, Axis::Shown rule, const std::vector<CellParams>& cells);

}  // namespace sweetspot
