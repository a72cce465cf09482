#pragma once
// A training step on the GPU in fp32, fp16 or bf16, of either model family (each unit's forward
// and backward are the family's: gpu_train_context.hpp): the counterpart of CpuTrainStep
// (cpu_train_step.hpp), in the same three phases. The forward keeps each block's activations (in
// the dtype) but those the options' Recompute leaves to the backward to compute again, and ends
// with the fused classifier, which leaves the logits' gradient in their place; the backward
// writes every unit's gradient (in the dtype) through the LayerSource while the unit is held and
// enqueues the partial sums of its squares; the update reads the global norm (its one host
// synchronization), clips, and runs AdamW on each tensor through acquire_update.
// Units are accessed in UnitSchedule::training's order: 0 .. n−1, n−1 .. 0, then 0 .. n−1 updated.
//
// fp16 gradients are scaled by a dynamic loss scale (the gradient of the loss times the scale is
// what fits fp16's range): it starts at 2^16, halves and skips the update when the gradient norm
// is not finite, and doubles after kLossScaleWindow updates in a row. fp32 and bf16 use 1; a
// non-finite norm skips their update too (skipped_steps), rather than writing NaN into the weights.
// A skipped update still acquires and releases every unit, so the schedule never changes.
//
// Where the source keeps the optimizer's state in host memory (UnitUpdate::on_host: ZeRO-Offload's
// placement), the update runs on the host's cores (host_adamw.hpp) with the same clipping, unit by
// unit: the unit's gradient copied to page-locked memory on a copy stream, AdamW on it there, the
// new weights in the dtype copied back on another; unit u + 1's gradient comes down while unit u
// is updated, and unit u's weights go up while u + 1 is. The compute stream waits for the last
// copy up, so the next forward reads the new weights; or, overlapped (update's `overlapped`), the
// update runs on a thread of its own beside the next forward, which waits for each unit's new
// weights (item_progress.hpp) before reading it. Without clipping (max_grad_norm 0) in fp32 and
// bf16 the update needs no norm, and once an update has run on the host an overlapped backward
// (backward's `overlap_update`) starts it itself: from the top unit down while the GPU makes the
// gradients, each unit once its own gradient is whole, then from unit 0 up beside the next forward.
// A non-finite gradient is then applied, not skipped (nothing waits for the norm); grad_norm and
// the loss still show it.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>

#include "kernels/compute/cpu_train_step.hpp"
#include "kernels/compute/dropout.hpp"
#include "kernels/compute/fp32_gemm.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/layer_source.hpp"
#include "kernels/model/recompute.hpp"
#include "kernels/model/variant.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

struct GpuTrainOptions {
    Fp32Gemm fp32_gemm = Fp32Gemm::exact;  // how fp32 GEMMs compute (fp32_gemm.hpp)
    // flash_attention: FlashAttention-2's forward (keeping each row's logsumexp) and backward;
    // otherwise the attention is materialised and its probabilities recomputed in the backward.
    // GPT-2's mlp_epilogue and proj_epilogue: the biases, the GELU and its backward, residual adds
    // in the GEMMs' epilogues. inplace_ln: the LayerNorms keep each row's rstd and their
    // backwards read their outputs, not the residual stream (recompute.hpp); after a backward
    // that met a LayerNorm weight too small to divide by (layernorm_recovery.hpp), grad_norm and
    // update throw, naming the LayerNorm, and no weight changes. inplace_gelu: the GELU's output
    // and a branch bit per element kept for its backward, not its input (gelu_from_output.hpp).
    // The fusions outside the family's gpu_training_fusions (family_compute.hpp: GPT-2's are
    // kTrainingFusions, LLaMA's flash_attention) are refused, and so is dropout for a family
    // without it.
    Variant variant;
    Dropout dropout;  // the family's dropouts (GPT-2's), the masks of every other path (dropout.hpp)
    // Which activations the backward computes again rather than the forward keeping them
    // (recompute.hpp); every setting gives the same gradients.
    Recompute recompute = Recompute::gelu;
    TrainSettings settings;
};

