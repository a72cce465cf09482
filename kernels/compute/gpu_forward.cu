// The GPU forward's machinery (gpu_forward_context.hpp) and its public face: the activations'
// allocation, the tokens, the logits. What each unit computes is the model family's
// (gpt2/gpt2_gpu_forward.cu, llama/llama_gpu_forward.cu).
#include "kernels/compute/gpu_forward.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/compute/count_nonfinite.cuh"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/gemm.hpp"
#include "kernels/compute/gpu_dtype.hpp"
#include "kernels/compute/gpu_forward_context.hpp"
#include "kernels/compute/flash_attention_limits.hpp"
#include "kernels/compute/managed_memory.hpp"
#include "kernels/model/activation_layout.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/model_family.hpp"

namespace sweetspot {

namespace {

std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

}  // namespace

GpuForwardContext::GpuForwardContext(const ModelConfig& model_, const WeightLayout& layout_, DType dtype_,
                                     const BatchShape& shape_, cudaStream_t stream_, const GpuForwardOptions& options_)
    : model(model_), layout(layout_), dtype(dtype_), shape(shape_), stream(stream_), options(options_) {
    options.dropout = options.dropout.for_shape(shape.stride(), model.max_positions);
    if (options.variant.has(Fusion::flash_attention) && model.head_dim() > kFlashAttentionMaxHeadDim) {
        throw std::invalid_argument("GpuForward: the flash_attention fusion supports head dimensions up to " +
                                    std::to_string(kFlashAttentionMaxHeadDim) + "; model '" + model.name + "' has " +
                                    std::to_string(model.head_dim()) + ".");
    }
    // Every argument is checked before the first CUDA call, so a bad request fails the same way
    // with or without a GPU.
    check_batch_shape("GpuForward", model, layout, shape);
    const bool rectangular = shape.is_rectangular();
    if (!rectangular && !gpu_forward_runs_ragged(options.variant)) {
        throw std::invalid_argument("GpuForward: variant '" + options.variant.text() +
                                    "' attends through the materialised scores, which need every sequence " +
                                    std::to_string(shape.stride()) +
                                    " rows long; the GPU forward runs ragged batches with the flash_attention fusion "
                                    "only.");
    }
    if (!rectangular && options.dropout.active()) {
        throw std::invalid_argument("GpuForward: dropout needs a rectangular batch: its masks are numbered by "
                                    "(sequence, position) in rows of the stride, which a ragged batch's rows do not "
                                    "follow.");
    }
    // cuBLAS takes int dimensions and the softmax launches one block per score row.
    if (rows() * model.n_head > INT_MAX) {
        throw std::invalid_argument("GpuForward: rows × n_head = " + std::to_string(rows() * model.n_head) +
                                    " is too large (at most " + std::to_string(INT_MAX) + ").");
    }

    // flash_attention keeps no scores: that buffer is what the fusion saves.
    const ActivationLayout l = activation_layout(model, dtype, shape, !options.variant.has(Fusion::flash_attention));
    const std::int64_t bytes = l.total_bytes;
    if (options.managed_activations) {
        arena = ManagedMemory(allocate_managed(bytes, options.allow_oversubscription));
    } else {
        arena = allocate_device(bytes);
    }
    arena_bytes = bytes;
    char* base = reinterpret_cast<char*>(arena.get());
    x = base + l.x;
    ln = base + l.ln;
    qkv = base + l.qkv;
    scores = base + l.scores;
    att = base + l.att;
    fc = base + l.fc;
    y = base + l.y;
    logits = base + l.logits;
    tokens = reinterpret_cast<std::int32_t*>(base + l.tokens);
    if (family_of(model).rotary) frequencies = reinterpret_cast<float*>(base + l.frequencies);
    spans = SequenceSpans::rectangular(shape.stride());

    // What the shape says of each row, uploaded once: the host vectors live until the stream is
    // synchronized below.
    std::vector<std::int32_t> row_positions, offsets_then_lengths;
    if (family_of(model).rotary || !rectangular) {
        positions = reinterpret_cast<std::int32_t*>(base + l.positions);
        row_positions = shape.positions();
        CUDA_CHECK(cudaMemcpyAsync(positions, row_positions.data(), row_positions.size() * sizeof(std::int32_t),
                                   cudaMemcpyHostToDevice, stream));
    }
    if (!rectangular) {
        auto* d_spans = reinterpret_cast<std::int32_t*>(base + l.spans);
        offsets_then_lengths = shape.offsets();
        offsets_then_lengths.insert(offsets_then_lengths.end(), shape.lengths().begin(), shape.lengths().end());
        CUDA_CHECK(cudaMemcpyAsync(d_spans, offsets_then_lengths.data(),
                                   offsets_then_lengths.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream));
        spans = SequenceSpans::ragged(shape.stride(), d_spans, d_spans + shape.batch());
    }
    if (shape.padded_tokens() > 0) {
        // The flash attention writes no padding row: zeroed once, those rows of att stay zero and
        // everything computed from them downstream stays finite. Real rows are overwritten by
        // every forward, so the whole buffer is zeroed in one call.
        CUDA_CHECK(cudaMemsetAsync(att, 0, as_size(rows() * model.n_embd) * dtype_size(dtype), stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));

    gemm = std::make_unique<Gemm>(dtype, stream, options.fp32_gemm);
    if (options.unit_graphs) graphs.emplace(static_cast<int>(layout.units.size()));
}

GpuForward::GpuForward(const ModelConfig& model, const WeightLayout& layout, DType dtype, const BatchShape& shape,
                       cudaStream_t stream, const GpuForwardOptions& options)
    : impl_(make_gpu_forward(model, layout, dtype, shape, stream, options)) {}

GpuForward::~GpuForward() = default;

void GpuForward::set_tokens(std::span<const std::int32_t> ids) {
    GpuForwardContext& s = *impl_;
    check_batch_ids("GpuForward", s.model, ids, s.rows(), "token");
    // On the stream, so a forward still in flight reads the old ids; then wait, so the upload is
    // synchronous as promised.
    CUDA_CHECK(cudaMemcpyAsync(s.tokens, ids.data(), ids.size_bytes(), cudaMemcpyHostToDevice, s.stream));
    CUDA_CHECK(cudaStreamSynchronize(s.stream));
    s.tokens_set = true;
}

void GpuForward::run(LayerSource& weights) {
    if (!impl_->tokens_set) throw std::logic_error("GpuForward::run: set_tokens was never called.");
    impl_->run(weights);
}

std::vector<float> GpuForward::logits_to_host() { return logits_to_host(impl_->rows()); }

namespace {

// n logits of `dtype` from device memory at `src` as fp32. The conversion of half types is done
// on the host (dtype.hpp's exact conversions), so no fp32 copy of them ever takes device memory.
std::vector<float> logits_slice_to_host(const void* src, std::size_t n, DType dtype, cudaStream_t stream) {
    std::vector<float> out(n);
    if (dtype == DType::fp32) {
        CUDA_CHECK(cudaMemcpyAsync(out.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return out;
    }
    std::vector<std::uint16_t> bits(n);
    CUDA_CHECK(cudaMemcpyAsync(bits.data(), src, n * sizeof(std::uint16_t), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (std::size_t i = 0; i < n; ++i)
        out[i] = dtype == DType::fp16 ? fp16_bits_to_float(bits[i]) : bf16_bits_to_float(bits[i]);
    return out;
}

}  // namespace

std::vector<float> GpuForward::logits_to_host(std::int64_t rows) {
    GpuForwardContext& s = *impl_;
    if (rows < 0 || rows > s.rows()) throw std::out_of_range("GpuForward::logits_to_host: rows out of range");
    return logits_slice_to_host(s.logits, as_size(rows * s.model.vocab_size), s.dtype, s.stream);
}

std::int64_t GpuForward::count_nonfinite_logits() {
    GpuForwardContext& s = *impl_;
    const std::int64_t n = s.rows() * s.model.vocab_size;
    // The count goes into y, which is dead between forwards (the next one writes it before it
    // reads it): no allocation of its own, so the estimator's arithmetic is untouched.
    auto* count = static_cast<unsigned long long*>(s.y);
    switch (s.dtype) {
        case DType::fp32: gpu::launch_count_nonfinite(static_cast<const float*>(s.logits), n, count, s.stream); break;
        case DType::fp16: gpu::launch_count_nonfinite(static_cast<const __half*>(s.logits), n, count, s.stream); break;
        case DType::bf16:
            gpu::launch_count_nonfinite(static_cast<const __nv_bfloat16*>(s.logits), n, count, s.stream);
            break;
    }
    unsigned long long bad = 0;
    CUDA_CHECK(cudaMemcpyAsync(&bad, count, sizeof bad, cudaMemcpyDeviceToHost, s.stream));
    CUDA_CHECK(cudaStreamSynchronize(s.stream));
    return static_cast<std::int64_t>(bad);
}

std::int64_t GpuForward::activation_bytes() const { return impl_->arena_bytes; }

std::int64_t GpuForward::workspace_bytes() const { return impl_->gemm->workspace_bytes(); }

int GpuForward::launches_per_forward() const { return impl_->launches; }

int GpuForward::graph_captures() const { return impl_->graphs ? impl_->graphs->captures() : 0; }

}  // namespace sweetspot
