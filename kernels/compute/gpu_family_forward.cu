// The GPU forward of each model family (gpu_forward_context.hpp): the one place on the GPU side
// that maps ModelFamily to its forward, as family_compute.cpp does for the host's.
#include "kernels/compute/gpu_forward_context.hpp"

#include <stdexcept>

#include "kernels/compute/gpt2/gpt2_gpu_forward.hpp"
#include "kernels/compute/llama/llama_gpu_forward.hpp"

namespace sweetspot {

std::unique_ptr<GpuForwardContext> make_gpu_forward(const ModelConfig& model, const WeightLayout& layout, DType dtype,
                                                    const BatchShape& shape, cudaStream_t stream,
                                                    const GpuForwardOptions& options) {
    switch (model.family) {
        case ModelFamily::gpt2: return gpt2::make_gpu_forward(model, layout, dtype, shape, stream, options);
        case ModelFamily::llama: return llama::make_gpu_forward(model, layout, dtype, shape, stream, options);
    }
    throw std::logic_error("make_gpu_forward: unknown model family");
}

}  // namespace sweetspot
