#pragma once
// Tables for the terminal (list, summary): columns sized to their content, numbers
// right-aligned; and the same rows as CSV, JSON or Markdown for other tools.
#include <cstdint>
#include <ostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sweetspot {

// How a table is written: aligned text for people, or CSV (RFC 4180), JSON (an array of objects
// keyed by header; "-" is null, numbers are numbers) or a Markdown table for other tools.
enum class TableFormat { text, csv, json, markdown };
// "table", "csv", "json" or "markdown"; nullopt for anything else.
std::optional<TableFormat> parse_table_format(std::string_view name);

// A size in a table: "1.50 GiB" for people (text, Markdown), the exact byte count for other
// tools (CSV, JSON); `none` where there is nothing.
std::string size_cell(std::int64_t bytes, TableFormat format, const std::string& none = "-");

class TextTable {
public:
    enum class Align { left, right };
    void add_column(std::string header, Align align = Align::left);
    void add_row(std::vector<std::string> cells);
    void print(std::ostream& out, TableFormat format = TableFormat::text) const;
    bool empty() const { return rows_.empty(); }
    std::size_t rows() const { return rows_.size(); }

private:
    std::vector<std::string> headers_;
    std::vector<Align> aligns_;
    std::vector<std::vector<std::string>> rows_;
};

}  // namespace sweetspot
