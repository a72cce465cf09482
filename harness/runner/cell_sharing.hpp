#pragma once
// Which cells of a sweep may run at the same time, one per GPU (`run --gpus`):
//   - a host cell times the CPU, which every cell uses (the reference check, the host side of
//     the copies): it runs alone;
//   - a cell that streams weights over the host link measures that link, which the GPUs of a
//     node share (the host's memory bandwidth, and often a PCIe switch): it runs beside no other
//     such cell, unless the user says the GPUs' links are independent (`--share-link`);
//   - any other GPU cell (all weights resident) runs beside anything but a host cell, and so does
//     a cell that fails on purpose (debug_fault), which measures nothing.
#include "harness/matrix/cell.hpp"

namespace sweetspot {

enum class Sharing { alone, link, beside_any };

Sharing sharing_of(const CellParams& cell, bool share_link);

// The cells running now, and whether one more may start.
class RunningCells {
public:
    bool can_start(Sharing s) const;
    void started(Sharing s);
    void finished(Sharing s);
    int running() const { return running_; }

private:
    int running_ = 0, alone_ = 0, link_ = 0;
};

}  // namespace sweetspot
