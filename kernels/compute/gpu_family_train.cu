// The GPU training step's share of each model family (gpu_train_context.hpp): the one place on the
// GPU side that maps ModelFamily to it, as gpu_family_forward.cu does for the forward.
#include <stdexcept>

#include "kernels/compute/gpt2/gpt2_gpu_train.hpp"
#include "kernels/compute/gpu_train_context.hpp"
#include "kernels/compute/llama/llama_gpu_train.hpp"

namespace sweetspot {

std::unique_ptr<GpuTrainContext> make_gpu_train(const ModelConfig& model, const WeightLayout& layout, DType dtype,
                                                const BatchShape& shape, cudaStream_t stream,
                                                const GpuTrainOptions& options) {
    switch (model.family) {
        case ModelFamily::gpt2: return gpt2::make_gpu_train(model, layout, dtype, shape, stream, options);
        case ModelFamily::llama: return llama::make_gpu_train(model, layout, dtype, shape, stream, options);
    }
    throw std::logic_error("make_gpu_train: unknown model family");
}

}  // namespace sweetspot
