#include "harness/store/sql_values.hpp"

namespace sweetspot {

std::string insert_sql(const std::string& table, const std::vector<std::string_view>& columns) {
    std::string names, marks;
    for (const std::string_view c : columns) {
        names += (names.empty() ? "" : ", ") + std::string(c);
        marks += marks.empty() ? "?" : ", ?";
    }
    return "INSERT INTO " + table + " (" + names + ") VALUES (" + marks + ")";
}

void insert_row(Database& db, const std::string& table, const Row& values) {
    std::vector<std::string_view> names;
    for (const auto& [name, value] : values) names.push_back(name);
    auto st = db.prepare(insert_sql(table, names));
    int i = 1;
    for (const auto& [name, value] : values) bind_sql(st, i++, value);
    st.run();
}

void bind_sql(Statement& st, int index, const SqlValue& value) {
    std::visit(
        [&](const auto& v) {
            if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::monostate>) st.bind_null(index);
            else st.bind(index, v);
        },
        value);
}

SqlValue axis_column_value(const Axis& axis, const std::string& normal) {
    switch (axis.column_type) {
        case Axis::Column::none: break;
        case Axis::Column::integer:
            if (axis.written == Axis::Written::boolean) return sql(normal == "true" ? 1 : 0);
            return sql(parse_integer(normal).value());
        case Axis::Column::real: return sql(parse_finite_number(normal).value());
        case Axis::Column::text: return sql(normal);
    }
    return {};
}

}  // namespace sweetspot
