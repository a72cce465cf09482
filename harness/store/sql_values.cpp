#include "harness/store/sql_values.hpp"

namespace sweetspot {

std::string insert_sql(const std::string& table, const std::vector<const char*>& columns) {
    std::string names, marks;
    for (const char* c : columns) {
        names += (names.empty() ? "" : ", ") + std::string(c);
        marks += marks.empty() ? "?" : ", ?";
    }
    return "INSERT INTO " + table + " (" + names + ") VALUES (" + marks + ")";
}

void insert_row(Database& db, const std::string& table, const Row& values) {
    std::vector<const char*> names;
    for (const auto& [name, value] : values) names.push_back(name);
    auto st = db.prepare(insert_sql(table, names));
    int i = 1;
    for (const auto& [name, value] : values) {
        std::visit(
            [&](const auto& v) {
                if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::monostate>) st.bind_null(i);
                else st.bind(i, v);
            },
            value);
        ++i;
    }
    st.run();
}

}  // namespace sweetspot
