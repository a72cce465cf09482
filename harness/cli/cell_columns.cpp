#include "harness/cli/cell_columns.hpp"

#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>

#include "harness/store/sql_values.hpp"

namespace sweetspot {
namespace {

bool is_flag(Unit unit) { return unit == Unit::flag; }

// A 0/1 column's value as a flag; the others as they are.
Value typed(const SqlValue& v, bool flag) {
    return std::visit(
        [flag](const auto& x) -> Value {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::int64_t>) {
                if (flag) return x != 0;
            }
            return x;
        },
        v);
}

// `v` as SQL writes it: what a statement reads in place of a column its database lacks.
std::string sql_literal(const SqlValue& v) {
    return std::visit(
        [](const auto& x) -> std::string {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::monostate>) return "NULL";
            else if constexpr (std::is_same_v<T, std::int64_t>) return std::to_string(x);
            else if constexpr (std::is_same_v<T, double>) return exact_number(x);
            else {
                std::string quoted = "'";
                for (const char c : x) quoted += c == '\'' ? std::string("''") : std::string(1, c);
                return quoted + "'";
            }
        },
        v);
}

SqlType sql_type(const Axis& axis) {
    switch (axis.column_type) {
        case Axis::Column::integer: return SqlType::integer;
        case Axis::Column::real: return SqlType::real;
        case Axis::Column::none:
        case Axis::Column::text: break;
    }
    return SqlType::text;
}

}  // namespace

std::vector<const Axis*> column_axes() {
    return axes_with_role({Axis::Role::workload, Axis::Role::placement, Axis::Role::protocol, Axis::Role::limit});
}

Field axis_field(const Axis& axis, const CellParams& cell) {
    return {axis.shown_text(cell), typed(axis_column_value(axis, axis.column_text(cell)), is_flag(axis.unit))};
}

CellColumns::CellColumns(std::set<std::string> present, std::string prefix)
    : present_(std::move(present)), prefix_(std::move(prefix)) {}

void CellColumns::add(const Axis& axis) {
    const std::string column(axis.column);
    std::string expression = prefix_ + column;
    if (!present_.count(column))
        expression = axis.before_sql ? axis.before_sql(prefix_) : sql_literal(axis_column_value(axis, axis.value_before()));
    columns_.push_back({column, expression, sql_type(axis), is_flag(axis.unit)});
}

void CellColumns::add(const Measure& measure) {
    const std::string name(measure.name);
    const std::string before = measure.before.empty() ? "NULL" : std::string(measure.before);
    columns_.push_back({name, present_.count(name) ? prefix_ + name : before, measure.type, is_flag(measure.unit)});
}

void CellColumns::add(std::string name, SqlType type, std::string expression) {
    if (expression.empty()) expression = prefix_ + name;
    columns_.push_back({std::move(name), std::move(expression), type, false});
}

std::string CellColumns::select_list() const {
    std::string list;
    for (const Column& c : columns_) list += (list.empty() ? "" : ", ") + c.expression;
    return list;
}

int CellColumns::index(std::string_view name) const {
    for (std::size_t i = 0; i < columns_.size(); ++i)
        if (columns_[i].name == name) return static_cast<int>(i);
    throw std::logic_error("CellColumns: no column '" + std::string(name) + "' was added to the statement");
}

Value CellColumns::value(const Statement& st, std::string_view name) const {
    const int i = index(name);
    const Column& c = columns_[static_cast<std::size_t>(i)];
    if (st.is_null(i)) return std::monostate{};
    if (c.flag) return st.int64(i) != 0;
    switch (c.type) {
        case SqlType::integer: return st.int64(i);
        case SqlType::real: return st.real(i);
        case SqlType::text: break;
    }
    return st.text(i);
}

std::string CellColumns::text(const Statement& st, std::string_view name) const {
    const int i = index(name);
    if (st.is_null(i)) return "-";
    if (columns_[static_cast<std::size_t>(i)].flag) return st.int64(i) != 0 ? "true" : "false";
    return st.text(i);
}

}  // namespace sweetspot
