#pragma once
// Experiment matrix files (TOML): defaults, sweeps whose list-valued keys expand as a
// cartesian product, exclusions, custom models. The format is documented in experiments/README.md.
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "harness/cell.hpp"

namespace sweetspot {

// Bad input in a matrix file. what() is "file:line:col: error: message".
class MatrixError : public std::runtime_error {
public:
    MatrixError(std::string file, int line, int column, const std::string& message);
    const std::string& file() const { return file_; }
    int line() const { return line_; }
    int column() const { return column_; }
    const std::string& message() const { return message_; }

private:
    std::string file_;
    int line_, column_;
    std::string message_;
};

struct Matrix {
    std::string path;
    std::string text;         // the file as read, stored with every run
    std::string name;         // top-level `name`, else the file's stem
    std::string description;
    std::vector<CellParams> cells;  // expansion order, exclusions and duplicates removed
    int excluded = 0;         // cells removed by exclusions
    int duplicates = 0;       // cells produced twice (same key) and kept once

    std::string hash() const { return fnv1a64_hex(text); }
};

// Throws MatrixError for syntax errors, unknown keys, wrong types and impossible values.
Matrix parse_matrix(std::string_view text, std::string_view path_for_messages);
// Reads the file; an unreadable file is a MatrixError at line 0.
Matrix load_matrix(const std::string& path);

// Keeps the cells matching every filter "axis=value[,value...]" (e.g. "model=gpt2_1.5b",
// "backend=uvm,uvm-prefetch", "budget=50%"). Values are compared in the cells' canonical form;
// an unknown axis throws std::invalid_argument.
void keep_only(Matrix& matrix, const std::vector<std::string>& filters);

}  // namespace sweetspot
