#pragma once
// CUPTI activity collection for a cell's traced iterations: kernels (CONCURRENT_KERNEL, never
// KERNEL, which serializes them), copies, every Unified Memory counter kind, NVTX markers and
// CUPTI's own overhead. Only one subscriber may use CUPTI in a process; `--collector none` lets
// a user run a cell under Nsight Systems instead.
#include "harness/collect/events.hpp"

namespace sweetspot {

// Points NVTX at libcupti (NVTX_INJECTION64_PATH) so that NVTX ranges reach CUPTI's marker
// activity. NVTX reads the variable at its first call, so this must run before any range is
// opened; a value the user set (e.g. Nsight Systems') is left alone.
void prepare_nvtx_injection();

class CuptiCollector {
public:
    // Registers the buffer callbacks and configures the UM counters. Create it before the cell
    // allocates managed memory: the counters do not see allocations made before they were
    // configured. The CUDA runtime must be initialized already (CUPTI_ERROR_NOT_READY otherwise).
    CuptiCollector();
    // Enables the activity kinds: collection runs from here to finish().
    void start();
    // Disables collection if finish() was not called (e.g. the cell failed).
    ~CuptiCollector();
    CuptiCollector(const CuptiCollector&) = delete;
    CuptiCollector& operator=(const CuptiCollector&) = delete;

    // Waits for the device, flushes every buffer, disables collection and returns the events.
    CellEvents finish();

private:
    void disable() noexcept;
    bool um_configured_ = false;
    bool um_enabled_ = false;
    bool active_ = true;
    std::string um_note_;
};

}  // namespace sweetspot
