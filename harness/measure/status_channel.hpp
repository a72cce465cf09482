#pragma once
// What a cell's process tells the runner while it runs: the phase it is in (named as cell_phases
// names it) or the iteration ("warmup 2/3", "iteration 5/20", "traced 1/1"), one line each on the
// descriptor the runner gave it (child_process.hpp), so the sweep's progress can show it and a
// cell that dies can be said to have died there.
#include <optional>
#include <string>
#include <string_view>

namespace sweetspot {

class StatusChannel {
public:
    // Silent: a cell run outside a sweep (`logits`, tests).
    StatusChannel() = default;
    explicit StatusChannel(int fd) : fd_(fd) {}

    // The phase the cell enters now.
    void phase(std::string_view name) const;
    // Iteration `number` (from 1) of `count` of a kind ("warmup", "iteration", "traced") starts;
    // `count_up_to` where the noise criterion may run more, up to that many.
    void iteration(std::string_view kind, int number, int count, std::optional<int> count_up_to = std::nullopt) const;

private:
    void say(const std::string& line) const;
    int fd_ = -1;
};

}  // namespace sweetspot
