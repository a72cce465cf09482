#include "harness/system/output_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>

namespace sweetspot {

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
    const std::filesystem::path target(path_);
    // A dot name keeps the unfinished file out of globs such as results/*.npy.
    std::string tmpl = (target.parent_path() / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
    const int fd = mkstemp(tmpl.data());
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot write " + path_);
    close(fd);
    temp_ = tmpl;
}

OutputFile::~OutputFile() {
    if (!committed_) std::remove(temp_.c_str());
}

void OutputFile::give_plain_permissions() const {
    // mkstemp made the file 0600; the result gets the permissions a plain create would give it.
    const mode_t mask = umask(0);
    umask(mask);
    std::error_code ec;
    std::filesystem::permissions(temp_, static_cast<std::filesystem::perms>(0666 & ~mask), ec);
}

void OutputFile::commit() {
    give_plain_permissions();
    if (std::rename(temp_.c_str(), path_.c_str()) != 0)
        throw std::system_error(errno, std::generic_category(), "cannot write " + path_);
    committed_ = true;
}

bool OutputFile::commit_if_absent() {
    give_plain_permissions();
    // link() never replaces its target, unlike rename(): of two processes creating the same
    // file at once, exactly one succeeds.
    if (link(temp_.c_str(), path_.c_str()) != 0) {
        if (errno == EEXIST) return false;
        throw std::system_error(errno, std::generic_category(), "cannot write " + path_);
    }
    std::remove(temp_.c_str());
    committed_ = true;
    return true;
}

}  // namespace sweetspot
