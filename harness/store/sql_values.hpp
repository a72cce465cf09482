#pragma once
// INSERTs built from column names and values, shared by the Store's rows (runs, cells) and the
// event tables.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "harness/matrix/axes.hpp"
#include "harness/store/sqlite.hpp"

namespace sweetspot {

// One column's value for an INSERT; std::monostate is NULL.
using SqlValue = std::variant<std::monostate, std::int64_t, double, std::string>;

inline SqlValue sql(std::int64_t v) { return v; }
inline SqlValue sql(int v) { return std::int64_t{v}; }
inline SqlValue sql(double v) { return v; }
inline SqlValue sql(std::string v) { return v; }
inline SqlValue sql(std::string_view v) { return std::string(v); }
template <class T>
SqlValue sql(const std::optional<T>& v) {
    return v ? sql(*v) : SqlValue{};
}

using Row = std::vector<std::pair<std::string_view, SqlValue>>;

// "INSERT INTO table (a, b) VALUES (?, ?)": one placeholder per column, bound in column order.
std::string insert_sql(const std::string& table, const std::vector<std::string_view>& columns);

void insert_row(Database& db, const std::string& table, const Row& values);
// Binds one value (NULL for std::monostate) to placeholder `index`.
void bind_sql(Statement& st, int index, const SqlValue& value);

// A value of `axis` in normal form as its `cells` column holds it (booleans as 0 / 1); NULL for
// an axis without a column.
SqlValue axis_column_value(const Axis& axis, const std::string& normal);

// Integers of any width go to SQLite as int64; unsigned 64-bit addresses keep their bit pattern.
template <class T>
void bind_value(Statement& st, int i, const T& v) {
    if constexpr (std::is_integral_v<T>) st.bind(i, static_cast<std::int64_t>(v));
    else st.bind(i, v);
}

// Binds `values` in column order to a statement from insert_sql, reused row after row, and runs it.
template <class... Values>
void insert_values(Statement& st, const Values&... values) {
    st.reset();
    int i = 0;
    (bind_value(st, ++i, values), ...);
    st.run();
}

}  // namespace sweetspot
