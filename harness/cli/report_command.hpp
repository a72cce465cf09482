#pragma once
// `sweetspot report`: figures and an HTML page from a results database, drawn by the Python code in
// analysis/ (matplotlib, pandas). This side finds that code and an interpreter that can run it.
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

namespace sweetspot {

struct ReportRequest {
    std::string db_path;
    std::string out_dir;
    std::optional<std::int64_t> timeline_cell;  // the cell whose traced iteration the timeline shows
};

// Writes the report and returns the exit code for the command: 0 written, 2 bad input (the
// database is missing, unreadable or not a sweetspot database; a cell that cannot be drawn),
// 1 it could not be drawn here (no python3 with matplotlib and pandas, analysis/ not found, the
// script failed). Progress goes to stdout (the script's own), problems to `err`.
int run_report(const ReportRequest& request, std::ostream& err);

}  // namespace sweetspot
