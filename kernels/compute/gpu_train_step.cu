// The GPU training step's machinery (gpu_train_context.hpp) and its public face: the walks over
// the units in UnitSchedule::training's order, the lm_head's products, the fused classifier and
// loss, the global norm, the loss scale and AdamW on the device or on the host. What each unit
// computes is the model family's (gpt2/gpt2_gpu_train.cu, llama/llama_gpu_train.cu).
#include "kernels/compute/gpu_train_step.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/compute/classifier.cuh"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/embedding.cuh"
#include "kernels/compute/family_compute.hpp"
#include "kernels/compute/flash_attention_limits.hpp"
#include "kernels/compute/gemm.hpp"
#include "kernels/compute/gpu_dtype.hpp"
#include "kernels/compute/gpu_train_context.hpp"
#include "kernels/compute/host_adamw.hpp"
#include "kernels/compute/host_update_order.hpp"
#include "kernels/compute/layernorm_recovery.hpp"
#include "kernels/compute/nvtx.hpp"
#include "kernels/compute/optimizer.cuh"
#include "kernels/compute/train_arena.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/model_family.hpp"
#include "base/item_progress.hpp"

namespace sweetspot {
namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

// Writes the padding between `unit`'s tensors (and after the last) into `weights` from its fp32
// `master`, rounded to the dtype: what the unit was placed with, since AdamW never moves it.
void restore_padding(const UnitLayout& unit, const float* master, void* weights, DType dtype) {
    const auto write = [&](std::int64_t begin, std::int64_t end) {
        if (end <= begin) return;
        convert_from_f32({master + begin, as_size(end - begin)}, dtype,
                         static_cast<std::byte*>(weights) + begin * static_cast<std::int64_t>(dtype_size(dtype)));
    };
    std::int64_t end = 0;
    for (const TensorSpec& t : unit.tensors) {
        write(end, t.offset);
        end = t.offset + t.numel;
    }
    write(end, unit.numel);
}

}  // namespace

