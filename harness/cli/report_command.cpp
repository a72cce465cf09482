#include "harness/cli/report_command.hpp"

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "base/number_text.hpp"
#include "harness/cli/analysis_script.hpp"
#include "harness/store/sqlite.hpp"
#include "harness/system/exit_codes.hpp"

namespace sweetspot {
namespace {

namespace fs = std::filesystem;

// analysis/report.py's own exit codes.
constexpr int kScriptOk = 0;
constexpr int kScriptBadInput = 2;
constexpr int kScriptMissingModules = 3;

// Finds the modules without importing them (importing pandas takes a second; the script does it
// anyway, and says what is missing if an installed module turns out broken).
constexpr const char* kFindModules =
    "import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in ('matplotlib', 'pandas')))";

constexpr const char* kInstallHint =
    "Install them with scripts/install-deps.sh, or with: apt-get install python3 python3-matplotlib python3-pandas "
    "(Debian 12).";

// Bad input the script would only see later, said in the words the other commands use.
std::optional<std::string> database_problem(const std::string& path) {
    try {
        require_database_file(path);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return std::nullopt;
}

}  // namespace

int run_report(const ReportRequest& request, std::ostream& err) {
    if (const auto problem = database_problem(request.db_path)) {
        err << "sweetspot report: " << *problem << "\n";
        return kExitBadInput;
    }
    // Said before anything is drawn: the report is a folder, and a file of that name cannot become one.
    if (std::error_code ec; fs::exists(request.out_dir, ec) && !fs::is_directory(request.out_dir, ec)) {
        err << "sweetspot report: " << request.out_dir << " is a file, not a folder; the report is a folder of figures "
            << "and index.html: give -o a folder's name (it is created if missing)\n";
        return kExitBadInput;
    }

    std::vector<std::string> looked;
    const std::optional<fs::path> script = find_analysis_script("report.py", looked);
    if (!script) {
        err << "sweetspot report: analysis/report.py not found (looked in " << comma_list(looked)
            << "); set SWEETSPOT_SOURCE_DIR to the sweetspot source tree\n";
        return kExitFailed;
    }

    std::optional<std::string> python;
    std::vector<std::string> started;
    for (const auto& candidate : python_interpreters()) {
        const auto status = run_program({candidate, "-c", kFindModules}, true);
        if (!status) continue;
        started.push_back(candidate);
        if (*status == 0) {
            python = candidate;
            break;
        }
    }
    if (!python) {
        if (started.empty())
            err << "sweetspot report: python3 was not found (tried " << comma_list(python_interpreters())
                << "); the report is drawn by Python with matplotlib and pandas. " << kInstallHint << "\n";
        else
            err << "sweetspot report: " << comma_list(started) << " cannot find matplotlib and pandas, which draw the "
                << "report. " << kInstallHint << "\n";
        return kExitFailed;
    }

    std::vector<std::string> argv = {*python, script->string(), request.db_path, "-o", request.out_dir};
    if (request.timeline_cell) {
        argv.push_back("--timeline-cell");
        argv.push_back(std::to_string(*request.timeline_cell));
    }
    const auto status = run_program(argv, false);
    if (!status) {
        err << "sweetspot report: cannot start " << *python << "\n";
        return kExitFailed;
    }
    switch (*status) {
        case kScriptOk: return kExitOk;
        case kScriptBadInput: return kExitBadInput;
        case kScriptMissingModules: return kExitFailed;  // the script said what is missing
        default:
            err << "sweetspot report: " << script->string() << " failed (exit status " << *status << ")\n";
            return kExitFailed;
    }
}

}  // namespace sweetspot
