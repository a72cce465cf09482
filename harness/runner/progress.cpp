#include "harness/runner/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sweetspot {
namespace {

// Erases the line the cursor is on (a terminal's carriage return and "erase in line").
constexpr const char* kEraseLine = "\r\033[K";

// What an 80-column terminal shows when it does not say its width.
constexpr int kDefaultColumns = 80;

}  // namespace

std::string format_clock(double seconds) {
    const auto s = static_cast<long>(std::llround(std::max(0.0, seconds)));
    char buf[32];
    if (s >= 3600)
        std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
    return buf;
}

std::optional<int> terminal_columns(int fd) {
    if (!isatty(fd)) return std::nullopt;
    winsize size{};
    if (ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
    return kDefaultColumns;
}

std::optional<double> remaining_seconds(double measured_cost, double measured_s, double remaining_cost, int parallel) {
    if (measured_cost <= 0) return std::nullopt;
    return measured_s / measured_cost * std::max(0.0, remaining_cost) / std::max(1, parallel);
}

Progress::Progress(int total, double total_cost, std::ostream& out, int parallel, ProgressStyle style)
    : total_(total),
      parallel_(parallel),
      remaining_cost_(total_cost),
      start_(std::chrono::steady_clock::now()),
      last_done_(start_),
      out_(out),
      style_(style) {}

double Progress::seconds_since(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string Progress::clocks() const {
    const std::string eta = eta_s_ ? format_clock(*eta_s_ - seconds_since(last_done_)) : "?";
    return "[" + format_clock(seconds_since(start_)) + " elapsed, ETA " + eta + "]";
}

void Progress::cell_done(const std::string& label, const std::string& status, std::optional<double> median_ms,
                         const std::string& note, double cost, std::optional<double> wall_s) {
    ++done_;
    remaining_cost_ = done_ >= total_ ? 0 : remaining_cost_ - cost;
    if (wall_s) {
        measured_cost_ += cost;
        measured_s_ += *wall_s;
    }
    last_done_ = std::chrono::steady_clock::now();
    if (const auto eta = remaining_seconds(measured_cost_, measured_s_, remaining_cost_, parallel_)) eta_s_ = eta;

    const int width = static_cast<int>(std::to_string(total_).size());
    char head[64];
    std::snprintf(head, sizeof head, "[%*d/%d] %-8s", width, done_, total_, status.c_str());
    char latency[32] = "";
    if (median_ms) std::snprintf(latency, sizeof latency, "%10.3f ms  ", *median_ms);
    else std::snprintf(latency, sizeof latency, "%15s", "");
    erase_live_line();
    out_ << head << latency << label;
    if (!note.empty()) out_ << "  (" << note << ")";
    out_ << "  " << clocks() << "\n";
    draw_live_line();
    out_ << std::flush;
}

void Progress::cell_started(int worker, const std::string& label) {
    running_[worker] = {label, "starting", std::chrono::steady_clock::now()};
    draw_live_line();
}

void Progress::cell_status(int worker, const std::string& status) {
    const auto it = running_.find(worker);
    if (it == running_.end()) return;
    it->second.status = status;
    draw_live_line();
}

void Progress::cell_ended(int worker) {
    running_.erase(worker);
    draw_live_line();
}

std::string Progress::running_line(bool with_clocks) const {
    if (running_.empty()) return "";
    std::string line = "running  ";
    for (auto it = running_.begin(); it != running_.end(); ++it) {
        if (it != running_.begin()) line += "; ";
        line += it->second.label + ": " + it->second.status;
        if (with_clocks) line += " (" + format_clock(seconds_since(it->second.since)) + ")";
    }
    return with_clocks ? line + "  " + clocks() : line;
}

void Progress::erase_live_line() {
    if (live_drawn_) out_ << kEraseLine;
    live_drawn_ = false;
}

void Progress::draw_live_line() {
    if (!style_.columns) return;
    erase_live_line();
    std::string line = running_line(true);
    if (line.empty()) return;
    // One character short of the width: a full line would wrap, and then the carriage return
    // would redraw only its last row.
    line.resize(std::min<std::size_t>(line.size(), static_cast<std::size_t>(std::max(1, *style_.columns - 1))));
    out_ << line << std::flush;
    live_drawn_ = true;
}

void Progress::tick() {
    if (style_.columns) {
        draw_live_line();
        return;
    }
    const std::string now = running_line(false);
    if (now.empty() || now == last_logged_) return;
    out_ << running_line(true) << "\n" << std::flush;
    last_logged_ = now;
}

double Progress::tick_period_s() const { return style_.columns ? 1.0 : style_.every_s; }

void Progress::note(const std::string& text) {
    erase_live_line();
    out_ << "sweetspot: " << text << "\n";
    draw_live_line();
    out_ << std::flush;
}

}  // namespace sweetspot