GpuTrainContext::GpuTrainContext(const ModelConfig& model_, const WeightLayout& layout_, DType dtype_,
                                 const BatchShape& shape_, cudaStream_t stream_, const GpuTrainOptions& options_)
    : model(model_),
      layout(layout_),
      dtype(dtype_),
      shape(shape_),
      stream(stream_),
      options(options_),
      heads{model_.n_head, model_.kv_heads(), model_.head_dim()},
      flash(options_.variant.has(Fusion::flash_attention)),
      inplace_ln(options_.variant.has(Fusion::inplace_ln)),
      recompute(options_.recompute),
      plan([&] {
          // Every argument is checked before the first CUDA call.
          check_batch_shape("GpuTrainStep", model_, layout_, shape_);
          // cuBLAS takes int dimensions and the softmax launches one block per score row.
          const std::int64_t score_rows = shape_.rows() * model_.n_head;
          if (score_rows > INT_MAX) {
              throw std::invalid_argument("GpuTrainStep: rows × n_head = " + std::to_string(score_rows) +
                                          " is too large (at most " + std::to_string(INT_MAX) + ").");
          }
          // The fusions each family trains with are declared once, in its FamilyCompute.
          const FamilyCompute& compute = compute_of(model_.family);
          const std::string family = "model '" + model_.name + "' (" + std::string(family_of(model_).title) + ")";
          if (!options_.variant.within(compute.gpu_training_fusions)) {
              throw std::invalid_argument("GpuTrainStep: training " + family + " has kernels for the fusions " +
                                          compute.gpu_training_fusions.fusions_text() + " only; variant '" +
                                          options_.variant.text() + "' has " + options_.variant.fusions_text() + ".");
          }
          if (options_.dropout.active() && !compute.dropout)
              throw std::invalid_argument("GpuTrainStep: " + family + " has no dropout.");
          const bool uses_flash = options_.variant.has(Fusion::flash_attention);
          if (uses_flash && model_.head_dim() > kFlashAttentionMaxHeadDim) {
              throw std::invalid_argument("GpuTrainStep: the flash_attention fusion supports head dimensions up to " +
                                          std::to_string(kFlashAttentionMaxHeadDim) + "; model '" + model_.name +
                                          "' has " + std::to_string(model_.head_dim()) + ".");
          }
          if (!shape_.is_rectangular()) {
              if (!gpu_forward_runs_ragged(options_.variant)) {
                  throw std::invalid_argument(
                      "GpuTrainStep: variant '" + options_.variant.text() +
                      "' attends through the materialised scores, which need every sequence " +
                      std::to_string(shape_.stride()) +
                      " rows long; the GPU training step runs ragged batches with the flash_attention fusion only.");
              }
              if (options_.dropout.active()) {
                  throw std::invalid_argument("GpuTrainStep: dropout needs a rectangular batch: its masks are "
                                              "numbered by (sequence, position) in rows of the stride, which a "
                                              "ragged batch's rows do not follow.");
              }
          }
          return TrainArena(model_, dtype_, shape_, options_.variant, options_.recompute);
      }()) {
    options.dropout = options.dropout.for_shape(shape.stride(), model.max_positions);
    arena = allocate_device(plan.total);
    const auto embedding_bytes = static_cast<std::int64_t>(gpu::embedding_backward_scratch_bytes(rows()));
    if (embedding_bytes > plan.dres - plan.scratch) {
        embedding_scratch = allocate_device(embedding_bytes);
        extra_bytes = embedding_bytes;
    }
    // What the shape says of each row, uploaded once: the host vectors live until the stream is
    // synchronized below.
    spans = SequenceSpans::rectangular(shape.stride());
    std::vector<std::int32_t> row_positions, offsets_then_lengths;
    if (plan.positions != 0) {
        row_positions = shape.positions();
        CUDA_CHECK(cudaMemcpyAsync(at<std::int32_t>(plan.positions), row_positions.data(),
                                   row_positions.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream));
    }
    if (plan.spans != 0) {
        auto* const d_spans = at<std::int32_t>(plan.spans);
        offsets_then_lengths = shape.offsets();
        offsets_then_lengths.insert(offsets_then_lengths.end(), shape.lengths().begin(), shape.lengths().end());
        CUDA_CHECK(cudaMemcpyAsync(d_spans, offsets_then_lengths.data(),
                                   offsets_then_lengths.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream));
        spans = SequenceSpans::ragged(shape.stride(), d_spans, d_spans + shape.batch());
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    gemm = std::make_unique<Gemm>(dtype, stream, options.fp32_gemm);
}

struct GpuTrainStep::Impl {
    std::unique_ptr<GpuTrainContext> context;  // the family's units, the arena, cuBLAS
    bool batch_set = false;

    float scale = 1.0f;           // the loss scale the next backward's gradients carry
    float backward_scale = 1.0f;  // the one the last backward's gradients carry
    int good_steps = 0;           // updates in a row since the scale last changed
    int steps = 0, skipped = 0;
    double norm = 0.0;  // the last backward's, unscaled
    bool norm_read = true;

    // The update on the host's cores (UnitUpdate::on_host), made at its first use: a copy stream
    // each way, and per staging slot when its gradient has come down and its weights gone up.
    struct HostLink {
        CudaStream down, up;
        CudaEvent backward_done, all_up, all_down;
        std::array<CudaEvent, kHostUpdateSlots> gradient_down, weights_up;
        std::vector<CudaEvent> unit_up;        // per unit: after its new weights' copy up
        std::vector<CudaEvent> gradient_done;  // per unit: after its gradient, in an update started early
        // Per unit, the last update: whether its weights went up. Bytes, not vector<bool>'s bits:
        // the update's thread writes one unit's while the forward's reads another's.
        std::vector<std::uint8_t> copied_up;
    };
    std::unique_ptr<HostLink> host_link;
    LinkBytes link_bytes;
    HostUpdateTimes update_times;

    // The overlapped host update (update(weights, true)): its thread and how far it has come. The
    // next forward waits for each unit (ItemProgress, and on the GPU the unit's copy up); the
    // forward's end joins the thread, and the next backward waits for the gradients' copies down.
    std::thread update_thread;
    ItemProgress progress;
    bool overlapped_update = false;  // an overlapped update ran since the last backward
    // The update started during the backward (start_early_update): `released` says which units
    // the backward has let go of, each with its gradient_done recorded.
    ItemProgress released;
    bool early_update = false;  // the last backward started the update
    // Joins the overlapped update's thread, rethrowing what it threw.
    void join_update();
    // Joins it and makes the compute stream wait for every copy up, as an update that is not
    // overlapped ends.
    void finish_overlapped_update();
    // Whether the next backward may start the host update itself: an update on the host has run
    // (the source keeps the optimizer's state there), nothing clips by the global norm, no fp16
    // loss scale waits for it to be finite, and no inplace_ln recovery may yet fail.
    bool may_update_early() const;
    template <class T>
    void start_early_update(LayerSource& weights);
    // Runs `update` (an update_on_host) on the update's thread, telling its end, or what it threw,
    // through `progress`.
    template <class F>
    void run_update_thread(F update) {
        update_thread = std::thread([this, update = std::move(update)] {
            try {
                update();
                progress.end();
            } catch (...) {
                progress.end(std::current_exception());
            }
        });
    }
    // Before the forward acquires unit `unit`: its overlapped update done, the compute stream after
    // its weights' copy up.
    void await_unit_update(int unit);

    explicit Impl(std::unique_ptr<GpuTrainContext> context_)
        : context(std::move(context_)), scale(context->dtype == DType::fp16 ? kInitialLossScale : 1.0f) {}
    ~Impl() {
        if (update_thread.joinable()) update_thread.join();
    }
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;

    template <class T>
    void forward(LayerSource& weights);
    // The lm_head's GEMMs split the vocabulary at the last multiple of kLogitsRowAlignment below
    // it: cuBLAS computes the aligned part with its fast kernels and only the few columns past it
    // with the slow ones a vocabulary such as 50257 otherwise gets for all of them.
    template <class F>
    void over_vocabulary(const F& f) const;
    template <class T>
    void backward(LayerSource& weights, bool overlap_update);
    template <class T>
    void update(LayerSource& weights, bool overlapped);
    // The update where the source keeps the optimizer's state on the host, unit by unit in
    // `order`; `first`: the first unit's, already acquired, or null. `overlapped`: on the update's
    // own thread, the compute stream not made to wait for it.
    template <class T>
    void update_on_host(LayerSource& weights, HostUpdateOrder order, const UnitUpdate* first, bool finite,
                        float grad_scale, bool overlapped);
    // AdamW's settings for tensor `t` at this step.
    cpu::AdamW adamw_for(const TensorSpec& t, float grad_scale) const {
        const TrainSettings& s = context->options.settings;
        return {s.lr, s.beta1, s.beta2, s.eps, decays_weights(t) ? s.weight_decay : 0.0f, steps, grad_scale};
    }
    void read_norm();
};

template <class F>
void GpuTrainStep::Impl::over_vocabulary(const F& f) const {
    const int vocab = context->model.vocab_size;
    const int aligned = vocab / kLogitsRowAlignment * kLogitsRowAlignment;
    if (aligned > 0) f(0, aligned, false);
    if (aligned < vocab) f(aligned, vocab - aligned, aligned > 0);
}

template <class T>
void GpuTrainStep::Impl::forward(LayerSource& weights) {
    const NvtxRange range("forward");
    GpuTrainContext& ctx = *context;
    const int bt = static_cast<int>(ctx.rows()), c = ctx.model.n_embd;
    const auto acquire = [&](int u) {
        const auto* p = static_cast<const T*>(weights.acquire(u));
        if (p == nullptr) throw std::runtime_error("GpuTrainStep: the layer source returned no pointer for unit " + std::to_string(u) + ".");
        return p;
    };

    // Each unit's work in a range of its name, as the inference forward's: the trace's queries
    // find a unit's kernels through it, in the forward's range or the backward's.
    {
        const NvtxRange unit_range(ctx.layout.unit_name(0));
        await_unit_update(0);
        ctx.embed(acquire(0), ctx.layout.units[0]);
        weights.release(0);
    }
    for (int l = 0; l < ctx.model.n_layer; ++l) {
        const int u = WeightLayout::block_unit(l);
        const NvtxRange unit_range(ctx.layout.unit_name(u));
        await_unit_update(u);
        ctx.block(l, acquire(u), ctx.layout.units[as_size(u)]);
        weights.release(u);
    }
    const int hu = ctx.layout.head_unit();
    const UnitLayout& hl = ctx.layout.units[as_size(hu)];
    const NvtxRange head_range(ctx.layout.unit_name(hu));  // the loss with it
    await_unit_update(hu);
    const T* head = acquire(hu);
    join_update();
    weights.follow_update(nullptr);
    ctx.final_norm(head, hl);
    const T* xf = ctx.at<T>(ctx.plan.xf);
    T* const logits = ctx.at<T>(ctx.plan.logits);
    const std::int64_t stride = padded_vocab(ctx.model.vocab_size);
    // logits [bt, V] = xf [bt, c] · lm_headᵀ, rows `stride` apart.
    const T* lm_head = hl.tensor(head, ctx.lm_head_tensor());
    over_vocabulary([&](int first, int count, bool) {
        ctx.gemm->batched(/*trans_b=*/true, bt, count, c, 1.0f, xf, c, 0, lm_head + static_cast<std::int64_t>(first) * c,
                          c, 0, 0.0f, logits + first, static_cast<int>(stride), 0, 1);
    });
    weights.release(hu);
    // The mean loss's gradient, 1 / targets per row (a padding row has none: kIgnoredTarget),
    // times the loss scale.
    const float per_target = 1.0f / static_cast<float>(ctx.shape.real_tokens());
    gpu::launch_fused_classifier<T>(logits, ctx.at<float>(ctx.plan.losses), ctx.at<std::int32_t>(ctx.plan.targets),
                                    ctx.rows(), ctx.model.vocab_size, stride, per_target * scale, ctx.stream);
    gpu::launch_mean_loss(ctx.at<float>(ctx.plan.losses), ctx.rows(), per_target, ctx.at<float>(ctx.plan.loss),
                          ctx.stream);
    backward_scale = scale;
}

void GpuTrainStep::Impl::join_update() {
    if (!update_thread.joinable()) return;
    update_thread.join();
    progress.wait_for(0);  // rethrows what the thread threw
}

void GpuTrainStep::Impl::finish_overlapped_update() {
    join_update();
    if (overlapped_update && host_link) {
        // As the update's end does when it is not overlapped: the compute stream after every copy.
        host_link->all_up.record(host_link->up.get());
        host_link->all_up.wait_on(context->stream);
    }
}

bool GpuTrainStep::Impl::may_update_early() const {
    return host_link != nullptr && !(context->options.settings.max_grad_norm > 0) &&
           context->dtype != DType::fp16 && !context->inplace_ln;
}

template <class T>
void GpuTrainStep::Impl::start_early_update(LayerSource& weights) {
    const int units = context->layout.unit_count();
    // Without clipping or a loss scale the update needs no norm: every gradient as it is (fp32 and
    // bf16 carry a loss scale of 1). A non-finite gradient is not caught before it is applied; the
    // cell's check and its loss still say so.
    ++steps;
    link_bytes = {};
    released.begin(units);
    progress.begin(units);
    overlapped_update = true;
    early_update = true;
    const float grad_scale = 1.0f / backward_scale;
    run_update_thread([this, &weights, units, grad_scale] {
        const auto backward_ended = [&last = host_link->gradient_done[0]] { return last.complete(); };
        update_on_host<T>(weights, HostUpdateOrder(units, released, backward_ended), nullptr, true, grad_scale, true);
    });
}

void GpuTrainStep::Impl::await_unit_update(int unit) {
    if (!update_thread.joinable()) return;
    progress.wait_for(unit);
    if (host_link->copied_up[as_size(unit)]) host_link->unit_up[as_size(unit)].wait_on(context->stream);
}

template <class T>
void GpuTrainStep::Impl::backward(LayerSource& weights, bool overlap_update) {
    const NvtxRange range("backward");
    GpuTrainContext& ctx = *context;
    join_update();
    // The overlapped update's copies of the gradients down are done before this backward writes them.
    if (std::exchange(overlapped_update, false)) host_link->all_down.wait_on(ctx.stream);
    early_update = false;
    if (overlap_update && may_update_early()) start_early_update<T>(weights);
    // Unit u's gradient is whole and the unit let go of: an update started early may take it.
    const auto let_go = [&](int u) {
        if (!early_update) return;
        host_link->gradient_done[as_size(u)].record(ctx.stream);
        released.done(u);
    };
    try {
        const WeightLayout& layout = ctx.layout;
        const int bt = static_cast<int>(ctx.rows()), c = ctx.model.n_embd;
        double* const partials = ctx.at<double>(ctx.plan.partials);
        // The unit's gradient, zeroed: the backward kernels add to it.
        const auto gradient_of = [&](int u) {
            auto* g = static_cast<T*>(weights.gradient(u));
            if (g == nullptr)
                throw std::runtime_error("GpuTrainStep: the layer source returned no gradient for unit " +
                                         std::to_string(u) + ".");
            CUDA_CHECK(cudaMemsetAsync(g, 0, as_size(layout.units[as_size(u)].numel) * sizeof(T), ctx.stream));
            return g;
        };
        const auto squares_of = [&](const T* g, int u) {
            gpu::launch_squared_norm_partials<T>(g, layout.units[as_size(u)].numel,
                                                 partials + static_cast<std::int64_t>(u) * gpu::kNormPartials,
                                                 ctx.stream);
        };

        // Each unit's work in a range of its name, as in the forward.
        {
            const int hu = layout.head_unit();
            const UnitLayout& hl = layout.units[as_size(hu)];
            const NvtxRange unit_range(layout.unit_name(hu));
            const auto* head = static_cast<const T*>(weights.acquire(hu));
            T* const head_grad = gradient_of(hu);
            T* const dxf = ctx.at<T>(ctx.plan.dln);
            // Of logits = xf · lm_headᵀ, a vocabulary part at a time: d lm_head's rows = dlogitsᵀ · xf;
            // dxf = Σ over the parts of dlogits · lm_head.
            const int stride = static_cast<int>(padded_vocab(ctx.model.vocab_size));
            const T* dlogits = ctx.at<T>(ctx.plan.logits);
            const T* xf = ctx.at<T>(ctx.plan.xf);
            const T* lm_head = hl.tensor(head, ctx.lm_head_tensor());
            T* const dlm_head = hl.tensor(head_grad, ctx.lm_head_tensor());
            over_vocabulary([&](int first, int count, bool later) {
                const std::int64_t row = static_cast<std::int64_t>(first) * c;
                ctx.gemm->batched(/*trans_a=*/true, /*trans_b=*/false, count, c, bt, 1.0f, dlogits + first, stride, 0,
                                  xf, c, 0, 0.0f, dlm_head + row, c, 0, 1);
                ctx.gemm->batched(/*trans_a=*/false, /*trans_b=*/false, bt, c, count, 1.0f, dlogits + first, stride,
                                  0, lm_head + row, c, 0, later ? 1.0f : 0.0f, dxf, c, 0, 1);
            });
            CUDA_CHECK(
                cudaMemsetAsync(ctx.at<T>(ctx.plan.dres), 0, as_size(ctx.rows() * c) * sizeof(T), ctx.stream));
            if (ctx.inplace_ln)
                CUDA_CHECK(cudaMemsetAsync(ctx.at<int>(ctx.plan.unrecoverable), 0, sizeof(int), ctx.stream));
            ctx.final_norm_backward(head, head_grad, hl);
            squares_of(head_grad, hu);
            weights.release(hu);
            let_go(hu);
        }

        for (int l = ctx.model.n_layer - 1; l >= 0; --l) {
            const int u = WeightLayout::block_unit(l);
            const NvtxRange unit_range(layout.unit_name(u));
            const auto* unit = static_cast<const T*>(weights.acquire(u));
            T* const grad = gradient_of(u);
            ctx.block_backward(l, unit, grad, layout.units[as_size(u)]);
            squares_of(grad, u);
            weights.release(u);
            let_go(u);
        }

        {
            const NvtxRange unit_range(layout.unit_name(0));
            weights.acquire(0);
            T* const embed_grad = gradient_of(0);
            ctx.embed_backward(embed_grad, layout.units[0]);
            squares_of(embed_grad, 0);
            weights.release(0);
            let_go(0);
        }
        gpu::launch_sum_partials(partials, static_cast<std::int64_t>(layout.unit_count()) * gpu::kNormPartials,
                                 ctx.at<double>(ctx.plan.squared_norm), ctx.stream);
        norm_read = false;
    } catch (...) {
        if (early_update) released.end(std::current_exception());
        throw;
    }
    if (early_update) {
        released.end();
        // Only now: the backward's own fetches must not wait for the update of the units they fetch.
        weights.follow_update(&progress);
    }
}

void GpuTrainStep::Impl::read_norm() {
    if (norm_read) return;
    const GpuTrainContext& ctx = *context;
    double squared = 0.0;
    int unrecoverable = 0;
    CUDA_CHECK(cudaMemcpyAsync(&squared, ctx.at<double>(ctx.plan.squared_norm), sizeof squared, cudaMemcpyDeviceToHost,
                               ctx.stream));
    if (ctx.inplace_ln) {
        CUDA_CHECK(cudaMemcpyAsync(&unrecoverable, ctx.at<int>(ctx.plan.unrecoverable), sizeof unrecoverable,
                                   cudaMemcpyDeviceToHost, ctx.stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    // Before the update reads the norm: no weight changes on gradients that divided by ~0.
    if (unrecoverable != 0) {
        char bound[32];
        std::snprintf(bound, sizeof bound, "%g", static_cast<double>(kInplaceLnMinWeight));
        throw std::runtime_error("GpuTrainStep: the inplace_ln variant cannot recover the normalised input of " +
                                 ctx.norm_named(unrecoverable) + " from its output: one of its weights is below " + bound +
                                 " in magnitude, and the recovery (output - bias) / weight divides by it. Train this "
                                 "model without inplace_ln.");
    }
    norm = std::sqrt(squared) / static_cast<double>(backward_scale);
    norm_read = true;
}

template <class T>
void GpuTrainStep::Impl::update(LayerSource& weights, bool overlapped) {
    const NvtxRange range("update");
    if (std::exchange(early_update, false)) {
        // The backward started it; it runs on, unless the caller wants it ended.
        if (!overlapped) finish_overlapped_update();
        return;
    }
    join_update();
    read_norm();
    const WeightLayout& layout = context->layout;
    const cudaStream_t stream = context->stream;
    const bool finite = std::isfinite(norm);
    if (context->dtype == DType::fp16) {
        if (!finite) {
            scale = std::max(1.0f, scale / 2.0f);
            good_steps = 0;
        } else if (++good_steps == kLossScaleWindow) {
            scale *= 2.0f;
            good_steps = 0;
        }
    }
    if (finite) ++steps;
    else ++skipped;
    // clip_grad_norm_'s scale and the loss scale's inverse, applied inside the AdamW pass.
    const auto grad_scale =
        static_cast<float>(context->options.settings.clip_scale(norm) / backward_scale);
    link_bytes = {};
    // A skipped update still visits every unit: the schedule is the same every step.
    UnitUpdate unit = weights.acquire_update(0);
    if (unit.on_host() && !host_link) {
        host_link = std::make_unique<HostLink>();
        for (int u = 0; u < layout.unit_count(); ++u) {
            host_link->unit_up.emplace_back();
            host_link->gradient_done.emplace_back();
        }
        host_link->copied_up.assign(as_size(layout.unit_count()), 0);
    }
    if (unit.on_host()) {
        // The gradients are final once the backward's work on the compute stream is: recorded here,
        // before anything of the next forward is enqueued behind it.
        host_link->backward_done.record(stream);
        host_link->backward_done.wait_on(host_link->down.get());
    }
    const int units = layout.unit_count();
    if (unit.on_host() && overlapped) {
        progress.begin(units);
        weights.follow_update(&progress);
        overlapped_update = true;
        run_update_thread([this, &weights, unit, units, finite, grad_scale] {
            update_on_host<T>(weights, HostUpdateOrder(units), &unit, finite, grad_scale, true);
        });
        return;
    }
    if (unit.on_host()) {
        update_on_host<T>(weights, HostUpdateOrder(units), &unit, finite, grad_scale, false);
        return;
    }
    for (int u = 0;;) {
        if (finite) {
            for (const TensorSpec& t : layout.units[as_size(u)].tensors) {
                gpu::launch_adamw<T>(static_cast<T*>(unit.weights) + t.offset,
                                     unit.master != nullptr ? unit.master + t.offset : nullptr,
                                     static_cast<const T*>(unit.gradient) + t.offset, unit.m + t.offset,
                                     unit.v + t.offset, t.numel, adamw_for(t, grad_scale), stream);
            }
        }
        weights.release_update(u);
        if (++u == layout.unit_count()) break;
        unit = weights.acquire_update(u);
    }
}

template <class T>
void GpuTrainStep::Impl::update_on_host(LayerSource& weights, HostUpdateOrder order, const UnitUpdate* first,
                                        bool finite, float grad_scale, bool overlapped) {
    const NvtxRange range("host_update");
    const WeightLayout& layout = context->layout;
    const DType dtype = context->dtype;
    const cudaStream_t stream = context->stream;
    HostLink& link = *host_link;
    std::fill(link.copied_up.begin(), link.copied_up.end(), 0);
    using Clock = std::chrono::steady_clock;
    const auto ms_since = [](Clock::time_point t) {
        return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
    };
    const Clock::time_point began = Clock::now();
    HostUpdateTimes times{.overlapped = overlapped};
    std::vector<HostAdamwTensor> tensors;
    const auto bytes_of = [&](int u) { return as_size(layout.units[as_size(u)].numel) * sizeof(T); };
    const auto slot_of = [](int u) { return as_size(u % kHostUpdateSlots); };
    // A streamed unit's gradient and weights are its own host buffers: the source copied the
    // gradient there, and the next forward streams the new weights from there. A unit the device
    // holds comes down through its staging slot (the source's: u % kHostUpdateSlots), after its own
    // gradient where the update started early, after the whole backward otherwise.
    const auto copy_down = [&](int u, const UnitUpdate& unit) {
        if (!finite || unit.streamed) return;
        const NvtxRange range("gradient out " + layout.unit_name(u));
        if (order.early()) link.gradient_done[as_size(u)].wait_on(link.down.get());
        CUDA_CHECK(cudaMemcpyAsync(unit.host_gradient, unit.gradient, bytes_of(u), cudaMemcpyDeviceToHost, link.down.get()));
        link.gradient_down[slot_of(u)].record(link.down.get());
        link_bytes.to_host += static_cast<std::int64_t>(bytes_of(u));
    };
    const auto take = [&](int u) {
        const Clock::time_point waited = Clock::now();
        order.wait(u);
        times.wait_ms += ms_since(waited);
        const UnitUpdate unit = weights.acquire_update(u);
        copy_down(u, unit);
        return unit;
    };
    int u = order.next();
    UnitUpdate unit;
    if (first != nullptr) {
        unit = *first;
        copy_down(u, unit);
    } else {
        unit = take(u);
    }
    while (u >= 0) {
        // The next unit's gradient comes down while this one is updated, where it goes through the
        // other staging slot and the backward has let go of it; otherwise once this one is done.
        const int next = order.next();
        const bool ahead = next >= 0 && slot_of(next) != slot_of(u) && order.ready(next);
        UnitUpdate next_unit;
        if (ahead) next_unit = take(next);
        const auto slot = slot_of(u);
        if (finite) {
            // The unit's update in a range of its name: its wait, AdamW and the copy of its new
            // weights up.
            const NvtxRange unit_range(layout.unit_name(u));
            {
                const NvtxRange wait("host_update_wait");
                const Clock::time_point waited = Clock::now();
                if (unit.streamed) {
                    if (unit.gradient_copied != nullptr) CUDA_CHECK(cudaEventSynchronize(unit.gradient_copied));
                } else {
                    link.gradient_down[slot].synchronize();
                    // The slot's weights buffer is free once the unit before in this slot went up.
                    link.weights_up[slot].synchronize();
                }
                times.wait_ms += ms_since(waited);
            }
            const NvtxRange compute("host_adamw");
            const Clock::time_point computing = Clock::now();
            tensors.clear();
            for (const TensorSpec& t : layout.units[as_size(u)].tensors)
                tensors.push_back({t.offset, t.numel, adamw_for(t, grad_scale)});
            host_adamw(dtype, unit.host_weights, unit.master, unit.host_gradient, unit.m, unit.v, tensors);
            times.adamw_ms += ms_since(computing);
            if (!unit.streamed) {
                // The slot's padding holds whichever unit went through it before: the unit goes
                // up whole (one copy), so its own padding goes with it.
                restore_padding(layout.units[as_size(u)], unit.master, unit.host_weights, dtype);
                CUDA_CHECK(cudaMemcpyAsync(unit.weights, unit.host_weights, bytes_of(u), cudaMemcpyHostToDevice, link.up.get()));
                link.weights_up[slot].record(link.up.get());
                link.unit_up[as_size(u)].record(link.up.get());
                link.copied_up[as_size(u)] = 1;
                link_bytes.to_device += static_cast<std::int64_t>(bytes_of(u));
            }
        }
        weights.release_update(u);
        if (overlapped) progress.done(u);
        if (next >= 0 && !ahead) next_unit = take(next);
        u = next;
        unit = next_unit;
    }
    times.span_ms = ms_since(began);
    update_times = times;
    link.all_down.record(link.down.get());
    // The copies up run in order on one stream: an event after the last covers them all. An
    // overlapped update leaves the next forward to wait for each unit's own.
    if (finite && !overlapped) {
        link.all_up.record(link.up.get());
        link.all_up.wait_on(stream);
    }
}

GpuTrainStep::GpuTrainStep(const ModelConfig& model, const WeightLayout& layout, DType dtype, const BatchShape& shape,
                           cudaStream_t stream, const GpuTrainOptions& options)
    : impl_(std::make_unique<Impl>(make_gpu_train(model, layout, dtype, shape, stream, options))) {}

GpuTrainStep::~GpuTrainStep() = default;

void GpuTrainStep::set_batch(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) {
    const GpuTrainContext& s = *impl_->context;
    check_batch_ids("GpuTrainStep", s.model, tokens, s.rows(), "token");
    check_batch_ids("GpuTrainStep", s.model, targets, s.rows(), "target");
    // On the stream, so a step in flight reads the old ids; then wait, as promised.
    CUDA_CHECK(cudaMemcpyAsync(s.at<std::int32_t>(s.plan.tokens), tokens.data(), tokens.size_bytes(),
                               cudaMemcpyHostToDevice, s.stream));
    // A padding row's target is none (its logits' gradient zero), whatever id the caller gave it.
    std::vector<std::int32_t> row_targets(targets.begin(), targets.end());
    for (std::int64_t r = 0; r < s.rows(); ++r)
        if (!s.shape.is_real(r)) row_targets[as_size(r)] = gpu::kIgnoredTarget;
    CUDA_CHECK(cudaMemcpyAsync(s.at<std::int32_t>(s.plan.targets), row_targets.data(), targets.size_bytes(),
                               cudaMemcpyHostToDevice, s.stream));
    CUDA_CHECK(cudaStreamSynchronize(s.stream));
    impl_->batch_set = true;
}

void GpuTrainStep::forward(LayerSource& weights) {
    Impl& s = *impl_;
    if (!s.batch_set) throw std::logic_error("GpuTrainStep::forward: set_batch was never called.");
    with_dtype(s.context->dtype, [&](auto t) { s.forward<decltype(t)>(weights); });
}

void GpuTrainStep::backward(LayerSource& weights, bool overlap_update) {
    Impl& s = *impl_;
    with_dtype(s.context->dtype, [&](auto t) { s.backward<decltype(t)>(weights, overlap_update); });
}

void GpuTrainStep::update(LayerSource& weights, bool overlapped) {
    Impl& s = *impl_;
    with_dtype(s.context->dtype, [&](auto t) { s.update<decltype(t)>(weights, overlapped); });
}

void GpuTrainStep::finish_update() { impl_->finish_overlapped_update(); }

double GpuTrainStep::loss() {
    const GpuTrainContext& s = *impl_->context;
    float loss = 0.0f;
    CUDA_CHECK(cudaMemcpyAsync(&loss, s.at<float>(s.plan.loss), sizeof loss, cudaMemcpyDeviceToHost, s.stream));
    CUDA_CHECK(cudaStreamSynchronize(s.stream));
    return loss;
}

double GpuTrainStep::grad_norm() {
    impl_->read_norm();
    return impl_->norm;
}

float GpuTrainStep::loss_scale() const { return impl_->scale; }
int GpuTrainStep::steps() const { return impl_->steps; }
int GpuTrainStep::skipped_steps() const { return impl_->skipped; }
LinkBytes GpuTrainStep::update_link_bytes() const { return impl_->link_bytes; }
HostUpdateTimes GpuTrainStep::host_update_times() const { return impl_->update_times; }

std::int64_t GpuTrainStep::activation_bytes() const { return impl_->context->plan.total + impl_->context->extra_bytes; }

std::int64_t GpuTrainStep::activation_bytes_for(const ModelConfig& model, DType dtype, const BatchShape& shape,
                                                const Variant& variant, Recompute recompute) {
    return TrainArena(model, dtype, shape, variant, recompute).total;
}

std::int64_t GpuTrainStep::workspace_bytes() const { return impl_->context->gemm->workspace_bytes(); }

std::span<std::byte> GpuTrainStep::per_step_memory() const {
    const GpuTrainContext& ctx = *impl_->context;
    return {ctx.arena.get(), static_cast<std::size_t>(ctx.plan.scratch)};
}

}  // namespace sweetspot
