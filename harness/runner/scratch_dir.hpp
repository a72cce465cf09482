#pragma once
// A sweep's private scratch folder ($TMPDIR/sweetspot-XXXXXX) for its cell processes' results and
// logs, removed when the sweep ends. It holds a locked file for as long as the sweep lives, so a
// later sweep can tell the folder of a killed one and remove it.
#include <filesystem>
#include <optional>
#include <string>

#include "harness/system/file_lock.hpp"

namespace sweetspot {

class ScratchDir {
public:
    ScratchDir();
    ~ScratchDir();
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
    std::optional<FileLock> lock_;
};

// Removes the scratch folders of sweeps that were killed before they could remove their own: a
// folder whose lock file can be locked has no living owner.
void remove_abandoned_scratch_dirs();

}  // namespace sweetspot
