#include "harness/measure/status_channel.hpp"

#include <unistd.h>

namespace sweetspot {

void StatusChannel::phase(std::string_view name) const { say(std::string(name)); }

void StatusChannel::iteration(std::string_view kind, int number, int count, std::optional<int> count_up_to) const {
    if (fd_ < 0) return;
    std::string line = std::string(kind) + " " + std::to_string(number) + "/" + std::to_string(count);
    if (count_up_to && *count_up_to > count) line += ".." + std::to_string(*count_up_to);
    say(line);
}

void StatusChannel::say(const std::string& line) const {
    if (fd_ < 0) return;
    // One write of less than PIPE_BUF bytes: the runner reads whole lines. A status the runner
    // has no room for yet is dropped (the next one replaces it anyway), and one it can no longer
    // read changes nothing in the measurement.
    const std::string text = line + "\n";
    (void)!write(fd_, text.data(), text.size());
}

}  // namespace sweetspot
