#include "harness/cli/table.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "base/number_text.hpp"

namespace sweetspot {

void TextTable::add_column(std::string header, Align align) {
    headers_.push_back(std::move(header));
    aligns_.push_back(align);
}

void TextTable::add_row(std::vector<std::string> cells) {
    if (cells.size() != headers_.size()) throw std::invalid_argument("TextTable: row width differs from header");
    rows_.push_back(std::move(cells));
}

std::optional<TableFormat> parse_table_format(std::string_view name) {
    if (name == "table") return TableFormat::text;
    if (name == "csv") return TableFormat::csv;
    if (name == "json") return TableFormat::json;
    if (name == "markdown") return TableFormat::markdown;
    return std::nullopt;
}

void TextTable::print_markdown(std::ostream& out) const {
    const auto line = [&](const std::vector<std::string>& cells) {
        out << "|";
        for (const std::string& cell : cells) {
            std::string escaped;
            for (const char ch : cell) escaped += ch == '|' ? std::string("\\|") : std::string(1, ch);
            out << " " << escaped << " |";
        }
        out << "\n";
    };
    line(headers_);
    out << "|";
    for (std::size_t c = 0; c < headers_.size(); ++c) out << (aligns_[c] == Align::right ? "---:|" : "---|");
    out << "\n";
    for (const auto& r : rows_) line(r);
}

void TextTable::print(std::ostream& out) const {
    std::vector<std::size_t> width(headers_.size());
    for (std::size_t c = 0; c < headers_.size(); ++c) {
        width[c] = headers_[c].size();
        for (const auto& r : rows_) width[c] = std::max(width[c], r[c].size());
    }
    auto line = [&](const std::vector<std::string>& cells) {
        std::string s;
        for (std::size_t c = 0; c < cells.size(); ++c) {
            const std::string pad(width[c] - cells[c].size(), ' ');
            s += aligns_[c] == Align::right ? pad + cells[c] : cells[c] + pad;
            if (c + 1 < cells.size()) s += "  ";
        }
        s.erase(s.find_last_not_of(' ') + 1);
        out << s << "\n";
    };
    line(headers_);
    std::vector<std::string> rule;
    for (auto w : width) rule.emplace_back(w, '-');
    line(rule);
    for (const auto& r : rows_) line(r);
}

std::string exact_number(double v) {
    char buf[40];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    std::string text(buf, ec == std::errc() ? end : buf);
    if (text.find_first_of(".eni") == std::string::npos) text += ".0";  // not after "inf" or "nan"
    return text;
}

Field text_field(std::string text) {
    Value value = text;
    return {std::move(text), std::move(value)};
}

Field integer_field(std::int64_t v) { return {std::to_string(v), v}; }

Field number_field(std::optional<double> v, int decimals) {
    if (!v) return missing_field();
    if (decimals >= 0) return {fixed(*v, decimals), *v};
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1e", *v);
    return {buf, *v};
}

Field bytes_field(std::optional<std::int64_t> bytes) {
    if (!bytes) return missing_field();
    return {*bytes == 0 ? "-" : human_bytes(static_cast<double>(*bytes)), *bytes};
}

Field missing_field() { return {"-", std::monostate{}}; }

namespace {

// RFC 4180: a field with a quote, a comma or a line break is quoted, its quotes doubled. An empty
// text is quoted too, so that it differs from a missing value.
std::string csv_text(const std::string& s) {
    if (!s.empty() && s.find_first_of(",\"\r\n") == std::string::npos) return s;
    std::string q = "\"";
    for (const char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
}

// A JSON string, escaped by nlohmann-json; bytes that are not UTF-8 become U+FFFD.
std::string json_text(const std::string& s) {
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A value as CSV (`csv`) or JSON writes it: they differ in what they write for nothing, a flag and
// text. An infinite double is nothing: JSON has no infinity (and SQLite stores no NaN).
std::string written(const Value& value, bool csv) {
    const std::string none = csv ? "" : "null";
    return std::visit(
        [&](const auto& v) -> std::string {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::monostate>) return none;
            else if constexpr (std::is_same_v<T, bool>) return csv ? (v ? "1" : "0") : (v ? "true" : "false");
            else if constexpr (std::is_same_v<T, std::int64_t>) return std::to_string(v);
            else if constexpr (std::is_same_v<T, double>) return std::isfinite(v) ? exact_number(v) : none;
            else return csv ? csv_text(v) : json_text(v);
        },
        value);
}

}  // namespace

void DataTable::add_column(std::string header, std::string key, Align align) {
    columns_.push_back({std::move(header), std::move(key), align});
}

void DataTable::add_row(std::vector<Field> fields) {
    if (fields.size() != columns_.size()) throw std::invalid_argument("DataTable: row width differs from its columns");
    rows_.push_back(std::move(fields));
}

TextTable DataTable::text_table() const {
    TextTable t;
    for (const Column& c : columns_)
        if (!c.header.empty()) t.add_column(c.header, c.align);
    for (const auto& row : rows_) {
        std::vector<std::string> cells;
        for (std::size_t i = 0; i < columns_.size(); ++i)
            if (!columns_[i].header.empty()) cells.push_back(row[i].text);
        t.add_row(std::move(cells));
    }
    return t;
}

void DataTable::print_csv(std::ostream& out) const {
    std::string header;
    for (const Column& c : columns_)
        if (!c.key.empty()) header += (header.empty() ? "" : ",") + csv_text(c.key);
    out << header << "\r\n";
    for (const auto& row : rows_) {
        std::string line;
        bool first = true;
        for (std::size_t i = 0; i < columns_.size(); ++i) {
            if (columns_[i].key.empty()) continue;
            line += (first ? "" : ",") + written(row[i].value, true);
            first = false;
        }
        out << line << "\r\n";
    }
}

// Laid out as nlohmann-json's dump(2) lays out an array of objects.
void DataTable::print_json(std::ostream& out) const {
    if (rows_.empty()) {
        out << "[]\n";
        return;
    }
    out << "[";
    for (std::size_t r = 0; r < rows_.size(); ++r) {
        out << (r ? ",\n  {" : "\n  {");
        bool first = true;
        for (std::size_t i = 0; i < columns_.size(); ++i) {
            if (columns_[i].key.empty()) continue;
            out << (first ? "\n    " : ",\n    ") << json_text(columns_[i].key) << ": " << written(rows_[r][i].value, false);
            first = false;
        }
        out << "\n  }";
    }
    out << "\n]\n";
}

void DataTable::print(std::ostream& out, TableFormat format) const {
    switch (format) {
        case TableFormat::text: text_table().print(out); return;
        case TableFormat::markdown: text_table().print_markdown(out); return;
        case TableFormat::csv: print_csv(out); return;
        case TableFormat::json: print_json(out); return;
    }
}

}  // namespace sweetspot
