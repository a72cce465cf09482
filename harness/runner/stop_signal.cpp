#include "harness/runner/stop_signal.hpp"

#include <csignal>

namespace sweetspot {
namespace {

std::atomic<bool> g_stop_requested{false};

extern "C" void request_stop(int) { g_stop_requested.store(true); }

}  // namespace

StopSignals::StopSignals() {
    g_stop_requested.store(false);
    struct sigaction sa {};
    sa.sa_handler = request_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
}

StopSignals::~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
}

std::atomic<bool>& stop_requested() { return g_stop_requested; }

}  // namespace sweetspot
