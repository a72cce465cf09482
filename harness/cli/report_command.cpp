#include "harness/cli/report_command.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "harness/store/sqlite.hpp"
#include "harness/system/child_process.hpp"
#include "harness/system/exit_codes.hpp"
#include "kernels/model/number_text.hpp"

extern char** environ;

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

class SpawnFileActions {
public:
    SpawnFileActions() { posix_spawn_file_actions_init(&actions_); }
    ~SpawnFileActions() { posix_spawn_file_actions_destroy(&actions_); }
    SpawnFileActions(const SpawnFileActions&) = delete;
    SpawnFileActions& operator=(const SpawnFileActions&) = delete;

    void discard_output() {
        posix_spawn_file_actions_addopen(&actions_, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&actions_, 2, "/dev/null", O_WRONLY, 0);
    }
    const posix_spawn_file_actions_t* get() const { return &actions_; }

private:
    posix_spawn_file_actions_t actions_;
};

// Runs argv (argv[0] looked up on PATH unless it has a slash) and waits: its exit status, 128 +
// the signal that ended it, or nullopt when it could not be started.
std::optional<int> run_program(const std::vector<std::string>& argv, bool quiet) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    SpawnFileActions actions;
    if (quiet) actions.discard_output();
    pid_t pid = 0;
    if (posix_spawnp(&pid, args[0], actions.get(), nullptr, args.data(), environ) != 0) return std::nullopt;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return std::nullopt;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Where analysis/ may be: the source tree named by the environment (a build carried to another
// machine), the source tree this binary was built from, and beside the build folder.
std::vector<fs::path> analysis_dirs() {
    std::vector<fs::path> dirs;
    if (const char* env = std::getenv("SWEETSPOT_SOURCE_DIR"); env && *env) dirs.push_back(fs::path(env) / "analysis");
    dirs.emplace_back(SWEETSPOT_ANALYSIS_DIR);
    dirs.push_back(fs::path(self_executable()).parent_path().parent_path() / "analysis");
    return dirs;
}

// $SWEETSPOT_PYTHON alone when set; else python3 on PATH, then Debian's own, since a python3
// earlier on PATH (pyenv, a virtualenv) may lack the Debian packages the report uses.
std::vector<std::string> interpreters() {
    if (const char* env = std::getenv("SWEETSPOT_PYTHON"); env && *env) return {env};
    return {"python3", "/usr/bin/python3"};
}

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

    std::optional<fs::path> script;
    std::vector<std::string> looked;
    for (const auto& dir : analysis_dirs()) {
        looked.push_back(dir.string());
        if (fs::is_regular_file(dir / "report.py")) {
            script = dir / "report.py";
            break;
        }
    }
    if (!script) {
        err << "sweetspot report: analysis/report.py not found (looked in " << comma_list(looked)
            << "); set SWEETSPOT_SOURCE_DIR to the sweetspot source tree\n";
        return kExitFailed;
    }

    std::optional<std::string> python;
    std::vector<std::string> started;
    for (const auto& candidate : interpreters()) {
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
            err << "sweetspot report: python3 was not found (tried " << comma_list(interpreters())
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
