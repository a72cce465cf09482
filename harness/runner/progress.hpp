#pragma once
// A sweep's progress: a line per cell done (position, status, latency, elapsed, ETA), and what the
// running cells say they are doing (their phase or iteration): redrawn in place on a terminal, a
// line at most every few seconds in a log (a file, Slurm's output).
#include <chrono>
#include <map>
#include <optional>
#include <ostream>
#include <string>

namespace sweetspot {

struct ProgressStyle {
    // A terminal this many columns wide: the running cells' line is redrawn in place, cut to fit.
    // Unset: a log, where that line is printed at most every `every_s`, and only when what the
    // running cells say has changed since it was last printed.
    std::optional<int> columns;
    double every_s = 30;
    static constexpr double min_every_s = 0.1;  // what `run --progress-every` accepts
};

// The width of the terminal on `fd`, or none where `fd` is not a terminal.
std::optional<int> terminal_columns(int fd);

// Seconds the cells left will take: their expected cost `remaining_cost` at the seconds per unit
// of cost the measured cells took (`measured_s` for `measured_cost` in all), spread over
// `parallel` workers; none before a cell with a cost was measured.
std::optional<double> remaining_seconds(double measured_cost, double measured_s, double remaining_cost, int parallel);

class Progress {
public:
    // `total_cost`: the expected cost of all `total` cells (shard_cost), by which the ETA weighs
    // the cells left; `parallel`: cells running at once.
    Progress(int total, double total_cost, std::ostream& out, int parallel = 1, ProgressStyle style = {});
    // A cell done, of expected cost `cost`; `wall_s` is what it took, none for a cell that needed
    // no process (resumed or skipped), which then does not calibrate the ETA.
    void cell_done(const std::string& label, const std::string& status, std::optional<double> median_ms,
                   const std::string& note, double cost, std::optional<double> wall_s);
    // The cell whose process runs on `worker`: started, what it says it is doing, ended.
    void cell_started(int worker, const std::string& label);
    void cell_status(int worker, const std::string& status);
    void cell_ended(int worker);
    // To be called every tick_period_s(): on a terminal redraws the running cells' line (their
    // clocks move on); in a log prints it if it has changed.
    void tick();
    double tick_period_s() const;
    // A line about the sweep itself (waiting for a lock), between the cells' lines.
    void note(const std::string& text);

private:
    struct Running {
        std::string label, status;
        std::chrono::steady_clock::time_point since;
    };
    double seconds_since(std::chrono::steady_clock::time_point t) const;
    std::string clocks() const;                   // "[1:05 elapsed, ETA 2:00]"
    std::string running_line(bool with_clocks) const;
    void erase_live_line();
    void draw_live_line();

    int total_, parallel_, done_ = 0;
    double remaining_cost_, measured_cost_ = 0, measured_s_ = 0;
    std::optional<double> eta_s_;                 // as of the last cell done
    std::chrono::steady_clock::time_point start_, last_done_;
    std::ostream& out_;
    ProgressStyle style_;
    std::map<int, Running> running_;              // by worker
    bool live_drawn_ = false;                     // the terminal shows the running cells' line
    std::string last_logged_;                     // the running cells' line as last printed in a log
};

// "1:05", "12:03:09"
std::string format_clock(double seconds);

}  // namespace sweetspot
