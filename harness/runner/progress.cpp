#include "harness/runner/progress.hpp"

#include <cmath>
#include <cstdio>

namespace sweetspot {

std::string format_clock(double seconds) {
    const auto s = static_cast<long>(std::llround(std::max(0.0, seconds)));
    char buf[32];
    if (s >= 3600)
        std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
    return buf;
}

Progress::Progress(int total, std::ostream& out, int parallel)
    : total_(total), parallel_(parallel), start_(std::chrono::steady_clock::now()), out_(out) {}

void Progress::cell_done(const std::string& label, const std::string& status, std::optional<double> median_ms,
                         const std::string& note, bool measured, double cell_wall_s) {
    ++done_;
    if (measured) {
        ++measured_;
        measured_wall_s_ += cell_wall_s;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double per_cell = measured_ > 0 ? measured_wall_s_ / measured_ : 0;
    const std::string eta = measured_ > 0 ? format_clock(per_cell * (total_ - done_) / parallel_) : "?";

    const int width = static_cast<int>(std::to_string(total_).size());
    char head[64];
    std::snprintf(head, sizeof head, "[%*d/%d] %-8s", width, done_, total_, status.c_str());
    char latency[32] = "";
    if (median_ms) std::snprintf(latency, sizeof latency, "%10.3f ms  ", *median_ms);
    else std::snprintf(latency, sizeof latency, "%15s", "");
    out_ << head << latency << label;
    if (!note.empty()) out_ << "  (" << note << ")";
    out_ << "  [" << format_clock(elapsed) << " elapsed, ETA " << eta << "]\n" << std::flush;
}

void Progress::note(const std::string& text) { out_ << "sweetspot: " << text << "\n" << std::flush; }

}  // namespace sweetspot
