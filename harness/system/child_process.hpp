#pragma once
// Runs one command in its own process group with a wall-clock timeout, its stdout and stderr
// captured in a log file, and, where asked, a channel on which it says what it is doing. A crash,
// abort, hang or non-zero exit of the child is a result here, never a problem for the caller.
#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sweetspot {

// The descriptor on which a child with a status channel writes its status, one line each
// (kept apart from stdout and stderr, which go to the log).
inline constexpr int kChildStatusFd = 3;

struct ChildSpec {
    std::vector<std::string> argv;  // argv[0] is the executable's path
    std::vector<std::pair<std::string, std::string>> extra_env;
    std::string log_path;           // receives stdout and stderr
    double timeout_s = 600;
    // Where set, the child gets a pipe on kChildStatusFd, and this is called, on the caller's
    // thread while it waits, with the newest complete line the child wrote since the last call:
    // only the latest status matters. The pipe does not block the child: when it is full (the
    // caller reads it every few tens of ms), the child's writes fail and that status is lost.
    std::function<void(const std::string&)> on_status;
};

struct ChildResult {
    std::optional<int> exit_code;   // set when the child exited
    std::optional<int> signal;      // set when a signal ended it (including our SIGKILL on timeout)
    bool timed_out = false;
    bool interrupted = false;       // `stop` became true and the child was killed
    double wall_s = 0;
    long peak_rss_bytes = 0;

    // "exited with status 3", "killed by signal 11 (Segmentation fault)", ...
    std::string describe() const;
};

// Blocks until the child ends, its timeout passes, or `stop` becomes true; in the last two
// cases the whole process group is killed. The child also dies if this process dies.
ChildResult run_child(const ChildSpec& spec, const std::atomic<bool>& stop);

// The last `max_bytes` of a file (whole lines where possible); empty if unreadable.
std::string file_tail(const std::string& path, std::size_t max_bytes);

// Absolute path of the running executable.
std::string self_executable();

}  // namespace sweetspot
