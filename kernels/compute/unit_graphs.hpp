#pragma once
// The GPU forward's kernels of each weight unit, captured once as a CUDA graph and then launched
// with one call per unit (the `launch = "graphs"` setting of a cell). A GPT-2 1.5B block enqueues
// about fifteen kernels and GEMMs; launched one by one they take the host longer than the GPU
// takes to run them at small batch, and the host time adds up wherever the host cannot run ahead
// of the GPU (a backend whose fetch holds the calling thread, such as a read-mostly
// cudaMemPrefetchAsync on some drivers). Activations, workspace and dropout seed are fixed for
// a GpuForward; the weights are the one pointer that may differ between forwards, so a unit's
// graph is kept with the pointer it was captured for and captured again when that changes.
#include <cuda_runtime_api.h>

#include <functional>
#include <utility>
#include <vector>

namespace sweetspot {

// An instantiated graph; destruction ignores errors (see cuda_resources.hpp).
class CudaGraphExec {
public:
    CudaGraphExec() = default;
    explicit CudaGraphExec(cudaGraphExec_t exec) : exec_(exec) {}
    ~CudaGraphExec() {
        if (exec_) (void)cudaGraphExecDestroy(exec_);
    }
    CudaGraphExec(CudaGraphExec&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
    CudaGraphExec& operator=(CudaGraphExec&& other) noexcept {
        std::swap(exec_, other.exec_);
        return *this;
    }
    CudaGraphExec(const CudaGraphExec&) = delete;
    CudaGraphExec& operator=(const CudaGraphExec&) = delete;

    cudaGraphExec_t get() const { return exec_; }

private:
    cudaGraphExec_t exec_ = nullptr;
};

class UnitGraphs {
public:
    // What enqueuing a unit's work left behind on the host besides the work: the forward's count
    // of launches and the state it hands to the next unit (an opaque int for this class).
    struct HostEffect {
        int launches = 0;
        int state_after = 0;
    };

    explicit UnitGraphs(int units) : graphs_(static_cast<std::size_t>(units)) {}

    // Puts unit `unit`'s work, reading weights at `weights`, on `stream`: the first time (and
    // whenever `weights` moved) `enqueue` runs under stream capture and its graph is kept; then
    // the graph is launched. Returns the host effect of `enqueue`, replayed from the capture on
    // later calls. Throws what a CUDA call reports (a call that capture does not allow).
    HostEffect run(int unit, const void* weights, cudaStream_t stream, const std::function<HostEffect()>& enqueue);

    // Captures so far (one per unit per weights pointer), so tests can tell replay from capture.
    int captures() const { return captures_; }

private:
    struct Entry {
        const void* weights = nullptr;
        CudaGraphExec exec;
        HostEffect effect;
    };
    std::vector<Entry> graphs_;
    int captures_ = 0;
};

}  // namespace sweetspot
