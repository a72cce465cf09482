#pragma once
// A model's forward on the GPU in fp32, fp16 or bf16, its family's (gpu_forward_context.hpp), built
// from the kernels of the op families (embedding.cuh, layernorm.cuh, ...) and cuBLAS: one kernel per
// op (`baseline`), or with a variant's fusions in their place. Weights come from a LayerSource (a backend) as device-accessible pointers in the
// cell's dtype, laid out as WeightLayout says; the forward never knows where they live.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/compute/dropout.hpp"
#include "kernels/compute/flash_attention_limits.hpp"
#include "kernels/compute/fp32_gemm.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/variant.hpp"
#include "kernels/model/layer_source.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

struct GpuForwardContext;

struct GpuForwardOptions {
    Fp32Gemm fp32_gemm = Fp32Gemm::exact;  // how fp32 GEMMs compute (fp32_gemm.hpp)
    bool managed_activations = false;  // activations in managed memory, as cuda-uvm-gpt2's PyTorch had them
    bool allow_oversubscription = false;
    Variant variant;  // which fusions replace baseline kernels
    Dropout dropout;  // the family's dropouts, with the masks every forward draws (dropout.hpp)
    bool unit_graphs = false;  // each unit's kernels launched as one CUDA graph (unit_graphs.hpp)
};

// Over a batch of any BatchShape, as CpuForward (cpu_forward.hpp): each sequence attends within its
// own rows from position 0; a padded batch's padding rows compute finite values that mean nothing
// (their attention output is zero). A ragged batch needs gpu_forward_runs_ragged and no dropout
// (its masks are numbered by rows of the stride, which a ragged batch's rows do not follow).
class GpuForward {
public:
    // Allocates activations, the cuBLAS handle and its workspace, and uploads what the shape
    // says of each row (positions, each sequence's rows) once; everything is enqueued on `stream`
    // (owned by the caller).
    GpuForward(const ModelConfig& model, const WeightLayout& layout, DType dtype, const BatchShape& shape,
               cudaStream_t stream, const GpuForwardOptions& options);
    ~GpuForward();
    GpuForward(const GpuForward&) = delete;
    GpuForward& operator=(const GpuForward&) = delete;

    // Uploads token ids, one per row of the shape (synchronously; once per cell).
    void set_tokens(std::span<const std::int32_t> tokens);
    // Enqueues one forward on the stream and returns without synchronizing. Units are acquired
    // in order embedding, blocks, head, each released as soon as its kernels are enqueued.
    void run(LayerSource& weights);
    // Synchronizes the stream and returns the logits [rows, vocab] as fp32 (the shape's rows): all
    // of them, or the first `rows` rows, which is all a check of a prefix needs.
    std::vector<float> logits_to_host();
    std::vector<float> logits_to_host(std::int64_t rows);
    // Counts the logits that are NaN or infinite, over the whole output, on the GPU (after the
    // forward in flight), and waits for the count: nothing the size of the logits reaches the host.
    std::int64_t count_nonfinite_logits();

    std::int64_t activation_bytes() const;  // activations, scores and logits
    std::int64_t workspace_bytes() const;   // cuBLAS workspace
    // Kernels and GEMMs the last forward enqueued (what a fusion saves in launches).
    int launches_per_forward() const;
    // Units captured as CUDA graphs so far (unit_graphs): once each, again only when a unit's
    // weights moved; 0 without unit_graphs.
    int graph_captures() const;

private:
    std::unique_ptr<GpuForwardContext> impl_;
};

}  // namespace sweetspot
