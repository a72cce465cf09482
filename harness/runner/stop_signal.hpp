#pragma once
// SIGINT and SIGTERM stop a sweep: the runner kills the running cells and stores nothing more. The
// flag the signal handler sets is the runner's only process-wide mutable state: a C signal handler
// can do nothing else.
#include <atomic>
#include <csignal>

namespace sweetspot {

// Installs the handlers for its lifetime (one sweep) and restores the previous ones.
class StopSignals {
public:
    StopSignals();
    ~StopSignals();
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;

private:
    struct sigaction old_int_ {}, old_term_ {};
};

// Set by the handlers, or by the runner itself when the sweep must stop (a database it cannot
// write): what run_child watches to kill a running cell.
std::atomic<bool>& stop_requested();

}  // namespace sweetspot
