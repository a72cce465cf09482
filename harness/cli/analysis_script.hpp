#pragma once
// Running the Python of analysis/ from a command (`report`, `summary`'s bound check): where the
// scripts are, which interpreters may run them, and running one.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace sweetspot {

// $SWEETSPOT_PYTHON alone when set; else python3 on PATH, then Debian's own, since a python3
// earlier on PATH (pyenv, a virtualenv) may lack the Debian packages the report uses.
std::vector<std::string> python_interpreters();

// analysis/NAME in the first of: the source tree named by $SWEETSPOT_SOURCE_DIR (a build carried
// to another machine), the source tree this binary was built from, and beside the build folder;
// nullopt when none has it, with the folders looked in added to `looked`.
std::optional<std::filesystem::path> find_analysis_script(const std::string& name, std::vector<std::string>& looked);

// Runs argv (argv[0] looked up on PATH unless it has a slash) and waits: its exit status, 128 +
// the signal that ended it, or nullopt when it could not be started. `quiet`: its stdout and
// stderr go to /dev/null.
std::optional<int> run_program(const std::vector<std::string>& argv, bool quiet);

}  // namespace sweetspot
