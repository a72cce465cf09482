#pragma once
// Helpers shared by the harness tests: temporary folders, files, and running the sweetspot
// binary as a user would.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

namespace sweetspot::test {

class TempDir {
public:
    TempDir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "sweetspot-test-XXXXXX").string();
        if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
        path_ = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
};

// The bytes of the file at `path` (empty where there is none).
inline std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

inline void write_file(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
    if (!f) throw std::runtime_error("cannot write " + path);
}

struct CommandResult {
    int exit_code = -1;
    std::string output;  // stdout and stderr together
};

// The build's paths, unless the environment names others (tests run from a copied build on a
// GPU machine, where the source tree lives elsewhere).
inline std::string env_or(const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return v && *v ? v : fallback;
}
inline std::string sweetspot_binary() { return env_or("SWEETSPOT_BINARY", SWEETSPOT_BINARY); }
inline std::string source_path(const std::string& rel) {
    return env_or("SWEETSPOT_SOURCE_DIR", SWEETSPOT_SOURCE_DIR) + "/" + rel;
}

// Runs the shell command `cmd` and collects its output.
inline CommandResult run_command(const std::string& cmd) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) throw std::runtime_error("popen failed");
    CommandResult r;
    std::array<char, 4096> buf{};
    std::size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
    const int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

// Runs `args` (shell words, already quoted where needed) with the sweetspot binary in front.
inline CommandResult run_sweetspot(const std::string& args) { return run_command("'" + sweetspot_binary() + "' " + args); }

// What to put in front of a command for file permissions to stop it: nothing for a user other
// than root; for root, whom they do not stop, setpriv as the user nobody (who must then be able to
// enter the folders above the files). nullopt where root has no setpriv.
inline std::optional<std::string> as_unprivileged_user() {
    if (geteuid() != 0) return "";
    if (run_command("command -v setpriv").exit_code != 0) return std::nullopt;
    return "setpriv --reuid=nobody --regid=nogroup --clear-groups ";
}

}  // namespace sweetspot::test
