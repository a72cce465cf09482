#include "kernels/compute/unit_graphs.hpp"

#include <stdexcept>
#include <string>

#include "kernels/compute/cuda_check.hpp"

namespace sweetspot {
namespace {

// A captured graph, only until it is instantiated.
struct CapturedGraph {
    cudaGraph_t graph = nullptr;
    ~CapturedGraph() {
        if (graph) (void)cudaGraphDestroy(graph);
    }
};

// Ends a capture that `enqueue` left by throwing, so the stream is usable again; the error being
// thrown is the one worth reporting, so this one's own is dropped.
void abandon_capture(cudaStream_t stream) {
    CapturedGraph partial;
    (void)cudaStreamEndCapture(stream, &partial.graph);
    (void)cudaGetLastError();
}

}  // namespace

UnitGraphs::HostEffect UnitGraphs::run(int unit, const void* weights, cudaStream_t stream,
                                       const std::function<HostEffect()>& enqueue) {
    if (unit < 0 || unit >= static_cast<int>(graphs_.size()))
        throw std::out_of_range("UnitGraphs: no unit " + std::to_string(unit));
    Entry& e = graphs_[static_cast<std::size_t>(unit)];
    if (!e.exec.get() || e.weights != weights) {
        // Thread-local capture: the backends' threads and CUPTI's may make calls that a global
        // capture would refuse while this thread captures.
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        HostEffect effect;
        try {
            effect = enqueue();
        } catch (...) {
            abandon_capture(stream);
            throw;
        }
        CapturedGraph captured;
        CUDA_CHECK(cudaStreamEndCapture(stream, &captured.graph));
        cudaGraphExec_t exec = nullptr;
        CUDA_CHECK(cudaGraphInstantiate(&exec, captured.graph, 0));
        e.exec = CudaGraphExec(exec);
        e.weights = weights;
        e.effect = effect;
        ++captures_;
    }
    CUDA_CHECK(cudaGraphLaunch(e.exec.get(), stream));
    return e.effect;
}

}  // namespace sweetspot
