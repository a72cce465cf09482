#pragma once
// Which cells of a sweep may run at the same time, one per GPU (`run --gpus`):
//   - a host cell times the CPU, which every cell uses (the reference check, the host side of
//     the copies): it runs alone;
//   - a cell that streams weights over the host link measures that link, which the GPUs of a
//     node share (the host's memory bandwidth, and often a PCIe switch): it runs beside no other
//     such cell, unless the user says the GPUs' links are independent (`--share-link`);
//   - any other GPU cell (all weights resident) runs beside anything but a host cell, and so does
//     a cell that fails on purpose (debug_fault), which measures nothing.
// A GPU cell whose workload's host reference logits another running cell is computing waits for
// that cell and reuses what it stores, rather than computing the same reference beside it: the
// two computations share the host's cores, and each takes longer than one alone
// (docs/benchmarks-history.md, "The two-GPU sweep").
#include <set>
#include <string>

#include "harness/matrix/cell.hpp"

namespace sweetspot {

enum class Sharing { alone, link, beside_any };

Sharing sharing_of(const CellParams& cell, bool share_link);

// The cells running now, and whether one more may start.
class RunningCells {
public:
    bool can_start(Sharing s) const;
    // `reference`: the key of the host reference the cell computes and stores, if it does.
    void started(Sharing s, const std::string& reference = {});
    void finished(Sharing s, const std::string& reference = {});
    int running() const { return running_; }
    // Whether a running cell is computing the reference with this key.
    bool computing(const std::string& reference) const { return computing_.count(reference) > 0; }

private:
    int running_ = 0, alone_ = 0, link_ = 0;
    std::multiset<std::string> computing_;
};

}  // namespace sweetspot
