#include "harness/system/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

namespace sweetspot {
namespace {

// The parent's end of a child's status pipe: whatever the child wrote, split into lines, the
// newest complete one handed on.
class StatusReader {
public:
    explicit StatusReader(const std::function<void(const std::string&)>& on_status) : on_status_(on_status) {}

    // Reads what is there without waiting.
    void read(int fd) {
        std::optional<std::string> newest;
        char chunk[4096];
        for (ssize_t n; (n = ::read(fd, chunk, sizeof chunk)) > 0;) {
            pending_.append(chunk, static_cast<std::size_t>(n));
            for (std::size_t end; (end = pending_.find('\n')) != std::string::npos;) {
                newest = pending_.substr(0, end);
                pending_.erase(0, end + 1);
            }
        }
        if (newest) on_status_(*newest);
    }

private:
    const std::function<void(const std::string&)>& on_status_;
    std::string pending_;
};

// Both ends of a status pipe, closed when done with; none where the child has no channel.
struct StatusPipe {
    int read_end = -1, write_end = -1;
    explicit StatusPipe(bool wanted) {
        if (!wanted) return;
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
        read_end = fds[0];
        write_end = fds[1];
        fcntl(read_end, F_SETFL, O_NONBLOCK);
        fcntl(write_end, F_SETFL, O_NONBLOCK);  // a parent slow to read never holds up the child
    }
    void close_write_end() {
        if (write_end >= 0) close(write_end);
        write_end = -1;
    }
    ~StatusPipe() {
        close_write_end();
        if (read_end >= 0) close(read_end);
    }
    StatusPipe(const StatusPipe&) = delete;
    StatusPipe& operator=(const StatusPipe&) = delete;
};

// In the forked child: only async-signal-safe calls until exec.
[[noreturn]] void exec_child(const ChildSpec& spec, pid_t parent, char* const* argv, int status_fd) {
    setpgid(0, 0);
    // Die with the parent: a SIGKILLed sweep must not leave cells running on the GPU.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    // First, before the descriptors below can take its number; dup2 onto the same number would
    // leave close-on-exec set.
    if (status_fd == kChildStatusFd) fcntl(status_fd, F_SETFD, 0);
    else if (status_fd >= 0) dup2(status_fd, kChildStatusFd);
    const int fd = open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
    }
    const int null_in = open("/dev/null", O_RDONLY);
    if (null_in >= 0) dup2(null_in, STDIN_FILENO);
    for (const auto& [k, v] : spec.extra_env) setenv(k.c_str(), v.c_str(), 1);
    execv(argv[0], argv);
    const char msg[] = "sweetspot: cannot execute the cell process\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(127);
}

}  // namespace

std::string ChildResult::describe() const {
    if (timed_out) return "timed out after " + std::to_string(static_cast<long>(wall_s)) + " s";
    if (interrupted) return "interrupted";
    if (signal) return "killed by signal " + std::to_string(*signal) + " (" + strsignal(*signal) + ")";
    if (exit_code) return "exited with status " + std::to_string(*exit_code);
    return "ended for an unknown reason";
}

ChildResult run_child(const ChildSpec& spec, const std::atomic<bool>& stop) {
    if (spec.argv.empty()) throw std::invalid_argument("run_child: empty argv");
    std::vector<char*> argv;
    for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);

    StatusPipe status_pipe(static_cast<bool>(spec.on_status));
    StatusReader reader(spec.on_status);
    const pid_t parent = getpid();
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
    if (pid == 0) exec_child(spec, parent, argv.data(), status_pipe.write_end);
    // Also set the group from this side, so a kill below cannot race the child's own setpgid.
    setpgid(pid, pid);
    status_pipe.close_write_end();
    const auto read_status = [&] {
        if (status_pipe.read_end >= 0) reader.read(status_pipe.read_end);
    };

    ChildResult r;
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    int status = 0;
    rusage usage{};
    auto poll_interval = std::chrono::milliseconds(1);
    for (;;) {
        const pid_t w = wait4(pid, &status, WNOHANG, &usage);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) throw std::runtime_error(std::string("wait4 failed: ") + std::strerror(errno));
        const bool late = elapsed() > spec.timeout_s;
        if (late || stop.load()) {
            r.timed_out = late;
            r.interrupted = !late;
            kill(-pid, SIGKILL);
            while (wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
            }
            break;
        }
        read_status();
        // Short cells should not pay a fixed polling delay; long ones need no fast polling.
        std::this_thread::sleep_for(poll_interval);
        poll_interval = std::min(poll_interval * 2, std::chrono::milliseconds(50));
    }
    read_status();  // what the child wrote last, before it ended
    // Whatever the child left running in its group goes with it.
    kill(-pid, SIGKILL);
    r.wall_s = elapsed();
    r.peak_rss_bytes = usage.ru_maxrss * 1024L;
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    return r;
}

std::string file_tail(const std::string& path, std::size_t max_bytes) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    if (!f) return {};
    const auto size = static_cast<std::size_t>(f.tellg());
    const std::size_t start = size > max_bytes ? size - max_bytes : 0;
    f.seekg(static_cast<std::streamoff>(start));
    std::string s(size - start, '\0');
    f.read(s.data(), static_cast<std::streamsize>(s.size()));
    if (start > 0) {
        if (const auto nl = s.find('\n'); nl != std::string::npos) s.erase(0, nl + 1);
    }
    return s;
}

std::string self_executable() {
    char buf[4096];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) throw std::runtime_error("cannot find the sweetspot executable (/proc/self/exe)");
    return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace sweetspot
