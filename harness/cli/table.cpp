#include "harness/cli/table.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kernels/model/number_text.hpp"

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

namespace {

std::string csv_field(const std::string& s) {
    if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
    std::string q = "\"";
    for (const char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
}

nlohmann::ordered_json json_value(const std::string& s) {
    if (s == "-" || s.empty()) return nullptr;
    const char* const last = s.data() + s.size();
    std::int64_t whole = 0;
    if (const auto [end, ec] = std::from_chars(s.data(), last, whole); ec == std::errc() && end == last) return whole;
    double v = 0;
    if (const auto [end, ec] = std::from_chars(s.data(), last, v); ec == std::errc() && end == last && std::isfinite(v)) return v;
    return s;
}

}  // namespace

void TextTable::print(std::ostream& out, TableFormat format) const {
    switch (format) {
        case TableFormat::csv: {
            const auto line = [&](const std::vector<std::string>& cells) {
                for (std::size_t c = 0; c < cells.size(); ++c) out << (c ? "," : "") << csv_field(cells[c]);
                out << "\r\n";
            };
            line(headers_);
            for (const auto& r : rows_) line(r);
            return;
        }
        case TableFormat::json: {
            nlohmann::ordered_json rows = nlohmann::ordered_json::array();
            for (const auto& r : rows_) {
                nlohmann::ordered_json row = nlohmann::ordered_json::object();
                for (std::size_t c = 0; c < headers_.size(); ++c) row[headers_[c]] = json_value(r[c]);
                rows.push_back(std::move(row));
            }
            out << rows.dump(2) << "\n";
            return;
        }
        case TableFormat::markdown: {
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
            return;
        }
        case TableFormat::text: break;
    }
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

std::string size_cell(std::int64_t bytes, TableFormat format, const std::string& none) {
    if (bytes == 0) return none;
    const bool people = format == TableFormat::text || format == TableFormat::markdown;
    return people ? human_bytes(static_cast<double>(bytes)) : std::to_string(bytes);
}

}  // namespace sweetspot
