#pragma once
// An exclusive advisory lock (flock) on a file, held for the object's lifetime. The kernel
// drops it when the process dies however it dies, so a lock that can be taken again marks
// whatever it guarded as abandoned.
#include <optional>
#include <string>

namespace sweetspot {

class FileLock {
public:
    // Locks `path` (which must exist) without waiting; nullopt when another process holds it.
    static std::optional<FileLock> try_lock(const std::string& path);
    FileLock(FileLock&& other) noexcept;
    FileLock& operator=(FileLock&& other) noexcept;
    FileLock(const FileLock&) = delete;
    FileLock& operator=(const FileLock&) = delete;
    ~FileLock();

private:
    explicit FileLock(int fd) : fd_(fd) {}
    int fd_ = -1;
};

}  // namespace sweetspot
