// The fused classifier's entry: launch_fused_classifier (per-row loss, the logits' gradient in
// place) followed by launch_mean_loss, as the training step runs them, against cpu::cross_entropy;
// some rows without a target (kIgnoredTarget), whose loss and gradient are zero.
#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/compute/classifier.cuh"
#include "kernels/compute/cpu_ops.hpp"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

// The gradient's scale is 1 / the targets times an fp16 step's loss scale: without it the
// gradient of a 50257-way softmax over a few rows, scale·p with p ~ 1e-5, would fall among fp16's
// subnormals and keep only a few bits, as an unscaled fp16 step's would.
constexpr float kLossScale = 1024.0f;

template <class T>
class ClassifierCase final : public OpCase {
public:
    ClassifierCase(const OpShape& shape, cudaStream_t stream)
        : rows_(shape.dims[0]),
          vocab_(static_cast<int>(shape.dims[1])),
          stride_(shape.dims[2]),
          // Logits of a few units either way: a softmax neither flat nor one-hot. Between rows
          // `stride_` apart, padding of the same kind, which the kernel must leave as it is.
          logits_(random_values(n(), dtype, kSeed, 0.01f, 4.0f, Sign::either)),
          targets_(with_ignored(random_tokens(as_size(rows_), vocab_, kSeed + 1))),
          d_logits_(logits_, stream),
          d_targets_(targets_, stream),
          d_losses_(as_size(rows_), stream),
          d_loss_(1, stream) {}

    void run(cudaStream_t stream) override {
        gpu::launch_fused_classifier<T>(d_logits_.get(), d_losses_.get(), d_targets_.get(), rows_, vocab_, stride_,
                                        kLossScale / static_cast<float>(rows_), stream);
        gpu::launch_mean_loss(d_losses_.get(), rows_, 1.0f / static_cast<float>(rows_), d_loss_.get(), stream);
    }

    OpError check(cudaStream_t stream) override {
        std::vector<float> grad = logits_;
        std::vector<float> losses(as_size(rows_));
        double total = 0.0;
        for (std::int64_t r = 0; r < rows_; ++r) {
            const auto row = static_cast<std::ptrdiff_t>(as_size(r) * as_size(stride_));
            if (targets_[as_size(r)] == gpu::kIgnoredTarget) {  // no loss, a zero gradient
                std::fill(grad.begin() + row, grad.begin() + row + vocab_, 0.0f);
                continue;
            }
            losses[as_size(r)] = static_cast<float>(cpu::cross_entropy(
                grad.data() + row, targets_.data() + r, 1, vocab_, kLossScale / static_cast<float>(rows_)));
            total += losses[as_size(r)];
        }
        const std::vector<float> mean{static_cast<float>(total / static_cast<double>(rows_))};

        // The gradient at the targets, scale·(p − 1), is close to −scale; everywhere else it is
        // scale·p, far smaller. Compared apart, each against its own largest value, so that a wrong
        // probability off the targets is not hidden under the targets' magnitude.
        const std::vector<float> gpu_grad = d_logits_.to_host(stream);
        std::vector<float> at_targets[2], elsewhere[2], padding[2];
        for (std::size_t i = 0; i < grad.size(); ++i) {
            const std::size_t column = i % as_size(stride_);
            const bool target = static_cast<std::int32_t>(column) == targets_[i / as_size(stride_)];
            auto& group = column >= as_size(vocab_) ? padding : target ? at_targets : elsewhere;
            group[0].push_back(gpu_grad[i]);
            group[1].push_back(grad[i]);
        }
        OpError error = compare("dlogits at the targets", at_targets[0], at_targets[1]);
        if (vocab_ > 1) error.include(compare("dlogits elsewhere", elsewhere[0], elsewhere[1]));
        // The padding between rows is not the kernel's to write: it must come back bit for bit.
        if (padding[0] != padding[1]) error.include({std::numeric_limits<double>::infinity(), 0, "padding written"});
        error.include(compare("losses", d_losses_.to_host(stream), losses));
        error.include(compare("mean loss", d_loss_.to_host(stream), mean));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    // Every fifth row of a batch of more than one without a target, as a ragged batch's padding.
    static std::vector<std::int32_t> with_ignored(std::vector<std::int32_t> targets) {
        for (std::size_t r = 4; targets.size() > 1 && r < targets.size(); r += 5) targets[r] = gpu::kIgnoredTarget;
        return targets;
    }
    std::size_t n() const { return as_size(rows_) * as_size(stride_); }

    std::int64_t rows_;
    int vocab_;
    std::int64_t stride_;  // between rows, ≥ vocab_
    std::vector<float> logits_;
    std::vector<std::int32_t> targets_;
    DeviceArray<T> d_logits_;
    DeviceTokens d_targets_;
    DeviceArray<float> d_losses_, d_loss_;
};

// Rows `stride` values apart, as the training step pads them (kernels/compute/train_arena.hpp).
OpShape rows_vocab_stride(std::int64_t rows, std::int64_t vocab, std::int64_t stride) {
    return op_shape({{"rows", rows}, {"vocab", vocab}, {"stride", stride}});
}
// Rows back to back.
OpShape rows_vocab(std::int64_t rows, std::int64_t vocab) { return rows_vocab_stride(rows, vocab, vocab); }

}  // namespace

std::vector<OpEntry> classifier_ops() {
    std::vector<OpEntry> entries;
    entries.push_back(OpEntry{
        .name = "fused_classifier",
        .family = "classifier",
        // One row of GPT-2's vocabulary; a vocabulary smaller than one 16-byte pack and rows
        // starting at every offset; 1000 (every row aligned, no head); 50257 over 33 rows, whose
        // starts take every alignment.
        // Padded rows: GPT-2's rows 50304 apart, and a vocabulary smaller than a pack in rows 128
        // apart.
        .test_shapes = {rows_vocab(1, 50257), rows_vocab(7, 13), rows_vocab(33, 1000), rows_vocab(33, 50257),
                        rows_vocab_stride(33, 50257, 50304), rows_vocab_stride(7, 13, 128)},
        // GPT-2 at batch 8, seq 1024 (every size has its vocabulary), contiguous and padded.
        .bench_shapes = {rows_vocab(8 * 1024, 50257), rows_vocab_stride(8 * 1024, 50257, 50304)},
        // The softmax, loss and gradient are fp32 on both sides (the CPU's sums in double, which the
        // fp32 part of store_tolerance covers: a few ulp over these rows), and the gradient is
        // rounded once to T: store_tolerance. The losses are fp32 in every dtype and meet its fp32
        // part; their largest, a few units, is what a wrong target or sum moves by O(1).
        .tolerance = store_tolerance,
        // The least traffic: the logits read once and their gradient written once, the targets read
        // and the losses written. The kernel reads each row a second time, mostly from L2, which is
        // not counted.
        .cost = [](const OpShape& s, DType dtype) {
            const auto rows = static_cast<double>(s.dims[0]);
            return OpCost{0, 2.0 * rows * static_cast<double>(s.dims[1]) * static_cast<double>(dtype_size(dtype)) +
                                 8.0 * rows};
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<ClassifierCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
