#pragma once
// Tables for the terminal (list, summary): columns sized to their content, numbers
// right-aligned; and the same rows as CSV, JSON or Markdown for other tools.
#include <cstdint>
#include <ostream>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sweetspot {

// How a table is written: aligned text for people, a Markdown table, or CSV (RFC 4180) or JSON
// (an array of objects) with fixed keys and typed values for other tools (results/README.md,
// "Machine-readable output").
enum class TableFormat { text, csv, json, markdown };
// "table", "csv", "json" or "markdown"; nullopt for anything else.
std::optional<TableFormat> parse_table_format(std::string_view name);

// Text in aligned columns, or as a Markdown table.
class TextTable {
public:
    enum class Align { left, right };
    void add_column(std::string header, Align align = Align::left);
    void add_row(std::vector<std::string> cells);
    void print(std::ostream& out) const;
    // '|' in a cell is written "\|", so that it does not end the cell.
    void print_markdown(std::ostream& out) const;
    bool empty() const { return rows_.empty(); }
    std::size_t rows() const { return rows_.size(); }

private:
    std::vector<std::string> headers_;
    std::vector<Align> aligns_;
    std::vector<std::vector<std::string>> rows_;
};

// A value for other tools, typed by where it comes from (the declared SQL type of a column, a C++
// value), never guessed from its text: a model named "1e5" is text. A flag (a 0/1 column) is a
// bool; std::monostate is a missing value.
using Value = std::variant<std::monostate, std::int64_t, double, bool, std::string>;

// The shortest text that reads back as the same double, with a decimal point or an exponent
// ("2.0", not "2") so that readers that tell integers from floats read a float.
std::string exact_number(double v);

// One entry of a DataTable: what people read (the text and Markdown tables) and what other tools
// read (CSV, JSON).
struct Field {
    std::string text;
    Value value;
};
Field text_field(std::string text);
Field integer_field(std::int64_t v);
// `decimals` digits after the point for people (-1: one, in scientific notation); "-" for none.
Field number_field(std::optional<double> v, int decimals);
// "1.50 GiB" for people, "-" for none or 0 bytes; the byte count for other tools.
Field bytes_field(std::optional<std::int64_t> bytes);
// "-" for people, null for other tools.
Field missing_field();

// A table that people and other tools read each in their own way: a column may have a header
// (the text and Markdown tables), a key (CSV and JSON) or both.
class DataTable {
public:
    using Align = TextTable::Align;
    // An empty `header` leaves the column out of the tables for people, an empty `key` out of
    // CSV and JSON.
    void add_column(std::string header, std::string key, Align align = Align::left);
    void add_row(std::vector<Field> fields);
    void print(std::ostream& out, TableFormat format) const;
    bool empty() const { return rows_.empty(); }
    std::size_t rows() const { return rows_.size(); }

private:
    struct Column {
        std::string header, key;
        Align align;
    };
    std::vector<Column> columns_;
    std::vector<std::vector<Field>> rows_;

    TextTable text_table() const;
    void print_csv(std::ostream& out) const;
    void print_json(std::ostream& out) const;
};

}  // namespace sweetspot
