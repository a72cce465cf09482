#include "harness/store/row_copy.hpp"

#include <algorithm>
#include <filesystem>

namespace sweetspot {

const std::vector<std::string> kCellTables = {
    "iterations", "cell_phases", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUDA_UM_GPU_PAGE_FAULT_EVENTS",
    "CUDA_UM_CPU_PAGE_FAULT_EVENTS", "UM_COUNTER_EVENTS", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_OVERHEAD"};

std::vector<std::string> table_columns(Database& db, const std::string& schema, const std::string& table) {
    std::vector<std::string> names;
    auto st = db.prepare("SELECT name FROM pragma_table_info(?1, ?2) ORDER BY cid");
    st.bind(1, table).bind(2, schema);
    while (st.step()) names.push_back(st.text(0));
    return names;
}

std::string quoted(const std::string& name) { return "\"" + name + "\""; }

std::string copy_rows_sql(Database& db, const std::string& from, const std::string& table, const std::string& key_column) {
    const std::vector<std::string> theirs = table_columns(db, from, table);
    std::string names, values;
    for (const std::string& column : table_columns(db, "main", table)) {
        if (std::find(theirs.begin(), theirs.end(), column) == theirs.end()) continue;
        std::string value = "t." + quoted(column);
        if (column == key_column) value = "?2";
        else if (column == "shortName" || column == "demangledName" || column == "textId" || column == "nameId")
            value = "(SELECT m.id FROM main.StringIds m JOIN " + from + ".StringIds x ON x.value = m.value WHERE x.id = t." +
                    quoted(column) + ")";
        names += (names.empty() ? "" : ", ") + quoted(column);
        values += (values.empty() ? "" : ", ") + value;
    }
    return "INSERT INTO main." + quoted(table) + " (" + names + ") SELECT " + values + " FROM " + from + "." + quoted(table) +
           " t WHERE t." + quoted(key_column) + " = ?1";
}

void copy_rows(Database& db, const std::vector<std::string>& copies, std::int64_t from_id, std::int64_t to_id) {
    for (const std::string& sql : copies) db.prepare(sql).bind(1, from_id).bind(2, to_id).run();
}

std::string read_only_uri(const std::string& path, bool immutable) {
    std::string uri = "file:";
    for (const char c : std::filesystem::absolute(path).string())
        uri += c == '%' ? std::string("%25") : c == '?' ? std::string("%3f") : c == '#' ? std::string("%23") : std::string(1, c);
    return uri + (immutable ? "?mode=ro&immutable=1" : "?mode=ro");
}

Attached::Attached(Database& db, const std::string& uri, const std::string& name) : db_(db), name_(name) {
    db_.prepare("ATTACH DATABASE ? AS " + name_).bind(1, uri).run();
}

Attached::~Attached() {
    try {
        db_.exec("DETACH DATABASE " + name_);
    } catch (const SqliteError&) {
        // Detaching fails only inside a transaction still open on the attached file, which the
        // connection's end releases as well.
    }
}

}  // namespace sweetspot
