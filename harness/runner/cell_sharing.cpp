#include "harness/runner/cell_sharing.hpp"

#include "backends/backend_registry.hpp"

namespace sweetspot {

Sharing sharing_of(const CellParams& cell, bool share_link) {
    if (cell.debug_fault != DebugFault::none) return Sharing::beside_any;
    const BackendTraits& backend = backend_traits(cell.backend);
    if (!backend.needs_gpu) return Sharing::alone;
    // A budget below the weights makes a streaming backend move weights every forward.
    const bool streams = backend.runs_under_budget && cell.budget_bytes() < cell.weight_bytes();
    return streams && !share_link ? Sharing::link : Sharing::beside_any;
}

bool RunningCells::can_start(Sharing s) const {
    if (alone_ > 0) return false;
    switch (s) {
        case Sharing::alone: return running_ == 0;
        case Sharing::link: return link_ == 0;
        case Sharing::beside_any: return true;
    }
    return false;
}

void RunningCells::started(Sharing s, const std::string& reference) {
    ++running_;
    if (s == Sharing::alone) ++alone_;
    if (s == Sharing::link) ++link_;
    if (!reference.empty()) computing_.insert(reference);
}

void RunningCells::finished(Sharing s, const std::string& reference) {
    --running_;
    if (s == Sharing::alone) --alone_;
    if (s == Sharing::link) --link_;
    if (const auto at = computing_.find(reference); !reference.empty() && at != computing_.end()) computing_.erase(at);
}

}  // namespace sweetspot
