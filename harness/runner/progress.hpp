#pragma once
// The one-line-per-cell progress report of a sweep: position, status, latency, elapsed, ETA.
#include <chrono>
#include <optional>
#include <ostream>
#include <string>

namespace sweetspot {

class Progress {
public:
    // `parallel`: cells running at once, which the ETA divides the remaining work by.
    Progress(int total, std::ostream& out, int parallel = 1);
    // `measured` is false for cells that took no measurable time (resumed or skipped), which
    // then do not distort the ETA.
    void cell_done(const std::string& label, const std::string& status, std::optional<double> median_ms,
                   const std::string& note, bool measured, double cell_wall_s);
    // A line about the sweep itself (waiting for a lock), between the cells' lines.
    void note(const std::string& text);

private:
    int total_, parallel_, done_ = 0, measured_ = 0;
    double measured_wall_s_ = 0;
    std::chrono::steady_clock::time_point start_;
    std::ostream& out_;
};

// "1:05", "12:03:09"
std::string format_clock(double seconds);

}  // namespace sweetspot
