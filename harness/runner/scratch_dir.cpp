#include "harness/runner/scratch_dir.hpp"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <system_error>

#include <unistd.h>

namespace sweetspot {
namespace {

constexpr const char* kScratchPrefix = "sweetspot-";
constexpr const char* kScratchLock = "lock";

std::filesystem::path temp_root() {
    const char* tmp = std::getenv("TMPDIR");
    return tmp && *tmp ? tmp : "/tmp";
}

}  // namespace

ScratchDir::ScratchDir() {
    std::string tmpl = (temp_root() / (std::string(kScratchPrefix) + "XXXXXX")).string();
    if (!mkdtemp(tmpl.data())) throw std::system_error(errno, std::generic_category(), "mkdtemp " + tmpl);
    path_ = tmpl;
    const std::string lock_path = file(kScratchLock);
    std::ofstream(lock_path).close();
    lock_ = FileLock::try_lock(lock_path);
}

ScratchDir::~ScratchDir() {
    lock_.reset();
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

void remove_abandoned_scratch_dirs() {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(temp_root(), ec)) {
        const auto name = entry.path().filename().string();
        const auto lock_path = entry.path() / kScratchLock;
        if (!name.starts_with(kScratchPrefix) || !std::filesystem::is_regular_file(lock_path, ec)) continue;
        try {
            if (auto lock = FileLock::try_lock(lock_path.string())) std::filesystem::remove_all(entry.path(), ec);
        } catch (const std::system_error&) {
            // Another user's folder, or one that vanished meanwhile: not ours to clean.
        }
    }
}

}  // namespace sweetspot
