#pragma once
// What is wrong with a checkpoint on disk (unreadable, corrupt, or not the model it should be).
// what() names the file and the problem; the command line maps it to exit code 2 (bad input).
#include <stdexcept>

namespace sweetspot {

class CheckpointError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace sweetspot
