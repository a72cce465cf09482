#include "harness/cli/bound_check.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/number_text.hpp"
#include "harness/cli/analysis_script.hpp"

namespace sweetspot {
namespace {

// A file for the script's answer, removed when done.
class AnswerFile {
public:
    AnswerFile() {
        std::string name = (std::filesystem::temp_directory_path() / "sweetspot-bounds-XXXXXX").string();
        const int fd = mkstemp(name.data());
        if (fd >= 0) {
            close(fd);
            path_ = name;
        }
    }
    ~AnswerFile() {
        if (!path_.empty()) unlink(path_.c_str());
    }
    AnswerFile(const AnswerFile&) = delete;
    AnswerFile& operator=(const AnswerFile&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

std::vector<BeatenBound> read_answer(const std::string& path) {
    std::vector<BeatenBound> beaten;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
        std::istringstream fields(line);
        BeatenBound b;
        std::string id;
        if (std::getline(fields, id, '\t') && std::getline(fields, b.bounds, '\t') &&
            std::getline(fields, b.x_bound, '\t') && std::getline(fields, b.x_driver_bound)) {
            b.cell_id = std::stoll(id);
            beaten.push_back(b);
        }
    }
    return beaten;
}

}  // namespace

BoundCheck check_bounds(const std::string& db_path) {
    std::vector<std::string> looked;
    const auto script = find_analysis_script("beaten_bounds.py", looked);
    if (!script) return {{}, "analysis/beaten_bounds.py not found (looked in " + comma_list(looked) + ")"};
    AnswerFile answer;
    if (answer.path().empty()) return {{}, "no temporary file for its answer"};
    for (const auto& python : python_interpreters()) {
        const auto status = run_program({python, script->string(), db_path, answer.path()}, true);
        if (!status) continue;  // not installed: try the next
        if (*status != 0) return {{}, python + " " + script->string() + " failed (exit status " + std::to_string(*status) + ")"};
        return {read_answer(answer.path()), ""};
    }
    return {{}, "python3 was not found (tried " + comma_list(python_interpreters()) + ")"};
}

}  // namespace sweetspot
