#pragma once
// Experiment matrix files (TOML): defaults, sweeps whose list-valued keys expand as a
// cartesian product, exclusions, custom models. The format is documented in experiments/README.md.
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "harness/matrix/cell.hpp"

namespace sweetspot {

// Bad input in a matrix file. what() is "file:line:col: error: message", the control bytes of
// both escaped (escape_controls below): messages quote what the file says.
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
    // What the expansion changed that the file did not say, once per sweep: a placement axis its
    // backend does not use, set to the default (`list` and `run` print these).
    std::vector<std::string> notes;
    std::vector<std::string> overrides;  // the --set values the cells were expanded with, "axis=v1,v2"

    std::string hash() const { return fnv1a64_hex(text); }
};

// User text as messages show it: bytes below 0x20 and 0x7f become escapes (\n, \0, \x1b), so a
// stray ESC or NUL from a file neither reaches the terminal nor cuts a message short.
std::string escape_controls(std::string_view text);

// The database `run` writes when no --db is given: results/<stem>.db, where the stem is the
// matrix's name with every byte outside [A-Za-z0-9._-] replaced by '_', a leading '.' too, and
// at most 100 bytes long; "matrix" for an empty name. So any name, "../x", "/tmp/x" or one with
// a NUL byte included, gives a file directly inside results/.
std::string default_db_path(const Matrix& matrix);

// Throws MatrixError for syntax errors, unknown keys, wrong types and impossible values.
// `overrides` ("AXIS=VALUE[,VALUE...]", the command line's --set) give an axis these values in
// every sweep, in place of what the sweeps and [defaults] say; std::invalid_argument for an
// unknown axis, a value it does not accept, an axis given twice, or values that take the matrix
// past the cells it may have.
Matrix parse_matrix(std::string_view text, std::string_view path_for_messages,
                    const std::vector<std::string>& overrides = {});
// Reads the file; an unreadable file is a MatrixError at line 0.
Matrix load_matrix(const std::string& path, const std::vector<std::string>& overrides = {});

// Keeps the cells matching every filter "axis=value[,value...]" (e.g. "model=gpt2_1.5b",
// "backend=uvm,uvm-prefetch", "budget=50%"). Values are compared in the cells' canonical form.
// Throws std::invalid_argument for an unknown axis, and for a filter that leaves no cell (naming
// it and the values its axis has), so a mistyped value does not make an empty run.
void keep_only(Matrix& matrix, const std::vector<std::string>& filters);

}  // namespace sweetspot