// Where the host update's thread spent its time (ms): from taking its first unit to letting go of
// its last; within that, AdamW's passes over the units and the waits for their gradients (the
// backward's, the copies down) and staging slots. The span less both is the thread's own upkeep.
// `overlapped`: the update ran beside the GPU's work (the backward, the next forward), not after it.
struct HostUpdateTimes {
    double span_ms = 0.0, adamw_ms = 0.0, wait_ms = 0.0;
    bool overlapped = false;
};

class GpuTrainStep {
public:
    static constexpr float kInitialLossScale = 65536.0f;  // fp16 only
    static constexpr int kLossScaleWindow = 2000;

    // Allocates every buffer of the step once (activation_bytes) and the cuBLAS workspace;
    // everything is enqueued on `stream` (owned by the caller).
    // A ragged shape (padded or packed, batch_shape.hpp) trains with the flash_attention fusion and
    // without dropout: the loss is the mean over its real tokens, a padding row's target ignored and
    // its gradient zero, as CpuTrainStep's.
    GpuTrainStep(const ModelConfig& model, const WeightLayout& layout, DType dtype, const BatchShape& shape,
                 cudaStream_t stream, const GpuTrainOptions& options);
    ~GpuTrainStep();
    GpuTrainStep(const GpuTrainStep&) = delete;
    GpuTrainStep& operator=(const GpuTrainStep&) = delete;

    // Uploads the token and target ids, one per row of the shape (checked < vocab; a padding row's
    // are ignored), synchronously.
    void set_batch(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets);

    // The phases, in order, each only enqueued on the stream (update waits for the norm).
    // `overlapped`, where the source keeps the optimizer's state on the host: the host update runs
    // on a thread of its own, unit by unit, and update returns at once; the next forward waits for
    // each unit's new weights before acquiring it (the source's look-ahead too, through
    // LayerSource::follow_update), so the update of the later units overlaps the forward of the
    // earlier ones, and the next backward waits for the update's end. finish_update() waits for it
    // where the caller reads the state in between (the gradients, the master weights); `weights`
    // must outlive it (the next forward, backward or update, finish_update and the destructor
    // join its thread). The same arithmetic either way: the same bits.
    // `overlap_update`, where the update may start early (above): the backward starts the
    // overlapped update on its thread, and the update that follows only ends it if not overlapped
    // itself. Elsewhere the flag changes nothing.
    void forward(LayerSource& weights);
    void backward(LayerSource& weights, bool overlap_update = false);
    void update(LayerSource& weights, bool overlapped = false);
    void finish_update();

    // The last forward's mean loss and the last backward's global gradient norm (of the unscaled
    // gradient, before clipping); each waits for the stream.
    double loss();
    double grad_norm();
    // The scale the next backward's gradients carry (1 outside fp16), and updates made and
    // skipped (a non-finite fp16 gradient).
    float loss_scale() const;
    int steps() const;
    int skipped_steps() const;
    // What the last finished update moved across the host link itself (an overlapped one's once
    // the next forward, or finish_update, has waited for it): the gradients to the host and the
    // new weights to the device, where the source keeps the optimizer's state on the host and the
    // unit's weights on the device; none where it keeps it on the device, for a streamed unit
    // (UnitUpdate::streamed: the backend moved it, Backend::link_bytes_since_reset), nor for a skipped
    // update.
    LinkBytes update_link_bytes() const;
    // The last finished update's times on the host, when it ran there (zero otherwise), as
    // update_link_bytes: an overlapped one's once waited for.
    HostUpdateTimes host_update_times() const;

    // Device bytes this object allocates besides the cuBLAS workspace: kept activations, the
    // logits, scratch, ids and the norm's partials. activation_bytes_for is the same number
    // without a device (the memory estimator's term), save for a shape of a handful of rows,
    // where the embedding backward's sort storage outgrows the scratch it reuses and is allocated
    // apart (some KiB).
    std::int64_t activation_bytes() const;
    static std::int64_t activation_bytes_for(const ModelConfig& model, DType dtype, const BatchShape& shape,
                                             const Variant& variant, Recompute recompute);
    std::int64_t workspace_bytes() const;
    // The device bytes every forward writes before anything reads them (the kept activations and
    // the logits): between a finished step and the next forward a caller may use them for its own
    // ends, as a cell does to load the link while it measures the host's memory (gpu_cell.cpp).
    std::span<std::byte> per_step_memory() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace sweetspot
