#include "harness/cli/analysis_script.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>

#include "harness/system/child_process.hpp"

extern char** environ;

namespace sweetspot {
namespace {

namespace fs = std::filesystem;

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

std::vector<fs::path> analysis_dirs() {
    std::vector<fs::path> dirs;
    if (const char* env = std::getenv("SWEETSPOT_SOURCE_DIR"); env && *env) dirs.push_back(fs::path(env) / "analysis");
    dirs.emplace_back(SWEETSPOT_ANALYSIS_DIR);
    dirs.push_back(fs::path(self_executable()).parent_path().parent_path() / "analysis");
    return dirs;
}

}  // namespace

std::vector<std::string> python_interpreters() {
    if (const char* env = std::getenv("SWEETSPOT_PYTHON"); env && *env) return {env};
    return {"python3", "/usr/bin/python3"};
}

std::optional<std::filesystem::path> find_analysis_script(const std::string& name, std::vector<std::string>& looked) {
    for (const auto& dir : analysis_dirs()) {
        looked.push_back(dir.string());
        if (fs::is_regular_file(dir / name)) return dir / name;
    }
    return std::nullopt;
}

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

}  // namespace sweetspot
