#pragma once
// What every family's GPU forward shares (gpu_forward.hpp's machinery): the shape, the activation
// buffers carved from one allocation as activation_layout says, cuBLAS, the stream, the launch
// count, and the walk over units that acquires each from the LayerSource, enqueues its kernels
// (or replays its CUDA graph) and releases it. A family derives from it and says what each unit
// computes (gpt2/gpt2_gpu_forward.cu, llama/llama_gpu_forward.cu); gpu_family_forward.cu makes the
// model's.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/gemm.hpp"
#include "kernels/compute/gpu_dtype.hpp"
#include "kernels/compute/gpu_forward.hpp"
#include "kernels/compute/nvtx.hpp"
#include "kernels/compute/sequence_spans.hpp"
#include "kernels/compute/unit_graphs.hpp"
#include "kernels/model/activation_layout.hpp"

namespace sweetspot {

struct GpuForwardContext {
    ModelConfig model;
    WeightLayout layout;
    DType dtype;
    BatchShape shape;
    cudaStream_t stream;
    GpuForwardOptions options;  // its dropout already for_shape(stride, max_positions)

    // All activations live in one allocation (cudaMalloc, or managed memory when asked), carved
    // into the buffers below as activation_layout says; elements are of the dtype except tokens
    // and positions (int32) and frequencies (fp32).
    DeviceMemory arena;  // cudaFree frees managed memory too
    std::int64_t arena_bytes = 0;
    void* x = nullptr;       // residual stream
    void* ln = nullptr;      // the normalised stream
    void* qkv = nullptr;     // q | k | v heads per row (qkv_heads.hpp)
    void* scores = nullptr;  // [B, H, T, T] attention scores, then probabilities in place
    void* att = nullptr;     // attention output, head h at columns h·hd
    void* fc = nullptr;      // the MLP's inputs
    void* y = nullptr;       // a sub-layer's output before the residual add
    void* logits = nullptr;  // [rows, V]
    std::int32_t* tokens = nullptr;     // [rows]
    std::int32_t* positions = nullptr;  // [rows], rotary families and ragged batches: the shape's
    float* frequencies = nullptr;       // [hd / 2], rotary families
    // Where each sequence lies, for the flash attention: rectangular, or ragged with its offsets
    // and lengths in the arena.
    SequenceSpans spans;
    bool tokens_set = false;

    std::unique_ptr<Gemm> gemm;
    int launches = 0;  // kernels and GEMMs enqueued by the forward in progress
    // What one unit's kernels leave for the next unit's, which a replayed graph cannot compute
    // (UnitGraphs::HostEffect): GPT-2's layer whose MLP output waits for its residual add
    // (residual_ln), or -1.
    int carried = -1;
    std::optional<UnitGraphs> graphs;  // with options.unit_graphs

    // Checks the shape and allocates; throws std::invalid_argument (before any CUDA call) for a
    // shape or option the forward cannot take.
    GpuForwardContext(const ModelConfig& model, const WeightLayout& layout, DType dtype, const BatchShape& shape,
                      cudaStream_t stream, const GpuForwardOptions& options);
    virtual ~GpuForwardContext() = default;
    GpuForwardContext(const GpuForwardContext&) = delete;
    GpuForwardContext& operator=(const GpuForwardContext&) = delete;

    // Enqueues one forward in the cell's dtype: the family's units, in order.
    virtual void run(LayerSource& weights) = 0;

    std::int64_t rows() const { return shape.rows(); }
    bool fused(Fusion f) const { return options.variant.has(f); }

    // compute(weights of `unit`, its UnitLayout) between acquire and release, inside NVTX ranges that
    // show where the host spends its time: the unit's (WeightLayout::unit_name), and in it waiting
    // for the backend, enqueuing kernels, handing back.
    template <class T, class Compute>
    void with_unit(LayerSource& weights, int unit, const Compute& compute) {
        const NvtxRange range(layout.unit_name(unit));
        const T* p = nullptr;
        {
            const NvtxRange phase("acquire");
            p = static_cast<const T*>(weights.acquire(unit));
        }
        if (p == nullptr)
            throw std::runtime_error("GpuForward: the layer source returned no pointer for unit " + std::to_string(unit) + ".");
        {
            const NvtxRange phase("compute");
            const UnitLayout& u = layout.units[static_cast<std::size_t>(unit)];
            if (graphs) {
                // A replayed graph enqueues nothing from the host code, so what that code leaves
                // for the next unit comes from the capture.
                const int before = launches;
                const auto effect = graphs->run(unit, p, stream, [&] {
                    compute(p, u);
                    return UnitGraphs::HostEffect{launches - before, carried};
                });
                launches = before + effect.launches;
                carried = effect.state_after;
            } else {
                compute(p, u);
            }
        }
        const NvtxRange phase("release");
        weights.release(unit);
    }
};

// The forward of the model's family (gpu_family_forward.cu).
std::unique_ptr<GpuForwardContext> make_gpu_forward(const ModelConfig& model, const WeightLayout& layout, DType dtype,
                                                    const BatchShape& shape, cudaStream_t stream,
                                                    const GpuForwardOptions& options);

}  // namespace sweetspot
