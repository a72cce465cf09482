#pragma once
// A file a command writes as its result. It is written under a temporary name in the same folder
// and renamed into place only by commit(), so a command that fails or is refused leaves a file
// that was already there byte for byte as it was, and creates none that was not.
#include <string>

namespace sweetspot {

class OutputFile {
public:
    // Creates the temporary file beside `path` (whose folder must exist); throws when it cannot.
    explicit OutputFile(std::string path);
    ~OutputFile();  // removes the temporary file unless committed
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;

    // Where to write until commit().
    const std::string& temp_path() const { return temp_; }
    const std::string& path() const { return path_; }
    // Renames the temporary file to path(), replacing what was there.
    void commit();
    // Gives the temporary file the name path() unless a file of that name exists by then;
    // false (and the temporary file left to the destructor) when one does.
    bool commit_if_absent();

private:
    void give_plain_permissions() const;

    std::string path_, temp_;
    bool committed_ = false;
};

}  // namespace sweetspot
